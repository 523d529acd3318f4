#!/usr/bin/env python3
"""The paper's model ablation, at small scale, on the measured CPU corpus.

Kaufman et al. (2021) compare, on the fusion task, the graph network
(GraphSAGE vs GAT vs no GNN) and the reduction from node embeddings to a
kernel embedding (per-node sum vs column-wise mean & max vs LSTM vs
Transformer). This script trains each variant with `tpuperf train` (same
data, epochs and seeds for all), evaluates all models side by side with
`tpuperf eval` on the test programs of a split, next to the roofline
baseline fitted on the training programs (`tpuperf baseline fit`), and
writes a markdown report (examples/ablation.md by default).

Usage::

    .venv/bin/python examples/ablation.py                   # the committed report
    .venv/bin/python examples/ablation.py --epochs 5 --seeds 1 --out /tmp/abl.md
    .venv/bin/python examples/ablation.py --only sage-column,gat-column
    .venv/bin/python examples/ablation.py --jobs 2 --train-args '--threads 1'   # 2 at once

The report's first line gives the command that wrote it.

Inputs: examples/corpus/graphs/<program>.zst (measured graph shards) and a
split file (examples/splits/manual.json: {"train": [...], "valid": [...],
"test": [...]} program names; the valid programs drive early stopping).
Models, logs and the evaluation JSON go to --work (a temporary directory
unless given). Progress goes to stderr.

Cost: the default (6 variants x 1 seed x at most 10 epochs, each model
capped at --max-time 150 s) took 8.4 minutes on 2 shared cores for the
77-program corpus, and takes at most 6 x 150 s + a few minutes. More seeds
show the seed spread: --seeds 3 --epochs 30 --max-time 180 is bounded by
6 x 3 x 180 s = 54 minutes of training.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BIN = Path(sys.executable).parent

# name -> (--gnn, --reduction, what it stands for in the paper's ablation)
VARIANTS = {
    "sage-column": ("sage", "column", "GraphSAGE, column-wise mean & max (reference)"),
    "gat-column": ("gat", "column", "GAT instead of GraphSAGE"),
    "none-column": ("none", "column", "no graph network: node features only"),
    "sage-per-node": ("sage", "per-node", "per-node runtimes, summed"),
    "sage-lstm": ("sage", "lstm", "LSTM over the nodes in topological order"),
    "sage-transformer": ("sage", "transformer", "Transformer encoder over the nodes"),
}
# the figures of the summary: (table key, statistic over programs, metric)
FIGURES = [("ge", "median", "mape"), ("ge", "median", "tau"),
           ("all", "median", "mape"), ("all", "median", "tau"),
           ("all", "mean", "mape"), ("all", "mean", "tau")]


def log(msg):
    print(f"ablation: {msg}", file=sys.stderr, flush=True)


def tool(name):
    path = BIN / name
    return str(path) if path.exists() else name


def run(cmd, logfile=None):
    cmd = [str(c) for c in cmd]
    log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, text=True, capture_output=True)
    if logfile:
        Path(logfile).write_text(p.stderr)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"ablation: command failed (exit {p.returncode}): {' '.join(cmd[:3])}")
    return p


def shards(corpus, names, missing, generated=False):
    """Shards of the named programs that exist; the names of those that do
    not are appended to missing (programs of the split not measured yet).
    Generated kernels ("ops:*": graphs/generated/SOURCE-NNN.zst) only with
    generated=True."""
    out = []
    for n in names:
        if ":" in n:
            if generated:
                out += sorted((corpus / "generated").glob(f"{n.split(':', 1)[0]}-*.zst"))
            continue
        p = corpus / f"{n}.zst"
        if p.exists():
            out.append(p)
        else:
            missing.append(n)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=HERE / "corpus" / "graphs",
                    help="directory of measured graph shards <program>.zst")
    ap.add_argument("--split", type=Path, default=HERE / "splits" / "manual.json")
    ap.add_argument("--epochs", type=int, default=10, help="at most this many epochs per model")
    ap.add_argument("--seeds", type=int, default=1, help="models per variant (seeds 0..N-1)")
    ap.add_argument("--max-time", type=float, default=150,
                    help="seconds of training per model at most (the time cap)")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--min-us", type=float, default=20.0,
                    help="threshold of the first table (us); on XLA:CPU every kernel pays "
                         "a few us of dispatch (the fastest take 3 to 4 us), so the paper's "
                         "5 us keeps most of them")
    ap.add_argument("--work", type=Path, default=None, help="where models go (default: temp)")
    ap.add_argument("--out", type=Path, default=HERE / "ablation.md")
    ap.add_argument("--train-args", default="", help="extra options for `tpuperf train`")
    ap.add_argument("--generated", action="store_true",
                    help="also train on the generated kernels the split's train list names "
                         "(graphs/generated; weigh them with --train-args '--generated-share F'); "
                         "default: the training programs only, as the bundled model")
    ap.add_argument("--jobs", type=int, default=1,
                    help="models trained at once (one per core: with --train-args "
                         "'--threads 1'); the default trains one after another")
    ap.add_argument("--reuse", action="store_true",
                    help="keep models already in --work (finished ones) instead of retraining")
    args = ap.parse_args(argv)
    args.command = " ".join(["examples/ablation.py"] + [shlex.quote(a) for a in (
        sys.argv[1:] if argv is None else argv)])

    split = json.loads(args.split.read_text())
    missing = []
    train = shards(args.corpus, split["train"], missing, args.generated)
    valid = shards(args.corpus, split.get("valid", []), missing)
    test = shards(args.corpus, split["test"], missing)
    if missing:
        log(f"{len(missing)} programs of {args.split} have no shard in {args.corpus} and are "
            f"left out: {', '.join(missing)}")
    if not train or not test:
        raise SystemExit("ablation: no training or no test programs with shards")
    variants = {k: v for k, v in VARIANTS.items() if not args.only or k in args.only.split(",")}
    if not variants:
        raise SystemExit(f"ablation: --only names none of {', '.join(VARIANTS)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="tpuperf-ablation-"))
    work.mkdir(parents=True, exist_ok=True)
    log(f"work directory {work}")
    # train and evaluate on a snapshot, so the corpus may change meanwhile
    snap = work / "corpus"
    snap.mkdir(exist_ok=True)
    for group in (train, valid, test):
        for i, path in enumerate(group):
            if not (args.reuse and (snap / path.name).exists()):
                shutil.copyfile(path, snap / path.name)
            group[i] = snap / path.name
    args.corpus_rev = git_rev(args.corpus)
    from tpuperf_cli.stream import read_many

    test_us = [r["runtime_ns"] / 1000 for r in read_many([str(p) for p in test])
               if r.get("runtime_ns")]
    args.fastest_us = min(test_us)
    args.under_5us = 100.0 * sum(t < 5 for t in test_us) / len(test_us)
    t_start = time.time()
    args.rev_start = git_rev()

    baseline = work / "baseline.json"
    run([tool("tpuperf"), "baseline", "fit", "-o", baseline, *train], work / "baseline.log")

    eval_cmd = [tool("tpuperf"), "eval", "-b", baseline, "--min-us", args.min_us, "-f", "json"]
    trained = {}   # label -> (variant, seed, model path, train summary)
    results = []   # one `tpuperf eval` result per model, each with the baseline

    def train_and_eval(name, gnn, reduction, seed):
        label = f"{name}.s{seed}"
        model = work / f"{label}.pt"
        logfile = work / f"{label}.log"
        evalfile = work / f"{label}.eval.json"
        finished = model.exists() and not Path(str(model) + ".resume").exists()
        if args.reuse and finished and logfile.exists() and evalfile.exists():
            log(f"{label}: reusing {model} and its evaluation")
        else:
            run([tool("tpuperf"), "train", "--data", str(snap / "*.zst"),
                 "--split", args.split, "-o", model, "--gnn", gnn, "--reduction", reduction,
                 "--epochs", args.epochs, "--seed", seed, "--max-time", args.max_time,
                 "--name", label, *args.train_args.split()], logfile)
            # evaluated at once, so a later change of the model code cannot strand it
            evalfile.write_text(run(eval_cmd + ["-m", f"{label}={model}", *test]).stdout)
        info = model_info(model, logfile)
        log(f"{label}: {info['epochs']} epochs (best {info['best_epoch']}), "
            f"{info['seconds']:.0f} s")
        return label, (name, seed, model, info), json.loads(evalfile.read_text())

    jobs = [(name, gnn, reduction, seed) for name, (gnn, reduction, _) in variants.items()
            for seed in range(args.seeds)]
    # --jobs models train side by side (give each one thread: --train-args
    # '--threads 1'); the results keep the order of the variants and seeds
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for label, entry, result in pool.map(lambda job: train_and_eval(*job), jobs):
            trained[label] = entry
            results.append(result)

    from tpuperf_cli.eval import report

    res = merge(results)
    (work / "eval.json").write_text(json.dumps(res, indent=2))
    per_model_md = report.render(res, "markdown", summary=True)
    seed0 = {lab: lab.rsplit(".", 1)[0] for lab, (_, seed, _, _) in trained.items() if seed == 0}
    per_program_md = report.render(select(res, seed0), "markdown")
    elapsed = time.time() - t_start
    write_report(args, res, variants, trained, per_model_md, per_program_md, elapsed,
                 len(train), len(valid), len(test), missing)
    log(f"wrote {args.out} ({elapsed / 60:.1f} min)")


# the parts of a `tpuperf eval` result (per program and in its summary) keyed by predictor
PER_PREDICTOR = ("ge", "all", "program_error")


def merge(results):
    """One fusion-task result with the predictors of several `tpuperf eval`
    results on the same data (the baseline, in all of them, once and last)."""
    out = json.loads(json.dumps(results[0]))
    labels = [lab for r in results for lab in r["predictors"] if lab != "baseline"]
    for r in results[1:]:
        if [p["program"] for p in r["programs"]] != [p["program"] for p in out["programs"]]:
            raise SystemExit("ablation: evaluations of different programs cannot be merged")
        for mine, theirs in zip(out["programs"], r["programs"]):
            for w in PER_PREDICTOR:
                mine.setdefault(w, {}).update(theirs.get(w, {}))
        for w in PER_PREDICTOR:
            out["summary"].setdefault(w, {}).update(r["summary"].get(w, {}))
    out["predictors"] = labels + ["baseline"]
    return out


def select(res, rename):
    """The result with only the predictors in rename (old -> new label), and
    the baseline."""
    rename = dict(rename, baseline="baseline")
    out = json.loads(json.dumps(res))
    out["predictors"] = [rename[lab] for lab in res["predictors"] if lab in rename]
    for p in out["programs"]:
        for w in PER_PREDICTOR:
            p[w] = {rename[k]: v for k, v in p.get(w, {}).items() if k in rename}
    for w in PER_PREDICTOR:
        out["summary"][w] = {rename[k]: v for k, v in out["summary"].get(w, {}).items() if k in rename}
    return out


def model_info(path, logfile):
    """Epochs run, the best (kept) epoch and training seconds, from the last
    line of `tpuperf train`'s log: "... (model M, epoch B of E; stopped: ...; Ns)"."""
    import re

    text = Path(logfile).read_text() if Path(logfile).exists() else ""
    m = re.findall(r"epoch (\d+) of (\d+); stopped: ([^;]*); (\d+)s\)", text)
    if not m:
        raise SystemExit(f"ablation: cannot read the end of training from {logfile}")
    best, epochs, stopped, seconds = m[-1]
    return {"epochs": int(epochs), "best_epoch": int(best), "stopped": stopped,
            "seconds": float(seconds)}


