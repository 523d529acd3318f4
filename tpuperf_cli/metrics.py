"""Accuracy metrics of a performance model (numpy; scipy only for tau, imported when used).

Fusion task (Kaufman et al. 2021, Table 2): per program, the mean absolute
percentage error (MAPE) of predicted kernel runtimes and Kendall's tau
between predicted and measured runtimes, usually on kernels that run at
least 5 us.

Tile task: per kernel (a group of records that differ only in their tile
configuration), the model ranks the configurations.

* Tile-Size APE (the paper's eq. 2): with C_k the configurations of kernel
  k, t the measured runtime, t* = min_{c in C_k} t(k, c) the best runtime and
  c'_k = argmin_{c in C_k} pred(k, c) the model's choice,

      Tile-Size APE = 100 * sum_k |t(k, c'_k) - t*_k| / sum_k t*_k

* mean per-kernel Kendall's tau between predicted and measured runtimes.
* top-K slowdown (TpuGraphs, tpu_graphs/baselines/tiles/metrics.py
  `top_error_performance`): per kernel, the best measured runtime among the
  model's K fastest-predicted configurations over the true best, minus one;
  averaged over kernels and given in percent (0 = the model's top K always
  holds the best configuration).

Where the model predicts ties, the choice is pessimistic: among configs tied
on the prediction the slowest one counts as picked, so a model that predicts a
constant cannot look good by the luck of record order.

Every function takes plain sequences or numpy arrays; empty input or an
undefined statistic gives NaN (never an exception), so a report can show "-".
"""

import math
from collections.abc import Hashable, Iterable, Sequence

import numpy as np
from numpy.typing import ArrayLike

# one kernel's configurations: (predictions, measured runtimes)
Group = tuple[ArrayLike, ArrayLike]

__all__ = [
    "mape", "ape", "kendall_tau", "fusion_metrics", "program_error",
    "tile_size_ape", "top_k_slowdown", "mean_kernel_tau", "tile_metrics",
    "group_indices", "summarize", "nanmedian", "nanmean",
]

def _arrays(pred, true):
    p = np.asarray(pred, dtype=np.float64).ravel()
    t = np.asarray(true, dtype=np.float64).ravel()
    if p.shape != t.shape:
        raise ValueError(f"pred and true differ in length ({p.size} vs {t.size})")
    return p, t


# ---------------------------------------------------------------- fusion task

def ape(pred: ArrayLike, true: ArrayLike) -> np.ndarray:
    """Absolute percentage errors 100 * |pred - true| / true, elementwise.

    true must be positive; a zero or negative runtime raises ValueError.
    """
    p, t = _arrays(pred, true)
    if np.any(~(t > 0)):
        raise ValueError("measured runtimes must be positive to compute a percentage error")
    return 100.0 * np.abs(p - t) / t


def mape(pred: ArrayLike, true: ArrayLike) -> float:
    """Mean absolute percentage error in percent; NaN for no data."""
    e = ape(pred, true)
    return float(e.mean()) if e.size else math.nan


