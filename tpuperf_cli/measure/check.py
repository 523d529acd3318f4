"""Is this the machine a corpus was measured on?

A corpus's manifest records its target and a few reference kernels with the
runtimes they had there. `check_machine` compares this machine's target with
the manifest's, field by field, and times the reference kernels here with
the same method: a corpus must never be extended, nor a model compared, on
another machine without anyone noticing. Targets alone are not enough: a
cloud VM may report the same CPU name, family and model on hosts that run
at different speeds.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.records import Record

# A reference kernel within this factor of its manifest time agrees; the
# median over them must be within the tighter one.
KERNEL_TOLERANCE = 1.5
MEDIAN_TOLERANCE = 1.15

# What the reference set is drawn from: steady, mid-sized kernels of the
# kinds a model sees most.
REFERENCE_KINDS = ("dot", "convolution", "kLoop", "kInput", "kOutput", "reduce", "copy")


def _kind(record):
    return record.get("fusion_kind") if record.get("opcode") == "fusion" else record.get("opcode")


def pick_references(records: Iterable[Record], per_kind: int = 2) -> list[dict]:
    """Reference kernels for a manifest: per kind, the least noisy measured
    kernels between 20 us and 2 ms (distinct fingerprints)."""
    seen, by_kind = set(), {}
    for r in records:
        fp = r.get("fingerprint")
        if "runtime_ns" not in r or fp in seen or not 2e4 <= r["runtime_ns"] <= 2e6:
            continue
        seen.add(fp)
        if _kind(r) in REFERENCE_KINDS:
            by_kind.setdefault(_kind(r), []).append(r)
    refs = []
    for kind in REFERENCE_KINDS:
        ranked = sorted(by_kind.get(kind, []), key=lambda r: (r.get("noise") or 0, r["fingerprint"]))
        refs += [{"program": r["program"], "kernel": r["kernel"], "fingerprint": r["fingerprint"],
                  "kind": kind, "runtime_ns": r["runtime_ns"]} for r in ranked[:per_kind]]
    return refs


def _label_file(path: Path) -> dict:
    """{"target", "reference_kernels"} of a label file (measure/labels.py:
    one machine's labels of a corpus, in its labels/ folder)."""
    from tpuperf_cli.measure.labels import read_label_file

    labels = read_label_file(path)
    return {"target": labels.target, "reference_kernels": labels.manifest.get("reference_kernels")}


def load_references(manifest_path: str | Path) -> tuple[dict, list[tuple[dict, str]]]:
    """(manifest, [(reference, hlo text)]) from a corpus manifest, or from
    a label file of the corpus (its target and its reference kernels'
    runtimes, that machine's); the texts come from the corpus's kernel
    shards."""
    import json

    from tpuperf_cli.stream import read_records

    path = Path(manifest_path)
    if path.is_dir():
        path = path / "manifest.json"
    labels = _label_file(path) if path.suffix == ".zst" else None
    source = path               # where the reference kernels come from, for errors
    if labels is not None:      # another machine's labels of the corpus two folders up
        path = path.parent.parent / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except OSError as e:
        raise TpuperfError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise TpuperfError(f"{path}: not a JSON manifest ({e})") from None
    if labels is not None:
        manifest = {**manifest, **labels}
    refs = manifest.get("reference_kernels")
    if not refs:
        raise TpuperfError(f"{source}: no reference_kernels (rebuild the manifest with "
                           f"examples/build_corpus.py manifest)")
    shards = {p["name"]: p["kernel_shard"] for p in manifest.get("per_program", [])}
    texts = {}
    # manifests before 2026-11-24 could pick generated kernels ("ops:copy"),
    # whose records are in the chunks of generated/
    chunks = sorted(path.parent.glob("generated/*.zst"))
    generated = set()
    for program in {r["program"] for r in refs}:
        if program not in shards:
            if ":" in program and chunks:
                generated.add(program)
                continue
            raise TpuperfError(f"{path}: reference program {program!r} is not in per_program")
        shard = path.parent.parent / shards[program]
        for r in read_records(str(shard)):
            texts[(program, r["fingerprint"])] = r["hlo"]
    for shard in chunks if generated else []:
        for r in read_records(str(shard)):
            if r.get("program") in generated:
                texts[(r["program"], r["fingerprint"])] = r["hlo"]
    out = []
    for ref in refs:
        text = texts.get((ref["program"], ref["fingerprint"]))
        if text is None:
            raise TpuperfError(f"{path}: reference kernel {ref['kernel']} is not in the shard "
                               f"of {ref['program']}")
        out.append((ref, text))
    return manifest, out


def check_machine(manifest_path: str | Path, measurer: Any) -> dict:
    """A report: target fields that differ, and each reference kernel's time
    here against the manifest's. report["same"] says whether this machine
    may extend or be compared with the corpus."""
    from .device import MeasureError
    from .target import same_machine

    manifest, refs = load_references(manifest_path)
    differ = same_machine(manifest.get("target") or {}, measurer.target)
    method = (manifest.get("target") or {}).get("method") != measurer.target.get("method")
    results = measurer.measure_many([text for _, text in refs])
    rows = []
    for (ref, _), result in zip(refs, results):
        now = None if isinstance(result, MeasureError) else result.runtime_ns
        rows.append({**ref, "now_ns": now,
                     "ratio": now / ref["runtime_ns"] if now else None})
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    median = statistics.median(ratios) if ratios else None
    timings_agree = bool(ratios) and len(ratios) == len(rows) and \
        1 / MEDIAN_TOLERANCE <= median <= MEDIAN_TOLERANCE and \
        all(1 / KERNEL_TOLERANCE <= x <= KERNEL_TOLERANCE for x in ratios)
    return {"target_differs": differ, "method_differs": method, "kernels": rows,
            "median_ratio": median, "timings_agree": timings_agree,
            "same": not differ and not method and timings_agree,
            "manifest_target": manifest.get("target"), "target": measurer.target}
