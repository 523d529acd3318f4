"""Known kernels: the measured runtimes a model file carries beside its weights.

A kernel the model's own data measured (the same fingerprint: hlo-split's
hash of the kernel's normalised module, equal for identical kernels whatever
their names) is predicted at that measurement, not at the network's
estimate of it: on the model's machine no model beats a timing of the
kernel itself, and kernels recur across programs (about a fifth of an
unseen program's, in the CPU corpus). `tpuperf train` stores the runtimes of
its training kernels, `tpuperf calibrate` those it timed on the machine it
adapts to; `predict --no-known` (Model.known = None) gives the network's own
estimate of every kernel.

In the model file, the entry `known` holds two tensors: `fingerprints`
(uint8, n x 16: the 32 hex digits as bytes) and `runtime_ns` (float64, n),
so that torch's weights_only load and the numpy reader (model.weights) both
read it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import numpy as np

FINGERPRINT = re.compile(r"[0-9a-f]{32}\Z")


class Collector:
    """Runtimes by fingerprint, gathered from measured records; a kernel
    measured more than once gets the geometric mean of its runtimes."""

    def __init__(self):
        self._logs = {}          # fingerprint -> [sum of log ns, count, the first ns]

    def add(self, fingerprint: object, runtime_ns: float) -> None:
        if type(fingerprint) is not str or not FINGERPRINT.match(fingerprint) \
                or not runtime_ns > 0 or not math.isfinite(runtime_ns):
            return
        entry = self._logs.get(fingerprint)
        if entry is None:       # the runtime itself, until a second one comes
            self._logs[fingerprint] = [math.log(runtime_ns), 1, runtime_ns]
        else:
            entry[0] += math.log(runtime_ns)
            entry[1] += 1

    def merge(self, other: Collector) -> None:
        for fp, (s, n, first) in other._logs.items():
            entry = self._logs.setdefault(fp, [0.0, 0, first])
            entry[0] += s
            entry[1] += n

    def __len__(self) -> int:
        return len(self._logs)

    def table(self) -> dict[str, float]:
        return {fp: first if n == 1 else math.exp(s / n) for fp, (s, n, first) in self._logs.items()}


def encode(table: dict[str, float]) -> dict | None:
    """The model file's `known` entry for {fingerprint: ns}; None when empty."""
    import torch

    if not table:
        return None
    fps = sorted(table)
    raw = np.frombuffer(bytes.fromhex("".join(fps)), np.uint8).reshape(len(fps), 16)
    return {"fingerprints": torch.from_numpy(raw.copy()),
            "runtime_ns": torch.tensor([table[fp] for fp in fps], dtype=torch.float64)}


def check(entry: object, path: str = "model") -> tuple[np.ndarray, np.ndarray]:
    """(fingerprints as uint8 n x 16, runtimes) of a model file's `known`
    entry (torch tensors or numpy arrays); TpuperfError for a malformed one."""
    from tpuperf_cli.errors import TpuperfError

    try:
        fps = np.asarray(entry["fingerprints"], np.uint8)
        ns = np.asarray(entry["runtime_ns"], np.float64)
        if fps.ndim != 2 or fps.shape[1] != 16 or ns.shape != (fps.shape[0],):
            raise ValueError(f"fingerprints {list(fps.shape)}, runtime_ns {list(ns.shape)}")
    except (KeyError, TypeError, ValueError) as e:
        raise TpuperfError(f"model {path}: bad model file (its known kernels: {e})") from None
    return fps, ns


def table_of(fps: np.ndarray, ns: np.ndarray) -> dict[str, float]:
    """{fingerprint: ns} of a `known` entry's arrays, as check returns them."""
    hexes = fps.tobytes().hex()
    return {hexes[32 * i:32 * i + 32]: float(v) for i, v in enumerate(ns.tolist())}


def lookup(table: dict[str, float] | None, fingerprints: Iterable[object], preds: np.ndarray,
           spreads: np.ndarray | None = None) -> int:
    """Replace preds[i] by the known runtime of fingerprints[i] where the
    table has it (and spreads[i], if given, by 0: a measurement, not the
    members' estimates); returns how many were replaced."""
    if not table:
        return 0
    hits = 0
    for i, fp in enumerate(fingerprints):
        v = table.get(fp) if type(fp) is str else None
        if v is not None:
            preds[i] = v
            if spreads is not None:
                spreads[i] = 0.0
            hits += 1
    return hits
