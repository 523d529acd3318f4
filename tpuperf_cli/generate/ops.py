"""The `ops` source: single-op HLO modules of every opcode XLA:CPU runs.

Each kernel is a module written as text with one instruction in its ENTRY
(its operands parameters), at a random valid shape, dtype, layout and
attributes, sizes drawn log-uniformly so that runtimes span about a
microsecond to a few milliseconds on a CPU, and capped (MAX_FLOPS,
MAX_BYTES) so that measuring them stays cheap. Elementwise ops are now and
then wrapped in a one-op kLoop fusion, as XLA:CPU's optimized HLO has them.

Convolutions and dots are compiled by XLA:CPU first, and their records
are the kernels of the optimized module that hold the op (see
COMPILED_FIRST).

While loops and conditionals are not kernels (hlo-split's find_kernels
enters them and lists the ops of their bodies, conditions and branches,
which is what a model is asked about), so for them the source writes a
small loop (or conditional) and yields every kernel it holds: the loop's
dynamic-slice / update / counter ops with the trip count as their count.

Opcodes of featurize's table that XLA:CPU cannot run alone, or that are
not kernels, are listed in NOT_GENERATED with the reason.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.generate import Failed, kernel_record, kernel_records_of
from tpuperf_cli.generate.fusions import compile_cpu
from tpuperf_cli.records import Record

MAX_FLOPS = 2e8          # per kernel
MAX_BYTES = 64 << 20     # operands and result together
MAX_ELEMS = 1 << 20      # of one cheap elementwise operand
MIN_ELEMS = 8192         # smaller ones take well under a microsecond
MIN_FLOPS = 1e5          # of a dot or convolution, for the same reason
# slow per element or per flop on a CPU (no vector units for them, or
# emulated): their caps are smaller
SLOW_FLOPS = 2e7

FLOATS = ("f32", "f32", "f32", "bf16", "f16", "f64")
INTS = ("s32", "s32", "s8", "u8", "s16", "u32", "s64")
SIGNED = ("s32", "s8", "s16", "s64")
BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
         "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}

# Opcodes of features/opcodes.py this source does not write, and why
# (shown in `tpuperf generate --help`).
NOT_GENERATED = {
    "needs other devices or a host peer (measure refuses them)": (
        "all-gather all-gather-start all-gather-done all-reduce all-reduce-start "
        "all-reduce-done all-to-all collective-broadcast collective-permute "
        "collective-permute-start collective-permute-done ragged-all-to-all reduce-scatter "
        "collective-reduce infeed outfeed send send-done recv recv-done partition-id "
        "replica-id"),
    "not kernels (the kernels of while loops and conditionals are written)": (
        "parameter constant tuple get-tuple-element bitcast call "
        "async-start async-update async-done after-all add-dependency opt-barrier domain "
        "copy-done"),
    "dynamic shapes: XLA:CPU's padder rejects them in a standalone kernel": (
        "set-dimension-size dynamic-reshape"),
    "not accepted by XLA's HLO parser in jaxlib 0.6": (
        "acos acosh asin asinh atan atanh cosh sinh mulhi ragged-dot scaled-dot scan "
        "shuffle trace tuple-select"),
    "does not convert through StableHLO (measure's way in)": "copy-start",
    "written by the fusions source": "fusion",
}


def not_generated_text() -> str:
    return "; ".join(f"{why}: {ops}" for why, ops in NOT_GENERATED.items())


# ---------------------------------------------------------------- text helpers

def _default_layout(rank):
    return list(range(rank - 1, -1, -1))


class ModuleText:
    """One module being written: parameters, called computations, one root."""

    def __init__(self, name):
        self.name = name
        self.params: list[str] = []
        self.comps: list[str] = []

    def param(self, shape: str) -> str:
        self.params.append(shape)
        return f"%p{len(self.params) - 1}"

    def text(self, root_shape: str, op: str, operands: Sequence[str], attrs: str = "",
             fused: bool = False) -> str:
        args = ", ".join(operands)
        tail = f", {attrs}" if attrs else ""
        lines = [f"HloModule {self.name.replace('-', '_')}", ""]
        lines += self.comps
        params = [f"  %p{i} = {s} parameter({i})" for i, s in enumerate(self.params)]
        if fused:
            fparams = [f"  %f{i} = {_strip(s)} parameter({i})" for i, s in enumerate(self.params)]
            fargs = ", ".join(a.replace("%p", "%f") for a in operands)
            lines += [f"%fused ({', '.join(f'f{i}: {_strip(s)}' for i, s in enumerate(self.params))})"
                      f" -> {_strip(root_shape)} {{", *fparams,
                      f"  ROOT %r = {_strip(root_shape)} {op}({fargs}){tail}", "}", ""]
            root = f"  ROOT %r = {root_shape} fusion({args}), kind=kLoop, calls=%fused"
        else:
            root = f"  ROOT %r = {root_shape} {op}({args}){tail}"
        sig = ", ".join(f"p{i}: {_strip(s)}" for i, s in enumerate(self.params))
        lines += [f"ENTRY %main ({sig}) -> {_strip(root_shape)} {{", *params, root, "}", ""]
        return "\n".join(lines)


def _strip(shape):
    """A shape without layouts (for signatures)."""
    out, depth = [], 0
    for ch in shape:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


class _Gen:
    """Random draws for one kernel."""

    def __init__(self, r: random.Random):
        self.r = r

    def layout(self, rank, default_p=0.7):
        if rank < 2 or self.r.random() < default_p:
            return _default_layout(rank)
        m2m = list(range(rank))
        self.r.shuffle(m2m)
        return m2m

    def shape(self, dt, dims, layout=None):
        if layout is None:
            layout = self.layout(len(dims))
        d = ",".join(str(x) for x in dims)
        if not dims:
            return f"{dt}[]"
        return f"{dt}[{d}]{{{','.join(str(x) for x in layout)}}}"

    def dims(self, rank, max_elems, min_elems=1, max_dim=1 << 20):
        """rank dims whose product is log-uniform in [min_elems, max_elems]."""
        if rank == 0:
            return []
        max_elems = max(max_elems, min_elems)
        total = math.exp(self.r.uniform(math.log(min_elems), math.log(max_elems)))
        w = [self.r.random() + 0.1 for _ in range(rank)]
        s = sum(w)
        out = [max(1, min(max_dim, int(round(total ** (x / s))))) for x in w]
        while math.prod(out) > max_elems:
            i = out.index(max(out))
            out[i] = max(1, out[i] // 2)
        return out

    def logint(self, lo, hi):
        return int(round(math.exp(self.r.uniform(math.log(lo), math.log(hi)))))

    def choice(self, seq):
        return self.r.choice(seq)

    def rand(self):
        return self.r.random()

    def randint(self, a, b):
        return self.r.randint(a, b)


def _scalar_comp(name, dt, body_op, nparams=2, out_dt=None):
    out_dt = out_dt or dt
    ps = "\n".join(f"  %x{i} = {dt}[] parameter({i})" for i in range(nparams))
    sig = ", ".join(f"x{i}: {dt}[]" for i in range(nparams))
    args = ", ".join(f"%x{i}" for i in range(nparams))
    return (f"%{name} ({sig}) -> {out_dt}[] {{\n{ps}\n  ROOT %y = {out_dt}[] {body_op}({args})"
            f"\n}}\n")


def _assign_comp(name, dt):
    """A scatter combiner that keeps the update (the second operand)."""
    return (f"%{name} (x0: {dt}[], x1: {dt}[]) -> {dt}[] {{\n"
            f"  %x0 = {dt}[] parameter(0)\n  ROOT %x1 = {dt}[] parameter(1)\n}}\n")


def _reducer(op: ModuleText, g: _Gen, dt, kinds=None) -> str:
    """Adds a scalar reducer computation; returns its name."""
    if dt == "pred":
        kind = g.choice(("and", "or"))
    else:
        kind = g.choice(kinds or ("add", "add", "maximum", "minimum", "multiply"))
    name = f"reduce_{kind}_{dt}"
    op.comps.append(_scalar_comp(name, dt, kind))
    return f"%{name}"


def _nbytes(dt, dims):
    return BYTES.get(dt, 4) * math.prod(dims)


# ---------------------------------------------------------------- elementwise

UNARY_FLOAT = ("abs ceil cosine exponential exponential-minus-one floor log log-plus-one "
               "negate round-nearest-afz round-nearest-even rsqrt sign sine sqrt tanh cbrt "
               "logistic tan erf").split()
TRANSCENDENTAL = set("cosine exponential exponential-minus-one log log-plus-one rsqrt sine "
                     "sqrt tanh cbrt logistic tan erf power atan2 remainder "
                     "stochastic-convert".split())
UNARY_INT = "abs negate sign not popcnt count-leading-zeros".split()
BINARY_FLOAT = "add subtract multiply divide maximum minimum power remainder atan2".split()
BINARY_INT = ("add subtract multiply divide maximum minimum remainder and or xor shift-left "
              "shift-right-arithmetic shift-right-logical power").split()
DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")


def _elementwise_dims(g, opcode, dt, nbuf):
    cap = MAX_ELEMS // (8 if opcode in TRANSCENDENTAL else 1) // (4 if dt in ("f16", "bf16") else 1)
    cap = min(cap, MAX_BYTES // (nbuf * BYTES.get(dt, 4)))
    # a few scalars (loop counters and the like are kernels of their own)
    if g.rand() < 0.04:
        return []
    return g.dims(g.randint(1, 4), cap, min_elems=MIN_ELEMS)


def _unary(g: _Gen, opcode=None):
    if opcode is None:
        opcode = g.choice(UNARY_FLOAT + UNARY_INT + ["is-finite"])
    if opcode in UNARY_INT and opcode not in ("abs", "negate", "sign"):
        dt = g.choice(INTS + (("pred",) if opcode == "not" else ()))
    elif opcode in ("abs", "negate", "sign"):
        dt = g.choice(FLOATS + SIGNED)      # StableHLO's sign and abs take no unsigned
    else:
        dt = g.choice(FLOATS)
    if opcode == "abs" and g.rand() < 0.1:
        dt = "c64"
    dims = _elementwise_dims(g, opcode, dt, 2)
    lay = g.layout(len(dims))
    op = ModuleText(opcode)
    x = op.param(g.shape(dt, dims, lay))
    out_dt = "pred" if opcode == "is-finite" else ("f32" if dt == "c64" else dt)
    return opcode, op.text(g.shape(out_dt, dims, lay), opcode, [x], fused=g.rand() < 0.25)


def _binary(g: _Gen, opcode=None):
    opcode = opcode or g.choice(BINARY_FLOAT + BINARY_INT)
    if opcode in ("and", "or", "xor"):
        dt = g.choice(INTS + ("pred",))
    elif opcode.startswith("shift"):
        dt = g.choice(INTS)
    elif opcode in ("atan2",) or opcode not in BINARY_INT:
        dt = g.choice(FLOATS)
    else:
        dt = g.choice(FLOATS + INTS) if opcode in BINARY_FLOAT else g.choice(INTS)
    dims = _elementwise_dims(g, opcode, dt, 3)
    lay = g.layout(len(dims))
    op = ModuleText(opcode)
    a = op.param(g.shape(dt, dims, lay))
    b = op.param(g.shape(dt, dims, g.layout(len(dims))))
    return opcode, op.text(g.shape(dt, dims, lay), opcode, [a, b], fused=g.rand() < 0.25)


def _compare(g: _Gen):
    dt = g.choice(FLOATS + INTS + ("pred",))
    dims = _elementwise_dims(g, "compare", dt, 3)
    op = ModuleText("compare")
    a = op.param(g.shape(dt, dims))
    b = op.param(g.shape(dt, dims))
    attrs = f"direction={g.choice(DIRECTIONS)}"
    if dt in FLOATS and g.rand() < 0.3:
        attrs += ", type=TOTALORDER"
    return "compare", op.text(g.shape("pred", dims), "compare", [a, b], attrs,
                              fused=g.rand() < 0.25)


def _select(g: _Gen):
    dt = g.choice(FLOATS + INTS + ("pred",))
    dims = _elementwise_dims(g, "select", dt, 4)
    lay = g.layout(len(dims))
    op = ModuleText("select")
    p = op.param(g.shape("pred", dims))
    a = op.param(g.shape(dt, dims, lay))
    b = op.param(g.shape(dt, dims))
    return "select", op.text(g.shape(dt, dims, lay), "select", [p, a, b], fused=g.rand() < 0.25)


def _clamp(g: _Gen):
    dt = g.choice(FLOATS + INTS)
    dims = _elementwise_dims(g, "clamp", dt, 4)
    op = ModuleText("clamp")
    scalar = g.rand() < 0.5
    lo = op.param(g.shape(dt, [] if scalar else dims))
    x = op.param(g.shape(dt, dims))
    hi = op.param(g.shape(dt, [] if scalar else dims))
    return "clamp", op.text(g.shape(dt, dims), "clamp", [lo, x, hi])


def _convert(g: _Gen):
    src = g.choice(FLOATS + INTS + ("pred",))
    dst = g.choice(FLOATS + INTS + ("pred", "f8e4m3fn", "f8e5m2"))
    dims = _elementwise_dims(g, "convert", "f64", 2)
    lay = g.layout(len(dims))
    op = ModuleText("convert")
    x = op.param(g.shape(src, dims, lay))
    return "convert", op.text(g.shape(dst, dims, lay), "convert", [x], fused=g.rand() < 0.25)


def _bitcast_convert(g: _Gen):
    groups = {1: ("s8", "u8", "pred"), 2: ("s16", "u16", "f16", "bf16"),
              4: ("s32", "u32", "f32"), 8: ("s64", "u64", "f64")}
    width = g.choice((1, 2, 4, 8))
    src = g.choice(tuple(x for x in groups[width] if x != "pred"))
    dims = _elementwise_dims(g, "bitcast-convert", "f64", 2)
    op = ModuleText("bitcast-convert")
    kind = g.rand()
    if kind < 0.5 or width == 1 or (kind >= 0.75 and width == 8):
        dst = g.choice(tuple(x for x in groups[width] if x not in (src, "pred")))
        x = op.param(g.shape(src, dims))
        out = g.shape(dst, dims)
    elif kind < 0.75:                      # wide -> narrow: a new minor dim
        nw = g.choice(tuple(w for w in groups if w < width))
        dst = g.choice(tuple(x for x in groups[nw] if x != "pred"))
        x = op.param(g.shape(src, dims, _default_layout(len(dims))))
        out = g.shape(dst, dims + [width // nw], _default_layout(len(dims) + 1))
    else:                                  # narrow -> wide: the minor dim goes
        nw = g.choice(tuple(w for w in groups if w > width))
        dst = g.choice(groups[nw])
        dst = dst if dst != "pred" else "s8"
        x = op.param(g.shape(src, dims + [nw // width], _default_layout(len(dims) + 1)))
        out = g.shape(dst, dims, _default_layout(len(dims)))
    return "bitcast-convert", op.text(out, "bitcast-convert", [x])


def _reduce_precision(g: _Gen):
    dt = g.choice(("f32", "f64", "bf16", "f16"))
    dims = _elementwise_dims(g, "reduce-precision", dt, 2)
    op = ModuleText("reduce-precision")
    x = op.param(g.shape(dt, dims))
    e, m = g.choice(((5, 10), (8, 7), (4, 3), (5, 2), (8, 23)))
    return "reduce-precision", op.text(g.shape(dt, dims), "reduce-precision", [x],
                                       f"exponent_bits={e}, mantissa_bits={m}")


def _stochastic_convert(g: _Gen):
    src, bits, dst = g.choice((("f32", "u32", "s32"), ("f32", "u32", "s8"),
                               ("f16", "u16", "s8"), ("bf16", "u16", "s16")))
    dims = _elementwise_dims(g, "stochastic-convert", "f32", 3)
    op = ModuleText("stochastic-convert")
    lay = g.layout(len(dims))
    x = op.param(g.shape(src, dims, lay))
    u = op.param(g.shape(bits, dims, lay))
    return "stochastic-convert", op.text(g.shape(dst, dims, lay), "stochastic-convert", [x, u])


def _complex_ops(g: _Gen):
    opcode = g.choice(("complex", "real", "imag"))
    dt, cdt = g.choice((("f32", "c64"), ("f64", "c128")))
    dims = _elementwise_dims(g, opcode, cdt, 3)
    op = ModuleText(opcode)
    if opcode == "complex":
        a, b = op.param(g.shape(dt, dims)), op.param(g.shape(dt, dims))
        return opcode, op.text(g.shape(cdt, dims), opcode, [a, b])
    x = op.param(g.shape(cdt, dims))
    return opcode, op.text(g.shape(dt, dims), opcode, [x])


def _map(g: _Gen):
    dt = g.choice(("f32", "f32", "s32", "f16"))
    dims = _elementwise_dims(g, "map", dt, 3)
    op = ModuleText("map")
    body = g.choice(("add", "multiply", "maximum", "subtract"))
    op.comps.append(_scalar_comp(f"map_{body}", dt, body))
    a, b = op.param(g.shape(dt, dims)), op.param(g.shape(dt, dims))
    d = ",".join(str(i) for i in range(len(dims)))
    return "map", op.text(g.shape(dt, dims), "map", [a, b],
                          f"dimensions={{{d}}}, to_apply=%map_{body}")


# ---------------------------------------------------------------- data movement

ANY = FLOATS + INTS + ("pred",)
MOVE_ELEMS = 1 << 20     # of one data-movement operand (s8 copies would be 32M at 64 MB)


def _move_cap(dt, nbuf=2):
    return min(MOVE_ELEMS, MAX_BYTES // nbuf // BYTES.get(dt, 4))


def _broadcast(g: _Gen):
    dt = g.choice(ANY)
    rank = g.randint(1, 5)
    dims = g.dims(rank, _move_cap(dt), min_elems=MIN_ELEMS)
    keep = sorted(g.r.sample(range(rank), g.randint(0, rank - 1)))
    op = ModuleText("broadcast")
    x = op.param(g.shape(dt, [dims[i] for i in keep]))
    return "broadcast", op.text(g.shape(dt, dims), "broadcast", [x],
                                f"dimensions={{{','.join(map(str, keep))}}}")


def _moves_data(dims, in_layout, perm, out_layout):
    """Whether a transpose (or copy: perm the identity) from in_layout to
    out_layout moves data: otherwise it is a bitcast, which XLA removes
    and measure cannot time. Only dims larger than 1 count."""
    src = [d for d in reversed(in_layout) if dims[d] > 1]
    dst = [perm[d] for d in reversed(out_layout) if dims[perm[d]] > 1]
    return src != dst


def _transpose(g: _Gen):
    dt = g.choice(ANY)
    for _ in range(20):
        rank = g.randint(2, 5)
        dims = g.dims(rank, _move_cap(dt), min_elems=MIN_ELEMS)
        perm = list(range(rank))
        while perm == sorted(perm):
            g.r.shuffle(perm)
        lin, lout = g.layout(rank), g.layout(rank)
        if _moves_data(dims, lin, perm, lout):
            break
    op = ModuleText("transpose")
    x = op.param(g.shape(dt, dims, lin))
    return "transpose", op.text(g.shape(dt, [dims[p] for p in perm], lout), "transpose", [x],
                                f"dimensions={{{','.join(map(str, perm))}}}")


def _factor(n, g):
    """A random split of n into two factors."""
    divs = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    d = g.choice(divs)
    return (d, n // d) if g.rand() < 0.5 else (n // d, d)


def _reshape(g: _Gen):
    dt = g.choice(ANY)
    rank = g.randint(1, 4)
    dims = g.dims(rank, _move_cap(dt), min_elems=MIN_ELEMS)
    out = list(dims)
    for _ in range(g.randint(1, 3)):
        if len(out) >= 2 and g.rand() < 0.5:
            i = g.randint(0, len(out) - 2)
            out[i:i + 2] = [out[i] * out[i + 1]]
        else:
            i = g.randint(0, len(out) - 1)
            out[i:i + 1] = list(_factor(out[i], g))
    if out == dims:
        out = [math.prod(dims)]
    # with row-major layouts a reshape is a bitcast XLA removes: mostly other layouts
    op = ModuleText("reshape")
    x = op.param(g.shape(dt, dims, g.layout(len(dims), 0.3)))
    return "reshape", op.text(g.shape(dt, out, g.layout(len(out), 0.3)), "reshape", [x])


def _copy(g: _Gen):
    """A copy that changes the layout (one that does not is removed by XLA)."""
    dt = g.choice(ANY)
    for _ in range(20):
        rank = g.randint(2, 5)
        dims = g.dims(rank, _move_cap(dt), min_elems=MIN_ELEMS)
        lin, lout = g.layout(rank, 0.3), g.layout(rank, 0.3)
        if _moves_data(dims, lin, list(range(rank)), lout):
            break
    op = ModuleText("copy")
    x = op.param(g.shape(dt, dims, lin))
    return "copy", op.text(g.shape(dt, dims, lout), "copy", [x])


def _slice(g: _Gen):
    dt = g.choice(ANY)
    rank = g.randint(1, 4)
    dims = g.dims(rank, _move_cap(dt), min_elems=MIN_ELEMS)
    spec, out = [], []
    for d in dims:
        start = g.randint(0, d // 2)        # a slice of about half the dim or more
        limit = g.randint(max(start + 1, d // 2), d)
        stride = g.choice((1, 1, 1, 2, 3)) if limit - start > 1 else 1
        spec.append(f"[{start}:{limit}:{stride}]" if stride != 1 else f"[{start}:{limit}]")
        out.append((limit - start + stride - 1) // stride)
    op = ModuleText("slice")
    x = op.param(g.shape(dt, dims))
    return "slice", op.text(g.shape(dt, out), "slice", [x], f"slice={{{', '.join(spec)}}}")


def _concatenate(g: _Gen):
    dt = g.choice(ANY)
    n = g.randint(2, 6)
    rank = g.randint(1, 4)
    axis = g.randint(0, rank - 1)
    dims = g.dims(rank, _move_cap(dt) // n, min_elems=MIN_ELEMS)
    op = ModuleText("concatenate")
    parts, total = [], 0
    for _ in range(n):
        d = list(dims)
        d[axis] = max(1, g.logint(1, max(1, dims[axis]) * 2))
        total += d[axis]
        parts.append(op.param(g.shape(dt, d)))
    out = list(dims)
    out[axis] = total
    return "concatenate", op.text(g.shape(dt, out), "concatenate", parts,
                                  f"dimensions={{{axis}}}")


def _reverse(g: _Gen):
    dt = g.choice(ANY)
    rank = g.randint(1, 4)
    dims = g.dims(rank, _move_cap(dt), min_elems=MIN_ELEMS)
    axes = sorted(g.r.sample(range(rank), g.randint(1, rank)))
    op = ModuleText("reverse")
    x = op.param(g.shape(dt, dims))
    return "reverse", op.text(g.shape(dt, dims), "reverse", [x],
                              f"dimensions={{{','.join(map(str, axes))}}}")


def _pad(g: _Gen):
    dt = g.choice(ANY)
    rank = g.randint(1, 4)
    dims = g.dims(rank, _move_cap(dt, 8), min_elems=MIN_ELEMS)
    spec, out = [], []
    for d in dims:
        interior = g.choice((0, 0, 0, 1, 2))
        size = d + (d - 1) * interior
        lo = g.randint(-(size // 2), 8) if g.rand() < 0.3 else g.randint(0, 4)
        hi = g.randint(-(size // 2), 8) if g.rand() < 0.3 else g.randint(0, 4)
        if size + lo + hi < 1:
            lo, hi = 0, 0
        spec.append(f"{lo}_{hi}" + (f"_{interior}" if interior else ""))
        out.append(size + lo + hi)
    op = ModuleText("pad")
    x = op.param(g.shape(dt, dims))
    v = op.param(f"{dt}[]")
    return "pad", op.text(g.shape(dt, out), "pad", [x, v], f"padding={'x'.join(spec)}")


def _iota(g: _Gen):
    dt = g.choice(("s32", "s32", "f32", "u32", "s64", "bf16", "s8"))
    rank = g.randint(1, 4)
    dims = g.dims(rank, _move_cap(dt), min_elems=MIN_ELEMS)
    op = ModuleText("iota")
    return "iota", op.text(g.shape(dt, dims), "iota", [], f"iota_dimension={g.randint(0, rank - 1)}")


def _dynamic_slice(g: _Gen, update=False):
    opcode = "dynamic-update-slice" if update else "dynamic-slice"
    dt = g.choice(ANY)
    rank = g.randint(1, 4)
    dims = g.dims(rank, _move_cap(dt, 3), min_elems=MIN_ELEMS)
    sizes = [g.randint(max(1, d // 4), d) for d in dims]
    ity = g.choice(("s32", "s32", "s64", "u32"))
    op = ModuleText(opcode)
    x = op.param(g.shape(dt, dims))
    if update:
        u = op.param(g.shape(dt, sizes))
        idx = [op.param(f"{ity}[]") for _ in dims]
        return opcode, op.text(g.shape(dt, dims), opcode, [x, u] + idx)
    idx = [op.param(f"{ity}[]") for _ in dims]
    return opcode, op.text(g.shape(dt, sizes), opcode, [x] + idx,
                           f"dynamic_slice_sizes={{{','.join(map(str, sizes))}}}")


def _gather_scatter_dims(g: _Gen, dt):
    rank = g.randint(1, 4)
    dims = g.dims(rank, _move_cap(dt, 4), min_elems=MIN_ELEMS)
    k = g.randint(1, rank)
    index_map = sorted(g.r.sample(range(rank), k))
    collapsed = [d for d in index_map if g.rand() < 0.6]
    sizes = [1 if d in collapsed else g.randint(1, max(1, dims[d] // 2)) if d in index_map
             else g.randint(1, dims[d]) for d in range(rank)]
    window = math.prod(sizes)
    # gather and scatter go one index at a time: cap the elements they move
    batch_cap = max(1, (1 << 16) // window)
    batch = g.dims(g.randint(1, 2), min(batch_cap, 1 << 16), min_elems=min(16, batch_cap))
    return dims, index_map, collapsed, sizes, batch


def _gather(g: _Gen):
    dt = g.choice(FLOATS + INTS)
    dims, index_map, collapsed, sizes, batch = _gather_scatter_dims(g, dt)
    ity = g.choice(("s32", "s32", "s64", "u32"))
    offset = [sizes[d] for d in range(len(dims)) if d not in collapsed]
    nb = len(batch)
    op = ModuleText("gather")
    x = op.param(g.shape(dt, dims))
    i = op.param(g.shape(ity, batch + [len(index_map)]))
    attrs = (f"offset_dims={{{','.join(str(nb + j) for j in range(len(offset)))}}}, "
             f"collapsed_slice_dims={{{','.join(map(str, collapsed))}}}, "
             f"start_index_map={{{','.join(map(str, index_map))}}}, index_vector_dim={nb}, "
             f"slice_sizes={{{','.join(map(str, sizes))}}}")
    if g.rand() < 0.3:
        attrs += ", indices_are_sorted=true"
    return "gather", op.text(g.shape(dt, batch + offset), "gather", [x, i], attrs)


def _scatter(g: _Gen):
    dt = g.choice(FLOATS + INTS)
    dims, index_map, collapsed, sizes, batch = _gather_scatter_dims(g, dt)
    ity = g.choice(("s32", "s32", "s64"))
    window = [sizes[d] for d in range(len(dims)) if d not in collapsed]
    nb = len(batch)
    op = ModuleText("scatter")
    kind = g.choice(("add", "maximum", "assign", "multiply"))
    if kind == "assign":
        op.comps.append(_assign_comp("scatter_assign", dt))
    else:
        op.comps.append(_scalar_comp(f"scatter_{kind}", dt, kind))
    x = op.param(g.shape(dt, dims))
    i = op.param(g.shape(ity, batch + [len(index_map)]))
    u = op.param(g.shape(dt, batch + window))
    attrs = (f"update_window_dims={{{','.join(str(nb + j) for j in range(len(window)))}}}, "
             f"inserted_window_dims={{{','.join(map(str, collapsed))}}}, "
             f"scatter_dims_to_operand_dims={{{','.join(map(str, index_map))}}}, "
             f"index_vector_dim={nb}, to_apply=%scatter_{kind}")
    if g.rand() < 0.3:
        attrs += ", indices_are_sorted=true"
    if g.rand() < 0.2:
        attrs += ", unique_indices=true"
    return "scatter", op.text(g.shape(dt, dims), "scatter", [x, i, u], attrs)


# ---------------------------------------------------------------- reductions

def _reduce(g: _Gen):
    op = ModuleText("reduce")
    rank = g.randint(1, 4)
    axes = sorted(g.r.sample(range(rank), g.randint(1, rank)))
    if g.rand() < 0.25:        # argmax/argmin: a variadic reduce of (value, index)
        dt = g.choice(("f32", "bf16", "f16"))
        dims = g.dims(rank, 1 << 20, min_elems=MIN_ELEMS)
        cmp = g.choice(("GT", "LT"))
        op.comps.append(
            f"%argreduce (v0: {dt}[], i0: s32[], v1: {dt}[], i1: s32[]) -> ({dt}[], s32[]) {{\n"
            f"  %v0 = {dt}[] parameter(0)\n  %i0 = s32[] parameter(1)\n"
            f"  %v1 = {dt}[] parameter(2)\n  %i1 = s32[] parameter(3)\n"
            f"  %c = pred[] compare(%v0, %v1), direction={cmp}\n"
            f"  %v = {dt}[] select(%c, %v0, %v1)\n  %i = s32[] select(%c, %i0, %i1)\n"
            f"  ROOT %t = ({dt}[], s32[]) tuple(%v, %i)\n}}\n")
        v = op.param(g.shape(dt, dims))
        i = op.param(g.shape("s32", dims))
        iv, ii = op.param(f"{dt}[]"), op.param("s32[]")
        out = [d for k, d in enumerate(dims) if k not in axes]
        shape = f"({g.shape(dt, out)}, {g.shape('s32', out)})"
        return "reduce", op.text(shape, "reduce", [v, i, iv, ii],
                                 f"dimensions={{{','.join(map(str, axes))}}}, to_apply=%argreduce")
    dt = g.choice(FLOATS + INTS + ("pred",))
    dims = g.dims(rank, _move_cap(dt), min_elems=MIN_ELEMS)
    red = _reducer(op, g, dt)
    x = op.param(g.shape(dt, dims))
    init = op.param(f"{dt}[]")
    out = [d for k, d in enumerate(dims) if k not in axes]
    return "reduce", op.text(g.shape(dt, out), "reduce", [x, init],
                             f"dimensions={{{','.join(map(str, axes))}}}, to_apply={red}")


def _window(g: _Gen, dims, allow_dilation=True, lhs_dilations=(1, 1, 1, 2),
            rhs_dilations=(1, 1, 1, 2), sizes=(1, 2, 3, 3, 5, 7), whole_p=0.0,
            framework_pads=False):
    """(window attribute, output dims) of a random valid window over dims;
    each dim's size drawn from sizes, or with probability whole_p as large
    as the dim (a filter gradient's window; with dilation allowed, half of
    those a dilated convolution's filter gradient: the dim less (taps - 1)
    strides of a dilation), its dilations from the tuples (when
    allow_dilation). framework_pads: pads as frameworks write them
    around a dilated window (none, 'same' or causal) instead of random ones
    under the window's size."""
    size, stride, pad, ld, rd, out = [], [], [], [], [], []
    for d in dims:
        whole = bool(whole_p) and d > 1 and g.rand() < whole_p
        k = (d if whole else g.choice(sizes)) if d > 1 else 1
        k = min(k, d)
        s = g.choice((1, 1, 2, 3)) if g.rand() < 0.7 else k
        lo, hi = (g.randint(0, k - 1), g.randint(0, k - 1)) if g.rand() < 0.4 else (0, 0)
        l = g.choice(lhs_dilations) if allow_dilation else 1
        r_ = g.choice(rhs_dilations) if allow_dilation and not whole else 1
        if whole:       # a filter gradient: stride 1, padded to a small filter's size
            s, pad_k = 1, g.choice(sizes) - 1
            lo, hi = pad_k // 2, pad_k - pad_k // 2
            strides = [x for x in rhs_dilations if 1 < x <= d // 2] if allow_dilation else []
            if strides and g.rand() < 0.5:
                # a dilated convolution's filter gradient (WaveNet's): the
                # window spans all but (taps - 1) dilations of the input,
                # strided by the dilation, unpadded: taps outputs
                s = g.choice(strides)
                taps = g.choice([t for t in (2, 2, 3) if (t - 1) * s <= d // 2])
                k, lo, hi, l = d - (taps - 1) * s, 0, 0, 1
        elif framework_pads:
            span_k = (k - 1) * r_
            lo, hi = g.choice(((0, 0), (span_k // 2, span_k - span_k // 2), (span_k, 0)))
        span = (d - 1) * l + 1 + lo + hi
        kd = (k - 1) * r_ + 1
        if span < kd:
            l, r_, kd, span = 1, 1, k, d + lo + hi
        size.append(k), stride.append(s), pad.append(f"{lo}_{hi}"), ld.append(l), rd.append(r_)
        out.append((span - kd) // s + 1)
    attr = f"size={'x'.join(map(str, size))} stride={'x'.join(map(str, stride))}"
    if any(p != "0_0" for p in pad):
        attr += f" pad={'x'.join(pad)}"
    if any(x != 1 for x in ld):
        attr += f" lhs_dilate={'x'.join(map(str, ld))}"
    if any(x != 1 for x in rd):
        attr += f" rhs_dilate={'x'.join(map(str, rd))}"
    return attr, out, math.prod(size)


def _reduce_window(g: _Gen):
    dt = g.choice(("f32", "f32", "bf16", "f16", "s32", "s8"))
    rank = g.randint(1, 4)
    dims = g.dims(rank, MAX_BYTES // 4 // BYTES.get(dt, 4), min_elems=MIN_ELEMS)
    attr, out, taps = _window(g, dims)
    while math.prod(out) * taps > SLOW_FLOPS:
        dims = [max(1, d // 2) for d in dims]
        attr, out, taps = _window(g, dims)
    op = ModuleText("reduce-window")
    red = _reducer(op, g, dt, ("add", "maximum", "minimum"))
    x = op.param(g.shape(dt, dims))
    init = op.param(f"{dt}[]")
    return "reduce-window", op.text(g.shape(dt, out), "reduce-window", [x, init],
                                    f"window={{{attr}}}, to_apply={red}")


def _select_and_scatter(g: _Gen):
    dt = g.choice(("f32", "f32", "bf16", "f16"))
    rank = g.randint(1, 4)
    dims = g.dims(rank, MAX_BYTES // 4 // BYTES.get(dt, 4), min_elems=MIN_ELEMS)
    attr, out, taps = _window(g, dims, allow_dilation=False)
    while math.prod(dims) * taps > SLOW_FLOPS:
        dims = [max(1, d // 2) for d in dims]
        attr, out, taps = _window(g, dims, allow_dilation=False)
    op = ModuleText("select-and-scatter")
    direction = g.choice(("GE", "LE"))
    op.comps.append(_scalar_comp(f"sel_{direction}", dt, "compare", out_dt="pred")
                    .replace("compare(%x0, %x1)", f"compare(%x0, %x1), direction={direction}"))
    op.comps.append(_scalar_comp("sas_add", dt, "add"))
    x = op.param(g.shape(dt, dims))
    src = op.param(g.shape(dt, out))
    init = op.param(f"{dt}[]")
    return "select-and-scatter", op.text(
        g.shape(dt, dims), "select-and-scatter", [x, src, init],
        f"window={{{attr}}}, select=%sel_{direction}, scatter=%sas_add")


# ---------------------------------------------------------------- sort, top-k

def _sort(g: _Gen):
    n_ops = g.choice((1, 1, 2, 3))
    rank = g.randint(1, 3)
    dims = g.dims(rank, (1 << 15) // n_ops, min_elems=256)
    axis = g.randint(0, rank - 1)
    dts = [g.choice(("f32", "f32", "s32", "bf16", "u32", "f16"))] + \
        [g.choice(("s32", "f32", "u8")) for _ in range(n_ops - 1)]
    op = ModuleText("sort")
    direction = g.choice(("LT", "GT"))
    sig = ", ".join(f"x{2 * k}: {dt}[], x{2 * k + 1}: {dt}[]" for k, dt in enumerate(dts))
    ps = "\n".join(f"  %x{2 * k + j} = {dt}[] parameter({2 * k + j})"
                   for k, dt in enumerate(dts) for j in (0, 1))
    ttype = ", type=TOTALORDER" if dts[0] in FLOATS and g.rand() < 0.5 else ""
    op.comps.append(f"%cmp ({sig}) -> pred[] {{\n{ps}\n"
                    f"  ROOT %c = pred[] compare(%x0, %x1), direction={direction}{ttype}\n}}\n")
    lay = g.layout(rank)
    xs = [op.param(g.shape(dt, dims, lay)) for dt in dts]
    shapes = [g.shape(dt, dims, lay) for dt in dts]
    out = shapes[0] if n_ops == 1 else f"({', '.join(shapes)})"
    stable = ", is_stable=true" if g.rand() < 0.5 else ""
    return "sort", op.text(out, "sort", xs, f"dimensions={{{axis}}}{stable}, to_apply=%cmp")


# custom-call: XLA:CPU itself provides TopK (its runtime's top-k). jaxlib's
# LAPACK targets (lapack_spotrf_ffi, ...) are registered only once jax's
# linalg module set them up: called from a bare module they crash the
# process (a segfault, tried), so they are left out.
def _topk(g: _Gen, custom=False):
    dt = g.choice(("f32", "f32", "bf16")) if not custom else "f32"
    batch = g.dims(g.randint(0, 1), 1 << 10)
    n = g.logint(2, max(2, (1 << 16) // max(1, math.prod(batch))))
    k = g.randint(1, min(n, g.choice((1, 4, 16, 64))))
    op = ModuleText("topk" if not custom else "custom-call")
    x = op.param(g.shape(dt, batch + [n], _default_layout(len(batch) + 1)))
    out = f"({g.shape(dt, batch + [k], _default_layout(len(batch) + 1))}, " \
          f"{g.shape('s32', batch + [k], _default_layout(len(batch) + 1))})"
    if custom:
        return "custom-call", op.text(out, "custom-call", [x], 'custom_call_target="TopK"')
    return "topk", op.text(out, "topk", [x], f"k={k}, largest={g.choice(('true', 'false'))}")


# ---------------------------------------------------------------- linear algebra

@dataclass(frozen=True)
class DotSpace:
    """Where _dot draws from: the tuples are choices (repeats weigh), sizes
    the largest product of a group of dims, flops the range accepted for the
    canonical case (f32, at most one batch dim; the others are capped at
    SLOW_FLOPS / 2, XLA:CPU's naive loop). fall_back: when no draw fits in
    `tries`, write a small default dot (ops: every call makes a kernel)
    instead of raising ValueError (its caller draws again)."""
    kinds: tuple = ("f32", "f32", "bf16", "f16", "s8", "bf16->f32", "f64")
    batch_ranks: tuple = (0, 0, 1, 1, 2)
    batch: int = 64
    free: int = 4096
    contracting: int = 8192
    flops: tuple = (MIN_FLOPS, MAX_FLOPS / 2)
    tries: int = 60
    fall_back: bool = True


@dataclass(frozen=True)
class ConvSpace:
    """Where _convolution draws from, as DotSpace for dots; flops the range
    for the Eigen path (plain f32 1-D/2-D), the naive loop's capped at
    naive_flops; fall_back: a dot of ops' space when no draw fits."""
    spatial_ranks: tuple = (1, 2, 2, 2, 3)
    dtypes: tuple = ("f32", "f32", "f32", "bf16", "f16")
    groups: tuple = (1, 1, 1, 2, 4, "depthwise")
    batch_groups: tuple = (1,) * 8 + (2, 4)
    batch: int = 32
    features: int = 256
    spatial: dict = field(default_factory=lambda: {1: 1 << 14, 2: 1 << 14, 3: 1 << 15})
    lhs_dilations: tuple = (1, 1, 1, 2)
    rhs_dilations: tuple = (1, 1, 1, 2)
    window_sizes: tuple = (1, 2, 3, 3, 5, 7)
    whole_window_p: float = 0.0          # see _window
    framework_pads: bool = False
    min_features: int = 1
    flops: tuple = (MIN_FLOPS / 10, MAX_FLOPS / 2)
    naive_flops: float = 2e6
    tries: int = 50
    fall_back: bool = True
    # the share of draws whose channel counts (features in, out) are round,
    # as a model's are: a multiple of 8, 16 or 32, or a power of two
    round_p: float = 0.0


def _dot(g: _Gen, space: DotSpace = DotSpace()):
    kind = g.choice(space.kinds)
    in_dt, out_dt = {"s8": ("s8", "s32"), "bf16->f32": ("bf16", "f32")}.get(kind, (kind, kind))
    nb = g.choice(space.batch_ranks)
    nlf, nrf = g.choice((1, 1, 1, 0, 2)), g.choice((1, 1, 1, 0, 2))
    nc = g.choice((1, 1, 1, 2))
    for _ in range(space.tries):
        b = g.dims(nb, space.batch)
        lf, rf = g.dims(nlf, space.free), g.dims(nrf, space.free)
        c = g.dims(nc, space.contracting)
        flops = 2 * math.prod(b) * math.prod(lf) * math.prod(rf) * math.prod(c)
        nbytes = (math.prod(b) * (math.prod(lf) * math.prod(c) + math.prod(rf) * math.prod(c))
                  * BYTES[in_dt] + math.prod(b + lf + rf) * BYTES[out_dt])
        canonical = in_dt == "f32" and nb <= 1
        lo, hi = space.flops if canonical else (space.flops[0], SLOW_FLOPS / 2)
        if lo <= flops <= hi and nbytes <= MAX_BYTES:
            break
    else:
        if not space.fall_back:
            raise ValueError("no dot of the space's size found")
        b, lf, rf, c = [2] * nb, [32] * nlf, [32] * nrf, [64] * nc      # 1e5 to 1e8 flops
    # lhs dims: batch, free, contracting in a random order (batch first mostly)
    lhs_axes = [("b", k) for k in range(nb)] + [("f", k) for k in range(nlf)] + \
        [("c", k) for k in range(nc)]
    rhs_axes = [("b", k) for k in range(nb)] + [("c", k) for k in range(nc)] + \
        [("f", k) for k in range(nrf)]
    if g.rand() < 0.3:
        g.r.shuffle(lhs_axes)
    if g.rand() < 0.3:
        g.r.shuffle(rhs_axes)
    size = {"b": b, "c": c}

    def dims_of(axes, free):
        return [(size[t] if t != "f" else free)[k] for t, k in axes]

    def where(axes, t):
        return ",".join(str(axes.index((t, k))) for k in range(len(size[t])))

    op = ModuleText("dot")
    lhs = op.param(g.shape(in_dt, dims_of(lhs_axes, lf)))
    rhs = op.param(g.shape(in_dt, dims_of(rhs_axes, rf)))
    attrs = []
    if nb:
        attrs.append(f"lhs_batch_dims={{{where(lhs_axes, 'b')}}}")
    attrs.append(f"lhs_contracting_dims={{{where(lhs_axes, 'c')}}}")
    if nb:
        attrs.append(f"rhs_batch_dims={{{where(rhs_axes, 'b')}}}")
    attrs.append(f"rhs_contracting_dims={{{where(rhs_axes, 'c')}}}")
    # the result: batch dims, then lhs's and rhs's free dims in operand order
    out = b + [lf[k] for t, k in lhs_axes if t == "f"] + [rf[k] for t, k in rhs_axes if t == "f"]
    return "dot", op.text(g.shape(out_dt, out), "dot", [lhs, rhs], ", ".join(attrs))


def _channels(g: _Gen, space: ConvSpace) -> int:
    """A channel count of the space: log-uniform, and round (to a multiple
    of 8, 16 or 32, or a power of two) space.round_p of the time. Odd
    counts cost XLA:CPU's convolutions up to 1.5x a multiply-add
    (benchmarks/bench_conv_channels.py); a space without round_p draws
    exactly as before it existed."""
    c = g.logint(space.min_features, space.features)
    if space.round_p and g.rand() < space.round_p:
        step = g.choice((8, 16, 32, 0))
        c = 1 << round(math.log2(c)) if step == 0 else max(step, round(c / step) * step)
        c = min(max(c, space.min_features), space.features)
    return c


def _convolution(g: _Gen, space: ConvSpace = ConvSpace()):
    nsp = g.choice(space.spatial_ranks)
    dt = g.choice(space.dtypes)
    sp = "012"[:nsp]
    for _ in range(space.tries):
        groups = g.choice(space.groups)
        bgroups = g.choice(space.batch_groups) if groups == 1 else 1
        n = g.logint(1, space.batch) * bgroups
        cin = _channels(g, space)
        if groups == "depthwise":
            groups = cin
        else:
            cin = max(groups, (cin // groups) * groups)
        cout = max(1, _channels(g, space) // (groups * bgroups)) * groups * bgroups
        spatial = g.dims(nsp, space.spatial[nsp], min_elems=1)
        attr, out, taps = _window(g, spatial, lhs_dilations=space.lhs_dilations,
                                  rhs_dilations=space.rhs_dilations, sizes=space.window_sizes,
                                  whole_p=space.whole_window_p,
                                  framework_pads=space.framework_pads)
        kernel = [int(x) for x in attr.split()[0][5:].split("x")]
        if (space.whole_window_p and groups == 1 and bgroups == 1
                and any(1 < k and 2 * k >= d for k, d in zip(kernel, spatial)) and g.rand() < 0.5):
            # a filter gradient as training writes it: the layer's input
            # channels in the batch dim, the minibatch contracted as features
            n, cin = cin, n
        flops = 2 * (n // bgroups) * cout * math.prod(out) * math.prod(kernel) * (cin // groups)
        nbytes = BYTES[dt] * (n * cin * math.prod(spatial) + math.prod(kernel) * cin // groups * cout
                              + n // bgroups * cout * math.prod(out))
        # XLA:CPU runs plain f32 1-D/2-D convolutions through Eigen; the rest
        # (lhs dilation, groups, batch groups, 3-D, 16-bit) through a naive
        # loop nest two orders of magnitude slower
        naive = (dt != "f32" or nsp == 3 or "lhs_dilate" in attr or bgroups > 1
                 or 1 < groups < cin)
        lo, hi = space.flops
        if lo <= flops <= (space.naive_flops if naive else hi) and nbytes <= MAX_BYTES:
            break
    else:
        if not space.fall_back:
            raise ValueError("no convolution of the space's size found")
        return _dot(g)
    lhs_labels = g.choice((f"b{sp}f", f"bf{sp}", f"{sp}bf"))
    rhs_labels = g.choice((f"{sp}io", f"oi{sp}", f"{sp}oi"))
    out_labels = g.choice((f"b{sp}f", f"bf{sp}"))

    def lay(labels, sizes):
        return [sizes[ch] for ch in labels]

    lhs_sizes = {"b": n, "f": cin, **{sp[k]: spatial[k] for k in range(nsp)}}
    rhs_sizes = {"i": cin // groups, "o": cout, **{sp[k]: kernel[k] for k in range(nsp)}}
    out_sizes = {"b": n // bgroups, "f": cout, **{sp[k]: out[k] for k in range(nsp)}}
    op = ModuleText("convolution")
    lhs = op.param(g.shape(dt, lay(lhs_labels, lhs_sizes)))
    rhs = op.param(g.shape(dt, lay(rhs_labels, rhs_sizes)))
    attrs = f"window={{{attr}}}, dim_labels={lhs_labels}_{rhs_labels}->{out_labels}"
    if groups > 1:
        attrs += f", feature_group_count={groups}"
    if bgroups > 1:
        attrs += f", batch_group_count={bgroups}"
    return "convolution", op.text(g.shape(dt, lay(out_labels, out_sizes)), "convolution",
                                  [lhs, rhs], attrs)


def _fft(g: _Gen):
    fft_type = g.choice(("FFT", "IFFT", "RFFT", "IRFFT"))
    nd = g.choice((1, 1, 2, 3))
    cdt, rdt = g.choice((("c64", "f32"), ("c64", "f32"), ("c128", "f64")))
    lengths = g.dims(nd, 1 << 16, min_elems=2)
    batch = g.dims(g.randint(0, 2), max(1, (1 << 18) // math.prod(lengths)))
    half = lengths[:-1] + [lengths[-1] // 2 + 1]
    ins, outs = {"FFT": ((cdt, lengths), (cdt, lengths)), "IFFT": ((cdt, lengths), (cdt, lengths)),
                 "RFFT": ((rdt, lengths), (cdt, half)), "IRFFT": ((cdt, half), (rdt, lengths))}[fft_type]
    op = ModuleText("fft")
    x = op.param(g.shape(ins[0], batch + ins[1]))
    return "fft", op.text(g.shape(outs[0], batch + outs[1]), "fft", [x],
                          f"fft_type={fft_type}, fft_length={{{','.join(map(str, lengths))}}}")


def _cholesky(g: _Gen):
    dt = g.choice(("f32", "f32", "f64"))
    # XLA:CPU expands cholesky into a blocked loop of small ops: slow
    n = g.logint(4, 64)
    batch = g.dims(g.randint(0, 2), max(1, int(5e5 // n ** 3)))
    batch = [min(b, 16) for b in batch]
    op = ModuleText("cholesky")
    lay = _default_layout(len(batch) + 2)
    x = op.param(g.shape(dt, batch + [n, n], lay))
    return "cholesky", op.text(g.shape(dt, batch + [n, n], lay), "cholesky", [x],
                               f"lower={g.choice(('true', 'false'))}")


def _triangular_solve(g: _Gen):
    dt = g.choice(("f32", "f32", "f64"))
    n = g.logint(1, 256)
    m = g.logint(1, 256)
    batch = [min(b, 16) for b in g.dims(g.randint(0, 1), max(1, int(5e6 // (n * n * m))))]
    left = g.rand() < 0.5
    op = ModuleText("triangular-solve")
    lay = _default_layout(len(batch) + 2)
    a = op.param(g.shape(dt, batch + [n, n], lay))
    bdims = batch + ([n, m] if left else [m, n])
    b = op.param(g.shape(dt, bdims, lay))
    attrs = (f"left_side={'true' if left else 'false'}, lower={g.choice(('true', 'false'))}, "
             f"unit_diagonal={g.choice(('true', 'false'))}, "
             f"transpose_a={g.choice(('NO_TRANSPOSE', 'TRANSPOSE'))}")
    return "triangular-solve", op.text(g.shape(dt, bdims, lay), "triangular-solve", [a, b], attrs)


def _batch_norm(g: _Gen):
    opcode = g.choice(("batch-norm-inference", "batch-norm-training", "batch-norm-grad"))
    dt = "f32"
    rank = g.randint(2, 4)
    dims = g.dims(rank, 1 << 20, min_elems=MIN_ELEMS)
    fi = g.randint(0, rank - 1)
    c = dims[fi]
    op = ModuleText(opcode)
    x = op.param(g.shape(dt, dims))
    vec = g.shape(dt, [c])
    eps = g.choice(("0.001", "1e-05"))
    attrs = f"epsilon={eps}, feature_index={fi}"
    if opcode == "batch-norm-inference":
        args = [x] + [op.param(vec) for _ in range(4)]
        return opcode, op.text(g.shape(dt, dims), opcode, args, attrs)
    if opcode == "batch-norm-training":
        args = [x, op.param(vec), op.param(vec)]
        return opcode, op.text(f"({g.shape(dt, dims)}, {vec}, {vec})", opcode, args, attrs)
    args = [x, op.param(vec), op.param(vec), op.param(vec), op.param(g.shape(dt, dims))]
    return opcode, op.text(f"({g.shape(dt, dims)}, {vec}, {vec})", opcode, args, attrs)


# ---------------------------------------------------------------- random numbers, misc

def _rng(g: _Gen):
    dist = g.choice(("rng_uniform", "rng_normal"))
    dt = g.choice(("f32", "f64", "f16")) if dist == "rng_normal" else g.choice(("f32", "s32", "f64"))
    dims = g.dims(g.randint(0, 3), 1 << 20, min_elems=MIN_ELEMS)
    op = ModuleText("rng")
    a, b = op.param(f"{dt}[]"), op.param(f"{dt}[]")
    return "rng", op.text(g.shape(dt, dims), "rng", [a, b], f"distribution={dist}")


def _rng_bit_generator(g: _Gen):
    alg = g.choice(("rng_default", "rng_three_fry", "rng_philox"))
    dt = g.choice(("u32", "u64", "u8", "u16"))
    dims = g.dims(g.randint(1, 3), 1 << 20, min_elems=MIN_ELEMS)
    op = ModuleText("rng-bit-generator")
    s = op.param("u64[2]{0}")
    return "rng-bit-generator", op.text(f"(u64[2]{{0}}, {g.shape(dt, dims)})",
                                        "rng-bit-generator", [s], f"algorithm={alg}")


def _rng_state(g: _Gen):
    op = ModuleText("rng-get-and-update-state")
    return "rng-get-and-update-state", op.text("u64[2]{0}", "rng-get-and-update-state", [],
                                               f"delta={g.choice((1, 4, 16, 256))}")


def _get_dimension_size(g: _Gen):
    dt = g.choice(ANY)
    rank = g.randint(1, 4)
    dims = g.dims(rank, 1 << 16)
    op = ModuleText("get-dimension-size")
    x = op.param(g.shape(dt, dims))
    return "get-dimension-size", op.text("s32[]", "get-dimension-size", [x],
                                         f"dimensions={{{g.randint(0, rank - 1)}}}")


# ---------------------------------------------------------------- control flow

def _while(g: _Gen):
    """A scan-like loop: state (i, acc, xs); each trip reads xs[i], combines it
    into acc and writes acc into ys[i]. Its kernels: the condition's compare and
    the body's dynamic-slice, elementwise op, dynamic-update-slice and
    counter add (the while itself is not a kernel; the reshapes between a
    row and its slice are bitcasts, as XLA leaves them, and no kernels)."""
    dt = g.choice(("f32", "f32", "bf16", "s32"))
    trip = g.logint(1, 512)
    row = g.dims(g.randint(1, 2), max(1, (MAX_BYTES // 8 // BYTES[dt]) // trip))
    elem = g.choice(("add", "multiply", "maximum") + (("tanh", "exponential") if dt != "s32" else ()))
    xs = g.shape(dt, [trip] + row, _default_layout(len(row) + 1))
    r = g.shape(dt, row, _default_layout(len(row)))
    r1 = g.shape(dt, [1] + row, _default_layout(len(row) + 1))
    state = f"(s32[], {r}, {xs}, {xs})"
    zeros = ", ".join("%z" for _ in row)
    if elem in ("tanh", "exponential"):
        comb = f"  %e = {r} {elem}(%x)\n  %acc2 = {r} add(%acc, %e)"
    else:
        comb = f"  %acc2 = {r} {elem}(%acc, %x)"
    body = (f"%body (s: {state}) -> {state} {{\n  %s = {state} parameter(0)\n"
            f"  %i = s32[] get-tuple-element(%s), index=0\n"
            f"  %acc = {r} get-tuple-element(%s), index=1\n"
            f"  %xs = {xs} get-tuple-element(%s), index=2\n"
            f"  %ys = {xs} get-tuple-element(%s), index=3\n"
            f"  %z = s32[] constant(0)\n"
            f"  %sl = {r1} dynamic-slice(%xs, %i, {zeros}), "
            f"dynamic_slice_sizes={{1,{','.join(map(str, row))}}}\n"
            f"  %x = {r} bitcast(%sl)\n{comb}\n"
            f"  %up = {r1} bitcast(%acc2)\n"
            f"  %ys2 = {xs} dynamic-update-slice(%ys, %up, %i, {zeros})\n"
            f"  %one = s32[] constant(1)\n  %i2 = s32[] add(%i, %one)\n"
            f"  ROOT %t = {state} tuple(%i2, %acc2, %xs, %ys2)\n}}\n")
    cond = (f"%cond (s: {state}) -> pred[] {{\n  %s = {state} parameter(0)\n"
            f"  %i = s32[] get-tuple-element(%s), index=0\n  %n = s32[] constant({trip})\n"
            f"  ROOT %lt = pred[] compare(%i, %n), direction=LT\n}}\n")
    entry = (f"ENTRY %main (p0: {_strip(r)}, p1: {_strip(xs)}, p2: {_strip(xs)}) -> {_strip(state)} {{\n"
             f"  %p0 = {r} parameter(0)\n  %p1 = {xs} parameter(1)\n  %p2 = {xs} parameter(2)\n"
             f"  %zero = s32[] constant(0)\n  %init = {state} tuple(%zero, %p0, %p1, %p2)\n"
             f"  ROOT %w = {state} while(%init), condition=%cond, body=%body, "
             f"backend_config={{\"known_trip_count\":{{\"n\":\"{trip}\"}}}}\n}}\n")
    return "while", f"HloModule scan_loop\n\n{body}\n{cond}\n{entry}"


def _conditional(g: _Gen):
    """A two-branch conditional on a pred; its kernels are its branches' ops
    (count_known false: which branch runs is not known)."""
    dt = g.choice(("f32", "bf16"))
    dims = g.dims(g.randint(1, 3), 1 << 20, min_elems=MIN_ELEMS)
    s = g.shape(dt, dims, _default_layout(len(dims)))
    ops = g.r.sample(("negate", "exponential", "sqrt", "abs", "floor", "tanh"), 2)
    branches = "".join(
        f"%branch{k} (x: {_strip(s)}) -> {_strip(s)} {{\n  %x = {s} parameter(0)\n"
        f"  ROOT %y = {s} {o}(%x)\n}}\n\n" for k, o in enumerate(ops))
    entry = (f"ENTRY %main (p0: pred[], p1: {_strip(s)}) -> {_strip(s)} {{\n"
             f"  %p0 = pred[] parameter(0)\n  %p1 = {s} parameter(1)\n"
             f"  ROOT %c = {s} conditional(%p0, %p1, %p1), true_computation=%branch0, "
             f"false_computation=%branch1\n}}\n")
    return "conditional", f"HloModule cond\n\n{branches}{entry}"


# ---------------------------------------------------------------- the table

def _fixed(fn, opcode):
    return lambda g: fn(g, opcode)


# opcode -> generator; generate() picks an opcode uniformly, so every opcode
# is about equally frequent whatever its family's size.
GENERATORS: dict[str, Callable[[_Gen], tuple[str, str]]] = {}
for _o in UNARY_FLOAT + UNARY_INT + ["is-finite"]:
    GENERATORS[_o] = _fixed(_unary, _o)
for _o in BINARY_FLOAT + BINARY_INT:
    GENERATORS[_o] = _fixed(_binary, _o)
GENERATORS.update({
    "compare": _compare, "select": _select, "clamp": _clamp, "convert": _convert,
    "bitcast-convert": _bitcast_convert, "reduce-precision": _reduce_precision,
    "stochastic-convert": _stochastic_convert, "complex": _complex_ops, "real": _complex_ops,
    "imag": _complex_ops, "map": _map,
    "broadcast": _broadcast, "transpose": _transpose, "reshape": _reshape, "copy": _copy,
    "slice": _slice, "concatenate": _concatenate, "reverse": _reverse, "pad": _pad,
    "iota": _iota, "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": lambda g: _dynamic_slice(g, update=True),
    "gather": _gather, "scatter": _scatter,
    "reduce": _reduce, "reduce-window": _reduce_window, "select-and-scatter": _select_and_scatter,
    "sort": _sort, "topk": _topk, "custom-call": lambda g: _topk(g, custom=True),
    "dot": _dot, "convolution": _convolution, "fft": _fft, "cholesky": _cholesky,
    "triangular-solve": _triangular_solve,
    "batch-norm-inference": _batch_norm, "batch-norm-training": _batch_norm,
    "batch-norm-grad": _batch_norm,
    "rng": _rng, "rng-bit-generator": _rng_bit_generator,
    "rng-get-and-update-state": _rng_state, "get-dimension-size": _get_dimension_size,
    "while": _while, "conditional": _conditional,
})
# the heavy, varied ops are drawn more often: their space of shapes and
# attributes is far larger than an elementwise op's
WEIGHTS = {"batch-norm-inference": 3, "complex": 3, "get-dimension-size": 0.3,
           "rng-get-and-update-state": 0.3, "convolution": 6, "dot": 5, "gather": 3, "scatter": 3, "reduce": 3,
           "reduce-window": 3, "fft": 2, "sort": 2, "pad": 2, "slice": 2, "transpose": 2,
           "broadcast": 2, "reshape": 2, "copy": 2, "concatenate": 2, "while": 2}
# the three batch-norm entries and complex/real/imag share one generator each
for _o in ("batch-norm-training", "batch-norm-grad", "real", "imag"):
    WEIGHTS[_o] = 0


# XLA:CPU rewrites a convolution or a dot into the forms its emitters take
# (operand layouts, batch and feature groups, transposes around it) when it
# compiles one. A synthetic one compiled again inside measure's timing loop
# was rewritten otherwise than alone: 10 of 13 generated convolutions over
# 0.5 ms (default layouts) timed 0.01x to 10x their time alone, 5 of 16 dots
# 0.4x to 4x, while kernels XLA had emitted keep their time (25 of 25
# program convolutions within 0.83x to 1.14x). So these are compiled by
# XLA:CPU first, and the source writes the kernels of the optimized module,
# as hlo-split would from a program: the kernels that hold the op as XLA
# emits it (not the transposes or copies XLA puts around it).
COMPILED_FIRST = frozenset({"convolution", "dot"})


def compiled_kernels(text: str, opcode: str, source: str) -> list[Record]:
    """The kernels of XLA:CPU's optimized module of `text` that hold
    `opcode` (the transposes or copies XLA puts around it are the transpose
    generator's business), with program "SOURCE:OPCODE"."""
    return [k for k in kernel_records_of(compile_cpu(text, "<generated op>"), source=source,
                                         program=f"{source}:{opcode}")
            if f" {opcode}(" in k["hlo"]]


def generate(seed: int, programs: Sequence[str], log: Callable[[str], None]) -> Iterator[Record]:
    """Kernel records of random single-op modules, forever (see the module
    docstring). programs: unused (this source draws from none)."""
    r = random.Random(f"ops:{seed}")
    g = _Gen(r)
    names = [o for o in GENERATORS if WEIGHTS.get(o, 1) > 0]
    weights = [WEIGHTS.get(o, 1) for o in names]
    while True:
        picked = r.choices(names, weights)[0]
        try:
            opcode, text = GENERATORS[picked](g)
        except (ValueError, IndexError, ZeroDivisionError) as e:   # a generator's own bug
            yield Failed(f"ops:{picked}: generator failed ({type(e).__name__}: {e})")
            continue
        try:
            if opcode in ("while", "conditional"):
                yield from kernel_records_of(text, source="ops", program=f"ops:{opcode}")
            elif opcode in COMPILED_FIRST:
                yield from compiled_kernels(text, opcode, "ops")
            else:
                yield kernel_record(text, source="ops", program=f"ops:{opcode}")
        except TpuperfError as e:
            yield Failed(f"ops:{opcode}: {e}")
