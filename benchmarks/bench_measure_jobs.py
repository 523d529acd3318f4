#!/usr/bin/env python3
"""measure --jobs and --compile-jobs: throughput of 1 and of N on the same kernels.

Takes the same stratified sample of corpus kernels as
bench_measure_noise.py (by kind and size band, distinct), and measures it
with the `measure` tool three times, each in a fresh cache directory:
--jobs 1, --jobs N (default 2), --jobs 1 again, all with --batch 8 (so that
a few dozen kernels make chunks enough for every job) and measure's
defaults otherwise (--cpus 1: each worker pinned to its own CPU, process
clock; options after -- override them). It
prints each run's seconds (start-up included) and kernels per second, the
speedup against each --jobs 1 run (the figure the issue asks at least
1.5x of on 2 cores; two references bracket a load that changed meanwhile),
and how far the runtimes agree: the median and 90th percentile over
kernels of |a - b| / min(a, b), the pairwise error of bench_measure_noise.py,
between the first --jobs 1 run and the --jobs N run, beside the same
between the two --jobs 1 runs (the noise of one job, the reference).

With --compile-pool the run in the middle is one job compiling on a pool
of N processes (--jobs 1 --compile-jobs N, measure's default on N CPUs), and
the two references compile where they time (--compile-jobs 0); all three
with --batch 64, so that a batch holds several bundles to compile at once.
Here the agreement should be within the references' noise: the pool
compiles the same code, and nothing runs beside the timing.

The machine's load average before and after is printed beside, and the CPU
time each run got (measure and its children) with the CPUs it kept busy on
average (CPU time / seconds): N jobs can only be N times faster where they
get N CPUs, and on a machine whose CPUs are busy with other work they do
not.

    .venv/bin/python benchmarks/bench_measure_jobs.py
    .venv/bin/python benchmarks/bench_measure_jobs.py --per-kind 10 --jobs 4 -- --samples 9
    .venv/bin/python benchmarks/bench_measure_jobs.py --compile-pool --per-kind 16
"""

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def measure(records, options, extra):
    """(runtimes by fingerprint, seconds, CPU seconds of measure and its
    children, stderr's summary) of one fresh run."""
    from tpuperf_cli.stream import RecordWriter, read_records

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernels.msgpack")
        with RecordWriter(path) as w:
            for r in records:
                w.write({k: v for k, v in r.items() if k not in ("runtime_ns", "runs", "noise", "target")})
        cpu0 = _children_cpu()
        t0 = time.time()
        p = subprocess.run([sys.executable, "-m", "tpuperf_cli", "measure", "--backend", "cpu",
                            "--cache-dir", os.path.join(tmp, "cache"), "--no-progress",
                            *options, *extra, path],
                           capture_output=True, cwd=ROOT)
        seconds = time.time() - t0
        cpu = _children_cpu() - cpu0
    if p.returncode != 0:
        sys.exit(f"bench_measure_jobs: measure {' '.join(options)} failed: "
                 f"{p.stderr.decode()[-2000:]}")
    out = list(read_records(io.BytesIO(p.stdout)))
    if [r["fingerprint"] for r in out] != [r["fingerprint"] for r in records]:
        sys.exit(f"bench_measure_jobs: measure {' '.join(options)} did not keep the input order")
    summary = [line for line in p.stderr.decode().splitlines() if "kernel(s):" in line]
    return {r["fingerprint"]: r["runtime_ns"] for r in out if "runtime_ns" in r}, seconds, cpu, summary


def _children_cpu():
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main():
    from bench_measure_noise import percentile, sample_kernels

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-kind", type=int, default=8,
                    help="kernels per kind (default 8: 64 over the corpus's 8 kinds)")
    ap.add_argument("--jobs", type=int, default=2, help="the jobs to compare with one (default 2)")
    ap.add_argument("--compile-pool", action="store_true",
                    help="compare one job compiling on --jobs processes with one compiling "
                         "where it times")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("measure_args", nargs="*", help="after --: options for measure")
    args = ap.parse_args()

    kernels = sample_kernels(args.per_kind, args.seed)
    n = len(kernels)
    load_before = os.getloadavg()
    if args.compile_pool:
        reference = ["--batch", "64", "--jobs", "1", "--compile-jobs", "0"]
        contender = ["--batch", "64", "--jobs", "1", "--compile-jobs", str(args.jobs)]
        name, ref_name = f"--compile-jobs {args.jobs}", "--compile-jobs 0"
    else:
        reference = ["--batch", "8", "--jobs", "1"]
        contender = ["--batch", "8", "--jobs", str(args.jobs)]
        name, ref_name = f"--jobs {args.jobs}", "--jobs 1"
    one, sec_one, cpu_one, sum_one = measure(kernels, reference, args.measure_args)
    many, sec_many, cpu_many, sum_many = measure(kernels, contender, args.measure_args)
    again, sec_again, cpu_again, sum_again = measure(kernels, reference, args.measure_args)
    load_after = os.getloadavg()

    def pairwise(a, b):
        return [abs(a[k] - b[k]) / min(a[k], b[k]) for k in a if k in b and min(a[k], b[k]) > 0]

    errs, ref = pairwise(one, many), pairwise(one, again)
    ratios = [many[k] / one[k] for k in one if k in many and one[k] > 0]

    print(f"{n} distinct corpus kernels, measure {' '.join(args.measure_args) or '(defaults)'}, "
          f"fresh cache each run; {len(os.sched_getaffinity(0))} CPUs usable")
    print(f"load average (1 min) before {load_before[0]:.1f}, after {load_after[0]:.1f} "
          f"(5 min: {load_after[1]:.1f})")
    for label, sec, cpu, summary in ((ref_name, sec_one, cpu_one, sum_one),
                                     (name, sec_many, cpu_many, sum_many),
                                     (ref_name, sec_again, cpu_again, sum_again)):
        print(f"{label}: {sec:7.1f} s  {n / sec:6.2f} kernels/s; {cpu:6.1f} CPU s, "
              f"{cpu / sec:4.2f} CPUs busy on average   "
              f"({summary[0].split(': ', 1)[-1] if summary else ''})")
    print(f"speedup {name} / {ref_name}: {sec_one / sec_many:.2f}x against the first "
          f"{ref_name} run, {sec_again / sec_many:.2f}x against the second")
    print(f"agreement, |a-b|/min(a,b) over kernels timed in both: {ref_name} against "
          f"{name}: median {percentile(errs, .5):.1%}, p90 {percentile(errs, .9):.1%}, median "
          f"ratio {statistics.median(ratios):.3f}; the two {ref_name} runs (the noise): median "
          f"{percentile(ref, .5):.1%}, p90 {percentile(ref, .9):.1%}")


if __name__ == "__main__":
    main()
