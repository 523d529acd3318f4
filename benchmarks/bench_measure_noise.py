#!/usr/bin/env python3
"""How far to trust one `measure` runtime on this machine.

Takes a sample of real kernels (hlo-split of the example programs, or a
kernel/graph stream given with --input), and measures each of them
--repeats times from scratch (compile, inputs, warm-up, min of --runs runs of
at least --min-time each), exactly as `measure` does without its cache. For
each kernel the relative spread of those repeated min-of-N runtimes is

    spread = (max - min) / median

and the benchmark prints the median and the 90th percentile of the spread
over kernels, by runtime class, next to the same figures for single runs
(the first run of each repeat, no minimum): the reference that shows what
the minimum buys. It also prints the per-call floor: the runtime of a
trivial kernel (one f32 negate), i.e. dispatch overhead.

    .venv/bin/python benchmarks/bench_measure_noise.py
    .venv/bin/python benchmarks/bench_measure_noise.py --sample 60 --repeats 5 --min-time 3ms
"""

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TRIVIAL = """HloModule trivial

ENTRY %main (p: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  ROOT %n = f32[] negate(%p)
}
"""


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def spread(xs):
    med = percentile(xs, 0.5)
    return (max(xs) - min(xs)) / med if med > 0 else float("nan")


def load_kernels(args):
    from tpuperf_cli.stream import read_records

    if args.input:
        records = list(read_records(args.input))
    else:
        files = sorted((ROOT / "examples" / "hlo").glob("*.hlo"))
        if not files:
            sys.exit("bench_measure_noise: no examples/hlo/*.hlo; give --input")
        out = subprocess.run([sys.executable, "-m", "tpuperf_cli", "hlo-split", *map(str, files)],
                             capture_output=True, check=True).stdout
        import io

        records = list(read_records(io.BytesIO(out)))
    seen, kernels = set(), []
    for r in records:
        fp = r.get("fingerprint") or r["hlo"]
        if fp not in seen:
            seen.add(fp)
            kernels.append(r)
    random.Random(args.seed).shuffle(kernels)
    return kernels


def main():
    from tpuperf_cli.commands.measure import parse_duration
    from tpuperf_cli.measure.runner import Measurer, MeasureError

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", help="kernel or graph stream (default: hlo-split of examples/hlo)")
    ap.add_argument("--sample", type=int, default=40, help="kernels to sample (default 40)")
    ap.add_argument("--repeats", type=int, default=5, help="measurements per kernel (default 5)")
    ap.add_argument("--runs", type=int, default=3, help="runs per measurement (default 3)")
    ap.add_argument("--min-time", default="3ms", help="shortest run (default 3ms)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--cpus", type=int, default=None,
                    help="pin to N CPUs first, as measure --cpus does (default: all)")
    ap.add_argument("--clock", default="wall", choices=["wall", "process"],
                    help="as measure --clock (default wall)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.cpus:
        from tpuperf_cli.measure.runner import pin_cpus

        pin_cpus(args.cpus)

    m = Measurer(args.backend, runs=args.runs, min_time=parse_duration(args.min_time),
                 clock=args.clock)
    kernels = load_kernels(args)
    t_start = time.time()
    floor = [m.measure(TRIVIAL)[0] for _ in range(args.repeats)]
    rows = []  # (median runtime, spread of min-of-N, spread of single runs)
    for rec in kernels:
        if len(rows) >= args.sample:
            break
        mins, singles = [], []
        try:
            for _ in range(args.repeats):
                t, runs = m.measure(rec["hlo"])
                mins.append(t)
                singles.append(runs[0])
        except MeasureError:
            continue
        rows.append((percentile(mins, 0.5), spread(mins), spread(singles)))
    elapsed = time.time() - t_start

    print(f"target: {m.target['platform']} {m.target['chip']} ({m.target.get('cpu_count', '?')} "
          f"cpus), jax {m.target['jax']}")
    print(f"{len(rows)} kernels x {args.repeats} measurements, min of {args.runs} runs of "
          f">= {args.min_time}, clock {args.clock}, cpus {m.target.get('cpu_count')}, "
          f"{elapsed:.0f}s")
    print(f"per-call floor (trivial kernel): median {percentile(floor, 0.5) / 1e3:.1f} us")
    print()
    print(f"{'kernels':<22}{'n':>4}  {'min-of-N spread':>22}  {'single-run spread':>22}")
    print(f"{'':<22}{'':>4}  {'median':>10}  {'p90':>10}  {'median':>10}  {'p90':>10}")
    classes = [("all", 0, float("inf")), ("< 10 us", 0, 1e4), ("10 us - 1 ms", 1e4, 1e6),
               (">= 1 ms", 1e6, float("inf"))]
    for label, lo, hi in classes:
        sel = [r for r in rows if lo <= r[0] < hi]
        if not sel:
            continue
        a = [r[1] for r in sel]
        b = [r[2] for r in sel]
        print(f"{label:<22}{len(sel):>4}  {percentile(a, .5):>10.1%}  {percentile(a, .9):>10.1%}"
              f"  {percentile(b, .5):>10.1%}  {percentile(b, .9):>10.1%}")
    a = [r[1] for r in rows]
    b = [r[2] for r in rows]
    if a:
        print()
        print(f"ratio single-run / min-of-N median spread: "
              f"{percentile(b, .5) / max(percentile(a, .5), 1e-12):.2f}x")


if __name__ == "__main__":
    main()
