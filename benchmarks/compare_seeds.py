#!/usr/bin/env python3
"""Compare training recipes over several seeds each, on one split's
validation (or test) programs of the CPU corpus.

One seed cannot choose between recipes here: on the manual split's six
validation programs the bundled recipe's seeds 0 to 3 span 19.5% to 28.4%
median MAPE (README, "The bundled model"), so a difference of a few points
between two single runs says nothing. Give each candidate its runs, seed
for seed in the same order:

    python benchmarks/compare_seeds.py --split examples/splits/manual.json \\
        recipe=r0.pt,r1.pt,r2.pt,r3.pt  candidate=c0.pt,c1.pt,c2.pt,c3.pt

For every candidate and run it prints the median over programs of MAPE,
Kendall's tau and whole-program error (bench_accuracy.py's figures,
kernels >= --min-us), then each candidate's mean and spread over its runs,
the mean of its seed-for-seed differences from the first candidate with
how many seeds it wins, and the figures of all its runs joined (the
geometric mean of their predictions, as `tpuperf ensemble` makes).

--kind KIND (repeatable: an opcode, or fusion:kLoop...: the kinds of
bench_accuracy.py --breakdown) adds the median APE of that kind's kernels
of every size, as the breakdown's "by kind" table gives it, run by run:

    python benchmarks/compare_seeds.py --set test --kind convolution \\
        recipe=r0.pt,r1.pt,r2.pt
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_accuracy  # noqa: E402

from tpuperf_cli import metrics  # noqa: E402

FIELDS = ("mape", "tau", "total_ape")


def parse_candidate(text):
    name, sep, paths = text.partition("=")
    models = [p for p in paths.split(",") if p]
    if not sep or not name or not models:
        sys.exit(f"compare_seeds: {text!r}: expected NAME=MODEL[,MODEL...]")
    for p in models:
        if not os.path.exists(p):
            sys.exit(f"compare_seeds: {name}: no such model file: {p}")
    return name, models


def figures(records, pred, min_ns, kind_idx=None):
    """The median figures over programs, and for each kind of kind_idx
    ({kind: its records' indices}) the median APE of its kernels."""
    med, _ = metrics.summarize(bench_accuracy.per_program(records, pred, min_ns), FIELDS)
    true = np.asarray([r["runtime_ns"] for r in records], dtype=np.float64)
    ape = 100 * np.abs(pred - true) / true
    for kind, idx in (kind_idx or {}).items():
        med[kind] = float(np.median(ape[idx]))
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("candidates", nargs="+", metavar="NAME=MODEL[,MODEL...]",
                    help="a recipe's models, one per seed; the first candidate is the reference")
    ap.add_argument("--split", default=os.path.join(bench_accuracy.ROOT,
                                                    "examples/splits/manual.json"))
    ap.add_argument("--corpus", default=os.path.join(bench_accuracy.ROOT, "examples/corpus/graphs"))
    ap.add_argument("--set", default="valid", help="which program list of the split (default valid)")
    ap.add_argument("--min-us", type=float, default=5.0)
    ap.add_argument("--kind", action="append", default=[], metavar="KIND",
                    help="also the median APE of this kind's kernels (every size): an opcode "
                         "or fusion:kLoop...; repeatable")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    candidates = [parse_candidate(c) for c in args.candidates]

    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.predict import load_model

    split = json.load(open(args.split))
    records = bench_accuracy.load(args.corpus, split[args.set])
    examples = [example(r, i) for i, r in enumerate(records, 1)]
    by_kind = metrics.group_indices([bench_accuracy.kind_of(r) for r in records])
    kind_idx = {k: by_kind.get(k, []) for k in args.kind}
    missing = [k for k, idx in kind_idx.items() if not len(idx)]
    if missing:
        sys.exit(f"compare_seeds: --kind {', '.join(missing)}: no such kernels in the "
                 f"'{args.set}' programs")
    min_ns = args.min_us * 1000
    out = {}
    for name, paths in candidates:
        preds, runs = [], []
        for path in paths:
            print(f"compare_seeds: {name}: {path}", file=sys.stderr)
            model = load_model(path)
            model.known = None      # the network's estimates: a recipe is chosen by what it learnt
            preds.append(np.asarray(model.predict_examples(examples), dtype=np.float64))
            runs.append(figures(records, preds[-1], min_ns, kind_idx))
        joined = figures(records, np.exp(np.mean(np.log(preds), axis=0)), min_ns, kind_idx)
        out[name] = {"models": paths, "runs": runs, "joined": joined}

    ref = candidates[0][0]
    fields = FIELDS + tuple(args.kind)
    for name, c in out.items():
        for f in fields:
            vals = np.asarray([r[f] for r in c["runs"]])
            c[f"{f}_mean"], c[f"{f}_sd"] = float(vals.mean()), float(vals.std(ddof=1)) \
                if len(vals) > 1 else 0.0
        pairs = list(zip(c["runs"], out[ref]["runs"]))
        c["mape_diff_mean"] = float(np.mean([a["mape"] - b["mape"] for a, b in pairs]))
        c["mape_wins"] = sum(a["mape"] < b["mape"] for a, b in pairs)
        c["seeds_paired"] = len(pairs)
    if args.json:
        print(json.dumps({"split": os.path.basename(args.split), "set": args.set,
                          "min_us": args.min_us, "candidates": out}, indent=1))
        return

    print(f"split {os.path.basename(args.split)} '{args.set}': "
          f"{len(set(r['program'] for r in records))} programs, {len(records)} kernels; "
          f"medians over programs, kernels >= {args.min_us:g} us")
    width = max(len(n) for n in out) + 2
    runs = max(len(c["runs"]) for c in out.values())
    print(f"{'':{width}s}" + "".join(f"{'run ' + str(i):>8s}" for i in range(runs))
          + f"{'mean':>8s}{'sd':>7s}{'vs ' + ref:>{max(12, len(ref) + 6)}s}{'joined':>9s}")
    labels = ("MAPE", "tau", "prog.err") + tuple(f"{k} APE ({len(kind_idx[k])} kernels, every size)"
                                                 for k in args.kind)
    for f, label in zip(fields, labels):
        print(label)
        for name, c in out.items():
            cells = "".join(f"{r[f]:8.3f}" if f == "tau" else f"{r[f]:7.1f}%" for r in c["runs"])
            cells += " " * 8 * (runs - len(c["runs"]))
            mean = f"{c[f + '_mean']:8.3f}" if f == "tau" else f"{c[f + '_mean']:7.1f}%"
            sd = f"{c[f + '_sd']:7.3f}" if f == "tau" else f"{c[f + '_sd']:6.1f} "
            vs = ""
            if f == "mape" and name != ref:
                vs = f"{c['mape_diff_mean']:+.1f} ({c['mape_wins']}/{c['seeds_paired']} won)"
            joined = f"{c['joined'][f]:9.3f}" if f == "tau" else f"{c['joined'][f]:8.1f}%"
            print(f"  {name:{width - 2}s}{cells}{mean}{sd}{vs:>{max(12, len(ref) + 6)}s}{joined}")


if __name__ == "__main__":
    main()
