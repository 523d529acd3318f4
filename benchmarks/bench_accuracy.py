#!/usr/bin/env python3
"""Accuracy of a model on held-out programs of the CPU corpus, beside the
analytical baseline (the paper's Table 2 setting).

For every test-split program (examples/splits/*.json, "test"): MAPE and
Kendall's tau of the model's per-kernel predictions on kernels measured at
>= --min-us (5 us, as in the paper), then median and mean over programs;
the same for the roofline baseline (tpuperf_cli.eval.baseline: max of
compute and memory time from kernel_feat, one coefficient per kernel kind,
fitted on the train-split programs, not the generated kernels its train
list names). A last column pair gives the error of
the whole-program estimate (sum of prediction x count, what `score`
prints). The noise column is the median of measure's `noise` over the
same kernels (the spread of their timed samples, in percent). Where the
corpus timed its kernels twice (build_corpus.py confirm), the "2x" column
is the better floor: the first timing's MAPE against the second, per
program, a floor no model's MAPE can be judged below; a line after the
table gives its median with tau and program error.

    .venv/bin/python benchmarks/bench_accuracy.py                  # bundled model, random split
    .venv/bin/python benchmarks/bench_accuracy.py --model m.pt --split examples/splits/manual.json
    .venv/bin/python benchmarks/bench_accuracy.py --breakdown      # where the error is
    .venv/bin/python benchmarks/bench_accuracy.py --no-known       # the network alone

A kernel the model file knows (model.known: its training data measured it)
is predicted at that runtime, as predict does; --no-known scores the
network on every kernel.

--breakdown adds where the model's error lies, over every test kernel (the
floor included): kernels grouped by measured size (decades of runtime), by
kind (the opcode, or the fusion's kind: kLoop, kInput, kOutput), by family (the
program's model, its name up to the first "_"), and by the scatter or gather
a kernel holds (fused or not), the kLoop fusions by what they hold
(a reduce, a transpose, a dot, bf16 values), and the kernels that run a
dot or a convolution by its shape (a dot with a dim of at most 64, as a
minibatch of a few rows makes; a convolution XLA:CPU runs through Eigen
or its naive loop nest: 3-D, window-reversed or grouped), each group with its
kernels, median APE of model and baseline, the median noise of its labels,
and its share of the test programs' summed absolute error of the
whole-program estimate (prediction x count against runtime x count).
For a model of several members (seeds joined, a network joined with
trees) it adds how far off the kernels >= --min-us are by the members'
spread (predict's pred_spread): whether the spread tells which estimates
to trust.
"""

import argparse
import glob
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tpuperf_cli import metrics  # noqa: E402
from tpuperf_cli.eval import baseline as baseline_lib  # noqa: E402
from tpuperf_cli.model.data import generated_source, is_generated  # noqa: E402
from tpuperf_cli.split import drawn_from, held_out  # noqa: E402
from tpuperf_cli.stream import read_records  # noqa: E402


def shard_paths(corpus, name):
    """The graph shards of a split entry: graphs/P.zst for a program, every
    graphs/generated/SOURCE-NNN.zst for a generated pattern ("ops:*")."""
    if is_generated(name):
        return sorted(glob.glob(os.path.join(corpus, "generated",
                                             f"{generated_source(name)}-*.zst")))
    return [os.path.join(corpus, f"{name}.zst")]


def load(corpus, programs):
    out, missing = [], []
    for name in programs:
        paths = shard_paths(corpus, name)
        if ":" not in name and not os.path.exists(paths[0]):
            missing.append(name)
            continue
        if ":" in name and not paths and glob.glob(
                os.path.join(corpus, "..", "generated", f"{generated_source(name)}-*.zst")):
            # generated kernels' graphs are not committed (a source the
            # corpus has no kernels of, as the GPU corpus, has nothing to build)
            print(f"bench_accuracy: warning: no graph shards for {name} in {corpus}/generated; "
                  f"build them with: python examples/build_corpus.py featurize", file=sys.stderr)
        for path in paths:
            out += [r for r in read_records(path) if (r.get("runtime_ns") or 0) > 0]
    if missing:
        print(f"bench_accuracy: warning: no shard for {len(missing)} program(s) of the split "
              f"({', '.join(missing)}); build them with examples/build_corpus.py", file=sys.stderr)
    if not out:
        sys.exit(f"bench_accuracy: no measured records for these programs in {corpus}")
    return out


