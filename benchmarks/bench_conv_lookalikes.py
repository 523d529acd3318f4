#!/usr/bin/env python3
"""How fast a program's convolutions run against the generated convolutions
of the same form in the corpus, and what a model predicts for each.

For every unfused convolution of --programs (default WaveNet's) and of the
corpus's generated kernels: its spatial rank, window size, element type,
multiply-adds (output elements x window taps x input features per group)
and its label's picoseconds per multiply-add. The program's convolutions
are grouped by (rank, window, type, feature groups or not; a window that
spans more than half the input, a filter gradient's, counts as one size,
"whole", and one strided as another, a dilated convolution's filter
gradient); a group's
look-alikes are the generated convolutions of that form whose multiply-adds
lie in the group's range. Each group prints its median ps per
multiply-add beside its look-alikes' (all of them; those with at least
as many input and output features as the group's fewest, since few
channels cost a CPU far more per multiply-add; and those at the group's
channel counts: both between its fewest and twice its most), and, with
--model, the model's
median prediction / label on both: a model that fits the look-alikes
but misses the program's convolutions by as much as their speeds differ
was taught that speed by its data.

Why: with families held out, every recipe so far predicts WaveNet's
convolutions 1.15x to 1.5x too slow (README, "Where the error is").

    .venv/bin/python benchmarks/bench_conv_lookalikes.py
    .venv/bin/python benchmarks/bench_conv_lookalikes.py --model m.pt --programs sepconv_m_train
"""

import argparse
import glob
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_accuracy  # noqa: E402

from tpuperf_cli.stream import read_records  # noqa: E402


def conv_form(r):
    """(spatial rank, window size, element type, grouped, multiply-adds, input
    features per group, output features) of an unfused convolution record,
    or None. The
    window size is "whole" where it spans more than half of the input (a
    filter gradient's spans all of it), "whole, strided" if it is strided
    too (a dilated convolution's filter gradient); grouped: feature_group_count > 1 (a depthwise convolution
    runs far slower per multiply-add on a CPU)."""
    from tpuperf_cli.hlo import attrs
    from tpuperf_cli.hlo.parser import parse_module

    if r.get("opcode") != "convolution":
        return None
    comp = parse_module(r["hlo"], "hlo").entry
    conv = comp.root
    if conv.opcode != "convolution" or "dim_labels" not in conv.attrs:
        return None
    d = attrs.conv_dims(conv.attrs["dim_labels"])
    lhs, rhs = (comp.by_name[o].shape for o in conv.operands)
    taps = math.prod(rhs.dims[i] for i in d["kernel_spatial"])
    cin = rhs.dims[d["kernel_input_feature"]]
    cout = rhs.dims[d["kernel_output_feature"]]
    dims = attrs.window(conv.attrs.get("window", "{}"))
    window = [w["size"] for w in dims]
    spatial = [lhs.dims[i] for i in d["input_spatial"]]
    # most of the input: a dilated convolution's filter gradient spans all
    # but (taps - 1) dilations of it (WaveNet's: 512 of 528), strided by
    # the dilation
    whole = math.prod(window) > 1 and all(2 * w > n for w, n in zip(window, spatial))
    strided = any(w["stride"] > 1 for w in dims)
    size = ("whole, strided" if strided else "whole") if whole else "x".join(map(str, window)) or "1"
    grouped = int(conv.attrs.get("feature_group_count", "1")) > 1
    return (len(d["kernel_spatial"]), size, conv.shape.element_type, grouped,
            conv.shape.num_elements() * taps * cin, cin, cout)


def convolutions(records):
    out = []
    for r in records:
        form = conv_form(r)
        if form and form[4]:
            out.append((r, form))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default="wavenet_m_train,wavenet_s_train",
                    help="corpus programs, comma-separated")
    ap.add_argument("--corpus", default=os.path.join(bench_accuracy.ROOT, "examples/corpus/graphs"))
    ap.add_argument("--model", help="also the model's prediction / label on each group")
    args = ap.parse_args()

    progs = convolutions(bench_accuracy.load(args.corpus, args.programs.split(",")))
    if not progs:
        sys.exit(f"bench_conv_lookalikes: {args.programs}: no unfused convolutions")
    shards = sorted(glob.glob(os.path.join(args.corpus, "generated", "*.zst")))
    if not shards:
        sys.exit(f"bench_conv_lookalikes: no generated graph shards in {args.corpus}/generated; "
                 f"build them with: python examples/build_corpus.py featurize")
    gen = convolutions(r for path in shards for r in read_records(path)
                       if (r.get("runtime_ns") or 0) > 0)

    ratio = {}
    if args.model:
        from tpuperf_cli.model.examples import example
        from tpuperf_cli.model.predict import load_model

        model = load_model(args.model)
        model.known = None      # the network's fit: the look-alikes are kernels it trained on
        both = progs + gen
        pred = model.predict_examples([example(r, i) for i, (r, _) in enumerate(both, 1)])
        ratio = {id(r): p / r["runtime_ns"] for (r, _), p in zip(both, pred)}

    def ps_per_mac(rows):
        return np.asarray([1e3 * r["runtime_ns"] / f[4] for r, f in rows])

    def cells(rows):
        if not rows:
            return f"{0:6d} {'-':>8s}" + (f" {'-':>7s}" if ratio else "")
        out = f"{len(rows):6d} {np.median(ps_per_mac(rows)):8.1f}"
        if ratio:
            out += f" {np.median([ratio[id(r)] for r, _ in rows]):6.2f}x"
        return out

    target = progs[0][0].get("target") or {}
    print(f"labels: {target.get('chip')} (family {(target.get('cpu') or {}).get('family')}, "
          f"model {(target.get('cpu') or {}).get('model')}); {args.programs}: {len(progs)} "
          f"convolutions; {len(gen)} generated convolutions in {len(shards)} shards")
    col = f"{'n':>6s} {'ps/MAC':>8s}" + (f" {'pred/y':>7s}" if ratio else "")
    print(f"{'rank window type':22s} {'program':>{len(col)}s} | {'look-alikes':>{len(col)}s} | "
          f"{'as many channels':>{len(col)}s} | {'their channels':>{len(col)}s} | "
          f"their ps/MAC / program's")
    print(f"{'':22s} {col} | {col} | {col} | {col} |")
    groups = {}
    for r, f in progs:
        groups.setdefault(f[:4], []).append((r, f))
    for key in sorted(groups, key=lambda k: (k[0], k[2], k[3], len(k[1]), k[1])):
        rows = groups[key]
        lo, hi = min(f[4] for _, f in rows), max(f[4] for _, f in rows)
        like = [(r, f) for r, f in gen if f[:4] == key and lo <= f[4] <= hi]
        fewest = min(min(f[5], f[6]) for _, f in rows)
        most = max(max(f[5], f[6]) for _, f in rows)
        wide_like = [(r, f) for r, f in like if min(f[5], f[6]) >= fewest]
        near_like = [(r, f) for r, f in wide_like if max(f[5], f[6]) <= 2 * most]
        speed = (f"{np.median(ps_per_mac(like)) / np.median(ps_per_mac(rows)):.2f}x"
                 if like else "-")
        label = f"{key[0]}-D {key[1]} {key[2]}" + (" grouped" if key[3] else "")
        print(f"{label:22s} {cells(rows)} | {cells(like)} | "
              f"{cells(wide_like)} | {cells(near_like)} | {speed}")


if __name__ == "__main__":
    main()
