#!/usr/bin/env python3
"""How fast predict runs: its start-up and kernels per second past it.

Figures, all measured in this run on this machine:

* start-up: wall time of `predict` (the installed command) on an empty
  input: Python, the model loaded, nothing predicted; with the numpy engine
  (the default) and with --engine dgl (torch and DGL imported); `score`
  beside them (the reference: a record tool that imports no model).
* throughput past start-up, on graph records of the whole committed CPU
  corpus (14,607 kernels of 77 programs, in shard order; synthetic records
  if the corpus is missing), through what the command runs
  (model.predict.predict_packed: records decoded, batched, scaled,
  predicted, the two fields appended to each record's bytes, written; no
  cyclic garbage collection, as in the command), for each engine; and on
  the corpus's distinct graphs only (no kernel repeats, so none is served
  from predict's memo of graphs seen before). Also the library's
  predict_records (records packed again), and the command end to end,
  start-up subtracted.
* reference: a do-nothing filter over the same stream (msgpack records
  read and written again), the floor any record tool pays.
* with --against REF: the model's rate as a ratio of another model's (the
  numpy engine, the whole corpus, past start-up), in --pairs runs that
  alternate the two in this process, each pair's ratio and their median:
  on a VM whose speed drifts from one minute to the next, runs of two
  models minutes apart differ by more than the models do.

Each figure is the best of --repeat runs; every run starts with a fresh
model (an empty memo, and a tree model's walk in numpy for its first
share, as in a new process; numba's compile, once per process, is in the
command's figure alone); output goes to a sink that drops it. Throughput
comes as wall-clock and CPU rates (CPU seconds of this process, math on
one thread): on a shared machine the CPU rate is the steadier one, and the
goal is checked on it.

    .venv/bin/python benchmarks/bench_predict.py [--model M] [--threads 1] [--repeat 3]
        [--against REF [--pairs 5]]
"""

import argparse
import gc
import glob
import io
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
BIN = os.path.dirname(sys.executable)
GOAL_RATE = 20000       # kernels/s past start-up
GOAL_STARTUP = 1.0      # s more than score's


def corpus():
    from tpuperf_cli.stream import read_records

    shards = sorted(glob.glob(os.path.join(ROOT, "examples/corpus/graphs/*.zst")))
    recs = [r for p in shards for r in read_records(p)]
    if recs:
        return recs, "CPU corpus graph records"
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from synthetic import synthetic_records

    return synthetic_records(n_programs=10, kernels=100, nodes=(2, 40)), "synthetic graph records"


def distinct(recs):
    seen, out = set(), []
    for r in recs:
        key = tuple(r[f]["data"] for f in ("node_opcode", "node_feat", "edge_index", "kernel_feat",
                                           "config_feat"))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def stream(recs):
    from tpuperf_cli.stream import RecordWriter

    buf = io.BytesIO()
    w = RecordWriter(buf)
    for r in recs:
        w.write(r)
    w.flush()
    return buf.getvalue()


class Sink:
    """An output that drops what it is given."""

    def write(self, data):
        return len(data)

    def flush(self):
        pass


