#!/usr/bin/env python3
"""A plain LightGBM beside the GNN: the same features, training programs
and test programs, scored the same way (benchmarks/bench_accuracy.py).

Features of a kernel, one row each: its kernel_feat (the first
--kernel-features, by default as many as the GNN reads); node_feat pooled over
its nodes (sum, mean and max of each of the 140 columns); how many nodes
of each opcode; node and edge counts. Target: log runtime, fitted with L2
loss (gradient-boosted trees, --trees at most, early stopping on the
split's "valid" programs). For every program of the split's "test" list:
MAPE and Kendall's tau on kernels >= --min-us, and the whole-program
error (bench_accuracy.per_program); the table gives their medians over
programs for LightGBM and for the GNN (--model, default the bundled one,
predicting the same records in this run), and LightGBM's MAPE over the
GNN's. A GNN that was trained on some of the test programs (the bundled
model on manual.json, whose test programs are mostly in random.json's
train list) is marked so: its figures on that split are not held-out.

Needs lightgbm (pip install -e '.[bench]').

    .venv/bin/python benchmarks/bench_lightgbm.py                      # random.json and manual.json
    .venv/bin/python benchmarks/bench_lightgbm.py --split examples/splits/random.json --model m.pt
    .venv/bin/python benchmarks/bench_lightgbm.py --programs-only   # the bundled GNN's data
"""

import argparse
import json
import os
import sys
import time
from collections import Counter

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_accuracy import load, load_training, per_program  # noqa: E402

from tpuperf_cli import metrics  # noqa: E402
from tpuperf_cli.model.data import draw_rates  # noqa: E402
from tpuperf_cli.model.examples import example  # noqa: E402
from tpuperf_cli.model.options import parse_source_weights  # noqa: E402
from tpuperf_cli.split import load_split  # noqa: E402

OPCODES = 256        # opcode-count columns (ids beyond share the last)


def kernel_columns(spec):
    """`tpuperf train --kernel-features`'s SPEC (N, N+NAME..., NAME+...) as
    what features() takes: a first N (None for all) or a list of columns."""
    from tpuperf_cli.errors import TpuperfError
    from tpuperf_cli.model.examples import kernel_columns as parse

    try:
        n, columns = parse(spec)
    except TpuperfError as e:
        sys.exit(f"bench_lightgbm: {e}")
    return list(columns) if columns else (n or None)


def features(examples, kernel_features=None):
    """One row per kernel: kernel_feat (its first kernel_features, or those
    columns where it is a list), node_feat sum/mean/max, opcode counts, sizes."""
    rows = []
    for ex in examples:
        nf = ex.node_feat.astype(np.float64)
        counts = np.bincount(np.clip(ex.opcode, 0, OPCODES - 1), minlength=OPCODES)
        kf = ex.kernel_feat[kernel_features] if isinstance(kernel_features, list) \
            else ex.kernel_feat[:kernel_features]
        rows.append(np.concatenate([kf, nf.sum(0), nf.mean(0), nf.max(0), counts,
                                    [ex.n, ex.edges.shape[0]]]))
    return np.asarray(rows, np.float64)


def fit(train, valid, args):
    import lightgbm

    xt = features([example(r, i) for i, r in enumerate(train, 1)], args.kernel_features)
    yt = np.log([r["runtime_ns"] for r in train])
    params = {"objective": "regression", "learning_rate": args.lr, "num_leaves": args.leaves,
              "min_data_in_leaf": 10, "bagging_fraction": 0.8, "bagging_freq": 1,
              "feature_fraction": 0.5, "num_threads": args.threads, "seed": 0, "verbose": -1}
    weight = None
    if args.generated_share is not None:
        # the GNN's --generated-share: the generated kernels weigh F of the whole
        sizes = Counter(r["program"] for r in train)
        rates = draw_rates(sizes, even=False, generated_share=args.generated_share,
                           generated_even=args.generated_even,
                           source_weights=args.source_weights)
        weight = np.array([rates[r["program"]] for r in train])
    data = lightgbm.Dataset(xt, yt, weight=weight)
    sets, callbacks = [], []
    if valid:
        xv = features([example(r, i) for i, r in enumerate(valid, 1)], args.kernel_features)
        sets = [lightgbm.Dataset(xv, np.log([r["runtime_ns"] for r in valid]), reference=data)]
        callbacks = [lightgbm.early_stopping(50, verbose=False)]
    return lightgbm.train(params, data, num_boost_round=args.trees, valid_sets=sets, callbacks=callbacks)


