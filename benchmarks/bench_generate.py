#!/usr/bin/env python3
"""Speed of tpuperf generate's sources: kernels per second, distinct ones
(by fingerprint), the opcodes they hold, and for fusions the share of
groups XLA:CPU compiled into one kernel (the kept rate).

Each source runs for --seconds or --count kernels, whichever comes first
(after loading its programs), on the example programs in the train list of
every split file (ops draws from none). The reference, measured in
the same run, is what the example programs themselves give: an example
program rebuilt by make_programs.py and split (distinct kernels per second);
each source's figure is also printed as a ratio to it.

The coverage of each sample follows: kernels per record opcode (a fusion
counts as fusion), and for ops per generated opcode (its program,
ops:OPCODE).

    .venv/bin/python benchmarks/bench_generate.py                   # ops, fusions and sweeps, 30 s each
    .venv/bin/python benchmarks/bench_generate.py --sources fusions --seconds 10
"""

import argparse
import collections
import glob
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tpuperf_cli.generate import source  # noqa: E402
from tpuperf_cli.hlo.parser import parse_module  # noqa: E402
from tpuperf_cli.split import train_in_all  # noqa: E402


def programs():
    names = train_in_all(sorted(glob.glob(os.path.join(ROOT, "examples", "splits", "*.json"))))
    return [os.path.join(ROOT, "examples", "hlo", f"{n}.hlo.zst") for n in names]


def inner_opcodes(records):
    ops = collections.Counter()
    for r in records:
        for comp in parse_module(r["hlo"], "kernel").computations.values():
            ops.update(i.opcode for i in comp.instructions
                       if i.opcode not in ("parameter", "constant"))
    return ops


def run_source(name, seed, seconds, progs, count=None):
    lines = []
    records = []
    gen = source(name)(seed, progs, lines.append)
    t0 = None
    for r in gen:
        if t0 is None:
            t0 = time.monotonic()      # the first kernel: loading is done
        if not isinstance(r, dict):     # a Failed candidate (see generate.Failed)
            continue
        records.append(r)
        if time.monotonic() - t0 >= seconds or (count and len(records) >= count):
            break
    elapsed = time.monotonic() - t0 if t0 else 0.0
    return records, elapsed, lines


def reference(seed_program="mlp_s_train"):
    """Distinct kernels per second of rebuilding an example program."""
    from tpuperf_cli.generate.sweeps import compile_cpu, make_programs
    from tpuperf_cli.hlo.split import kernel_records

    mp = make_programs()
    spec = mp.sweep_spec(seed_program)
    compile_cpu(mp, spec)             # jax's first compile pays its start-up: not counted
    t0 = time.monotonic()
    text = compile_cpu(mp, spec)
    fps = {r["fingerprint"] for r in kernel_records(parse_module(text, spec.name))}
    return len(fps) / (time.monotonic() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", nargs="+", default=["ops", "fusions", "sweeps"])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--count", type=int, default=5000, help="most kernels per source")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    progs = programs()
    ref = reference()
    print(f"reference: an example program rebuilt and split, {ref:.1f} distinct kernels/s")
    for name in a.sources:
        records, elapsed, lines = run_source(name, a.seed, a.seconds,
                                             [] if name == "ops" else progs, a.count)
        if not records:
            print(f"{name}: no kernels ({lines[-1] if lines else 'no log'})")
            continue
        distinct = len({r["fingerprint"] for r in records})
        ops = inner_opcodes(records)
        rate = distinct / elapsed if elapsed else float("inf")
        print(f"{name}: {len(records)} kernels ({distinct} distinct) in {elapsed:.1f}s: "
              f"{len(records) / elapsed:.1f} kernels/s, {rate:.1f} distinct/s "
              f"({rate / ref:.2f}x the reference)")
        print(f"  {len(ops)} distinct opcodes inside: {', '.join(sorted(ops))}")
        progress = [line for line in lines if "kept" in line]
        if progress:
            print(f"  {progress[-1]}")
        by_opcode = collections.Counter(r["opcode"] for r in records)
        print(f"  kernels per opcode ({len(by_opcode)}): "
              + ", ".join(f"{o} {n}" for o, n in by_opcode.most_common()))
        if name == "ops":
            by_op = collections.Counter(r["program"].split(":", 1)[1] for r in records)
            print(f"  kernels per generated opcode ({len(by_op)}): "
                  + ", ".join(f"{o} {n}" for o, n in by_op.most_common()))


if __name__ == "__main__":
    main()
