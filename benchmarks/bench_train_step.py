#!/usr/bin/env python3
"""How fast one training process steps: kernels trained on per second, and
with --against, as a ratio of another checkout's rate in the same run.

Each run is a fresh process on one torch thread that imports the training
library of one tree (this checkout, or the --against one), loads the
training programs of --split with the generated kernels as the bundled
model's recipe draws them (examples/train_default_model.sh: half of each
epoch, evenly by source, indexed at a quarter; the first 16 kernel
features, the Huber loss), builds the bundled model's network and runs
--epochs epochs of the training loop: the first warms up, the others are
timed (training steps alone: batches built, forward, backward, clipping,
the optimizer and the moving average; no validation). Kernels/s counts the
graphs of the timed epochs per wall second and per CPU second.

With --against DIR (a checkout of another commit, e.g. `git worktree add
/tmp/ref HEAD~1`), --pairs runs alternate the two trees, so that a VM
whose speed drifts from one minute to the next moves both alike; each
pair's ratio (this tree's CPU rate over the other's) and their median are
printed, and whether the two trees' weights after the same steps are
identical bit for bit (a speed change that should not change training
says so).

    .venv/bin/python benchmarks/bench_train_step.py [--epochs 2] [--against DIR [--pairs 3]]
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "examples/corpus/graphs")


def worker(args):
    """One run: import the library of args.tree, time the epochs, write
    {"seen", "seconds", "cpu", "weights", "library"} to args.result."""
    sys.path.insert(0, args.tree)
    import tpuperf_cli
    from tpuperf_cli.model import set_threads

    set_threads(1)
    import torch

    from tpuperf_cli.model.config import NetConfig
    from tpuperf_cli.model.options import TrainOptions
    from tpuperf_cli.model.train import TrainingRun, load_data

    opts = TrainOptions(epochs=args.epochs, seed=0, threads=1, loss="huber", kernel_features=16,
                        generated_share=0.5, generated_even="source",
                        source_weight={"indexed": 0.25}).check()
    data = [os.path.join(args.corpus, "*.zst"), os.path.join(args.corpus, "generated", "*.zst")]
    train_set, _, scaler = load_data(data, None, args.split, opts, progress=lambda _line: None)
    run = TrainingRun(NetConfig(), scaler, opts)
    seen = seconds = cpu = 0.0
    for epoch in range(args.epochs):
        t, c = time.perf_counter(), time.process_time()
        _, n = run.train_epoch(train_set)
        if epoch:                                   # the first epoch warms up
            seen += n
            seconds += time.perf_counter() - t
            cpu += time.process_time() - c
    digest = hashlib.sha256()
    for name, value in sorted(run.saved_net.state_dict().items()):
        digest.update(name.encode())
        digest.update(value.detach().contiguous().numpy().tobytes())
    with open(args.result, "w") as f:
        json.dump({"seen": seen, "seconds": seconds, "cpu": cpu, "weights": digest.hexdigest(),
                   "library": os.path.dirname(tpuperf_cli.__file__), "torch": torch.__version__}, f)


def one_run(args, tree):
    with tempfile.TemporaryDirectory() as d:
        result = os.path.join(d, "result.json")
        env = dict(os.environ, OMP_NUM_THREADS="1", TPUPERF_THREADS="1")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--tree", tree,
               "--result", result, "--epochs", str(args.epochs), "--split", args.split,
               "--corpus", args.corpus]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode:
            sys.exit(f"bench_train_step: the run of {tree} failed:\n{r.stderr[-3000:]}")
        with open(result) as f:
            out = json.load(f)
    if os.path.realpath(out["library"]) != os.path.realpath(os.path.join(tree, "tpuperf_cli")):
        sys.exit(f"bench_train_step: the run of {tree} imported {out['library']} instead")
    return out


def rates(r):
    return r["seen"] / r["seconds"], r["seen"] / r["cpu"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2, help="epochs per run, the first untimed")
    ap.add_argument("--split", default=os.path.join(ROOT, "examples/splits/manual.json"))
    ap.add_argument("--corpus", default=CORPUS, help="graph shards, generated ones under generated/")
    ap.add_argument("--against", metavar="DIR", help="another checkout to compare with")
    ap.add_argument("--pairs", type=int, default=3, help="alternating runs of the two trees")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.epochs < 2:
        sys.exit("bench_train_step: --epochs must be at least 2 (the first is a warm-up)")
    if not os.path.isdir(os.path.join(args.corpus, "generated")):
        sys.exit(f"bench_train_step: no {args.corpus}/generated (run examples/build_corpus.py featurize)")
    if args.against and not os.path.isdir(os.path.join(args.against, "tpuperf_cli")):
        sys.exit(f"bench_train_step: --against {args.against}: no tpuperf_cli there")
    load = os.getloadavg()[0]
    print(f"training steps, the recipe's network on the {os.path.basename(args.split)} split's "
          f"training programs and the generated kernels; {args.epochs - 1} timed epoch(s), one "
          f"torch thread; {os.cpu_count()} cores, load average {load:.2f} before")
    trees = [("this", ROOT)] + ([("against", os.path.abspath(args.against))] if args.against else [])
    pairs = args.pairs if args.against else 1
    print(f"{'run':>4s} {'tree':>8s} {'kernels':>8s} {'wall s':>7s} {'kernels/s':>10s} "
          f"{'CPU s':>7s} {'per CPU s':>10s}")
    ratios, weights = [], set()
    for i in range(pairs):
        order = trees if i % 2 == 0 else trees[::-1]       # alternate which goes first
        got = {}
        for label, tree in order:
            r = got[label] = one_run(args, tree)
            wall, per_cpu = rates(r)
            weights.add(r["weights"])
            print(f"{i + 1:4d} {label:>8s} {int(r['seen']):8d} {r['seconds']:7.1f} {wall:10.0f} "
                  f"{r['cpu']:7.1f} {per_cpu:10.0f}", flush=True)
        if args.against:
            ratios.append(rates(got["this"])[1] / rates(got["against"])[1])
    print(f"load average {os.getloadavg()[0]:.2f} after")
    if args.against:
        print(f"this tree's kernels per CPU second over {args.against}'s, each pair: "
              + ", ".join(f"{x:.2f}x" for x in ratios) + f"; median {statistics.median(ratios):.2f}x")
        print("weights after the same steps: " + ("identical in both trees" if len(weights) == 1
                                                  else "differ between the trees"))


if __name__ == "__main__":
    main()
