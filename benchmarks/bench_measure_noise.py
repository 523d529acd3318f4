#!/usr/bin/env python3
"""How far two independent `measure` runs agree on this machine.

Draws a fixed sample of corpus kernels (examples/corpus/kernels), stratified
by kind (dots, convolutions, loop, input and output fusions, reductions,
reduce-windows, iotas, copies and transposes, the rest) and by size (the
corpus's runtime: under 10 us, 10-100 us, 100 us-1 ms, over 1 ms), and
measures all of them twice with the `measure` tool itself, on its default
settings and without its cache: two separate processes, the second in the
reverse order. For each kernel the pairwise error is

    |a - b| / min(a, b)        (max/min - 1)

and the benchmark prints its median, 90th percentile and maximum ratio
overall, by size band (from the first run's runtime) and by kind, beside the
median of the `noise` field that measure wrote (its own estimate of one
sample's spread), and the seconds per kernel of each run.

The goal (the measurement issue): median at most 3%, 90th percentile at most
10%, no kernel over 1.5x apart, kernels of 10 us or more at most 2% median.

    .venv/bin/python benchmarks/bench_measure_noise.py
    .venv/bin/python benchmarks/bench_measure_noise.py --per-kind 40 -- --samples 9
    .venv/bin/python benchmarks/bench_measure_noise.py --json noise.json

Arguments after `--` go to measure (e.g. --min-time 5ms, --cpus all).

--kernels DIR samples another corpus's shards (*.zst, *.msgpack; say the
kernels/ of examples/gpu_corpus.py) and --backend times them on another
backend: on a GPU, `--kernels /tmp/gpu/kernels --backend gpu` gives that
corpus's noise figures (measure's defaults there: the device's clock).

--reference DIR measures the same sample the same way with the measure of
another checkout of tpuperf (say `git worktree add /tmp/old aa56be6`, the
method before this one: min of 3 dispatched runs of 10 ms), with its own
defaults, and prints its figures and seconds per kernel beside these.
"""

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BANDS = [("< 10 us", 0, 1e4), ("10-100 us", 1e4, 1e5), ("100 us-1 ms", 1e5, 1e6),
         (">= 1 ms", 1e6, float("inf"))]


def kind_of(r):
    op = r.get("opcode")
    if op == "fusion":
        return {"kLoop": "loop fusion", "kInput": "input fusion", "kOutput": "output fusion",
                "kCustom": "custom fusion"}.get(r.get("fusion_kind"), "other fusion")
    if op == "custom-call":      # on a GPU: cuBLAS and cuDNN calls
        return "custom call"
    if op in ("dot", "convolution", "reduce", "reduce-window", "iota"):
        return op
    if op in ("copy", "transpose"):
        return "copy/transpose"
    return "other"


def percentile(xs, q):
    from tpuperf_cli.measure.device import quantile

    return quantile(xs, q)


def band_of(ns):
    return next(label for label, lo, hi in BANDS if lo <= ns < hi)


def sample_kernels(per_kind, seed, folder=None):
    """Distinct corpus kernels: up to per_kind of each kind, spread evenly
    over the size bands (by the corpus's runtime)."""
    from tpuperf_cli.stream import read_records

    seen, strata = set(), {}
    folder = Path(folder) if folder else ROOT / "examples" / "corpus" / "kernels"
    shards = sorted(folder.glob("*.zst")) + sorted(folder.glob("*.msgpack"))
    if not shards:
        sys.exit(f"bench_measure_noise: no *.zst or *.msgpack shards in {folder}")
    for shard in shards:
        for r in read_records(str(shard)):
            if "runtime_ns" not in r or r["fingerprint"] in seen:
                continue
            seen.add(r["fingerprint"])
            strata.setdefault(kind_of(r), {}).setdefault(band_of(r["runtime_ns"]), []).append(r)
    rng = random.Random(seed)
    picked = []
    for kind in sorted(strata):
        bands = [sorted(b, key=lambda r: r["fingerprint"]) for _, b in sorted(strata[kind].items())]
        for b in bands:
            rng.shuffle(b)
        take = []
        while len(take) < per_kind and any(bands):
            for b in bands:  # round robin over the size bands
                if b and len(take) < per_kind:
                    take.append(b.pop())
        picked += take
    return picked


