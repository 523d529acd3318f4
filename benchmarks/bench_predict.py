#!/usr/bin/env python3
"""How fast predict runs: kernels per second, and its start-up time.

Figures, all measured in this run on this machine:

* start-up: wall time of `predict` (the installed command) on an empty
  input, i.e. Python, torch, DGL and the model loaded, nothing predicted;
  `score` beside it (score never imports torch).
* throughput: graph records (the committed CPU corpus, repeated to
  --kernels records; synthetic records if the corpus is missing) through
  the library's predict_records: records decoded, batched, scaled,
  predicted, fields added; start-up excluded. Also the same through the
  command end to end (records piped in and out, start-up subtracted).
* reference: a do-nothing filter over the same stream (msgpack records
  read and written again), the floor any record tool pays.

    .venv/bin/python benchmarks/bench_predict.py [--model M] [--threads 2] [--kernels 20000]
"""

import argparse
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


def records_stream(n):
    from tpuperf_cli.stream import RecordWriter, read_records

    shards = sorted(glob.glob(os.path.join(ROOT, "examples/corpus/graphs/*.zst")))
    recs = [r for p in shards for r in read_records(p)]
    source = "CPU corpus graph records"
    if not recs:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from synthetic import synthetic_records

        recs = synthetic_records(n_programs=10, kernels=100, nodes=(2, 40))
        source = "synthetic graph records"
    buf = io.BytesIO()
    w = RecordWriter(buf)
    for i in range(n):
        w.write(recs[i % len(recs)])
    w.flush()
    return buf.getvalue(), source, len(recs)


def best_of(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model file (default: the bundled model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kernels", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    os.environ["TPUPERF_THREADS"] = str(args.threads)
    env = {**os.environ, "TPUPERF_THREADS": str(args.threads)}
    model_args = ["--model", args.model] if args.model else []

    data, source, distinct = records_stream(args.kernels)
    n = args.kernels

    # start-up (fresh processes)
    def run(cmd, inp=b""):
        r = subprocess.run(cmd, input=inp, capture_output=True, env=env)
        if r.returncode:
            sys.exit(f"bench_predict: {' '.join(cmd)} failed: {r.stderr.decode()}")
        return r

    start_min, start_med = best_of(lambda: run([os.path.join(BIN, "predict"), *model_args]), args.repeat)
    from tpuperf_cli.records import new_record
    from tpuperf_cli.stream import RecordWriter

    one = io.BytesIO()
    w = RecordWriter(one)
    w.write(new_record("graph", program="p", kernel="k", pred_ns=1.0))
    w.flush()
    score_min, score_med = best_of(lambda: run([os.path.join(BIN, "score"), "-f", "json"], one.getvalue()),
                                   args.repeat)

    # reference: a do-nothing record filter
    from tpuperf_cli.stream import read_records

    def passthrough():
        out = io.BytesIO()
        w = RecordWriter(out)
        for r in read_records(io.BytesIO(data)):
            w.write(r)
        w.flush()

    ref, _ = best_of(passthrough, args.repeat)

    # library throughput, start-up excluded
    from tpuperf_cli.model.predict import load_model, predict_records

    t = time.perf_counter()
    model = load_model(args.model, threads=args.threads)
    load_s = time.perf_counter() - t

    def library():
        out = io.BytesIO()
        w = RecordWriter(out)
        for r in predict_records(read_records(io.BytesIO(data)), model):
            w.write(r)
        w.flush()

    library()  # warm-up
    lib, lib_med = best_of(library, args.repeat)

    # the command end to end
    cli, _ = best_of(lambda: run([os.path.join(BIN, "predict"), *model_args], data), args.repeat)
    cli_net = max(cli - start_min, 1e-9)

    print(f"machine: {os.cpu_count()} cores ({_cpu()}), torch threads {args.threads}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"model {model.name}: {model.cfg.gnn} x{model.cfg.layers}, {model.cfg.reduction}, "
          f"hidden {model.cfg.hidden}; input: {n} {source} ({distinct} distinct, "
          f"{len(data) / n:.0f} bytes/record)")
    print(f"start-up   predict (empty input)      {start_min:6.2f} s   (median {start_med:.2f} s; "
          f"model load alone {load_s:.2f} s)")
    print(f"start-up   score (one record)         {score_min:6.2f} s   (median {score_med:.2f} s)")
    print(f"reference  read+write records         {n / ref:9.0f} kernels/s")
    print(f"predict    library (predict_records)  {n / lib:9.0f} kernels/s   "
          f"({lib / ref:.2f}x the reference's time; median {n / lib_med:.0f}/s)")
    print(f"predict    command, start-up excluded {n / cli_net:9.0f} kernels/s   "
          f"({n} kernels in {cli:.2f} s with start-up)")
    goal = 5000
    print(f"goal {goal} kernels/s on 2 cores: {'met' if n / lib >= goal else 'NOT met'} "
          f"(library), {'met' if n / cli_net >= goal else 'NOT met'} (command)")


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