def load_training(corpus, split, programs_only=False):
    """The measured records a model trained on `split` (load_split's lists)
    learns from: its train list (programs only, or with its patterns of
    generated kernels), less any kernel generated from its valid or test
    programs, as `tpuperf train --split` leaves them out."""
    names = [n for n in split["train"] if ":" not in n] if programs_only else split["train"]
    held = held_out(split)
    return [r for r in load(corpus, names) if not drawn_from(r, held)]


def fit_baseline(corpus, split):
    """(the roofline baseline, how many kernels it was fitted on): fitted on
    the split's training programs, as the bundled model is trained, not the
    generated kernels, so its figures do not hang on whether they are built."""
    train = load(corpus, [n for n in split["train"] if ":" not in n])
    return baseline_lib.fit_records(train), len(train)


def per_program(records, pred, min_ns):
    rows = []
    for prog, idx in metrics.group_indices([r["program"] for r in records]).items():
        true = np.asarray([records[i]["runtime_ns"] for i in idx])
        p = pred[idx]
        counts = np.asarray([records[i].get("count", 1) for i in idx], dtype=np.float64)
        m = metrics.fusion_metrics(p, true, min_ns)
        m["program"] = prog
        m["total_ape"] = 100 * abs((p * counts).sum() - (true * counts).sum()) / (true * counts).sum()
        noise = [records[i].get("noise") for i in idx if records[i]["runtime_ns"] >= min_ns]
        noise = [x for x in noise if isinstance(x, (int, float))]
        m["noise"] = 100 * float(np.median(noise)) if noise else float("nan")
        rows.append(m)
    return rows


