"""Evaluation plots with matplotlib (Agg backend, no display needed).

One PNG, left to right:
* for each predictor that predicts runtimes (up to four), a log-log scatter
  of predicted vs measured kernel runtime with the identity line and a
  factor-of-two band; all scatters share their axes. Kernels the bars count
  (fusion task: measured at >= the threshold) are coloured by program; the
  others are small grey dots.
* the program legend, next to the scatters;
* a bar chart of the per-program error: per predictor (shades of grey and
  hatching, so that colour always means a program), the MAPE of the kernels
  >= the threshold with error bars of one standard error of the mean APE, and
  a diamond at the whole-program error (the sum's, all kernels x count); for
  the tile task, Tile-Size APE. Tick labels take their program's colour; the
  predictor legend sits above the bars, never on them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from tpuperf_cli import metrics

if TYPE_CHECKING:
    from tpuperf_cli.eval.report import EvalData

MAX_SCATTER = 4
_HATCHES = ("", "//", "..", "xx", "\\\\", "++", "--", "oo")


def _colors(n):
    """n program colours, leaving out the palettes' greys (grey is for the
    kernels below the threshold and for the predictors' bars)."""
    import matplotlib

    name, greys = ("tab10", {7}) if n <= 9 else ("tab20", {14, 15})
    cmap = matplotlib.colormaps[name]
    palette = [cmap(i) for i in range(cmap.N) if i not in greys]
    return [palette[i % len(palette)] for i in range(n)]


def _greys(n):
    return [str(round(0.25 + 0.5 * i / max(n - 1, 1), 2)) for i in range(n)]


def _us(ns):
    return np.asarray(ns, dtype=np.float64) / 1000.0


