#!/usr/bin/env python3
"""Compare training recipes by cross-validation over program families: one
model per fold of `tpuperf split folds`, each scored on its fold's
validation programs, every family validated on once.

A split's validation list is a coarse chooser: the manual split validates
on six programs of three families, and two recipes screened there on
2026-11-28 ranked one way on them and the other way, by 2 to 3 points, on
the ten test programs of four other families (README, "The bundled
model"). The folds of `tpuperf split folds examples/splits/manual.json
--folds 4` (committed: examples/splits/folds/) validate on all 79 of its
train and valid programs, 24 families, and keep its test programs out of
every fold. Train each recipe once per fold, then:

    python benchmarks/compare_folds.py \\
        recipe=f0.pt,f1.pt,f2.pt,f3.pt  candidate=c0.pt,c1.pt,c2.pt,c3.pt

Model i is scored on fold i's validation programs. It prints, for every
candidate, the median over programs of MAPE, Kendall's tau and
whole-program error (bench_accuracy.py's figures, kernels >= --min-us)
fold by fold and over all the folds' programs pooled, the candidates'
fold-for-fold MAPE differences from the first with how many folds each
wins, the tail of whole-program error (its mean, 90th percentile and the
programs off by more than 25%, which a median does not see), and each
family's median MAPE.

--lightgbm adds a candidate "lightgbm": benchmarks/bench_lightgbm.py's
trees fitted on each fold's training programs and generated kernels
(less those generated from the fold's validation or test programs, as
`tpuperf train --split` leaves them out), weighed as the bundled recipe draws them (--generated-share 0.5
--generated-even source --source-weight indexed=0.25), stopped early on
the fold's validation programs as the networks are, on the first
--kernel-features (16, the recipe's) kernel features. Issue 12's goal
asks for 0.67x its MAPE.

--join A+B adds a candidate "A+B" whose prediction is the geometric mean
of candidates A's and B's, fold by fold (as `tpuperf ensemble` joins
networks; A+B+C... joins each named): e.g. --lightgbm --join
recipe+lightgbm. Its spread (for --breakdown) is the named candidates'
standard deviation of log runtime, as an ensemble's members'.

--breakdown NAME adds bench_accuracy.py's --breakdown for candidate NAME
over every fold's validation kernels pooled (every size): where its error
lies by size, kind, family, what a kLoop fusion holds and the shape of
its matrix multiply, beside the roofline baseline fitted on each fold's
training programs, and for a candidate whose models have several members
(`tpuperf ensemble`) how far off its kernels are by the members' spread.
Repeat it for several candidates.

--bootstrap N (default 2000; 0 leaves it out) says how much of a
difference from the first candidate the programs' draw alone could make:
the folds' validation programs (79 with the committed folds) resampled N
times with replacement, the same draw for both candidates (so the
comparison is paired), and each time the difference of their pooled
medians of MAPE, tau and whole-program error; it prints the 5th to 95th
percentile of those differences. --against NAME takes another candidate
(or a --join) as the one differed from. A difference whose interval
holds 0 is one that other programs of the same families could have
reversed. It knows nothing of the seed-to-seed spread, which only
another seed shows.
"""

import argparse
import json
import os
import re
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_accuracy  # noqa: E402
from compare_seeds import FIELDS, parse_candidate  # noqa: E402

from tpuperf_cli import metrics  # noqa: E402
from tpuperf_cli.split import family_of, load_split  # noqa: E402

# the bundled recipe's draw of generated kernels (examples/train_default_model.sh)
RECIPE_DRAW = {"generated_share": 0.5, "generated_even": "source",
               "source_weights": {"indexed": 0.25}}

DEFAULT_FOLDS = os.path.join(bench_accuracy.ROOT, "examples/splits/folds/manual-fold{}.json")


def fold_paths(template):
    """The fold files of a template with {} (fold0, fold1... while they exist)."""
    if template.count("{}") != 1:
        sys.exit(f"compare_folds: --folds {template!r}: needs one {{}} where the fold's number goes")
    paths = []
    while os.path.exists(template.replace("{}", str(len(paths)))):
        paths.append(template.replace("{}", str(len(paths))))
    if len(paths) < 2:
        sys.exit(f"compare_folds: --folds {template!r}: found {len(paths)} fold file(s); "
                 f"make them with tpuperf split folds")
    return paths


