#!/usr/bin/env python3
"""Could a reference kernel timed beside the others (a canary) correct a
loud machine's labels? How this machine's slowdowns fall across kernels and
time.

Draws corpus kernels as bench_measure_noise.py does (--per-kind of each
kind, spread over the size bands; only those the corpus labels at
--min-us or more), calibrates them as measure does (one pinned CPU, the
process clock, XLA:CPU on the calling thread) and samples them in rounds,
one sample of each kernel a round, for --seconds. Then, from those
samples alone:

* the median round's slowdown: per round, the median over kernels of a
  sample's time over that kernel's fastest sample of the whole run;
* how far apart the same kernel's fastest sample lies in disjoint windows
  of --window rounds (measure takes 30 samples in 30 rounds): |a - b| /
  min(a, b), median and 90th percentile over kernels and window pairs;
* the same after dividing each sample by its round's median slowdown (the
  most a canary could know of the machine's speed at that moment), and
  with each kernel in turn as a lone canary (the best and median of them);
* the raw figure for windows of other sizes (more samples a kernel).

If the slowdown were the machine's (a clock, a steady neighbour), the
canaries would take the disagreement near zero; if it is each kernel's at
each moment, they cannot.

    .venv/bin/python benchmarks/bench_measure_drift.py
    .venv/bin/python benchmarks/bench_measure_drift.py --seconds 60 --per-kind 2
"""

import argparse
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def pairwise(estimates):
    """|a - b| / min(a, b) over kernels and every pair of windows, from log
    estimates (windows x kernels)."""
    w = len(estimates)
    gaps = [np.abs(estimates[a] - estimates[b]) for a in range(w) for b in range(a + 1, w)]
    return np.expm1(np.concatenate(gaps)) if gaps else np.zeros(0)


def fastest_in_windows(logs, window):
    """Each kernel's fastest (log) sample in each disjoint window of rounds."""
    n = len(logs) // window
    return np.array([np.nanmin(logs[k * window:(k + 1) * window], axis=0) for k in range(n)])


def divided_by_round(logs):
    """(each log sample less its round's median log slowdown, that slowdown
    per round, each sample's log slowdown against its kernel's fastest):
    the most a canary could know of the machine's speed in each round."""
    slow = logs - np.nanmin(logs, axis=0)
    round_factor = np.nanmedian(slow, axis=1)
    return logs - round_factor[:, None], round_factor, slow


def text(gaps):
    if not gaps.size:
        return "n/a (fewer than 2 windows)"
    return f"median {100 * np.median(gaps):.1f}%, p90 {100 * np.percentile(gaps, 90):.1f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=180.0, help="how long to sample")
    ap.add_argument("--per-kind", type=int, default=4, help="kernels of each kind")
    ap.add_argument("--min-us", type=float, default=2.0, help="only kernels the corpus labels at this or more")
    ap.add_argument("--window", type=int, default=30, help="rounds a window (measure's samples)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from tpuperf_cli.measure.device import MeasureError, Measurer, pin_cpus, single_threaded_xla

    pin_cpus(1)                 # measure's steady settings, before jax starts
    single_threaded_xla()
    from bench_measure_noise import sample_kernels

    records = [r for r in sample_kernels(args.per_kind, args.seed)
               if r["runtime_ns"] >= args.min_us * 1000]
    m = Measurer("cpu", clock="process")
    texts = [r["hlo"] for r in records]
    results = [None] * len(texts)
    ready = []
    for prepared in m._prepare_all(list(m._bundles(texts, results))):
        for i, timed in prepared:
            if isinstance(timed, MeasureError):
                continue
            try:
                timed.calibrate()
            except Exception as e:      # a kernel that does not run is left out
                print(f"bench_measure_drift: kernel {i} left out: {e}", file=sys.stderr)
                continue
            ready.append(timed)
    if len(ready) < 3:
        sys.exit("bench_measure_drift: fewer than 3 kernels ready to sample")
    print(f"bench_measure_drift: sampling {len(ready)} kernels for {args.seconds:.0f} s",
          file=sys.stderr)

    rows = []
    start = time.monotonic()
    while time.monotonic() - start < args.seconds:
        row = []
        for timed in ready:
            timed.sample()
            t, _ = timed.samples[-1]
            per_trip = (t - min(timed.zero)) / timed.trips
            row.append(math.log(per_trip) if per_trip > 0 else np.nan)
        rows.append(row)
    logs = np.array(rows)                                        # rounds x kernels
    normed, round_factor, slow = divided_by_round(logs)

    print(f"target: {m.target.get('chip')} ({m.target.get('cpu')}), clock {m.clock}")
    print(f"{len(ready)} kernels (corpus labels >= {args.min_us:g} us), {len(rows)} rounds "
          f"in {args.seconds:.0f} s")
    print(f"median round: {math.exp(np.median(round_factor)):.2f}x each kernel's fastest sample "
          f"(10th to 90th percentile of rounds: {math.exp(np.percentile(round_factor, 10)):.2f}x "
          f"to {math.exp(np.percentile(round_factor, 90)):.2f}x)")
    w = args.window
    print(f"\nthe same kernel's fastest sample in windows of {w} rounds, two windows apart:")
    print(f"  as measured:                         {text(pairwise(fastest_in_windows(logs, w)))}")
    print(f"  each sample / its round's slowdown:  {text(pairwise(fastest_in_windows(normed, w)))}")
    canaries = []
    for c in range(logs.shape[1]):
        z = np.delete(logs - slow[:, [c]], c, axis=1)
        gaps = pairwise(fastest_in_windows(z, w))
        if gaps.size:
            canaries.append(float(np.median(gaps)))
    if canaries:
        canaries.sort()
        print(f"  each kernel in turn as the canary:   best median {100 * canaries[0]:.1f}%, "
              f"median {100 * canaries[len(canaries) // 2]:.1f}%")
    print("\nmore samples a kernel (windows of N rounds, as measured):")
    for n in (10, 30, 60, 150, 300, 450):
        if len(rows) // n >= 2:
            print(f"  {n:4d} rounds ({len(rows) // n:3d} windows): "
                  f"{text(pairwise(fastest_in_windows(logs, n)))}")


if __name__ == "__main__":
    main()