def plot(path: str, data: EvalData, predictions: dict[str, np.ndarray], result: dict, dpi: int = 120) -> None:
    """Write the figure to path (PNG, or any format matplotlib knows by
    extension). data: EvalData; predictions: {label: array}; result: the
    dict from report.evaluate()."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib import ticker
    from matplotlib.lines import Line2D

    labels = list(predictions)
    scatter = [lab for lab in labels
               if np.all(np.asarray(predictions[lab], dtype=np.float64) > 0)][:MAX_SCATTER]
    programs = list(metrics.group_indices(data.program))
    colors = dict(zip(programs, _colors(len(programs))))
    fusion = result["task"] == "fusion"
    thr_ns = result["threshold_ns"] if fusion else 0.0

    bars_width = max(5.0, 0.55 * len(programs) * max(1, len(labels)) ** 0.5 + 2.0)
    widths = [4.6] * len(scatter) + ([3.0] if scatter else []) + [bars_width]
    fig = plt.figure(figsize=(sum(widths) + 0.5, 5.6))
    grid = fig.add_gridspec(1, len(widths), width_ratios=widths, wspace=0.35)
    true_us = _us(data.runtime)
    prog = np.asarray(data.program, dtype=object)
    counted = data.runtime >= thr_ns

    # one pair of limits for every scatter, so they compare at a glance
    if scatter:
        preds = [_us(predictions[lab]) for lab in scatter]
        lo = min(true_us.min(), *(p.min() for p in preds)) / 1.5
        hi = max(true_us.max(), *(p.max() for p in preds)) * 1.5
    axes = []
    for col, lab in enumerate(scatter):
        ax = fig.add_subplot(grid[0, col], sharex=axes[0] if axes else None,
                             sharey=axes[0] if axes else None)
        axes.append(ax)
        pred_us = _us(predictions[lab])
        if not counted.all():
            ax.scatter(true_us[~counted], pred_us[~counted], s=5, color="0.7",
                       edgecolors="none", label=f"under {thr_ns / 1000:g} us (no bar)")
        for p in programs:
            sel = (prog == p) & counted
            ax.scatter(true_us[sel], pred_us[sel], s=12, alpha=0.75, color=colors[p],
                       label=p, edgecolors="none")
        line = np.array([lo, hi])
        ax.plot(line, line, color="black", lw=1, label="predicted = measured")
        ax.fill_between(line, line / 2, line * 2, color="grey", alpha=0.12, lw=0,
                        label="within 2x")
        if fusion:
            ax.axvline(thr_ns / 1000, color="grey", ls=":", lw=1,
                       label=f"{thr_ns / 1000:g} us threshold")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0) if hi / lo < 1e3
                                                     else (1.0,)))
            axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel("measured runtime (us)")
        ax.set_ylabel("predicted runtime (us)")
        ax.set_title(f"{lab}: predicted vs measured")
        ax.grid(True, which="major", alpha=0.3)

    if scatter:
        legend_ax = fig.add_subplot(grid[0, len(scatter)])
        legend_ax.axis("off")
        handles, names = axes[0].get_legend_handles_labels()
        order = [names.index(p) for p in programs if p in names] + \
                [i for i, n in enumerate(names) if n not in programs]
        dots = [Line2D([], [], ls="", marker="o", color=h.get_facecolor()[0], markersize=5)
                if hasattr(h, "get_offsets") else h for h in handles]
        legend_ax.legend([dots[i] for i in order], [names[i] for i in order], loc="center left",
                         fontsize=8, frameon=False, title="program", borderaxespad=0)

    bars = fig.add_subplot(grid[0, len(widths) - 1])
    _bars(bars, data, predictions, result, programs, colors)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)


def _bars(ax, data, predictions, result, programs, colors):
    from matplotlib.lines import Line2D

    labels = list(predictions)
    x = np.arange(len(programs))
    width = 0.8 / max(len(labels), 1)
    fusion = result["task"] == "fusion"
    by_prog = {r["program"]: r for r in result["programs"]}
    idx = metrics.group_indices(data.program)
    handles = []
    for j, (lab, grey) in enumerate(zip(labels, _greys(len(labels)))):
        heights, errs, whole = [], [], []
        for p in programs:
            r = by_prog[p]
            if fusion:
                heights.append(r["ge"][lab]["mape"])
                whole.append(r.get("program_error", {}).get(lab, math.nan))
                sel = idx[p]
                true = data.runtime[sel]
                keep = true >= result["threshold_ns"]
                if keep.sum() > 1:
                    ape = metrics.ape(np.asarray(predictions[lab], dtype=np.float64)[sel][keep], true[keep])
                    errs.append(ape.std(ddof=1) / math.sqrt(ape.size))
                else:
                    errs.append(0.0)
            else:
                heights.append(r["metrics"][lab]["tile_ape"])
                errs.append(0.0)
        h = np.nan_to_num(np.asarray(heights, dtype=np.float64), nan=0.0)
        at = x + (j - (len(labels) - 1) / 2) * width
        handles.append(ax.bar(at, h, width, yerr=errs if fusion else None, capsize=2,
                              color=grey, edgecolor="black", linewidth=0.5,
                              hatch=_HATCHES[j % len(_HATCHES)], label=lab,
                              error_kw={"elinewidth": 0.8}))
        if fusion:
            ax.plot(at, whole, ls="", marker="D", markersize=4, markerfacecolor="white",
                    markeredgecolor="black", zorder=3)
    ax.set_xticks(x)
    ax.set_xticklabels(programs, rotation=45, ha="right", fontsize=8)
    for tick, p in zip(ax.get_xticklabels(), programs):
        tick.set_color(colors[p])
    if fusion:
        handles.append(Line2D([], [], ls="", marker="D", markersize=4, markerfacecolor="white",
                              markeredgecolor="black", label="whole-program error"))
        ax.set_ylabel("error (%)")
        title = (f"per-program error\nbars: MAPE of kernels >= {result['threshold_ns'] / 1000:g} us "
                 f"(+-1 s.e.)")
    else:
        ax.set_ylabel("Tile-Size APE (%)")
        title = "per-program Tile-Size APE"
    ax.set_ylim(bottom=0)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    # the predictor legend above the plotting area, so it never covers a bar
    ax.legend(handles=handles, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0),
              ncol=min(len(handles), 4), frameon=False, title="predictor")
    ax.set_title(title, fontsize=11, pad=12 + 14 * (1 + (len(handles) - 1) // 4) + 12)
