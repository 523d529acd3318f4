"""How many kernels per second featurize turns into graph records.

On the largest example program (or the HLO files named), in one run:

  msgpack      the raw record rate: unpack the kernel stream and pack each
               record again (the floor any stream tool pays)
  parse        parsing each kernel's standalone HLO alone (the parser is
               shared with hlo-split)
  featurize    the whole library path of the tool: read, parse, node
               features, edges, cost analysis, write (in process, one core)
  featurize/cli   the featurize command on a stream of the kernels repeated
               --copies times, process start included
  split|featurize the pipeline `hlo-split FILE | featurize` as two
               processes, per kernel of the program, process starts included

And over the whole example corpus (examples/corpus/kernels/*.zst, 14,607
kernels of 77 programs, as one stream): featurize in process on one core
against msgpack read+write of the same stream; the goal is 5,000 kernels/s.

Each timing is the best of --repeat; CPU seconds (process_time) are shown
beside wall seconds because the machine is shared. Rates are kernels/s; the
ratio columns compare featurize with the references measured in this run.
The garbage collector is set as the featurize command sets it.

    .venv/bin/python benchmarks/bench_featurize.py
    .venv/bin/python benchmarks/bench_featurize.py examples/hlo/cnn_m_train.hlo.zst --repeat 5
"""

import argparse
import glob
import io
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import msgpack  # noqa: E402
from example_programs import largest_example  # noqa: E402

from tpuperf_cli.features import featurize_kernel  # noqa: E402
from tpuperf_cli.hlo import parser  # noqa: E402
from tpuperf_cli.hlo.dump import read_hlo  # noqa: E402
from tpuperf_cli.hlo.split import kernel_records  # noqa: E402
from tpuperf_cli.stream import RecordWriter, read_records  # noqa: E402

BIN = os.path.dirname(sys.executable)


def timed(fn, repeat):
    """(best wall s, best cpu s) over repeat runs."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def corpus_rate(repeat):
    shards = sorted(glob.glob(os.path.join(ROOT, "examples", "corpus", "kernels", "*.zst")))
    if not shards:
        print("no examples/corpus/kernels/*.zst: corpus rate skipped")
        return
    buf = io.BytesIO()
    w = RecordWriter(buf)
    n = 0
    for p in shards:
        for r in read_records(p):
            for k in ("node_opcode", "node_feat", "edge_index", "kernel_feat", "config_feat"):
                r.pop(k, None)
            w.write(r)
            n += 1
    w.flush()
    stream = buf.getvalue()

    def raw():
        out = RecordWriter(io.BytesIO())
        for r in read_records(io.BytesIO(stream)):
            out.write(r)

    def featurize():
        out = RecordWriter(io.BytesIO())
        for r in read_records(io.BytesIO(stream)):
            r.update(featurize_kernel(r))
            r["type"] = "graph"
            out.write(r)

    t_raw = timed(raw, repeat)
    t_feat = timed(featurize, max(1, repeat // 2))
    rate = n / t_feat[1]
    print(f"example corpus: {n} kernel records, {len(stream) / n:.0f} bytes each")
    print(f"  msgpack read+write   {n / t_raw[1]:9.0f} kernels/s (cpu)")
    print(f"  featurize            {rate:9.0f} kernels/s (cpu; {n / t_feat[0]:.0f}/s wall), "
          f"{(n / t_raw[1]) / rate:.1f}x the reference's time per kernel")
    print(f"  goal >= 5000 kernels/s on one core: {'met' if rate >= 5000 else 'NOT met'}")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="HLO files (default: the largest examples/hlo/*.hlo.zst)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per timing; the best counts")
    ap.add_argument("--copies", type=int, default=10,
                    help="times the kernel stream is repeated for the command timing")
    args = ap.parse_args()
    files = args.files or [largest_example()]

    import gc

    gc.freeze()                         # as the featurize command does
    gc.set_threshold(100_000, 50, 1000)
    corpus_rate(args.repeat)
    for path in files:
        text = read_hlo(path).text
        module = parser.parse_module(text, path)
        records = list(kernel_records(module, program="bench"))
        n = len(records)
        stream = b"".join(msgpack.packb(r, use_bin_type=True) for r in records)

        def raw():
            packer = msgpack.Packer(use_bin_type=True)
            out = io.BytesIO()
            for r in msgpack.Unpacker(io.BytesIO(stream), raw=False):
                out.write(packer.pack(r))

        def parse():
            for r in records:
                parser.parse_module(r["hlo"], "k")

        def featurize():
            out = RecordWriter(io.BytesIO())
            for r in read_records(io.BytesIO(stream), name="bench"):
                r.update(featurize_kernel(r))
                r["type"] = "graph"
                out.write(r)

        featurize()                                      # warm caches as a long run would
        t_raw = timed(raw, args.repeat)
        t_parse = timed(parse, args.repeat)
        t_feat = timed(featurize, args.repeat)

        big = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_featurize_{os.getpid()}.msgpack")
        with open(big, "wb") as f:
            for _ in range(args.copies):
                f.write(stream)
        try:
            def cli():
                subprocess.run([os.path.join(BIN, "featurize"), big], check=True,
                               stdout=subprocess.DEVNULL)

            def pipeline():
                split = subprocess.Popen([os.path.join(BIN, "hlo-split"), "-q", path],
                                         stdout=subprocess.PIPE)
                subprocess.run([os.path.join(BIN, "featurize")], stdin=split.stdout, check=True,
                               stdout=subprocess.DEVNULL)
                split.stdout.close()
                if split.wait():
                    raise SystemExit("hlo-split failed")

            t_cli = timed(cli, max(1, args.repeat // 2))
            t_pipe = timed(pipeline, max(1, args.repeat // 2))
        finally:
            os.unlink(big)

        def rate(t, k=n):
            return k / t

        print(f"{os.path.basename(path)}: {n} kernels ({len(text) / 1e6:.2f} MB of HLO)")
        print(f"{'':<18} {'kernels/s':>10} {'(cpu)':>10}   featurize vs this")
        feat_rate = rate(t_feat[1])
        for label, t, k in [("msgpack read+write", t_raw, n), ("parse alone", t_parse, n),
                            ("featurize", t_feat, n),
                            (f"featurize cli x{args.copies}", t_cli, n * args.copies),
                            ("split|featurize", t_pipe, n)]:
            note = "" if label == "featurize" else f"{feat_rate / rate(t[1], k):9.2f}x"
            if label.startswith(("featurize cli", "split")):
                note = "   (wall; process starts included)"
                print(f"{label:<18} {rate(t[0], k):10.0f} {'':>10}{note}")
            else:
                print(f"{label:<18} {rate(t[0], k):10.0f} {rate(t[1], k):10.0f}   {note}")
        print(f"featurize per kernel: {1e6 * t_feat[1] / n:.0f} us cpu "
              f"(parse {1e6 * t_parse[1] / n:.0f} us of it); goal >= 2000 kernels/s on one core: "
              f"{'met' if feat_rate >= 2000 else 'NOT met'} ({feat_rate:.0f}/s cpu)")


if __name__ == "__main__":
    main()
