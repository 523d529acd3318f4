#!/usr/bin/env python3
"""How a convolution's speed on this machine depends on round channel counts.

Takes the distinct convolutions of one corpus program (default WaveNet's
1-D causal convolutions, f32[8,512,48] by a window of 2, dilated 1 to
128), writes each again with every channel count of --channels in place of
the program's (input and output features alike), times them all with the
`measure` tool itself (its default settings, no cache, one process) and
prints each one's nanoseconds per multiply-add, relative to the program's
own channel count. A convolution's work grows with the square of its
channels, so on a machine indifferent to them every ratio is 1.

Why: with families held out, the bundled recipe predicts WaveNet's
convolutions 1.5x too slow, though its training data holds 5,329 1-D
convolutions of the same forms; `heavy` draws their channel counts
log-uniformly, so 2% of them have both a multiple of 8. Measured on one
machine (2026-11-28), a model of `heavy` alone had them right with or
without round counts; the full recipe with them is untested, and over
seeds no mix of generated sources tried mends it (README, "Where the
error is").

    .venv/bin/python benchmarks/bench_conv_channels.py
    .venv/bin/python benchmarks/bench_conv_channels.py --channels 32,31,33,40 --limit 3
"""

import argparse
import io
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ROOT_LINE = re.compile(r"ROOT .*")


def root_line(hlo):
    return ROOT_LINE.findall(hlo)[-1]


def variants(records, channels, limit):
    """(base convolution index, channel count, kernel record) for the
    program's first `limit` distinct 1-D convolutions whose input and
    output features are equal, each written with every channel count."""
    from tpuperf_cli.hlo.parser import parse_module

    out, seen = [], set()
    for r in records:
        if r.get("opcode") != "convolution" or len(seen) >= limit:
            continue
        m = parse_module(r["hlo"], "hlo")
        conv = m.entry.root
        lhs, rhs = (m.entry.by_name[o].shape for o in conv.operands)
        if conv.attrs.get("dim_labels", "").split("_")[0] != "b0f" or lhs.dims[-1] != rhs.dims[1] \
                or rhs.dims[1] != rhs.dims[2] or conv.shape.dims[-1] != lhs.dims[-1]:
            continue                        # 1-D, channels in, channels out alike
        key = re.sub(r"%[\w.\-]+|, metadata=\{.*", "", root_line(r["hlo"])) + str(lhs.dims)
        if key in seen:
            continue
        seen.add(key)
        c0 = lhs.dims[-1]
        for c in channels:
            hlo = r["hlo"].replace(f",{c0}]", f",{c}]").replace(f"[{rhs.dims[0]},{c0},",
                                                                 f"[{rhs.dims[0]},{c},")
            out.append((len(seen) - 1, c0, c, {"v": 1, "type": "kernel", "program": f"channels-{c}",
                                               "kernel": r["kernel"], "hlo": hlo,
                                               "opcode": "convolution"}))
    return out


def time_records(records, who):
    """The records timed by the `measure` tool itself (its default settings,
    no cache, one process), in their order; exits with measure's error."""
    from tpuperf_cli.stream import RecordWriter, read_records

    with tempfile.NamedTemporaryFile(suffix=".msgpack") as f:
        w = RecordWriter(f)
        for record in records:
            w.write(record)
        w.flush()
        p = subprocess.run([sys.executable, "-m", "tpuperf_cli", "measure", "--no-cache",
                            "--no-progress", "-q", f.name], capture_output=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"{who}: measure failed: {p.stderr.decode()[-2000:]}")
    return list(read_records(io.BytesIO(p.stdout)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", default="wavenet_m_train",
                    help="a program of the corpus (examples/corpus/graphs/PROGRAM.zst)")
    ap.add_argument("--channels", default="40,45,47,48,49,56,64",
                    help="channel counts to write each convolution with, comma-separated")
    ap.add_argument("--limit", type=int, default=6, help="at most this many convolutions")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    from tpuperf_cli.stream import read_records

    shard = ROOT / "examples/corpus/graphs" / f"{args.program}.zst"
    if not shard.exists():
        sys.exit(f"bench_conv_channels: no shard {shard}")
    channels = [int(c) for c in args.channels.split(",") if c.strip()]
    rows = variants(read_records(str(shard)), channels, args.limit)
    if not rows:
        sys.exit(f"bench_conv_channels: {args.program} has no 1-D convolution with as many "
                 f"channels in as out")
    timed = time_records([rec for *_, rec in rows], "bench_conv_channels")
    target = timed[0].get("target", {}) if timed else {}
    per = {}                                # convolution -> {channels: ns per c^2}
    own = {}                                # convolution -> (its channels, its window)
    for (i, c0, c, rec), out in zip(rows, timed):
        own[i] = (c0, re.search(r"window=\{([^}]*)\}", root_line(rec["hlo"])).group(1))
        if "runtime_ns" in out:
            per.setdefault(i, {})[c] = out["runtime_ns"] / c ** 2
    cpu = target.get("cpu") or {}
    print(f"machine: {target.get('chip')} (family {cpu.get('family')}, model {cpu.get('model')}); "
          f"{args.program}: {len(per)} convolution(s), each with {len(channels)} channel counts")
    print("ns per (channels^2), relative to the program's own channel count:")
    print(f"{'window':32s} " + " ".join(f"{c:>6d}" for c in channels) + "   own runtime")
    figures = []
    for i, row in per.items():
        c0, window = own[i]
        if c0 not in row:
            continue
        own_ns = row[c0] * c0 ** 2
        ratios = {c: row[c] / row[c0] for c in channels if c in row}
        figures.append({"window": window, "channels": c0, "own_ns": own_ns, "ratios": ratios})
        print(f"{window:32s} " + " ".join(f"{ratios.get(c, float('nan')):6.2f}" for c in channels)
              + f"   {own_ns / 1e3:.0f} us ({c0} channels)")
    if args.json:
        Path(args.json).write_text(json.dumps({"target": target, "program": args.program,
                                               "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