def lightgbm_predictions(fold, valid, valid_examples, args):
    """bench_lightgbm's trees fitted on a fold's training data, weighed as
    the recipe draws it, and stopped early on its validation programs."""
    import bench_lightgbm

    train = bench_accuracy.load_training(args.corpus, load_split(fold))
    print(f"compare_folds: lightgbm: {fold}: fitting on {len(train)} kernels", file=sys.stderr)
    opts = argparse.Namespace(trees=2000, lr=0.03, leaves=31, threads=1,
                               kernel_features=args.kernel_columns, **RECIPE_DRAW)
    gbm = bench_lightgbm.fit(train, valid, opts)
    x = bench_lightgbm.features(valid_examples, args.kernel_columns)
    return np.exp(gbm.predict(x, num_iteration=gbm.best_iteration or None))


def program_error_tail(rows: list[dict]) -> dict:
    """How far off the worst-predicted whole programs are, which the median
    does not see: the mean and 90th percentile of the programs' error, and
    how many are off by more than 25%."""
    errors = np.array([r["total_ape"] for r in rows if np.isfinite(r["total_ape"])])
    if not len(errors):
        return {"mean": float("nan"), "p90": float("nan"), "above_25": 0}
    return {"mean": float(errors.mean()), "p90": float(np.percentile(errors, 90)),
            "above_25": int((errors > 25).sum())}