def bands_of(keys, runtimes):
    """{band label: the keys whose runtime falls in it}, in BANDS order."""
    return {label: [k for k in keys if lo <= runtimes[k] < hi] for label, lo, hi in BANDS}


def run_measure(records, extra, checkout=None, backend="cpu"):
    """Runtimes by fingerprint, noise by fingerprint, seconds, target."""
    from tpuperf_cli.stream import RecordWriter, read_records

    with tempfile.NamedTemporaryFile(suffix=".msgpack", delete=False) as f:
        w = RecordWriter(f)
        for r in records:
            w.write({k: v for k, v in r.items() if k not in ("runtime_ns", "runs", "target")})
        w.flush()
        path = f.name
    try:
        env = dict(os.environ)
        if checkout:
            env["PYTHONPATH"] = str(Path(checkout).resolve())
        t0 = time.time()
        p = subprocess.run([sys.executable, "-m", "tpuperf_cli", "measure", "--backend", backend,
                            "--no-cache", "--no-progress", "-q", *extra, path],
                           capture_output=True, env=env, cwd=checkout or ROOT)
        seconds = time.time() - t0
    finally:
        os.unlink(path)
    if p.returncode != 0:
        sys.exit(f"bench_measure_noise: measure failed: {p.stderr.decode()[-2000:]}")
    out = list(read_records(io.BytesIO(p.stdout)))
    runtimes = {r["fingerprint"]: r["runtime_ns"] for r in out if "runtime_ns" in r}
    noise = {r["fingerprint"]: r.get("noise") for r in out if "runtime_ns" in r}
    return runtimes, noise, seconds, out[0]["target"] if out else {}


