"""Evaluation plots with matplotlib (Agg backend, no display needed).

One PNG: for each predictor (up to four) a log-log scatter of predicted vs
measured kernel runtime, one colour per program, with the identity line and
a factor-of-two band; and a bar chart of the per-program error (MAPE on
kernels >= the threshold for the fusion task, with error bars of one
standard error of the mean APE; Tile-Size APE for the tile task).
"""

import math

import numpy as np

from tpuperf_cli.eval import metrics as m

MAX_SCATTER = 4


def _colors(n):
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _us(ns):
    return np.asarray(ns, dtype=np.float64) / 1000.0


def plot(path, data, predictions, result, dpi=120):
    """Write the figure to path (PNG, or any format matplotlib knows by
    extension). data: EvalData; predictions: {label: array}; result: the
    dict from report.evaluate()."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    labels = list(predictions)
    scatter = [lab for lab in labels
               if np.all(np.asarray(predictions[lab], dtype=np.float64) > 0)][:MAX_SCATTER]
    programs = list(m.group_indices(data.program))
    colors = dict(zip(programs, _colors(len(programs))))
    ncols = len(scatter) + 1
    fig, axes = plt.subplots(1, ncols, figsize=(4.6 * len(scatter) + 6.5, 5.2), squeeze=False)
    axes = axes[0]
    true_us = _us(data.runtime)
    prog = np.asarray(data.program, dtype=object)

    for ax, lab in zip(axes, scatter):
        pred_us = _us(predictions[lab])
        for p in programs:
            sel = prog == p
            ax.scatter(true_us[sel], pred_us[sel], s=12, alpha=0.7, color=colors[p],
                       label=p, edgecolors="none")
        lo = min(true_us.min(), pred_us.min()) / 1.5
        hi = max(true_us.max(), pred_us.max()) * 1.5
        line = np.array([lo, hi])
        ax.plot(line, line, color="black", lw=1, label="predicted = measured")
        ax.fill_between(line, line / 2, line * 2, color="grey", alpha=0.12, lw=0,
                        label="within 2x")
        if result["task"] == "fusion":
            thr = result["threshold_ns"] / 1000
            ax.axvline(thr, color="grey", ls=":", lw=1, label=f"{thr:g} us threshold")
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

    _bars(axes[-1], data, predictions, result, programs)
    handles, names = (axes[0].get_legend_handles_labels() if scatter else ([], []))
    if handles:
        fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5),
                   fontsize=8, frameon=False, title="program")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)


def _bars(ax, data, predictions, result, programs):
    labels = list(predictions)
    x = np.arange(len(programs))
    width = 0.8 / max(len(labels), 1)
    fusion = result["task"] == "fusion"
    by_prog = {r["program"]: r for r in result["programs"]}
    idx = m.group_indices(data.program)
    for j, lab in enumerate(labels):
        heights, errs = [], []
        for p in programs:
            r = by_prog[p]
            if fusion:
                heights.append(r["ge"][lab]["mape"])
                sel = idx[p]
                true = data.runtime[sel]
                keep = true >= result["threshold_ns"]
                if keep.sum() > 1:
                    ape = m.ape(np.asarray(predictions[lab], dtype=np.float64)[sel][keep], true[keep])
                    errs.append(ape.std(ddof=1) / math.sqrt(ape.size))
                else:
                    errs.append(0.0)
            else:
                heights.append(r["metrics"][lab]["tile_ape"])
                errs.append(0.0)
        h = np.nan_to_num(np.asarray(heights, dtype=np.float64), nan=0.0)
        ax.bar(x + (j - (len(labels) - 1) / 2) * width, h, width,
               yerr=errs if fusion else None, capsize=2, label=lab)
    ax.set_xticks(x)
    ax.set_xticklabels(programs, rotation=45, ha="right", fontsize=8)
    if fusion:
        ax.set_ylabel(f"MAPE (%), kernels >= {result['threshold_ns'] / 1000:g} us")
        ax.set_title("per-program error (bars: +-1 s.e. of the mean APE)")
    else:
        ax.set_ylabel("Tile-Size APE (%)")
        ax.set_title("per-program Tile-Size APE")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, title="predictor")
