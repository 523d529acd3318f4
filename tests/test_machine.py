"""tpuperf machine: this machine's target, and the check against a corpus."""

import json
import os
import subprocess
import sys

from tpuperf_cli.records import new_record
from tpuperf_cli.stream import RecordWriter, read_records

TOOL = [sys.executable, "-m", "tpuperf_cli"]


def matmul(n):
    return f"""HloModule mm{n}

ENTRY %main (a: f32[{n},{n}], b: f32[{n},{n}]) -> f32[{n},{n}] {{
  %a = f32[{n},{n}]{{1,0}} parameter(0)
  %b = f32[{n},{n}]{{1,0}} parameter(1)
  ROOT %dot = f32[{n},{n}]{{1,0}} dot(%a, %b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


def _run(args, tmp_path, **kw):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    return subprocess.run(TOOL + args, capture_output=True, env=env, cwd=tmp_path, **kw)


def _corpus(tmp_path):
    """A one-program corpus, measured here, with its manifest."""
    from tpuperf_cli.hlo.split import module_fingerprint
    from tpuperf_cli.measure.check import pick_references

    (tmp_path / "c" / "corpus" / "kernels").mkdir(parents=True)
    raw = tmp_path / "k.msgpack"
    with open(raw, "wb") as f:
        w = RecordWriter(f)
        for i, n in enumerate((96, 128, 160)):
            w.write(new_record("kernel", program="p", kernel=f"dot.{n}", index=i, count=1,
                               count_known=True, hlo=matmul(n), opcode="dot", fusion_kind=None,
                               fingerprint=module_fingerprint(matmul(n))))
        w.flush()
    shard = tmp_path / "c" / "corpus" / "kernels" / "p.zst"
    p = _run(["measure", "--backend", "cpu", "--min-time", "1ms", "-o", str(shard), str(raw)],
             tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    recs = list(read_records(str(shard)))
    manifest = {"target": recs[0]["target"],
                "per_program": [{"name": "p", "kernel_shard": "corpus/kernels/p.zst"}],
                "reference_kernels": pick_references(recs)}
    return manifest


def test_machine_prints_the_target(tmp_path):
    p = _run(["machine", "-f", "json"], tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    t = json.loads(p.stdout)["target"]
    assert t["platform"] == "cpu" and t["cpu_count"] == 1 and t["clock"] == "process"
    assert {"vendor", "family", "model", "stepping"} <= set(t["cpu"])


def test_check_times_references_and_flags_another_machine(tmp_path):
    manifest = _corpus(tmp_path)
    assert manifest["reference_kernels"], "no reference kernel picked"
    path = tmp_path / "c" / "corpus" / "manifest.json"
    path.write_text(json.dumps(manifest))
    p = _run(["machine", "--check", str(path), "-f", "json"], tmp_path)
    report = json.loads(p.stdout)
    assert report["target_differs"] == [] and not report["method_differs"]
    assert all(r["ratio"] > 0 for r in report["kernels"])
    assert p.returncode == (0 if report["same"] else 1)

    # the same corpus said to come from another CPU: never the same machine
    here = dict(manifest["target"])
    manifest["target"] = {**manifest["target"],
                          "cpu": {**manifest["target"]["cpu"], "model": "no-such-model"}}
    path.write_text(json.dumps(manifest))
    p = _run(["machine", "--check", str(tmp_path / "c" / "corpus")], tmp_path)
    assert p.returncode == 1
    out = p.stdout.decode()
    assert "differs: cpu" in out and "same machine: no" in out

    # a corpus timed by an older method (the committed one: method 4)
    manifest["target"] = {**here, "method": 4}
    path.write_text(json.dumps(manifest))
    p = _run(["machine", "--check", str(path)], tmp_path)
    out = p.stdout.decode()
    assert p.returncode == 1 and "differs: cpu" not in out
    assert "the corpus: method 4, measure now: method 5" in out and "same machine: no" in out


def test_check_without_references_is_a_clear_error(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps({"target": {}}))
    p = _run(["machine", "--check", "m.json"], tmp_path)
    assert p.returncode == 1 and "no reference_kernels" in p.stderr.decode()
    assert "Traceback" not in p.stderr.decode()
    (tmp_path / "l.zst").write_bytes(b"not zstd")
    p = _run(["machine", "--check", "l.zst"], tmp_path)
    assert p.returncode == 1 and "l.zst: not a label file" in p.stderr.decode()
    assert "Traceback" not in p.stderr.decode()


def test_committed_corpus_reference_kernels_resolve():
    """Every reference kernel of the committed manifest is found with its
    HLO text, as `tpuperf machine --check examples/corpus` needs (a
    generated kernel picked as a reference once broke the check)."""
    from pathlib import Path

    from tpuperf_cli.measure.check import load_references

    corpus = Path(__file__).resolve().parent.parent / "examples" / "corpus"
    manifest, refs = load_references(corpus)
    assert len(refs) == len(manifest["reference_kernels"]) >= 8
    assert all(text.startswith("HloModule") for _, text in refs)
    # a label file of the corpus: its machine's target and timings, the corpus's texts
    theirs, their_refs = load_references(corpus / "labels" / "amd-epyc-26-2.zst")
    assert theirs["target"]["cpu"]["vendor"] == "AuthenticAMD" != manifest["target"]["cpu"]["vendor"]
    assert [t for _, t in their_refs] and all(t.startswith("HloModule") for _, t in their_refs)
    ours = {r["fingerprint"]: r["runtime_ns"] for r in manifest["reference_kernels"]}
    assert all(ours.get(r["fingerprint"]) != r["runtime_ns"] for r, _ in their_refs)


def test_references_of_generated_kernels_are_found_in_generated_chunks(tmp_path):
    """Manifests before 2026-11-24 could pick a generated kernel ("ops:dot")
    as a reference: its text is read from the chunks of generated/, and a
    pseudo-program found nowhere is still a clear error."""
    import pytest

    from tpuperf_cli.errors import TpuperfError
    from tpuperf_cli.hlo.split import module_fingerprint
    from tpuperf_cli.measure.check import load_references

    corpus = tmp_path / "c" / "corpus"
    (corpus / "kernels").mkdir(parents=True)
    (corpus / "generated").mkdir()
    refs = []
    for where, program, n in (("kernels/p.zst", "p", 96), ("generated/ops-000.zst", "ops:dot", 128)):
        fp = module_fingerprint(matmul(n))
        with open(corpus / where, "wb") as f:
            w = RecordWriter(f)
            w.write(new_record("kernel", program=program, kernel=f"dot.{n}", index=1, count=1,
                               count_known=True, hlo=matmul(n), opcode="dot", fusion_kind=None,
                               fingerprint=fp, runtime_ns=1e5))
            w.flush()
        refs.append({"program": program, "kernel": f"dot.{n}", "fingerprint": fp, "kind": "dot",
                     "runtime_ns": 1e5})
    manifest = {"target": {}, "per_program": [{"name": "p", "kernel_shard": "corpus/kernels/p.zst"}],
                "reference_kernels": refs}
    (corpus / "manifest.json").write_text(json.dumps(manifest))
    _, found = load_references(corpus)
    assert [ref["program"] for ref, _ in found] == ["p", "ops:dot"]
    assert "f32[128,128]" in found[1][1]

    manifest["reference_kernels"].append({**refs[1], "program": "ops:add"})
    (corpus / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TpuperfError, match="reference kernel dot.128 is not in the shard of ops:add"):
        load_references(corpus)
