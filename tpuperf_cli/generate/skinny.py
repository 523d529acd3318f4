"""The `skinny` source: matrix multiplies with one small dim, as a minibatch
of a few rows makes them (an RNN's step, a dense layer's weight gradient),
written as HLO and compiled by XLA:CPU.

A recurrent network's loop body multiplies its state, a minibatch of 8 to
64 rows, by weights of hundreds of features, and its backward pass does
the same with a weight transposed (the input gradient) or contracts the
minibatch itself (the weight gradient). XLA:CPU's speed for such shapes
moves by 7x with the small dim and the operands' order: on the AMD EPYC
family 25 model 17 of 2026-12-06, f32[16,512] by the transpose of
f32[128,512] ran at 12 GFLOP/s, f32[16,576] by that of f32[288,576] at
35, f32[16,128] by f32[128,512] at 100. The recipe's family-fold models
put lstm_s's at 0.37x its time and seq2seq's at 2.5x (HISTORY.md, "The
layers source at two seeds"): `heavy` draws each dim log-uniformly up to
8,192 from 3e6 flops, so few of its dots have a dim under 64, and `ops`
holds about 140 dots of two dims in all.

A draw: one dim small (1 to 64, a power of two half the time), the other
two 32 to 4,096 (a power of two a quarter of the time, a multiple of 32
another quarter; at d3b87d0, which drew the shard measured on
2026-12-07, a multiple of 32 half the time), the small one the lhs's
rows, the rhs's columns or the contraction; each operand row-major as jax
writes it, stored as the product reads it or transposed (BLAS's n and t:
the lhs m by k or k by m, the rhs k by n or n by k), so four orders; now
and then a leading batch dim (2 to 32, attention's heads); f32 mostly,
bf16 at times. 1e5 to 2e8 flops (bf16, which XLA:CPU converts to f32
around the dot and ran at a median 5 GFLOP/s, at most 1e7), the operands
and result at most 64 MiB. XLA:CPU compiles the dot first; the kernels
that still hold a dot are kept (a dim of 1 can become a reduction, which
is dropped).

Records: program "skinny:<small>-<order>", e.g. "skinny:rows-nt". Draws
from no programs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.generate import Failed, log_uniform
from tpuperf_cli.generate.ops import BYTES, MAX_BYTES, ModuleText, compiled_kernels
from tpuperf_cli.records import PROGRAM, Record

SOURCE_NAME = "skinny"
SMALL = ("rows", "rows", "columns", "contraction")    # which dim is small (repeats weigh)
ORDERS = ("nn", "nt", "tn", "tt")                      # lhs, rhs: t = stored transposed
DTYPES = ("f32", "f32", "f32", "bf16")
FLOPS = {"f32": (1e5, 2e8), "bf16": (1e5, 1e7)}
BATCH_P = 0.2


def _size(r: random.Random, lo: int, hi: int, round_to: int) -> int:
    """Log-uniform in [lo, hi]; half the time rounded as models have them:
    small dims (round_to 1) to a power of two, large ones to a power of two
    or a multiple of round_to. A transposed weight whose rows are a power
    of two of bytes apart runs 3x slower than its neighbours
    (benchmarks/bench_dot_strides.py), and models' widths often are."""
    n = log_uniform(r, lo, hi)
    if r.random() < 0.5:
        if round_to == 1 or r.random() < 0.5:
            n = min(hi, max(lo, 2 ** round(math.log2(n))))
        else:
            n = max(round_to, round(n / round_to) * round_to)
    return n


def draw_dot(r: random.Random) -> dict | None:
    """One dot's settings, or None when its size is out of range (the
    caller draws again)."""
    small, order, dtype = r.choice(SMALL), r.choice(ORDERS), r.choice(DTYPES)
    dims = {"m": _size(r, 32, 4096, 32), "n": _size(r, 32, 4096, 32),
            "k": _size(r, 32, 4096, 32)}
    dims[{"rows": "m", "columns": "n", "contraction": "k"}[small]] = _size(r, 1, 64, 1)
    batch = _size(r, 2, 32, 1) if r.random() < BATCH_P else 0
    m, n, k = dims["m"], dims["n"], dims["k"]
    flops = 2 * max(batch, 1) * m * n * k
    nbytes = max(batch, 1) * ((m * k + k * n) * BYTES[dtype] + m * n * BYTES[dtype])
    lo, hi = FLOPS[dtype]
    if not lo <= flops <= hi or nbytes > MAX_BYTES:
        return None
    return dict(small=small, order=order, dtype=dtype, batch=batch, m=m, n=n, k=k)


def dot_text(dot: dict) -> str:
    """An HLO module of the dot alone: lhs [batch,]m,k (k,m when t), rhs
    [batch,]k,n (n,k when t), row-major, result [batch,]m,n."""
    b = [dot["batch"]] if dot["batch"] else []
    lhs_t, rhs_t = dot["order"][0] == "t", dot["order"][1] == "t"
    nb = len(b)

    def shape(dims):                # row-major, as jax writes it
        return f"{dot['dtype']}[{','.join(map(str, dims))}]{{{','.join(map(str, reversed(range(len(dims)))))}}}"

    op = ModuleText("skinny_dot")
    lhs = op.param(shape(b + ([dot["k"], dot["m"]] if lhs_t else [dot["m"], dot["k"]])))
    rhs = op.param(shape(b + ([dot["n"], dot["k"]] if rhs_t else [dot["k"], dot["n"]])))
    attrs = ["lhs_batch_dims={0}", "rhs_batch_dims={0}"] if nb else []
    attrs += [f"lhs_contracting_dims={{{nb + (0 if lhs_t else 1)}}}",
              f"rhs_contracting_dims={{{nb + (1 if rhs_t else 0)}}}"]
    return op.text(shape(b + [dot["m"], dot["n"]]), "dot", [lhs, rhs], ", ".join(attrs))


def generate(seed: int, programs: Sequence[str], log: Callable[[str], None]) -> Iterator[Record]:
    """Kernel records of random skinny dots, forever (see the module
    docstring). programs: unused (this source draws from none)."""
    r = random.Random(f"{SOURCE_NAME}:{seed}")
    while True:
        dot = draw_dot(r)
        if dot is None:
            continue
        name = f"{dot['small']}-{dot['order']}"
        try:
            records = compiled_kernels(dot_text(dot), "dot", SOURCE_NAME)
        except TpuperfError as e:
            yield Failed(f"{SOURCE_NAME}:{name}: {e}")
            continue
        if not records:
            yield Failed(f"{SOURCE_NAME}:{name}: XLA wrote the dot as no dot "
                         f"(m={dot['m']} n={dot['n']} k={dot['k']})")
        for record in records:
            record[PROGRAM] = f"{SOURCE_NAME}:{name}"
            yield record