def paired_bootstrap(rows: list[dict], ref_rows: list[dict], draws: int, seed: int = 0) -> dict:
    """{field: (5th, 95th percentile)} of the difference of pooled medians
    (rows minus ref_rows) over `draws` resamplings of the programs, the same
    programs drawn for both (rows and ref_rows hold the same programs in
    the same order)."""
    if [r["program"] for r in rows] != [r["program"] for r in ref_rows]:
        raise ValueError("the candidates were scored on different programs")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(rows), size=(draws, len(rows)))
    out = {}
    for f in FIELDS:
        a = np.array([r.get(f, np.nan) for r in rows], dtype=np.float64)
        b = np.array([r.get(f, np.nan) for r in ref_rows], dtype=np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)     # a draw of only NaN taus
            diff = np.nanmedian(a[picks], axis=1) - np.nanmedian(b[picks], axis=1)
        diff = diff[np.isfinite(diff)]
        out[f] = tuple(float(x) for x in np.percentile(diff, [5, 95])) if diff.size else (np.nan, np.nan)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("candidates", nargs="*", metavar="NAME=MODEL,MODEL...",
                    help="a recipe's models, one per fold in fold order; the first candidate "
                         "is the reference")
    ap.add_argument("--folds", default=DEFAULT_FOLDS, metavar="TEMPLATE",
                    help="the fold split files, {} for the fold's number "
                         "(default: examples/splits/folds/manual-fold{}.json)")
    ap.add_argument("--corpus", default=os.path.join(bench_accuracy.ROOT, "examples/corpus/graphs"))
    ap.add_argument("--family", default="^[a-z]+", metavar="REGEX",
                    help="families for the per-family table, as `tpuperf split folds --family`")
    ap.add_argument("--min-us", type=float, default=5.0)
    ap.add_argument("--lightgbm", action="store_true",
                    help="also LightGBM on the same features and data, fitted per fold")
    ap.add_argument("--kernel-features", default="16", metavar="SPEC",
                    help="with --lightgbm: its kernel features, as `tpuperf train --kernel-features` "
                         "takes them (default 16, the recipe's first 16)")
    ap.add_argument("--join", action="append", default=[], metavar="A+B",
                    help="also the geometric mean of candidates A's and B's predictions "
                         "(A+B+C...: of each named; repeatable; lightgbm names --lightgbm's trees)")
    ap.add_argument("--breakdown", action="append", default=[], metavar="NAME",
                    help="also where candidate NAME's error lies, over the folds' validation "
                         "kernels pooled (bench_accuracy.py --breakdown; repeatable)")
    ap.add_argument("--bootstrap", type=int, default=2000, metavar="N",
                    help="resamplings of the programs for the interval of each candidate's "
                         "difference from the first (default 2000; 0: none)")
    ap.add_argument("--against", metavar="NAME",
                    help="the candidate (or --join) --bootstrap differs from (default: the first)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    if not args.candidates and not args.lightgbm:
        ap.error("give a recipe's models (NAME=MODEL,MODEL...), or --lightgbm")
    folds = fold_paths(args.folds)
    candidates = [parse_candidate(c) for c in args.candidates]
    for name, models in candidates:
        if len(models) != len(folds):
            sys.exit(f"compare_folds: {name}: {len(models)} model(s) for {len(folds)} folds "
                     f"(one per fold, in fold order)")
    names = [name for name, _ in candidates] + ["lightgbm"] * args.lightgbm
    joins = [(join, join.split("+")) for join in args.join]
    for join, parts in joins:
        if len(parts) < 2 or len(set(parts)) < len(parts) or not all(p in names for p in parts):
            sys.exit(f"compare_folds: --join {join!r}: needs A+B (or A+B+C...), two or more "
                     f"of the candidates ({', '.join(names)})")
    if args.breakdown and args.json:
        sys.exit("compare_folds: --breakdown prints tables; leave out --json")
    every = names + [join for join, _ in joins]
    for name in args.breakdown:
        if name not in every:
            sys.exit(f"compare_folds: --breakdown {name!r}: not a candidate ({', '.join(every)})")
    if args.against is not None and args.against not in every:
        sys.exit(f"compare_folds: --against {args.against!r}: not a candidate ({', '.join(every)})")
    pattern = re.compile(args.family)
    if args.lightgbm:
        try:
            import lightgbm  # noqa: F401
        except ImportError:
            sys.exit("compare_folds: --lightgbm needs lightgbm: pip install -e '.[bench]'")
        import bench_lightgbm

        args.kernel_columns = bench_lightgbm.kernel_columns(args.kernel_features)   # exits on a bad SPEC

    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.predict import load_model

    min_ns = args.min_us * 1000
    valid = [bench_accuracy.load(args.corpus, load_split(p)["valid"]) for p in folds]
    examples = [[example(r, i) for i, r in enumerate(recs, 1)] for recs in valid]

    spreads = {}            # a candidate's members' spreads, fold by fold (None: one member)

    def predictions(name, i, model):
        if name == "lightgbm":
            return lightgbm_predictions(folds[i], valid[i], examples[i], args)
        print(f"compare_folds: {name}: fold {i}: {model}", file=sys.stderr)
        m = load_model(model)
        m.known = None      # the network's estimates: a recipe is chosen by what it learnt
        pred, spread = m.predict_examples(examples[i], with_spread=True)
        spreads.setdefault(name, []).append(spread)
        return np.asarray(pred, dtype=np.float64)

    if args.lightgbm:
        candidates.append(("lightgbm", [None] * len(folds)))
    preds = {name: [predictions(name, i, model) for i, model in enumerate(models)]
             for name, models in candidates}
    for join, parts in joins:
        logs = [np.log(np.stack(fold)) for fold in zip(*(preds[p] for p in parts))]
        preds[join] = [np.exp(fold.mean(0)) for fold in logs]
        spreads[join] = [fold.std(0, ddof=1) for fold in logs]     # as an ensemble's members'
        # the models each fold joins (lightgbm's trees are fitted here: no file)
        files = [[m or name for m in dict(candidates)[name]] for name in parts]
        candidates.append((join, [" + ".join(fold) for fold in zip(*files)]))
    out = {}
    for name, models in candidates:
        rows, per_fold = [], []
        for i, pred in enumerate(preds[name]):
            fold_rows = bench_accuracy.per_program(valid[i], pred, min_ns)
            per_fold.append(metrics.summarize(fold_rows, FIELDS)[0])
            rows += fold_rows
        families = metrics.group_indices([family_of(r["program"], pattern) for r in rows])
        out[name] = {"models": models, "folds": per_fold, "rows": rows,
                     "pooled": metrics.summarize(rows, FIELDS)[0],
                     "programs": len(rows),
                     "worst": max(((r["mape"], r["program"]) for r in rows
                                   if np.isfinite(r["mape"])), default=(float("nan"), "")),
                     "above_50": sum(r["mape"] > 50 for r in rows),
                     "program_error_tail": program_error_tail(rows),
                     "families": {f: metrics.summarize([rows[i] for i in idx], ["mape"])[0]["mape"]
                                  for f, idx in sorted(families.items())}}
    ref = candidates[0][0]
    for name, c in out.items():
        pairs = list(zip(c["folds"], out[ref]["folds"]))
        c["mape_diff_mean"] = float(np.mean([a["mape"] - b["mape"] for a, b in pairs]))
        c["mape_wins"] = sum(a["mape"] < b["mape"] for a, b in pairs)
    against = args.against or ref
    for name, c in out.items():
        if args.bootstrap > 0 and name != against:
            c["bootstrap_90"] = paired_bootstrap(c["rows"], out[against]["rows"], args.bootstrap)
    if args.json:
        print(json.dumps({"folds": folds, "min_us": args.min_us, "candidates": out}, indent=1))
        return

    print(f"{len(folds)} folds ({args.folds}): {out[ref]['programs']} validation programs "
          f"of {len(out[ref]['families'])} families; medians over programs, kernels >= "
          f"{args.min_us:g} us")
    width = max(len(n) for n in out) + 2
    head = "".join(f"{'fold ' + str(i):>9s}" for i in range(len(folds)))
    print(f"{'':{width}s}{head}{'pooled':>9s}{'vs ' + ref:>{max(14, len(ref) + 6)}s}")
    for f, label in zip(FIELDS, ("MAPE", "tau", "prog.err")):
        print(label)
        for name, c in out.items():
            cells = "".join(f"{r[f]:9.3f}" if f == "tau" else f"{r[f]:8.1f}%" for r in c["folds"])
            pooled = c["pooled"][f]
            cells += f"{pooled:9.3f}" if f == "tau" else f"{pooled:8.1f}%"
            vs = ""
            if f == "mape" and name != ref:
                vs = f"{c['mape_diff_mean']:+.1f} ({c['mape_wins']}/{len(folds)} won)"
            print(f"  {name:{width - 2}s}{cells} {vs:>{max(14, len(ref) + 6)}s}")
    if args.bootstrap > 0 and len(out) > 1:
        print(f"difference from {against}, 5th to 95th percentile over {args.bootstrap} resamplings "
              f"of the programs (paired)")
        for name, c in out.items():
            if name == against:
                continue
            cells = []
            for f, label in zip(FIELDS, ("MAPE", "tau", "prog.err")):
                lo, hi = c["bootstrap_90"][f]
                cells.append(f"{label} {lo:+.3f} to {hi:+.3f}" if f == "tau" else
                             f"{label} {lo:+.1f} to {hi:+.1f} points")
            print(f"  {name}: {', '.join(cells)}")
    for name, c in out.items():
        mape, prog = c["worst"]
        print(f"worst program: {name}: {prog} {mape:.1f}% ({c['above_50']} of {c['programs']} "
              f"above 50%)")
    for name, c in out.items():
        t = c["program_error_tail"]
        print(f"program error's tail: {name}: mean {t['mean']:.1f}%, 90th percentile "
              f"{t['p90']:.1f}%, {t['above_25']} of {c['programs']} above 25%")
    print("median MAPE by family (of its programs' medians)")
    print(f"  {'':14s}" + "".join(f"{n[:8]:>9s}" for n in out))
    for fam in out[ref]["families"]:
        cells = "".join(f"{c['families'][fam]:8.1f}%" for c in out.values())
        print(f"  {fam:14s}{cells}")
    if args.breakdown:
        bases = [bench_accuracy.fit_baseline(args.corpus, load_split(fold))[0] for fold in folds]
        baselines = [[base.predict_record(r) for r in records] for base, records in zip(bases, valid)]
    for name in args.breakdown:
        print(f"\nwhere {name}'s error is, over the {len(folds)} folds' "
              f"{sum(map(len, valid))} validation kernels (every size):")
        pooled = [r for records in valid for r in records]
        bench_accuracy.breakdown(pooled, np.concatenate(preds[name]), np.concatenate(baselines))
        if spreads.get(name) and all(s is not None for s in spreads[name]):
            bench_accuracy.spread_table(pooled, np.concatenate(preds[name]), np.concatenate(spreads[name]),
                                        min_ns)


if __name__ == "__main__":
    main()