def _tie_pairs(a):
    """Number of pairs i < j with a[i] == a[j]."""
    if a.size < 2:
        return 0
    _, counts = np.unique(a, return_counts=True)
    return int((counts * (counts - 1) // 2).sum())


def kendall_tau(x: ArrayLike, y: ArrayLike) -> float:
    """Kendall's tau-b between two sequences (ties handled).

        tau_b = (n_c - n_d) / sqrt((n_0 - n_1) (n_0 - n_2))

    n_0 = n (n - 1) / 2 pairs, n_c / n_d concordant / discordant pairs, n_1 /
    n_2 pairs tied in x / in y. NaN with fewer than two points or when either
    sequence is constant. scipy's O(n log n) algorithm (Knight's): a 100 000
    kernel corpus takes milliseconds, not the minutes of counting pairs.
    """
    a, b = _arrays(x, y)
    if a.size < 2 or _tie_pairs(a) == a.size * (a.size - 1) // 2 \
            or _tie_pairs(b) == b.size * (b.size - 1) // 2:
        return math.nan
    from scipy.stats import kendalltau  # here, so importing metrics stays cheap

    return float(kendalltau(a, b, variant="b").statistic)


def fusion_metrics(pred: ArrayLike, true: ArrayLike, threshold_ns: float = 0.0) -> dict:
    """MAPE (percent) and Kendall's tau-b on kernels with true >= threshold_ns.

    Returns {"n": kernels used, "mape": ..., "tau": ...}.
    """
    p, t = _arrays(pred, true)
    keep = t >= threshold_ns
    p, t = p[keep], t[keep]
    return {"n": int(p.size), "mape": mape(p, t), "tau": kendall_tau(p, t)}


def program_error(pred, true, count=None):
    """The whole-program error in percent: 100 |sum pred x count - sum true x
    count| / sum true x count (what `score` prints as error). NaN for no
    kernels."""
    p, t = _arrays(pred, true)
    c = np.ones_like(t) if count is None else np.asarray(count, dtype=np.float64).ravel()
    total = float((t * c).sum())
    if not p.size or not total > 0:
        return math.nan
    return 100.0 * abs(float((p * c).sum()) - total) / total


# ---------------------------------------------------------------- tile task

def _ranked(pred, true):
    """Indices ordering configs by prediction, ties broken pessimistically
    (slowest measured first among equal predictions)."""
    return np.lexsort((-true, pred))


def _groups(groups):
    for pred, true in groups:
        p, t = _arrays(pred, true)
        if p.size == 0 or np.isnan(p).all():  # no configs, or no prediction for this kernel
            continue
        if np.any(~(t > 0)):
            raise ValueError("measured runtimes must be positive")
        yield p, t


def tile_size_ape(groups: Iterable[Group]) -> float:
    """Tile-Size APE in percent over kernels; groups: iterable of (pred, true)
    per kernel, one entry per tile configuration.

    100 * sum_k |t(k, argmin pred) - min t(k)| / sum_k min t(k). NaN for none.
    """
    err = 0.0
    best = 0.0
    for p, t in _groups(groups):
        chosen = t[_ranked(p, t)[0]]
        tbest = t.min()
        err += abs(chosen - tbest)
        best += tbest
    return 100.0 * err / best if best > 0 else math.nan


def top_k_slowdown(groups: Iterable[Group], k: int) -> float:
    """Mean over kernels of (best measured runtime among the model's top-k
    configs / best measured runtime - 1), in percent. Kernels with fewer than
    k configs use all of them (slowdown 0). NaN for no kernels."""
    if k < 1:
        raise ValueError("k must be at least 1")
    out = []
    for p, t in _groups(groups):
        top = _ranked(p, t)[:k]
        out.append(t[top].min() / t.min() - 1.0)
    return 100.0 * float(np.mean(out)) if out else math.nan


def mean_kernel_tau(groups: Iterable[Group]) -> float:
    """Mean of per-kernel Kendall's tau-b over kernels where it is defined
    (two or more configs, neither side constant). NaN for none."""
    taus = [kendall_tau(p, t) for p, t in _groups(groups)]
    taus = [x for x in taus if not math.isnan(x)]
    return float(np.mean(taus)) if taus else math.nan


def tile_metrics(groups: Iterable[Group], ks: Sequence[int] = (1, 5, 10)) -> dict:
    """All tile-task metrics for a list of (pred, true) groups:
    {"kernels", "configs", "tile_ape", "tau", "top1", "top5", "top10"}."""
    groups = [(p, t) for p, t in _groups(groups)]
    out = {
        "kernels": len(groups),
        "configs": int(sum(p.size for p, _ in groups)),
        "tile_ape": tile_size_ape(groups),
        "tau": mean_kernel_tau(groups),
    }
    for k in ks:
        out[f"top{k}"] = top_k_slowdown(groups, k)
    return out


# ---------------------------------------------------------------- aggregation

def group_indices(keys: Iterable[Hashable]) -> dict[Hashable, np.ndarray]:
    """{key: array of positions} in first-seen key order."""
    out = {}
    for i, key in enumerate(keys):
        out.setdefault(key, []).append(i)
    return {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}


def nanmedian(values: Iterable[float | None]) -> float:
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(np.median(v)) if v.size else math.nan


def nanmean(values: Iterable[float | None]) -> float:
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else math.nan


def summarize(rows: Sequence[dict], fields: Iterable[str]) -> tuple[dict, dict]:
    """Median and mean rows over per-program rows (dicts), ignoring NaN:
    returns ({field: median}, {field: mean})."""
    med = {f: nanmedian([r.get(f) for r in rows]) for f in fields}
    avg = {f: nanmean([r.get(f) for r in rows]) for f in fields}
    return med, avg