def table(rows, key, order):
    lines = [f"{'':<16}{'n':>5}  {'median':>8}  {'p90':>8}  {'max ratio':>9}  "
             f"{'noise med':>9}"]
    for label in order:
        sel = [r for r in rows if key(r) == label]
        if not sel:
            continue
        errs = [r["err"] for r in sel]
        lines.append(f"{label:<16}{len(sel):>5}  {percentile(errs, .5):>8.1%}  "
                     f"{percentile(errs, .9):>8.1%}  {1 + max(errs):>8.2f}x  "
                     f"{percentile([r['noise'] for r in sel], .5):>9.1%}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-kind", type=int, default=40,
                    help="kernels per kind (default 40: 320 over the corpus's 8 kinds)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the figures to this JSON file")
    ap.add_argument("--reference", metavar="DIR",
                    help="another tpuperf checkout whose measure to compare with")
    ap.add_argument("--kernels", metavar="DIR",
                    help="sample the shards in DIR (default examples/corpus/kernels)")
    ap.add_argument("--backend", default="cpu", help="measure --backend (default cpu)")
    ap.add_argument("measure_args", nargs="*", help="after --: options for measure")
    args = ap.parse_args()

    kernels = sample_kernels(args.per_kind, args.seed, args.kernels)
    a, noise, sec_a, target = run_measure(kernels, args.measure_args, backend=args.backend)
    b, _, sec_b, _ = run_measure(kernels[::-1], args.measure_args, backend=args.backend)
    reference = None
    if args.reference:
        ra, _, rsec_a, _ = run_measure(kernels, [], args.reference)
        rb, _, rsec_b, _ = run_measure(kernels[::-1], [], args.reference)
        rerr = [abs(ra[k] - rb[k]) / min(ra[k], rb[k]) for k in ra if k in rb and
                min(ra[k], rb[k]) > 0]
        # the two methods against each other: agreement, and the bias of
        # this one (median of this / reference over both runs' means)
        both = [k for k in a if k in b and k in ra and k in rb and min(a[k], b[k], ra[k], rb[k]) > 0]
        mine = {k: (a[k] + b[k]) / 2 for k in both}
        theirs = {k: (ra[k] + rb[k]) / 2 for k in both}
        cross = [abs(mine[k] - theirs[k]) / min(mine[k], theirs[k]) for k in both]
        reference = {"median": percentile(rerr, .5), "p90": percentile(rerr, .9),
                     "max_ratio": 1 + max(rerr),
                     "cross_median": percentile(cross, .5), "cross_p90": percentile(cross, .9),
                     "bias": statistics.median(mine[k] / theirs[k] for k in both),
                     # by the reference's size band: a change aimed at one
                     # band (say long kernels' fewer samples) shows there
                     "bias_by_band": {label: {"ratio": statistics.median(mine[k] / theirs[k]
                                                                         for k in ks),
                                              "n": len(ks)}
                                      for label, ks in bands_of(both, theirs).items() if ks},
                     "seconds_per_kernel": (rsec_a + rsec_b) / 2 / len(kernels)}
    rows = []
    for r in kernels:
        fp = r["fingerprint"]
        if fp in a and fp in b and min(a[fp], b[fp]) > 0:
            rows.append({"kind": kind_of(r), "band": band_of(a[fp]), "ns": a[fp],
                         "err": abs(a[fp] - b[fp]) / min(a[fp], b[fp]),
                         "noise": noise.get(fp) or 0.0})
    errs = [r["err"] for r in rows]
    big = [r["err"] for r in rows if r["ns"] >= 1e4]
    cpu = target.get("cpu", {})
    print(f"target: {target.get('platform')} {target.get('chip')} (family {cpu.get('family')} "
          f"model {cpu.get('model')} stepping {cpu.get('stepping')}), "
          f"{target.get('cpu_count')} of {target.get('cores')} cpus, clock {target.get('clock')}, "
          f"method {target.get('method')}, jax {target.get('jax')}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print(f"{len(rows)} kernels measured in both runs (of {len(kernels)}); measure "
          f"{' '.join(args.measure_args) or '(defaults)'}")
    print(f"seconds per kernel: {sec_a / len(kernels):.3f} (first run), "
          f"{sec_b / len(kernels):.3f} (second run), start-up included")
    if reference:
        print(f"reference ({args.reference}, its defaults): pairwise error median "
              f"{reference['median']:.1%}, p90 {reference['p90']:.1%}, max "
              f"{reference['max_ratio']:.2f}x; {reference['seconds_per_kernel']:.3f} s per kernel: "
              f"this measure takes {(sec_a + sec_b) / 2 / len(kernels) / reference['seconds_per_kernel']:.2f}x "
              f"its time")
        print(f"this method against the reference (means of two runs each): error median "
              f"{reference['cross_median']:.1%}, p90 {reference['cross_p90']:.1%}; median ratio "
              f"this/reference {reference['bias']:.3f}")
        print("median ratio this/reference by the reference's size: " + ", ".join(
            f"{label} {band['ratio']:.3f} (n={band['n']})"
            for label, band in reference["bias_by_band"].items()))
    print()
    print(f"pairwise error |a-b|/min(a,b): median {percentile(errs, .5):.1%}, "
          f"p90 {percentile(errs, .9):.1%}, max {1 + max(errs):.2f}x; "
          f">= 10 us: median {percentile(big, .5):.1%} (n={len(big)})")
    print()
    print("by size (first run's runtime):")
    print("\n".join(table(rows, lambda r: r["band"], [label for label, _, _ in BANDS])))
    print()
    print("by kind:")
    print("\n".join(table(rows, lambda r: r["kind"], sorted({r["kind"] for r in rows}))))
    if args.json:
        figures = {"target": target, "kernels": len(rows),
                   "median": percentile(errs, .5), "p90": percentile(errs, .9),
                   "max_ratio": 1 + max(errs), "median_10us": percentile(big, .5),
                   "noise_median": statistics.median(r["noise"] for r in rows),
                   "seconds_per_kernel": (sec_a + sec_b) / 2 / len(kernels),
                   "measure_args": args.measure_args, "reference": reference}
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
