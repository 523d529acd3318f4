"""Paper-style evaluation tables: compute them from records, render them.

`evaluate()` takes measured records and predictions from one or more
predictors (learned models, the roofline baseline, XLA's default tile choice)
and returns a plain dict (the JSON output of `tpuperf eval`); `render()`
turns that dict into an aligned text table or markdown.

Fusion task (each record a kernel; Table 2 of Kaufman et al.): one row per
program with, per predictor, MAPE and Kendall's tau-b of kernel runtimes,
once on kernels whose measured runtime is at least the threshold (5 us by
default) and once on all kernels, and the whole-program error (the error of
the sum of all its kernels' predictions x count, what `score` prints); then
median and mean rows over programs.

Tile task (several records per (program, kernel), differing in config): one
row per program with, per predictor, Tile-Size APE, mean per-kernel tau and
top-1/5/10 slowdown; then median and mean rows over programs and a pooled
row over all kernels together.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

import numpy as np

from tpuperf_cli import metrics
from tpuperf_cli.records import NOISE, Record, measured_runtime

FUSION_FIELDS = ("mape", "tau")
TILE_FIELDS = ("tile_ape", "tau", "top1", "top5", "top10")
# predictors that only pick one config per kernel (no ranking): only these
CHOICE_FIELDS = ("tile_ape", "top1")

FIELD_TITLES = {
    "mape": "MAPE%", "tau": "tau", "program_error": "prog%", "tile_ape": "TileAPE%",
    "top1": "top1%", "top5": "top5%", "top10": "top10%", "n": "n",
}


# ---------------------------------------------------------------- data

class EvalData:
    """The measured records reduced to arrays, in record order.

    program, kernel: str arrays; runtime: float ns; is_default: bool array
    (all False when the records carry none); count: times each kernel runs
    per program run (1 where the record has none); noise: measure's
    relative spread of each kernel's samples (NaN where the record has
    none); grouped: True when some (program, kernel) has several records
    (tile data).
    """

    def __init__(self, records: Iterable[Record]):
        self.program, self.kernel, self.runtime, self.is_default = [], [], [], []
        self.count = []
        self.noise = []
        self.has_config = False
        self.skipped = 0
        self.records = []
        for r in records:
            rt = measured_runtime(r)
            if rt is None:
                self.skipped += 1
                continue
            self.records.append(r)
            self.program.append(str(r.get("program", "?")))
            self.kernel.append(str(r.get("kernel", r.get("fingerprint", len(self.kernel)))))
            self.runtime.append(float(rt))
            self.is_default.append(bool(r.get("is_default", False)))
            c = r.get("count", 1)
            self.count.append(float(c) if isinstance(c, (int, float)) and not isinstance(c, bool)
                              and c >= 0 else 1.0)
            nz = r.get(NOISE)
            self.noise.append(float(nz) if isinstance(nz, (int, float)) and
                              not isinstance(nz, bool) else np.nan)
            self.has_config = self.has_config or bool(r.get("config"))
        self.runtime = np.asarray(self.runtime, dtype=np.float64)
        self.noise = np.asarray(self.noise, dtype=np.float64)
        self.is_default = np.asarray(self.is_default, dtype=bool)
        self.count = np.asarray(self.count, dtype=np.float64)
        keys = list(zip(self.program, self.kernel))
        self.grouped = len(set(keys)) < len(keys)

    def __len__(self):
        return len(self.runtime)

    def task(self) -> str:
        return "tile" if (self.has_config and self.grouped) else "fusion"


def default_choice(data: EvalData) -> tuple[np.ndarray, int]:
    """XLA's own pick as a predictor: 0 for the is_default config, 1 else;
    NaN (no prediction: the kernel is left out) for every config of a kernel
    none of whose configs is marked is_default.

    Returns (predictions, number of kernels left out).
    """
    pred = np.where(data.is_default, 0.0, 1.0)
    missing = 0
    for idx in metrics.group_indices(list(zip(data.program, data.kernel))).values():
        if not data.is_default[idx].any():
            pred[idx] = np.nan
            missing += 1
    return pred, missing


# ---------------------------------------------------------------- evaluate

def evaluate(data: EvalData, predictions: dict[str, np.ndarray], task: str | None = None,
             threshold_ns: float = 5000.0, choice_only: Iterable[str] = ()) -> dict:
    """The evaluation as a JSON-able dict.

    data: EvalData. predictions: {label: array of predicted ns (or scores,
    lower = faster) aligned with data}. choice_only: labels that only pick
    one config per kernel (tile task; only Tile-Size APE and top-1 shown).
    """
    task = task or data.task()
    labels = list(predictions)
    for label, p in predictions.items():
        if len(p) != len(data):
            raise ValueError(f"predictor {label!r}: {len(p)} predictions for {len(data)} records")
    if task == "fusion":
        out = _fusion(data, predictions, threshold_ns)
    elif task == "tile":
        out = _tile(data, predictions, set(choice_only))
    else:
        raise ValueError(f"unknown task {task!r}")
    out.update({"task": task, "predictors": labels, "records": len(data),
                "choice_only": [lab for lab in labels if lab in set(choice_only)],
                "skipped_unmeasured": data.skipped})
    return out


def _fusion(data, predictions, threshold_ns):
    groups = metrics.group_indices(data.program)
    rows = []
    for program, idx in groups.items():
        true = data.runtime[idx]
        count = data.count[idx]
        row = {"program": program, "kernels": int(idx.size),
               "kernels_ge": int((true >= threshold_ns).sum()),
               "runtime_ns": float((true * count).sum()), "ge": {}, "all": {}, "program_error": {},
               # the labels' own spread (percent, as MAPE): the floor under any MAPE
               "noise": 100 * metrics.nanmedian(data.noise[idx][true >= threshold_ns])}
        for label, pred in predictions.items():
            p = np.asarray(pred, dtype=np.float64)[idx]
            ge = metrics.fusion_metrics(p, true, threshold_ns)
            al = metrics.fusion_metrics(p, true, 0.0)
            row["ge"][label] = {"mape": ge["mape"], "tau": ge["tau"]}
            row["all"][label] = {"mape": al["mape"], "tau": al["tau"]}
            row["program_error"][label] = metrics.program_error(p, true, count)
        rows.append(row)
    summary = {}
    for which in ("ge", "all"):
        summary[which] = {}
        for label in predictions:
            med, avg = metrics.summarize([r[which][label] for r in rows], FUSION_FIELDS)
            summary[which][label] = {"median": med, "mean": avg}
    summary["program_error"] = {
        label: {"median": metrics.nanmedian([r["program_error"][label] for r in rows]),
                "mean": metrics.nanmean([r["program_error"][label] for r in rows])}
        for label in predictions}
    summary["noise"] = {"median": metrics.nanmedian([r["noise"] for r in rows]),
                        "mean": metrics.nanmean([r["noise"] for r in rows])}
    return {"threshold_ns": float(threshold_ns), "programs": rows, "summary": summary}


def _tile_groups(data, pred, idx):
    by_kernel = metrics.group_indices([data.kernel[i] for i in idx])
    p = np.asarray(pred, dtype=np.float64)
    return [(p[idx[j]], data.runtime[idx[j]]) for j in by_kernel.values()]


def _tile(data, predictions, choice_only):
    groups = metrics.group_indices(data.program)
    rows = []
    for program, idx in groups.items():
        kernels = len(set(data.kernel[i] for i in idx))
        row = {"program": program, "kernels": kernels, "configs": int(idx.size), "metrics": {}}
        for label, pred in predictions.items():
            r = metrics.tile_metrics(_tile_groups(data, pred, idx))
            row["metrics"][label] = _mask(r, label in choice_only)
        rows.append(row)
    summary = {}
    for label, pred in predictions.items():
        med, avg = metrics.summarize([r["metrics"][label] for r in rows], TILE_FIELDS)
        pooled = _mask(metrics.tile_metrics(_tile_groups_all(data, pred)), label in choice_only)
        summary[label] = {"median": med, "mean": avg,
                          "pooled": {f: pooled[f] for f in TILE_FIELDS}}
    return {"programs": rows, "summary": summary,
            "kernels": len(set(zip(data.program, data.kernel)))}


def _tile_groups_all(data, pred):
    keys = list(zip(data.program, data.kernel))
    p = np.asarray(pred, dtype=np.float64)
    return [(p[j], data.runtime[j]) for j in metrics.group_indices(keys).values()]


def _mask(r, choice):
    if not choice:
        return r
    return {k: (v if (k in CHOICE_FIELDS or k in ("kernels", "configs")) else math.nan)
            for k, v in r.items()}


# ---------------------------------------------------------------- render

def _fmt(v, field):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if field == "tau":
        return f"{v:.3f}"
    if isinstance(v, (int, np.integer)):
        return str(v)
    return f"{v:.1f}" if abs(v) < 1e4 else f"{v:.3g}"


def tables(result: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """[(title, header, rows)] for a result of evaluate(); cells are str."""
    labels = result["predictors"]
    out = []
    if result["task"] == "fusion":
        thr = result["threshold_ns"]
        for which, title, ncol in (
                ("ge", f"fusion task: kernels >= {thr / 1000:g} us; prog%: error of the "
                       f"whole-program sum (all kernels x count); noise%, where measured: "
                       f"median spread of the kernels' timed samples, a floor under MAPE",
                 "kernels_ge"),
                ("all", "fusion task: all kernels", "kernels")):
            whole = which == "ge"   # the program error once, in the first table
            noisy = whole and not math.isnan(result["summary"].get("noise", {}).get(
                "median", math.nan))   # a noise column where measure wrote noise
            fields = FUSION_FIELDS + (("program_error",) if whole else ())
            header = ["program", "kernels"] + (["noise%"] if noisy else []) + \
                [f"{lab} {FIELD_TITLES[f]}" for lab in labels for f in fields]

            def cell(r, lab, f):
                return _fmt(r["program_error"][lab] if f == "program_error" else r[which][lab][f], f)

            def stat_cell(stat, lab, f):
                summ = result["summary"]
                return _fmt(summ["program_error"][lab][stat] if f == "program_error"
                            else summ[which][lab][stat][f], f)

            rows = []
            for r in result["programs"]:
                rows.append([r["program"], str(r[ncol])] +
                            ([_fmt(r.get("noise"), "mape")] if noisy else []) +
                            [cell(r, lab, f) for lab in labels for f in fields])
            for stat in ("median", "mean"):
                noise = result["summary"].get("noise", {}).get(stat)
                rows.append([stat, ""] + ([_fmt(noise, "mape")] if noisy else []) +
                            [stat_cell(stat, lab, f) for lab in labels for f in fields])
            out.append((title, header, rows))
    else:
        choice = set(result.get("choice_only", ()))
        cols = [(lab, f) for lab in labels
                for f in (CHOICE_FIELDS if lab in choice else TILE_FIELDS)]
        header = ["program", "kernels"] + [f"{lab} {FIELD_TITLES[f]}" for lab, f in cols]
        rows = []
        for r in result["programs"]:
            rows.append([r["program"], str(r["kernels"])] +
                        [_fmt(r["metrics"][lab][f], f) for lab, f in cols])
        for stat in ("median", "mean", "pooled"):
            n = str(result["kernels"]) if stat == "pooled" else ""
            rows.append([stat if stat != "pooled" else "all kernels", n] +
                        [_fmt(result["summary"][lab][stat][f], f) for lab, f in cols])
        out.append(("tile task: Tile-Size APE, mean per-kernel tau, top-K slowdown", header, rows))
    return out


def summary_table(result: dict) -> tuple[str, list[str], list[list[str]]]:
    """(title, header, rows): one row per predictor with the median and mean
    over programs (the compact view for ablations)."""
    labels = result["predictors"]
    if result["task"] == "fusion":
        thr = f"{result['threshold_ns'] / 1000:g}us"
        cols = [(w, st, f) for w in ("ge", "all") for st in ("median", "mean") for f in FUSION_FIELDS]
        header = ["predictor"] + [f"{st} {FIELD_TITLES[f]} {'>=' + thr if w == 'ge' else 'all'}"
                                  for w, st, f in cols] + ["median prog%", "mean prog%"]
        summ = result["summary"]
        rows = [[lab] + [_fmt(summ[w][lab][st][f], f) for w, st, f in cols]
                + [_fmt(summ["program_error"][lab][st], "program_error") for st in ("median", "mean")]
                for lab in labels]
        return ("fusion task: median and mean over programs (prog%: whole-program error)",
                header, rows)
    cols = [(st, f) for st in ("mean", "pooled") for f in TILE_FIELDS]
    header = ["predictor"] + [f"{'all' if st == 'pooled' else st} {FIELD_TITLES[f]}"
                              for st, f in cols]
    rows = [[lab] + [_fmt(result["summary"][lab][st][f], f) for st, f in cols] for lab in labels]
    return ("tile task: mean over programs, and all kernels pooled", header, rows)


def _text_table(header, rows):
    cols = list(zip(header, *rows))
    widths = [max(len(c) for c in col) for col in cols]

    def line(cells):
        return "  ".join((c.ljust(w) if i == 0 else c.rjust(w))
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep] + [line(r) for r in rows])


def _markdown_table(header, rows):
    esc = [[c.replace("|", "\\|") for c in r] for r in [header] + rows]
    lines = ["| " + " | ".join(esc[0]) + " |",
             "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return "\n".join(lines)


def render(result: dict, fmt: str = "table", summary: bool = False) -> str:
    """The result as text: fmt is "table", "markdown" or "json"; summary:
    only the per-predictor summary table (json: unchanged)."""
    if fmt == "json":
        return json.dumps(_jsonable(result), indent=2) + "\n"
    parts = []
    for title, header, rows in ([summary_table(result)] if summary else tables(result)):
        if fmt == "markdown":
            parts.append(f"**{title}**\n\n{_markdown_table(header, rows)}\n")
        else:
            parts.append(f"{title}\n\n{_text_table(header, rows)}\n")
    return "\n".join(parts)


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.floating, float)):
        v = float(v)
        return None if math.isnan(v) else v
    if isinstance(v, np.integer):
        return int(v)
    return v