def one_split(split_path, model, args):
    split = load_split(split_path)
    train = load_training(args.corpus, split, args.programs_only)
    valid = load(args.corpus, split["valid"]) if split.get("valid") else []
    test = load(args.corpus, split["test"])
    min_ns = args.min_us * 1000
    test_ex = [example(r, i) for i, r in enumerate(test, 1)]

    t = time.time()
    gbm = fit(train, valid, args)
    t_fit = time.time() - t
    pred_l = np.exp(gbm.predict(features(test_ex, args.kernel_features), num_iteration=gbm.best_iteration or None))
    pred_g = model.predict_examples(test_ex)

    fields = ("mape", "tau", "total_ape")
    med_l, _ = metrics.summarize(per_program(test, pred_l, min_ns), fields)
    med_g, _ = metrics.summarize(per_program(test, pred_g, min_ns), fields)
    seen = set(model.meta.get("trained", {}).get("programs", [])) & set(split["test"])
    out = {"split": os.path.basename(split_path), "programs": len(split["test"]), "kernels": len(test),
           "train_kernels": len(train), "trees": int(gbm.best_iteration or gbm.num_trees()),
           "fit_seconds": round(t_fit, 1), "lightgbm": med_l, "gnn": med_g,
           "gnn_trained_on_test": len(seen)}
    if args.blend:
        # the geometric mean of the two predictions, on the valid programs
        # too (the figures a choice of it would rest on)
        out["blend"] = metrics.summarize(per_program(test, np.sqrt(pred_l * pred_g), min_ns),
                                         fields)[0]
        valid_real = [r for r in valid if ":" not in r.get("program", "")]
        if valid_real:
            valid_ex = [example(r, i) for i, r in enumerate(valid_real, 1)]
            vl = np.exp(gbm.predict(features(valid_ex, args.kernel_features),
                                    num_iteration=gbm.best_iteration or None))
            vg = model.predict_examples(valid_ex)
            out["valid"] = {name: metrics.summarize(per_program(valid_real, p, min_ns), fields)[0]
                            for name, p in (("gnn", vg), ("lightgbm", vl),
                                            ("blend", np.sqrt(vl * vg)))}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", action="append",
                    help="split file(s) (default: examples/splits/random.json and manual.json)")
    ap.add_argument("--model", help="the GNN to compare with (default: the bundled model)")
    ap.add_argument("--corpus", default=os.path.join(ROOT, "examples/corpus/graphs"))
    ap.add_argument("--min-us", type=float, default=5.0)
    ap.add_argument("--trees", type=int, default=2000, help="at most this many trees")
    ap.add_argument("--lr", type=float, default=0.03)
    ap.add_argument("--leaves", type=int, default=31)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--programs-only", action="store_true",
                    help="train on the split's programs only, not the generated kernels its "
                         "train list names (\"ops:*\"...): the bundled GNN's training data")
    ap.add_argument("--generated-share", type=float, metavar="F",
                    help="weigh the generated kernels F of the training data in all, as "
                         "`tpuperf train --generated-share F` draws them (default: each "
                         "kernel weighs 1)")
    ap.add_argument("--generated-even", choices=("program", "source"), default="program",
                    help="with --generated-share: the same share for every generated kernel "
                         "(program), or for each source first, then its kernels alike "
                         "(source), as `tpuperf train --generated-even source`")
    ap.add_argument("--source-weight", action="append", metavar="SOURCE=W",
                    help="with --generated-even source: SOURCE's part of the share against 1 for "
                         "each other source, as `tpuperf train --source-weight` (repeatable)")
    ap.add_argument("--kernel-features", metavar="SPEC",
                    help="the kernel features of the records to use, as `tpuperf train "
                         "--kernel-features` takes them: N (the first N), N+NAME..., NAME+... "
                         "(default: those the GNN reads)")
    ap.add_argument("--blend", action="store_true",
                    help="also score the geometric mean of the GNN's and LightGBM's predictions, "
                         "on the test and the valid programs")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    try:
        args.source_weights = parse_source_weights(args.source_weight or ())
    except ValueError as e:
        ap.error(f"--source-weight {e}")
    try:
        import lightgbm  # noqa: F401
    except ImportError:
        sys.exit("bench_lightgbm: needs lightgbm: pip install -e '.[bench]'")
    from tpuperf_cli.model.predict import load_model

    model = load_model(args.model)
    model.known = None      # the network against the trees, each on what it learnt
    if args.kernel_features is None:        # the GNN's own
        args.kernel_features = list(model.scaler.columns or ()) or model.scaler.kernel_features
    else:
        args.kernel_features = kernel_columns(args.kernel_features)
    shown = (len(args.kernel_features) if isinstance(args.kernel_features, list)
             else args.kernel_features or "all")
    splits = args.split or [os.path.join(ROOT, "examples/splits", s) for s in ("random.json", "manual.json")]
    results = [one_split(s, model, args) for s in splits]
    if args.json:
        print(json.dumps({"model": model.name, "kernel_features": shown,
                          "results": results}, indent=1))
        return
    print(f"median over test programs, kernels >= {args.min_us:g} us; GNN: model {model.name}; "
          f"LightGBM: log runtime, L2, early stopping on the split's valid programs, {args.threads} thread(s), "
          f"{shown} kernel features")
    head = (f"{'split':12s} {'progs':>5s} {'kernels':>7s} | {'GNN MAPE':>8s} {'tau':>6s} {'prog.err':>8s} | "
            f"{'LGBM MAPE':>9s} {'tau':>6s} {'prog.err':>8s} {'trees':>5s} | {'LGBM/GNN':>8s}")
    print(head)
    print("-" * len(head))
    for r in results:
        g, lg = r["gnn"], r["lightgbm"]
        mark = "*" if r["gnn_trained_on_test"] else " "
        print(f"{r['split']:12s} {r['programs']:5d} {r['kernels']:7d} | {g['mape']:7.1f}%{mark} {g['tau']:6.3f} "
              f"{g['total_ape']:7.1f}% | {lg['mape']:8.1f}% {lg['tau']:6.3f} {lg['total_ape']:7.1f}% "
              f"{r['trees']:5d} | {lg['mape'] / g['mape']:7.2f}x")
    for r in results:
        if "blend" in r:
            b = r["blend"]
            print(f"{r['split']:12s} blend (geometric mean of the two): MAPE {b['mape']:.1f}%, tau "
                  f"{b['tau']:.3f}, program error {b['total_ape']:.1f}% ({b['mape'] / r['gnn']['mape']:.2f}x "
                  f"the GNN's MAPE)")
        if "valid" in r:
            print(f"{r['split']:12s} valid programs, MAPE: " + ", ".join(
                f"{k} {v['mape']:.1f}% (tau {v['tau']:.3f})" for k, v in r["valid"].items()))
    for r in results:
        if r["gnn_trained_on_test"]:
            print(f"* {r['split']}: the GNN was trained on {r['gnn_trained_on_test']} of its "
                  f"{r['programs']} test programs: not a held-out figure")


if __name__ == "__main__":
    main()
