#!/usr/bin/env python3
"""Data-parallel training throughput: kernels per second per process with
1 and with 2 processes on the same data, and the 2-process speedup.

Each case starts the training library under torchrun (python -m
torch.distributed.run --standalone): every process learns the scaling,
builds the model (the bundled model's hyperparameters) and runs --epochs
epochs of the training loop (one all-reduce per step); the first epoch is
a warm-up, the others are timed (training steps only, no validation).
Three cases: 1 process with global batch B (--batch-size); 2 processes
with the same global batch, B/2 graphs each per step (the same training as
one process, in less time if a step's work halves); 2 processes with B
graphs each (global batch 2B: half the steps, what a corpus twice as
large on twice the processes needs to keep its epoch time). Throughput
counts kernels trained on (graphs in the epochs' batches) per wall second
and per CPU second of each process; speedups are 2-process totals over
the 1-process total, all measured in this run, one torch thread per
process. On a machine with fewer free cores than processes the wall-clock
speedup says little: the load average is printed beside it.

    .venv/bin/python benchmarks/bench_train_dist.py [--epochs 3] [--split examples/splits/random.json]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def worker(args):
    """One process of a torchrun case: time the training epochs, rank 0
    writes {"seen", "seconds", "world"} to args.result."""
    from tpuperf_cli.model import set_threads

    set_threads(1)
    from tpuperf_cli.model.config import NetConfig
    from tpuperf_cli.model.dist import Dist
    from tpuperf_cli.model.train import TrainingRun, TrainOptions, load_data

    dist = Dist.from_env()
    opts = TrainOptions(epochs=args.epochs, batch_size=args.batch_size, seed=0, threads=1).check()
    train_set, _, scaler = load_data([os.path.join(args.corpus, "*.zst")], None, args.split, opts,
                                     progress=lambda _line: None, dist=dist)
    run = TrainingRun(NetConfig(), scaler, opts, dist)
    seen = seconds = cpu = 0.0
    for epoch in range(args.epochs):
        t, c = time.perf_counter(), time.process_time()
        _, n = run.train_epoch(train_set)
        dt = dist.max(time.perf_counter() - t)
        dc = sum(dist.gather(time.process_time() - c))
        if epoch:                               # the first epoch warms up
            seen += n
            seconds += dt
            cpu += dc
    if dist.main:
        with open(args.result, "w") as f:
            json.dump({"seen": seen, "seconds": seconds, "cpu": cpu, "world": dist.world,
                       "examples": train_set.examples, "local": train_set.local}, f)
    dist.close()


def case(args, procs, batch_size):
    with tempfile.TemporaryDirectory() as d:
        result = os.path.join(d, "result.json")
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   OMP_NUM_THREADS="1", TPUPERF_THREADS="1")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
               str(procs), os.path.abspath(__file__), "--worker", "--result", result,
               "--epochs", str(args.epochs), "--batch-size", str(batch_size),
               "--split", args.split, "--corpus", args.corpus]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode:
            sys.exit(f"bench_train_dist: {procs} process(es) failed:\n{r.stderr[-3000:]}")
        with open(result) as f:
            return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3, help="epochs per case, the first untimed")
    ap.add_argument("--batch-size", type=int, default=64, help="global batch (graphs per step)")
    ap.add_argument("--split", default=os.path.join(ROOT, "examples/splits/random.json"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "examples/corpus/graphs"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.epochs < 2:
        sys.exit("bench_train_dist: --epochs must be at least 2 (the first is a warm-up)")
    load = os.getloadavg()
    b = args.batch_size
    cases = [(1, b), (2, b), (2, 2 * b)]
    rows = [case(args, procs, batch) for procs, batch in cases]
    print(f"training throughput, {rows[0]['examples']} training kernels of the "
          f"{os.path.basename(args.split)} split, {args.epochs - 1} timed epoch(s), 1 torch thread "
          f"per process; {os.cpu_count()} cores, load average {load[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after")
    print(f"{'processes':>9s} {'batch':>11s} {'kernels':>8s} {'wall s':>7s} {'kernels/s':>10s} "
          f"{'per process':>12s} {'CPU s':>7s} {'per CPU s':>10s} {'speedup':>8s}")
    base = rows[0]["seen"] / rows[0]["seconds"]
    for (procs, batch), r in zip(cases, rows):
        total = r["seen"] / r["seconds"]
        print(f"{procs:9d} {f'{batch} ({batch // procs} each)':>11s} {int(r['seen']):8d} "
              f"{r['seconds']:7.1f} {total:10.0f} {total / procs:12.0f} {r['cpu']:7.1f} "
              f"{r['seen'] / r['cpu']:10.0f} {total / base:7.2f}x")
    print("speedup: kernels/s over 1 process's (ideal 2.00x with 2 free cores); per CPU s: kernels "
          "per CPU second of all processes (1 process's figure means no work is duplicated)")


if __name__ == "__main__":
    main()
