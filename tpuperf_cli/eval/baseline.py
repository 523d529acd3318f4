"""The analytical baseline: a roofline scaled by one coefficient per kernel kind.

For a kernel with static cost features (featurize's kernel_feat)

    compute = flops + transcendentals              (operations)
    memory  = bytes_read + bytes_written           (bytes)
    roof    = max(compute / P, memory / B)         (seconds)
    t       = t0 + c[kind] * roof                  (seconds; x 1e9 for ns)

P is the peak rate (operations/s) and B the memory bandwidth (bytes/s) of
the target, kind is the kernel's kind ("fusion:kLoop", "fusion:kInput",
..., or an opcode family such as "dot", "convolution", "elementwise"),
c[kind] > 0 says how far from the roofline that kind of kernel runs, and t0
is a fixed cost per kernel launch of the target (one number; 0 with
overhead=False). On the CPU every kernel costs a few us however small (the
runtime's dispatch), which a pure roofline cannot express.

Fitting (`fit`) minimises the squared error of log(t) over the measured
kernels, the loss the learned model uses for the fusion task:

* With per-kind coefficients, the overall scale of P and B is absorbed by the
  coefficients; only the ridge point R = P / B (operations per byte, where a
  kernel turns from memory- to compute-bound) shapes the prediction. R is
  found by a search over a log grid (0.01 to 10 000 op/byte, refined), t0 by
  a search over 0 and fractions (1 % to 98 %) of the fastest measured kernel.
* For given R and t0, log c[kind] is the mean of log((t - t0) / roof) over
  the kind's kernels (closed form); the (R, t0) pair with the smallest
  log(t) error wins.
* P and B are then reported so that the kernels' coefficients have a
  geometric mean of 1, i.e. as the effective roofline of all measured
  kernels together, and c[kind] reads as "this kind runs c times slower
  than the average kernel".

Alternatively P and B can be given (per-target constants from a data sheet,
e.g. a TPU v3 core: 61.5e12 bf16 flop/s and 450e9 bytes/s HBM), and then only
the coefficients (and t0) are fitted. Kinds seen fewer than `min_kernels`
times share the coefficient "other" (fitted on all kernels), which is also
used for kinds never seen in training.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from tpuperf_cli.errors import TpuperfError, read_file
from tpuperf_cli.records import (
    BASE_KERNEL_FEATURES,
    KERNEL_FEAT,
    KERNEL_FEATURES,
    PROGRAM,
    TARGET,
    Record,
    hashable,
    locate,
    measured_runtime,
)
from tpuperf_cli.stream import decode_array, is_array

FORMAT = "tpuperf-baseline"
VERSION = 1
FORMULA = ("t_ns = overhead_ns + 1e9 * c[kind] * max((flops + transcendentals) / peak_flops, "
           "(bytes_read + bytes_written) / bandwidth)")

# Opcodes that do one cheap operation per element: one kind for all of them.
_ELEMENTWISE = frozenset("""
abs add and atan2 cbrt ceil clamp clz compare complex convert cosine divide
erf exponential exponential-minus-one floor imag is-finite log log-plus-one
logistic maximum minimum multiply negate not or popcnt power real
reduce-precision remainder round-nearest-afz round-nearest-even rsqrt select
shift-left shift-right-arithmetic shift-right-logical sign sine sqrt subtract
tan tanh xor
""".split())
_DATA_MOVEMENT = frozenset("""
broadcast concatenate copy dynamic-slice dynamic-update-slice gather iota pad
reshape reverse scatter slice transpose bitcast bitcast-convert copy-start
copy-done
""".split())
_COLLECTIVE_PREFIXES = ("all-", "collective-", "reduce-scatter")


def kernel_kind(record: Record) -> str:
    """The kind of a kernel record: "fusion:<fusion_kind>" for fusions, else
    an opcode family (dot, convolution, reduce, elementwise, data-movement,
    collective, custom-call, or the opcode itself)."""
    opcode = str(record.get("opcode") or "unknown")
    if opcode == "fusion":
        return f"fusion:{record.get('fusion_kind') or 'unknown'}"
    if opcode in _ELEMENTWISE:
        return "elementwise"
    if opcode in _DATA_MOVEMENT:
        return "data-movement"
    if opcode.startswith(_COLLECTIVE_PREFIXES):
        return "collective"
    return opcode


def cost_features(record: Record, where: str = "record") -> tuple[float, float]:
    """(compute ops, memory bytes) of a graph record from its kernel_feat."""
    feat = record.get(KERNEL_FEAT)
    if feat is None:
        raise TpuperfError(f"{where}: no kernel_feat field (run featurize first)")
    try:
        a = decode_array(feat, KERNEL_FEAT) if is_array(feat) else feat
        a = np.asarray(a, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise TpuperfError(f"{where}: kernel_feat is not an array of numbers "
                           f"({type(feat).__name__})") from None
    names = KERNEL_FEATURES[:BASE_KERNEL_FEATURES]     # what every featurize wrote
    if a.size < len(names):
        raise TpuperfError(f"{where}: kernel_feat has {a.size} values, expected "
                           f"{len(names)} ({', '.join(names)})")
    v = dict(zip(names, a))
    compute = v.get("flops", 0.0) + v.get("transcendentals", 0.0)
    memory = v.get("bytes_read", 0.0) + v.get("bytes_written", 0.0)
    return float(compute), float(memory)


def _roof_bytes(compute, memory, ridge):
    """max(compute / R, memory): the roofline in byte-equivalents (>= 1)."""
    return np.maximum(np.maximum(compute / ridge, memory), 1.0)


class Baseline:
    """A fitted roofline: peak_flops (op/s), bandwidth (B/s), coef per kind,
    overhead_ns per kernel."""

    def __init__(self, peak_flops: float, bandwidth: float, coef: dict[str, float], info: dict | None = None,
                 overhead_ns: float = 0.0):
        self.peak_flops = float(peak_flops)
        self.bandwidth = float(bandwidth)
        self.coef = {str(k): float(v) for k, v in coef.items()}
        self.overhead_ns = float(overhead_ns)
        self.info = dict(info or {})

    # ------------------------------------------------------------ predict
    def coefficient(self, kind: str) -> float:
        return self.coef.get(kind, self.coef.get("other", 1.0))

    def predict_ns(self, compute: float, memory: float, kind: str) -> float:
        roof = max(compute / self.peak_flops, memory / self.bandwidth, 1.0 / self.bandwidth)
        return self.overhead_ns + 1e9 * self.coefficient(kind) * roof

    def predict_record(self, record: Record, where: str = "record") -> float:
        compute, memory = cost_features(record, where)
        return self.predict_ns(compute, memory, kernel_kind(record))

    # ------------------------------------------------------------ files
    def to_json(self) -> dict:
        return {
            "format": FORMAT, "v": VERSION, "formula": FORMULA,
            "peak_flops": self.peak_flops, "bandwidth": self.bandwidth,
            "overhead_ns": self.overhead_ns,
            "ridge_flops_per_byte": self.peak_flops / self.bandwidth,
            "coef": dict(sorted(self.coef.items())),
            **self.info,
        }

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=2, sort_keys=False)
            f.write("\n")

    @classmethod
    def load(cls, path: str) -> Baseline:
        text = read_file(path, "r")
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise TpuperfError(f"{path}: not a baseline file (bad JSON: {e})") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise TpuperfError(f"{path}: not a baseline file (write one with `tpuperf baseline fit`)")
        try:
            info = {k: v for k, v in d.items()
                    if k not in ("format", "v", "formula", "peak_flops", "bandwidth",
                                 "ridge_flops_per_byte", "coef", "overhead_ns")}
            return cls(d["peak_flops"], d["bandwidth"], d["coef"], info,
                       d.get("overhead_ns", 0.0))
        except (KeyError, TypeError, ValueError) as e:
            raise TpuperfError(f"{path}: bad baseline file ({e})") from None


def fit(compute: ArrayLike, memory: ArrayLike, kinds: Sequence[str], runtime_ns: ArrayLike,
        peak_flops: float | None = None, bandwidth: float | None = None, min_kernels: int = 3,
        overhead: bool = True) -> Baseline:
    """Fit a Baseline on measured kernels (arrays of equal length).

    peak_flops and bandwidth: both given (per-target constants) or both None
    (fitted). overhead: also fit the fixed cost per kernel t0 (else 0).
    Returns the Baseline; its info holds the fit's statistics.
    """
    compute = np.asarray(compute, dtype=np.float64)
    memory = np.asarray(memory, dtype=np.float64)
    t = np.asarray(runtime_ns, dtype=np.float64) * 1e-9
    kinds = np.asarray([str(k) for k in kinds], dtype=object)
    if not (compute.size == memory.size == t.size == kinds.size):
        raise ValueError("fit: arrays differ in length")
    if (peak_flops is None) != (bandwidth is None):
        raise TpuperfError("give both peak flops and bandwidth, or neither (to fit them)")
    if peak_flops is not None and not (peak_flops > 0 and bandwidth > 0):
        raise TpuperfError("peak flops and bandwidth must be positive")
    ok = t > 0
    compute, memory, t, kinds = compute[ok], memory[ok], t[ok], kinds[ok]
    if t.size == 0:
        raise TpuperfError("no measured kernels to fit the baseline on "
                           "(records need runtime_ns > 0 and kernel_feat)")
    log_t = np.log(t)

    # kinds with too few kernels share "other"
    names, counts = np.unique(kinds, return_counts=True)
    frequent = {n for n, c in zip(names, counts) if c >= min_kernels and n != "other"}
    group = np.asarray([k if k in frequent else "other" for k in kinds], dtype=object)
    labels = sorted(set(group))
    index = {k: i for i, k in enumerate(labels)}
    gi = np.asarray([index[k] for k in group])
    size = np.bincount(gi, minlength=len(labels)).astype(np.float64)

    def solve(ridge, t0):
        """(loss, log c per kind) for a ridge point and overhead; the
        roofline here is in byte-equivalents (c absorbs 1/B)."""
        log_roof = np.log(_roof_bytes(compute, memory, ridge))
        resid = np.log(t - t0) - log_roof
        logc = np.bincount(gi, weights=resid, minlength=len(labels)) / np.maximum(size, 1)
        pred = t0 + np.exp(logc[gi] + log_roof)
        return float(np.mean((log_t - np.log(pred)) ** 2)), logc

    t_min = float(t.min())
    t0_grid = [0.0] + (list(t_min * np.geomspace(0.01, 0.98, 30)) if overhead else [])
    if peak_flops is None:
        ridges = np.logspace(-2, 4, 61)
    else:
        ridges = np.asarray([peak_flops / bandwidth])
    best = min(((solve(r, t0)[0], r, t0) for r in ridges for t0 in t0_grid))
    if peak_flops is None:  # refine the ridge point around the best
        i = int(np.argmin(np.abs(ridges - best[1])))
        fine = np.geomspace(ridges[max(i - 1, 0)], ridges[min(i + 1, ridges.size - 1)], 41)
        best = min(best, min((solve(r, best[2])[0], r, best[2]) for r in fine))
    loss, ridge, t0 = best
    _, logc = solve(ridge, t0)

    # t = t0 + c_bytes * roof_bytes = t0 + (c_bytes * B) * roof_bytes / B; pick B so that
    # the kernels' coefficients c = c_bytes * B have a geometric mean of 1 (or B given)
    if peak_flops is None:
        bandwidth = float(math.exp(-np.mean(logc[gi])))
        peak_flops = ridge * bandwidth
    coef = {k: float(math.exp(logc[index[k]]) * bandwidth) for k in labels}
    if "other" not in coef:
        resid = np.log(t - t0) - np.log(_roof_bytes(compute, memory, ridge))
        coef["other"] = float(math.exp(np.mean(resid)) * bandwidth)
    pred = t0 + np.exp(logc[gi]) * _roof_bytes(compute, memory, ridge)
    info = {
        "fitted_peaks": ridges.size > 1,
        "kernels": int(t.size),
        "kernels_per_kind": {k: int(size[index[k]]) for k in labels},
        "compute_bound_fraction": float((compute / ridge > memory).mean()),
        "log_rmse": float(math.sqrt(loss)),
        "train_mape": float(100 * np.mean(np.abs(pred - t) / t)),
    }
    return Baseline(peak_flops, bandwidth, coef, info, overhead_ns=t0 * 1e9)


def fit_records(records: Iterable[Record], peak_flops: float | None = None, bandwidth: float | None = None,
                min_kernels: int = 3, stats: dict | None = None, overhead: bool = True) -> Baseline:
    """Fit on an iterable of measured graph records. Records without
    runtime_ns (failed measurements) are skipped and counted in stats."""
    compute, memory, kinds, runtime = [], [], [], []
    stats = stats if stats is not None else {}
    stats.setdefault("skipped", 0)
    seen = set()
    for number, record in enumerate(records, 1):
        rt = measured_runtime(record)
        if rt is None:
            stats["skipped"] += 1
            continue
        c, m = cost_features(record, locate(number, record=record))
        compute.append(c)
        memory.append(m)
        kinds.append(kernel_kind(record))
        runtime.append(float(rt))
        seen.add(hashable(record.get(PROGRAM)))
        target = record.get(TARGET)
        if isinstance(target, dict):
            key = (target.get("platform"), target.get("device_kind"))
            stats.setdefault("targets", {}).setdefault(key, target)
    b = fit(compute, memory, kinds, runtime, peak_flops, bandwidth, min_kernels, overhead)
    b.info["programs"] = len(seen)
    targets = list(stats.get("targets", {}).values())
    if len(targets) == 1:
        b.info["target"] = targets[0]
    elif targets:
        b.info["targets"] = targets
    return b
