#!/usr/bin/env python3
"""How a skinny dot's speed on this machine depends on its contracted dim.

Writes f32 dots of a few rows, [m,k] by [k,n] (nn) and by the transpose of
[n,k] (nt: the weight stored as the product does not read it, as an RNN's
input gradient or a loop body's state through a transposed weight), for
every k of --k, times them all with the `measure` tool itself (its default
settings, no cache, one process) and prints each one's GFLOP/s and the nt
dot's speed relative to the nn dot's of the same k, powers of two marked.

Why: on an AMD EPYC family 25 model 17 (2026-12-07) XLA:CPU ran lstm_s's
f32[16,512] by the transpose of f32[128,512] at 12 GFLOP/s and seq2seq's
f32[16,576] by that of f32[288,576] at 35, and every model trained on the
corpus had the two the wrong way round (HISTORY.md, "The skinny source").
Reading the transposed operand's rows of 2 or 4 KB apart, a power of two,
appears to map them to a few cache sets. matmul_k_align says how aligned
k is only up to 128, so 512, 640 and 768 look alike to a model reading
the recipe's 16 kernel features; the twenty-sixth, matmul_rhs_row_align,
says it.

    .venv/bin/python benchmarks/bench_dot_strides.py
    .venv/bin/python benchmarks/bench_dot_strides.py --m 32 --n 128 --k 448,512,576
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_conv_channels import time_records  # noqa: E402

ORDERS = ("nn", "nt")


def dot_records(m, n, ks):
    """(order, k, kernel record) of each dot as XLA:CPU compiles it."""
    from tpuperf_cli.generate.ops import compiled_kernels
    from tpuperf_cli.generate.skinny import dot_text

    rows = []
    for order in ORDERS:
        for k in ks:
            dot = dict(small="rows", order=order, dtype="f32", batch=0, m=m, n=n, k=k)
            for record in compiled_kernels(dot_text(dot), "dot", "bench_dot_strides"):
                rows.append((order, k, record))
    return rows


def power_of_two(k):
    return k & (k - 1) == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=16, help="the rows (default 16)")
    ap.add_argument("--n", type=int, default=256, help="the columns (default 256)")
    ap.add_argument("--k", default="384:1152:32",
                    help="contracted dims: START:STOP:STEP (STOP included) or a comma-separated "
                         "list (default 384:1152:32)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    try:
        if ":" in args.k:
            start, stop, step = (int(x) for x in args.k.split(":"))
            ks = list(range(start, stop + 1, step))
        else:
            ks = [int(x) for x in args.k.split(",") if x.strip()]
    except ValueError:
        sys.exit(f"bench_dot_strides: --k {args.k!r}: expected START:STOP:STEP or K,K,...")
    if not ks or min(ks) < 1 or min(args.m, args.n) < 1:
        sys.exit("bench_dot_strides: --m, --n and every --k must be at least 1")
    rows = dot_records(args.m, args.n, ks)
    timed = time_records([record for *_, record in rows], "bench_dot_strides")
    target = timed[0].get("target", {}) if timed else {}
    rate = {}                                   # (order, k) -> GFLOP/s
    for (order, k, _), out in zip(rows, timed):
        if "runtime_ns" in out:
            rate[(order, k)] = 2 * args.m * args.n * k / out["runtime_ns"]
    cpu = target.get("cpu") or {}
    print(f"machine: {target.get('chip')} (family {cpu.get('family')}, model {cpu.get('model')}); "
          f"f32[{args.m},k] by [k,{args.n}] (nn) and by the transpose of [{args.n},k] (nt)")
    print(f"{'k':>6s} {'nn GFLOP/s':>11s} {'nt GFLOP/s':>11s} {'nt / nn':>8s}")
    figures = []
    for k in ks:
        nn, nt = rate.get(("nn", k)), rate.get(("nt", k))
        if nn is None or nt is None:
            continue
        figures.append({"k": k, "nn": nn, "nt": nt, "power_of_two": power_of_two(k)})
        print(f"{k:6d} {nn:11.1f} {nt:11.1f} {nt / nn:8.2f}" + ("   power of two" if power_of_two(k) else ""))
    two = [f["nt"] / f["nn"] for f in figures if f["power_of_two"]]
    other = [f["nt"] / f["nn"] for f in figures if not f["power_of_two"]]
    if two and other:
        print(f"nt / nn, median: {statistics.median(two):.2f} at {len(two)} power(s) of two, "
              f"{statistics.median(other):.2f} at the other {len(other)} k")
    if args.json:
        Path(args.json).write_text(json.dumps({"target": target, "m": args.m, "n": args.n,
                                               "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