def two_timings(records, min_ns, fields=("mape", "tau", "total_ape", "noise")):
    """The noise floor in the figures' own terms: where the corpus timed its
    kernels twice (build_corpus.py confirm, `timings`), the first timing
    scored against the second as a model is scored against the label.
    Returns (the records timed twice, the median over programs of
    per_program's figures or None when none was, each program's figures
    by name)."""
    twice = [r for r in records if len(r.get("timings") or ()) == 2]
    if not twice:
        return twice, None, {}
    first = np.array([r["timings"][0] for r in twice], dtype=np.float64)
    rows = per_program([dict(r, runtime_ns=r["timings"][1]) for r in twice], first, min_ns)
    return twice, metrics.summarize(rows, fields)[0], {r["program"]: r for r in rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model file (default: the bundled model)")
    ap.add_argument("--split", default=os.path.join(ROOT, "examples/splits/random.json"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "examples/corpus/graphs"))
    ap.add_argument("--set", default="test", help="which program list of the split to score")
    ap.add_argument("--min-us", type=float, default=5.0)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--breakdown", action="store_true",
                    help="also print the error by kernel size, kind and family")
    ap.add_argument("--known-off", type=float, default=4.2,
                    help="also score the known kernels this many percent off (the noise floor "
                         "of two timings: 4.2%% on the corpus's machine)")
    ap.add_argument("--no-known", action="store_true",
                    help="the network alone: no kernel at the runtime the model file knows "
                         "(predict --no-known)")
    args = ap.parse_args()

    split = json.load(open(args.split))
    test = load(args.corpus, split[args.set])
    min_ns = args.min_us * 1000

    from tpuperf_cli.model.predict import load_model

    t = time.time()
    model = load_model(args.model)
    if args.no_known:
        model.known = None
    from tpuperf_cli.model.examples import example

    pred, spread = model.predict_examples([example(r, i) for i, r in enumerate(test, 1)], with_spread=True)
    t_model = time.time() - t
    table = model.known or {}
    known = sum(r["runtime_ns"] >= min_ns and r.get("fingerprint") in table for r in test)

    base, fitted_on = fit_baseline(args.corpus, split)
    bpred = np.asarray([base.predict_record(r) for r in test])

    rows_m = per_program(test, pred, min_ns)
    rows_b = per_program(test, bpred, min_ns)
    fields = ("mape", "tau", "total_ape", "noise")
    med_m, mean_m = metrics.summarize(rows_m, fields)
    med_b, mean_b = metrics.summarize(rows_b, fields)
    twice, med_t, by_program_t = two_timings(test, min_ns, fields)
    for rm in rows_m:                       # the per-program floor, beside the noise
        rm["two_timings_mape"] = by_program_t.get(rm["program"], {}).get("mape")
    if args.json:
        print(json.dumps({"model": model.name, "split": os.path.basename(args.split), "set": args.set,
                          "model_rows": rows_m, "baseline_rows": rows_b,
                          "model_median": med_m, "model_mean": mean_m,
                          "baseline_median": med_b, "baseline_mean": mean_b,
                          "known_kernels": known, "timed_twice": len(twice),
                          "two_timings_median": med_t}, indent=1))
        return
    tgt = model.target or {}
    print(f"model {model.name} (trained on {tgt.get('platform')}/{tgt.get('chip')}, "
          f"{len(model.meta.get('trained', {}).get('programs', []))} programs); "
          f"split {os.path.basename(args.split)} '{args.set}': {len(rows_m)} programs, "
          f"{len(test)} kernels; kernels >= {args.min_us:g} us")
    print(f"baseline: roofline x per-kind coefficient fitted on {fitted_on} train kernels "
          f"({len(base.coef)} kinds)")
    head = f"{'program':24s} {'kernels':>7s} {'noise':>6s} {'2x':>6s} | {'MAPE':>7s} {'tau':>6s} " \
           f"{'prog.err':>8s} | {'MAPE':>7s} {'tau':>6s} {'prog.err':>8s}"
    print(f"{'':47s}| {'model':^24s}| {'baseline':^24s}")
    print(head)
    print("-" * len(head))

    def fmt(r):
        return f"{r['mape']:6.1f}% {r['tau']:6.3f} {r['total_ape']:7.1f}%"

    def apart(x):                           # the 2x column: "-" where a program has no pair
        return f"{x:5.1f}%" if isinstance(x, float) and x == x else f"{'-':>6s}"

    for rm, rb in zip(rows_m, rows_b):
        print(f"{rm['program']:24s} {rm['n']:7d} {rm['noise']:5.1f}% {apart(rm['two_timings_mape'])} | "
              f"{fmt(rm)} | {fmt(rb)}")
    print("-" * len(head))
    floor = med_t["mape"] if med_t else None
    mean_floor = metrics.nanmean([r["mape"] for r in by_program_t.values()]) if med_t else None
    print(f"{'median':24s} {'':7s} {med_m['noise']:5.1f}% {apart(floor)} | {fmt(med_m)} | {fmt(med_b)}")
    print(f"{'mean':24s} {'':7s} {mean_m['noise']:5.1f}% {apart(mean_floor)} | {fmt(mean_m)} | {fmt(mean_b)}")
    print(f"(model predicted {len(test)} kernels in {t_model:.2f}s including loading)")
    if twice:
        print(f"(two timings: {len(twice)} of the {len(test)} kernels were timed twice, "
              f"build_corpus.py confirm; the label is the faster. The first timing scored "
              f"against the second as the model is against the label: {fmt(med_t)})")
    if known:
        print(f"(known: {known} of {sum(r['runtime_ns'] >= min_ns for r in test)} kernels >= "
              f"{args.min_us:g} us are kernels the model's training data measured, predicted at "
              f"that runtime; their labels are the corpus's own timings (the faster of two where "
              f"it timed them twice), so a new timing differs by the noise floor. --no-known: "
              f"the network alone)")
        # what to expect of those kernels timed again: each --known-off
        # percent too slow (arithmetic on the same predictions, not a timing)
        is_known = np.array([r.get("fingerprint") in table for r in test])
        off = pred.copy()
        off[is_known] *= 1 + args.known_off / 100
        med_off, _ = metrics.summarize(per_program(test, off, min_ns), fields)
        print(f"(the known kernels {args.known_off:g}% off, the noise floor: {fmt(med_off)})")
        # how far the network alone is on the kernels it knows and on the rest
        model.known = None
        net = model.predict_examples([example(r, i) for i, r in enumerate(test, 1)])
        big = np.array([r["runtime_ns"] >= min_ns for r in test])
        true = np.array([r["runtime_ns"] for r in test])
        ape = np.abs(net / true - 1) * 100
        print(f"(the network alone, mean APE of kernels >= {args.min_us:g} us: the known ones "
              f"{ape[big & is_known].mean():.1f}%, the rest {ape[big & ~is_known].mean():.1f}%)")
    if args.breakdown:
        breakdown(test, pred, bpred)
        if spread is not None:
            spread_table(test, pred, spread, min_ns, table)