def best_of(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def best_cpu(fn, repeat):
    """(best wall s, best CPU s of this process): on a shared machine the CPU
    time says what the work costs, the wall time what the load let it have."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - w)
        cpu = min(cpu, time.process_time() - c)
    return wall, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model file (default: the bundled model)")
    ap.add_argument("--threads", type=int, default=1,
                    help="math threads (default 1: on a shared 2-core machine one is faster)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", metavar="REF", help="also the model's rate against REF's, in alternating runs")
    ap.add_argument("--pairs", type=int, default=5, help="alternating runs of --against (default 5)")
    args = ap.parse_args()
    os.environ["TPUPERF_THREADS"] = str(args.threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))   # before numpy loads
    env = {**os.environ, "TPUPERF_THREADS": str(args.threads)}
    model_args = ["--model", args.model] if args.model else []

    recs, source = corpus()
    uniq = distinct(recs)
    data, data_uniq, warm = stream(recs), stream(uniq), stream(recs[:500])
    n, nu = len(recs), len(uniq)
    del recs, uniq          # a tool holds a batch, not the corpus
    gc.collect()

    def run(cmd, inp=b""):
        r = subprocess.run(cmd, input=inp, capture_output=True, env=env)
        if r.returncode:
            sys.exit(f"bench_predict: {' '.join(cmd)} failed: {r.stderr.decode()}")
        return r

    predict = [os.path.join(BIN, "predict"), *model_args]
    start_np, start_np_med = best_of(lambda: run(predict), args.repeat)
    start_dgl, _ = best_of(lambda: run(predict + ["--engine", "dgl"]), args.repeat)
    from tpuperf_cli.records import new_record
    from tpuperf_cli.stream import RecordWriter, read_records

    one = stream([new_record("graph", program="p", kernel="k", pred_ns=1.0)])
    start_score, start_score_med = best_of(lambda: run([os.path.join(BIN, "score"), "-f", "json"], one),
                                           args.repeat)

    def passthrough(d):
        w = RecordWriter(Sink())
        for r in read_records(io.BytesIO(d)):
            w.write(r)
        w.flush()

    ref, _ = best_of(lambda: passthrough(data), args.repeat)

    from tpuperf_cli.model.predict import load_model, predict_packed, predict_records

    models = {}
    t = time.perf_counter()
    models["numpy"] = load_model(args.model, threads=args.threads, engine="numpy")
    load_np = time.perf_counter() - t
    t = time.perf_counter()
    models["dgl"] = load_model(args.model, threads=args.threads, engine="dgl")
    load_dgl = time.perf_counter() - t

    def fresh(model):
        """As a fresh process has it: no graph seen, no tree walked (the walk
        compiles after numpy's first share: model/trees.py)."""
        model._memo.clear()
        model._memo_bytes = 0
        for part in (model.net, model.trees):
            if hasattr(part, "walked"):
                part.walked = 0

    def library(model, d):
        """What the command runs past start-up."""
        fresh(model)                 # every run starts as a fresh process would
        w = RecordWriter(Sink())
        gc.disable()
        try:
            for packed, count in predict_packed(read_records(io.BytesIO(d), with_bytes=True), model):
                w.write_packed(packed, count)
        finally:
            gc.enable()
        w.flush()

    def records_api(model, d):
        fresh(model)
        w = RecordWriter(Sink())
        for r in predict_records(read_records(io.BytesIO(d)), model):
            w.write(r)
        w.flush()

    lib, lib_cpu = {}, {}
    for engine, model in models.items():
        library(model, warm)                            # warm-up
        lib[engine], lib_cpu[engine] = best_cpu(lambda: library(model, data), args.repeat)
        key = engine + " distinct"
        lib[key], lib_cpu[key] = best_cpu(lambda: library(model, data_uniq), args.repeat)
    key = "numpy, predict_records"
    lib[key], lib_cpu[key] = best_cpu(lambda: records_api(models["numpy"], data), args.repeat)
    ref_cpu = best_cpu(lambda: passthrough(data), args.repeat)[1]

    cli, _ = best_of(lambda: run(predict, data), args.repeat)
    cli_net = max(cli - start_np, 1e-9)

    m = models["numpy"]
    print(f"machine: {os.cpu_count()} cores ({_cpu()}), {args.threads} math thread(s), "
          f"load average {os.getloadavg()[0]:.1f}")
    net = m.kind if m.is_trees else \
        f"{m.cfg.gnn} x{m.cfg.layers}, {m.cfg.reduction}, hidden {m.cfg.hidden}"
    print(f"model {m.name}: {net}; "
          f"input: {n} {source} ({nu} distinct graphs), {len(data) / n:.0f} bytes/record")
    print(f"start-up   score (reference)              {start_score:6.2f} s   (median {start_score_med:.2f} s)")
    print(f"start-up   predict (numpy engine)         {start_np:6.2f} s   (median {start_np_med:.2f} s; "
          f"+{start_np - start_score:.2f} s over score; model load alone {load_np:.3f} s)")
    print(f"start-up   predict --engine dgl           {start_dgl:6.2f} s   (+{start_dgl - start_score:.2f} s "
          f"over score; model load alone {load_dgl:.2f} s)")
    print(f"{'':<42} {'wall':>9} {'cpu':>9} kernels/s")
    print(f"{'reference  read+write records':<42} {n / ref:9.0f} {n / ref_cpu:9.0f}")
    for key, t in lib.items():
        k = nu if key.endswith("distinct") else n
        label = f"predict    {key}"
        print(f"{label:<42} {k / t:9.0f} {k / lib_cpu[key]:9.0f}   "
              f"({(k / lib_cpu[key]) / (n / ref_cpu):.2f}x the reference's rate, cpu)")
    print(f"predict    command, start-up excluded     {n / cli_net:9.0f} kernels/s   "
          f"({n} kernels in {cli:.2f} s with start-up)")
    print(f"numpy engine vs dgl, same run, cpu: {lib_cpu['dgl'] / lib_cpu['numpy']:.1f}x (corpus), "
          f"{lib_cpu['dgl distinct'] / lib_cpu['numpy distinct']:.1f}x (distinct graphs); "
          f"start-up {start_dgl - start_np:.2f} s shorter")
    rate = n / lib_cpu["numpy"]
    print(f"goals: start-up <= score + {GOAL_STARTUP:.0f} s: "
          f"{'met' if start_np - start_score <= GOAL_STARTUP else 'NOT met'}; "
          f">= {GOAL_RATE} kernels/s past start-up (cpu): {'met' if rate >= GOAL_RATE else 'NOT met'} "
          f"({rate:.0f}/s cpu, {n / lib['numpy']:.0f}/s wall; command {n / cli_net:.0f}/s wall)")
    if args.against:
        other = load_model(args.against, threads=args.threads, engine="numpy")
        library(other, warm)
        ratios = []
        for _ in range(args.pairs):
            mine = best_cpu(lambda: library(m, data), 1)[1]
            theirs = best_cpu(lambda: library(other, data), 1)[1]
            ratios.append(theirs / mine)
        print(f"against {other.name} ({args.against}), {args.pairs} alternating pairs, cpu: this model at "
              f"{statistics.median(ratios):.2f}x its rate (median; pairs "
              f"{', '.join(f'{r:.2f}x' for r in ratios)}; {n / mine:.0f}/s against {n / theirs:.0f}/s in the last)")


def _cpu():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown cpu"


if __name__ == "__main__":
    main()
