#!/usr/bin/env python3
"""hlo-split end to end against XLA's C++ parser, and how it scales.

hlo-split's work on a program, in process: parse the HLO text, find the
kernels, write each one's standalone module and fingerprint, and pack the
records into a msgpack stream. The reference, in the same process on the
same text: jaxlib's hlo_module_from_text (XLA's own parser building its
HloModule). Timings are CPU seconds of this process, best of --repeat,
interleaved so both see the same machine load; the speed column is XLA's
time over ours (1.0 = as fast, 0.5 = twice XLA's time).

Inputs: the largest example program and a TPU program with tiled layouts
(the three real TPU kernels of ../shared/data/tpu_tile_sample.json, each
wrapped as a called computation, 16 renamed copies side by side: 0.16 MB,
a TPU dump's size), each at 1x, 4x and 16x its size (that many copies of
the program, renamed, called from one ENTRY), to show that the time grows
linearly with the input.

    .venv/bin/python benchmarks/bench_split.py [--repeat 5] [--sizes 1,4,16]
"""

import argparse
import gc
import io
import json
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# ../shared/data beside the checkout (or beside a worktree's parent)
TILE_SAMPLE = next((p for p in (os.path.join(ROOT, *[".."] * k, "shared", "data", "tpu_tile_sample.json")
                                for k in (1, 2)) if os.path.exists(p)), None)
GOAL = 0.5

from example_programs import largest_example  # noqa: E402

from tpuperf_cli.hlo import parser as P  # noqa: E402
from tpuperf_cli.hlo.dump import read_hlo  # noqa: E402
from tpuperf_cli.hlo.split import kernel_records  # noqa: E402
from tpuperf_cli.stream import RecordWriter  # noqa: E402

_REF = re.compile(r"%([A-Za-z_][\w.\-]*)")
_PARAM = re.compile(r"([(,]\s*)([A-Za-z_][\w.\-]*)(:\s)")


def wrapped(text, tag):
    """The module's computations renamed with `tag`, its ENTRY turned into a
    plain computation; returns (text, entry name, [param shape texts], root shape text)."""
    m = P.parse_module(text)
    entry = m.entry
    params = [p.shape.text for p in entry.parameters]
    root = entry.root.shape.text
    out = []
    for line in text.split("\n"):
        s = line.strip()
        if s.startswith("HloModule") or not s:
            continue
        if s.startswith("ENTRY"):
            line = line.replace("ENTRY ", "", 1)
        if line.rstrip().endswith("{") and "=" not in line.split("(", 1)[0]:
            line = _PARAM.sub(lambda g: g.group(1) + g.group(2) + tag + g.group(3), line)
        out.append(_REF.sub(lambda g: "%" + g.group(1) + tag, line))
    return "\n".join(out), entry.name + tag, params, root


def scaled(texts, copies):
    """One module: `copies` renamed copies of each module in texts, every
    one's ENTRY called from a new ENTRY."""
    body, params, calls = [], [], []
    for c in range(copies):
        for j, text in enumerate(texts):
            comp, name, shapes, root = wrapped(text, f".s{c}_{j}")
            body.append(comp)
            args = []
            for shape in shapes:
                args.append(f"%p{len(params)}")
                params.append(shape)
            calls.append((name, root, args))
    entry = [f"  %p{k} = {s} parameter({k})" for k, s in enumerate(params)]
    for k, (name, root, args) in enumerate(calls):
        entry.append(f"  %call.{k} = {root} call({', '.join(args)}), to_apply=%{name}")
    tuple_shape = "(" + ", ".join(root for _, root, _ in calls) + ")"
    entry.append(f"  ROOT %out = {tuple_shape} tuple({', '.join(f'%call.{k}' for k in range(len(calls)))})")
    sig = ", ".join(f"p{k}: {re.sub(r'{[^{}]*}', '', s)}" for k, s in enumerate(params))
    head = f"ENTRY %main ({sig}) -> {re.sub(r'{[^{}]*}', '', tuple_shape)} {{"
    return "HloModule scaled\n\n" + "\n\n".join(body) + "\n\n" + head + "\n" + "\n".join(entry) + "\n}\n"


def split(text):
    """hlo-split's work, as in a fresh process (empty shape caches; the
    command runs with the garbage collector off)."""
    P.clear_caches()
    out = RecordWriter(io.BytesIO())
    n = 0
    for r in kernel_records(P.parse_module(text), program="bench"):
        out.write(r)
        n += 1
    return n


def cpu(fn):
    t = time.process_time()
    fn()
    return time.process_time() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per timing; the best counts")
    ap.add_argument("--sizes", default="1,4,16", help="copies of each program")
    args = ap.parse_args()
    from jax._src.lib import xla_client as xc

    gc.disable()        # as hlo-split does

    largest = largest_example()
    programs = {os.path.basename(largest).removesuffix(".zst"): [read_hlo(largest).text]}
    if TILE_SAMPLE:
        programs["TPU kernels (tiled layouts)"] = [k["hlo"] for k in json.load(open(TILE_SAMPLE))] * 16
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"{'program':<32} {'size':>4} {'MB':>6} {'kernels':>7} {'xla ms':>8} {'ours ms':>8} "
          f"{'speed vs xla':>12} {'ours us/KB':>10}")
    worst = {}
    for label, texts in programs.items():
        per_kb = []
        for size in sizes:
            if size == 1 and len(texts) == 1:
                text = texts[0]
            else:
                text = scaled(texts, size)
            xla_t = our_t = float("inf")
            kernels = split(text)
            for _ in range(args.repeat):       # interleaved: both see the same load
                xla_t = min(xla_t, cpu(lambda: xc._xla.hlo_module_from_text(text)))
                our_t = min(our_t, cpu(lambda: split(text)))
            speed = xla_t / our_t
            worst[label] = min(worst.get(label, speed), speed)
            per_kb.append(our_t * 1e6 / (len(text) / 1e3))
            print(f"{label[:32]:<32} {size:>3}x {len(text) / 1e6:6.2f} {kernels:7d} {xla_t * 1e3:8.1f} "
                  f"{our_t * 1e3:8.1f} {speed:11.2f}x {per_kb[-1]:10.1f}")
        print(f"{'':<32} time per KB from {sizes[0]}x to {sizes[-1]}x: "
              f"{per_kb[-1] / per_kb[0]:.2f}x (1.00 = linear)")
    print(f"goal: hlo-split end to end >= {GOAL}x XLA's parser: " + "; ".join(
        f"{k}: {'met' if v >= GOAL else 'NOT met'} (worst {v:.2f}x)" for k, v in worst.items()))


if __name__ == "__main__":
    main()