SIZE_BANDS = ((0, 5e3, "< 5 us"), (5e3, 50e3, "5-50 us"), (50e3, 500e3, "50-500 us"),
              (500e3, 5e6, "0.5-5 ms"), (5e6, float("inf"), ">= 5 ms"))


# ops whose cost goes by index tuples (featurize's indexed_slices): a kernel
# holding one is grouped by it, fused or not
INDEXED_OPS = ("scatter", "gather")


def kind_of(r):
    """A fusion by its kind (fusion:kLoop...), else the opcode."""
    op = r.get("opcode") or "?"
    if op == "fusion":
        return f"fusion:{r.get('fusion_kind') or '?'}"
    return op


def breakdown(records, pred, bpred):
    true = np.asarray([r["runtime_ns"] for r in records], dtype=np.float64)
    counts = np.asarray([r.get("count", 1) for r in records], dtype=np.float64)
    ape = 100 * np.abs(pred - true) / true
    bape = 100 * np.abs(bpred - true) / true
    abs_err = np.abs(pred - true) * counts
    total = abs_err.sum()
    noise = np.asarray([r.get("noise") if isinstance(r.get("noise"), (int, float)) else np.nan
                        for r in records], dtype=np.float64)

    def table(title, groups, order=None):
        print(f"\nby {title}:")
        print(f"  {'':22s} {'kernels':>7s} {'model APE':>9s} {'baseline':>9s} {'noise':>6s} "
              f"{'share of error':>14s}")
        names = order or sorted(groups, key=lambda g: -abs_err[groups[g]].sum())
        for g in names:
            idx = groups.get(g)
            if idx is None or not len(idx):
                continue
            nz = noise[idx][~np.isnan(noise[idx])]
            print(f"  {g:22s} {len(idx):7d} {np.median(ape[idx]):8.1f}% {np.median(bape[idx]):8.1f}% "
                  f"{100 * np.median(nz) if len(nz) else float('nan'):5.1f}% "
                  f"{100 * abs_err[idx].sum() / total:13.1f}%")

    sizes = {name: np.flatnonzero((true >= lo) & (true < hi)) for lo, hi, name in SIZE_BANDS}
    table("measured size", sizes, [name for _, _, name in SIZE_BANDS])
    kinds = metrics.group_indices([kind_of(r) for r in records])
    top = sorted(kinds, key=lambda g: -abs_err[kinds[g]].sum())[:12]
    table("kind (the 12 with most error)", {g: np.asarray(kinds[g]) for g in top}, top)
    fams = metrics.group_indices([str(r["program"]).split("_")[0] for r in records])
    table("family", {g: np.asarray(v) for g, v in fams.items()})
    held = {op: np.asarray([i for i, r in enumerate(records) if f" {op}(" in (r.get("hlo") or "")],
                           dtype=int) for op in INDEXED_OPS}
    table("indexed op held (cost per index tuple)", held, list(INDEXED_OPS))
    loops = fusion_contents(records, "kLoop")
    table("what a kLoop fusion holds", loops, list(FUSION_HOLDS) + ["none of these"])
    shapes = matmul_shapes(records)
    table("the shape of its dot or convolution", shapes, list(MATMUL_SHAPES))
    needed = needed_shares(records)
    if needed:
        table("the flops it needs of XLA's count (needed_flops)", needed, [n for _, _, n in NEEDED_BANDS])


# needed_flops against flops + transcendentals: a loop fusion that computes
# only a slice of its ops' elements (a ViT's class token)
NEEDED_BANDS = ((0.0, 0.1, "under a tenth"), (0.1, 0.5, "a tenth to a half"),
                (0.5, 0.9, "a half to 0.9"), (0.9, float("inf"), "0.9 or more"))


def needed_shares(records):
    """Indices of the records grouped by NEEDED_BANDS ({} when the records
    were featurized before needed_flops)."""
    from tpuperf_cli.records import KERNEL_FEATURES
    from tpuperf_cli.stream import decode_array

    col = KERNEL_FEATURES.index("needed_flops")
    ratios = []
    for r in records:
        kf = decode_array(r["kernel_feat"], "kernel_feat")
        if kf.size <= col:
            return {}
        ratios.append((kf[col] + 1) / (kf[0] + kf[1] + 1))
    ratios = np.asarray(ratios)
    return {name: np.flatnonzero((ratios >= lo) & (ratios < hi)) for lo, hi, name in NEEDED_BANDS}


