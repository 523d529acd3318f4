#!/usr/bin/env python3
"""The whole pipeline, `hlo-split FILE | featurize | predict | score`, in
wall-clock seconds, beside the sum of its parts.

Each part is also run alone on the stream the part before it wrote (start-up
included, output to /dev/null), so the sum of the parts is what running the
tools one after another would take; the pipeline overlaps them (four
processes, two cores here). Best of --repeat each, in the same run. Beside
each wall time, the CPU seconds its processes used (user + system): on a
shared machine the wall time says what the load let the tools have, the
CPU time what they cost. The goal is the pipeline under 2 s on the largest
example program.

    .venv/bin/python benchmarks/bench_pipeline.py [FILE] [--repeat 3]
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from example_programs import largest_example  # noqa: E402

from tpuperf_cli.hlo.dump import read_hlo  # noqa: E402

BIN = os.path.dirname(sys.executable)
GOAL = 2.0


def tool(name):
    return os.path.join(BIN, name)


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def best(fn, repeat):
    """(best wall s, best CPU s of the processes fn runs)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        t, c = time.perf_counter(), children_cpu()
        fn()
        wall = min(wall, time.perf_counter() - t)
        cpu = min(cpu, children_cpu() - c)
    return wall, cpu


def run(cmd, stdin=None, stdout=subprocess.DEVNULL):
    with open(stdin, "rb") if stdin else open(os.devnull, "rb") as f:
        r = subprocess.run(cmd, stdin=f, stdout=stdout, stderr=subprocess.PIPE)
    if r.returncode:
        sys.exit(f"bench_pipeline: {' '.join(cmd)} failed: {r.stderr.decode()[-500:]}")


def pipeline(path):
    steps = [[tool("hlo-split"), "-q", path], [tool("featurize"), "-q"], [tool("predict")],
             [tool("score"), "--format", "table"]]
    procs = []
    prev = None
    for k, cmd in enumerate(steps):
        last = k == len(steps) - 1
        p = subprocess.Popen(cmd, stdin=prev, stdout=subprocess.DEVNULL if last else subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
        if prev is not None:
            prev.close()            # the next process holds it now
        prev = p.stdout
        procs.append(p)
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"bench_pipeline: pipeline failed: exit codes {codes}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", help="HLO file (default: the largest examples/hlo/*.hlo.zst)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    path = args.file or largest_example()
    with tempfile.TemporaryDirectory() as d:
        kernels, graphs, predicted = (os.path.join(d, n) for n in ("k.msgpack", "g.msgpack",
                                                                    "p.msgpack"))
        with open(kernels, "wb") as f:
            run([tool("hlo-split"), "-q", path], stdout=f)
        with open(graphs, "wb") as f:
            run([tool("featurize"), "-q"], kernels, stdout=f)
        with open(predicted, "wb") as f:
            run([tool("predict")], graphs, stdout=f)
        parts = {
            "hlo-split": best(lambda: run([tool("hlo-split"), "-q", path]), args.repeat),
            "featurize": best(lambda: run([tool("featurize"), "-q"], kernels), args.repeat),
            "predict": best(lambda: run([tool("predict")], graphs), args.repeat),
            "score": best(lambda: run([tool("score"), "--format", "table"], predicted), args.repeat),
        }
        whole = best(lambda: pipeline(path), args.repeat)
        from_count = sum(1 for _ in open(kernels, "rb").read().split(b"\xa4type\xa6kernel")) - 1
    print(f"{os.path.basename(path)}: {len(read_hlo(path).text) / 1e6:.2f} MB of HLO, "
          f"{from_count} kernels; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"  {'':<21} {'wall':>6}   {'cpu':>6}")
    for name, (t, c) in parts.items():
        print(f"  {name:<10} alone      {t:6.2f} s {c:6.2f} s")
    total = sum(t for t, _ in parts.values())
    total_cpu = sum(c for _, c in parts.values())
    print(f"  sum of the parts     {total:6.2f} s {total_cpu:6.2f} s")
    print(f"  pipeline             {whole[0]:6.2f} s {whole[1]:6.2f} s   "
          f"({whole[0] / total:.2f}x the sum of its parts, wall)")
    print(f"goal: the pipeline under {GOAL:.0f} s: {'met' if whole[0] < GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
