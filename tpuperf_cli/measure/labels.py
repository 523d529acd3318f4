"""One machine's labels of a corpus, in one small file.

Measuring the whole corpus takes an hour; its graphs take 40 MB. A label
file carries only what one machine's measuring adds to them: for every
measured kernel, by fingerprint, its runtime, noise and the two timings
(where the corpus's `confirm` took them), with the target that measured
them and the manifest's account of how (reference kernels included, so
`tpuperf machine --check` can tell whether it runs on that machine).
examples/build_corpus.py writes them (`labels`) and gives them to the
committed graphs (`relabel`).

The file is one record of columns: the fingerprints' 16 bytes each and
little-endian floats, NaN where a kernel has no noise or one timing.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import NamedTuple

from tpuperf_cli.errors import TpuperfError

VERSION = 1
# the manifest's fields a label file carries
MANIFEST_FIELDS = ("measure_options", "last_build_measure_seconds", "two_timings", "median_kernel_noise",
                   "measurement_noise", "reference_kernels")


class LabelFile(NamedTuple):
    target: dict
    manifest: dict              # MANIFEST_FIELDS of the corpus's manifest when it was written
    labels: dict                # {fingerprint: (runtime_ns, noise or None, [t1, t2] or None)}


def label_record(target: dict, labels: dict, manifest: dict) -> dict:
    """The one record of a label file; labels as LabelFile.labels."""
    import numpy as np

    fps = sorted(labels)
    nan = math.nan
    return {"v": VERSION, "type": "labels", "target": target, "kernels": len(fps),
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "manifest": {k: manifest[k] for k in MANIFEST_FIELDS if k in manifest},
            "fingerprints": bytes.fromhex("".join(fps)),
            "runtime_ns": np.array([labels[fp][0] for fp in fps], "<f8").tobytes(),
            "noise": np.array([nan if labels[fp][1] is None else labels[fp][1] for fp in fps], "<f4").tobytes(),
            "timings": np.array([labels[fp][2] or [nan, nan] for fp in fps], "<f8").tobytes()}


def read_label_file(path: str | Path) -> LabelFile:
    """The label file at path; TpuperfError naming it for anything else."""
    import numpy as np

    from tpuperf_cli.stream import read_records

    try:
        records = list(read_records(str(path)))
    except (OSError, TpuperfError) as e:
        raise TpuperfError(f"{path}: not a label file ({e})") from None
    if len(records) != 1 or records[0].get("type") != "labels":
        raise TpuperfError(f"{path}: not a label file (examples/build_corpus.py labels writes them)")
    r = records[0]
    if r.get("v") != VERSION:
        raise TpuperfError(f"{path}: label file version {r.get('v')!r}, this tpuperf reads {VERSION}")
    try:
        n = int(r["kernels"])
        raw = r["fingerprints"]
        ns = np.frombuffer(r["runtime_ns"], "<f8")
        noise = np.frombuffer(r["noise"], "<f4")
        timings = np.frombuffer(r["timings"], "<f8").reshape(-1, 2)
        if len(raw) != 16 * n or not (ns.size == noise.size == timings.shape[0] == n):
            raise ValueError(f"columns of unequal lengths for {n} kernels")
    except (KeyError, TypeError, ValueError) as e:
        raise TpuperfError(f"{path}: malformed label file ({e})") from None
    hexes = raw.hex()
    labels = {}
    for i in range(n):
        t = timings[i].tolist()
        labels[hexes[32 * i:32 * i + 32]] = (float(ns[i]), None if np.isnan(noise[i]) else float(noise[i]),
                                            None if math.isnan(t[0]) else t)
    return LabelFile(r.get("target") or {}, r.get("manifest") or {}, labels)