# bands of predict's pred_spread (the members' standard deviation of log
# runtime): 0.05 is members about 5% apart
SPREAD_BANDS = ((0.0, 0.05), (0.05, 0.1), (0.1, 0.2), (0.2, 0.4), (0.4, float("inf")))


def spread_table(records, pred, spread, min_ns, known=None):
    """How far off the kernels >= min_ns are, by the members' spread: the
    kernels of each band, their median and mean APE (what MAPE averages),
    how many are more than 1.5x off, and their part of the kernels' summed
    APE. Kernels given a known runtime (a measurement: spread 0; `known`,
    a fingerprint table) are left out."""
    true = np.asarray([r["runtime_ns"] for r in records], dtype=np.float64)
    ape = 100 * np.abs(pred / true - 1)
    off = np.maximum(pred / true, true / pred) > 1.5
    keep = true >= min_ns
    if known:
        keep &= np.array([r.get("fingerprint") not in known for r in records])
    total = ape[keep].sum()
    print(f"\nby the members' spread (pred_spread), kernels >= {min_ns / 1000:g} us not known:")
    print(f"  {'':22s} {'kernels':>7s} {'median APE':>10s} {'mean APE':>9s} {'>1.5x off':>9s} "
          f"{'share of APE':>12s}")
    for lo, hi in SPREAD_BANDS:
        idx = keep & (spread >= lo) & (spread < hi)
        if not idx.any():
            continue
        name = f"{lo:g} to {hi:g}" if np.isfinite(hi) else f">= {lo:g}"
        print(f"  {name:22s} {idx.sum():7d} {np.median(ape[idx]):9.1f}% {ape[idx].mean():8.1f}% "
              f"{100 * off[idx].mean():8.1f}% {100 * ape[idx].sum() / total:11.1f}%")


# what a fusion may hold that changes how XLA:CPU emits its loop: a reduce
# (an inner loop per output element), a transpose, a dot, bf16 values
FUSION_HOLDS = {"reduce": " reduce(", "transpose": " transpose(", "dot": " dot(",
                "bf16": "bf16["}


# XLA:CPU's speed for a dot moves by 7x with a small dim and the operands'
# order (the skinny source); its naive loop nest runs a convolution 10x to
# 1,000x slower a flop than Eigen (the layers source)
MATMUL_SHAPES = ("dot, a dim <= 64", "dot, every dim > 64", "convolution, Eigen",
                 "convolution, naive loop")


def matmul_shapes(records):
    """Indices of the kernels that run a dot or a convolution, grouped by
    MATMUL_SHAPES: a dot by the smallest of m, n and k of the kernel's
    largest one (its matmul_* kernel features), a convolution by the path
    XLA:CPU takes for the kernel's first (generate/layers.py's
    kernel_form). A kernel holding both counts as a convolution."""
    from tpuperf_cli.generate.layers import first_convolution, kernel_form
    from tpuperf_cli.hlo.parser import parse_module
    from tpuperf_cli.records import KERNEL_FEATURES
    from tpuperf_cli.stream import decode_array

    mnk = [KERNEL_FEATURES.index(f"matmul_{d}") for d in "mnk"]
    groups = {name: [] for name in MATMUL_SHAPES}
    for i, r in enumerate(records):
        text = r.get("hlo") or ""
        if " convolution(" in text:
            naive = kernel_form(first_convolution(parse_module(text, "kernel"))) != "eigen"
            groups["convolution, naive loop" if naive else "convolution, Eigen"].append(i)
        elif " dot(" in text:
            small = decode_array(r["kernel_feat"], "kernel_feat")[mnk].min() <= 64
            groups["dot, a dim <= 64" if small else "dot, every dim > 64"].append(i)
    return {name: np.asarray(idx, dtype=int) for name, idx in groups.items()}


def fusion_contents(records, fusion_kind):
    """Indices of the fusions of one kind, grouped by what they hold
    (FUSION_HOLDS; a fusion can be in several groups), and those holding
    none of these."""
    groups = {name: [] for name in list(FUSION_HOLDS) + ["none of these"]}
    for i, r in enumerate(records):
        if r.get("opcode") != "fusion" or r.get("fusion_kind") != fusion_kind:
            continue
        text = r.get("hlo") or ""
        held = [name for name, mark in FUSION_HOLDS.items() if mark in text]
        for name in held or ["none of these"]:
            groups[name].append(i)
    return {name: np.asarray(idx, dtype=int) for name, idx in groups.items()}


if __name__ == "__main__":
    main()