def _fmt(v, metric):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.3f}" if metric == "tau" else f"{v:.1f}"


def _agg(values, metric):
    """mean over seeds, with the spread (min-max) when there are several."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return "-"
    mean = statistics.fmean(vals)
    if len(vals) == 1:
        return _fmt(mean, metric)
    return f"{_fmt(mean, metric)} ({_fmt(min(vals), metric)}-{_fmt(max(vals), metric)})"


def git_rev(path=None):
    """The short commit of HEAD, or of the last commit touching path; with
    "+changes" when the tracked files differ from it (HEAD only)."""
    cmd = ["git", "-C", str(ROOT), "log", "-1", "--format=%h"] + ([str(path)] if path else [])
    try:
        rev = subprocess.run(cmd, capture_output=True, text=True).stdout.strip() or "?"
        if path is None:
            dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                                    "--untracked-files=no"], capture_output=True, text=True)
            if dirty.stdout.strip():
                rev += "+changes"
        return rev
    except OSError:
        return "?"


def write_report(args, res, variants, trained, per_model_md, per_program_md, elapsed,
                 n_train, n_valid, n_test, missing):
    thr = f"{args.min_us:g}"
    rev = git_rev()
    if rev != args.rev_start:
        rev = f"{args.rev_start} when started, {rev} when done"
    summary = res["summary"]
    kernels = sum(r["kernels"] for r in res["programs"])
    kernels_ge = sum(r["kernels_ge"] for r in res["programs"])

    def rel(p):
        return p.relative_to(ROOT) if p.resolve().is_relative_to(ROOT) else p

    head = ["variant", "gnn", "reduction"] + [
        f"{st} {'MAPE%' if m == 'mape' else 'tau'} {'>=' + thr + 'us' if w == 'ge' else 'all'}"
        for w, st, m in FIGURES] + ["best/run epochs", "train s"]
    rows = []
    for name, (gnn, red, _) in variants.items():
        labels = [lab for lab, (v, *_rest) in trained.items() if v == name]
        cells = [_agg([summary[w][lab][st][m] for lab in labels], m) for w, st, m in FIGURES]
        epochs = ", ".join(f"{trained[lab][3]['best_epoch']}/{trained[lab][3]['epochs']}"
                           for lab in labels)
        secs = statistics.fmean(trained[lab][3]["seconds"] for lab in labels)
        rows.append([name, gnn, red] + cells + [epochs, f"{secs:.0f}"])
    rows.append(["baseline (roofline)", "-", "-"] +
                [_fmt(summary[w]["baseline"][st][m], m) for w, st, m in FIGURES] + ["-", "-"])
    table = ["| " + " | ".join(head) + " |",
             "|" + "|".join([":---"] * 3 + ["---:"] * (len(head) - 3)) + "|"]
    table += ["| " + " | ".join(r) + " |" for r in rows]

    lines = [
        "# Model ablation on the CPU corpus (small scale)",
        "",
        f"Written by `{args.command}` on {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC "
        f"(commit {rev}; {platform.machine()}, {os.cpu_count()} cores shared with other "
        f"work; training took {sum(t[3]['seconds'] for t in trained.values()) / 60:.1f} min of "
        f"model time, this run {elapsed / 60:.1f} min). Rerun the script to update it; do not "
        "edit by hand.",
        "",
        "Setup:",
        "",
        f"- Data: `{rel(args.corpus)}` (last changed in commit {args.corpus_rev}), "
        f"split `{rel(args.split)}`: {n_train} training, "
        f"{n_valid} validation (early stopping) and {n_test} test programs; the test programs "
        f"have {kernels} measured kernels, {kernels_ge} of them >= {thr} us. "
        + ("The generated kernels of the split's train list are in the training data."
           if args.generated else "Training programs only: no generated kernels.")
        + (f" {len(missing)} programs of the split had no measured shard yet and were left "
           f"out." if missing else ""),
        f"- Models: `tpuperf train --gnn G --reduction R --epochs {args.epochs} "
        f"--max-time {args.max_time:g} --seed S"
        f"{' ' + args.train_args if args.train_args else ''}` (other options at their "
        f"defaults), seeds 0..{args.seeds - 1}. Cells give the mean over seeds and, in "
        "brackets, the lowest and highest seed. Each model is the one of its best "
        "validation epoch (\"best/run epochs\" per seed); \"train s\" is the mean training "
        "time per model.",
        "- Baseline: `tpuperf baseline fit` on the training programs (roofline x one "
        "coefficient per kernel kind + a fixed cost per kernel).",
        f"- Metrics (`tpuperf eval`): per test program, MAPE and Kendall's tau-b of kernel "
        f"runtimes on kernels >= {thr} us and on all kernels; then the median and mean over "
        f"the {n_test} programs. The paper's 5 us threshold would leave out "
        f"{args.under_5us:.0f}% of the test kernels (the fastest takes "
        f"{args.fastest_us:.2f} us); {thr} us keeps the kernels whose time is well above "
        f"the timer's resolution and the noise of the smallest kernels.",
        "- Scale: thousands of kernels and minutes of training per model, against the "
        "paper's millions of kernels; differences smaller than the seed spread mean nothing.",
        "",
        "## Summary",
        "",
        *table,
        "",
        "## Every model",
        "",
        per_model_md.strip(),
        "",
        "## Per test program (seed 0)",
        "",
        per_program_md.strip(),
        "",
    ]
    args.out.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
