"""The roofline baseline: fit on synthetic rooflines, file round trip, CLI."""

import io
import json

import msgpack
import numpy as np
import pytest
from click.testing import CliRunner

from tpuperf_cli.eval import baseline as bl
from tpuperf_cli.records import new_record
from tpuperf_cli.stream import encode_array, read_records

from conftest import write_stream

P, B = 2e11, 1e10          # ridge point 20 op/byte
COEF = {"fusion:kLoop": 3.0, "dot": 1.5, "elementwise": 6.0}


def synthetic(n_per_kind=30, seed=0, noise=0.0, overhead_ns=0.0):
    """Graph records whose runtimes follow the roofline exactly (or with
    log-normal noise)."""
    rng = np.random.default_rng(seed)
    records = []
    for kind, c in COEF.items():
        opcode, fkind = ("fusion", "kLoop") if kind.startswith("fusion") else (
            ("dot", None) if kind == "dot" else ("add", None))
        for i in range(n_per_kind):
            memory = float(rng.uniform(1e4, 1e7))
            intensity = float(np.exp(rng.uniform(np.log(0.5), np.log(500))))  # op/byte
            flops = memory * intensity
            t = c * max(flops / P, memory / B) * 1e9 + overhead_ns
            t *= float(np.exp(rng.normal(0, noise))) if noise else 1.0
            feat = np.array([flops, 0, memory * 0.75, memory * 0.25, memory * 0.25], np.float32)
            records.append(new_record(
                "graph", program=f"p{i % 3}", kernel=f"{kind}.{i}", index=i, count=1,
                opcode=opcode, fusion_kind=fkind, kernel_feat=feat, runtime_ns=t))
    return records


def _encode(records):
    """Records as they arrive from a stream (arrays as plain maps)."""
    return [msgpack.unpackb(msgpack.packb(r, default=encode_array), raw=False) for r in records]


def test_kernel_kind():
    assert bl.kernel_kind({"opcode": "fusion", "fusion_kind": "kInput"}) == "fusion:kInput"
    assert bl.kernel_kind({"opcode": "multiply"}) == "elementwise"
    assert bl.kernel_kind({"opcode": "transpose"}) == "data-movement"
    assert bl.kernel_kind({"opcode": "all-reduce"}) == "collective"
    assert bl.kernel_kind({"opcode": "convolution"}) == "convolution"


def test_fit_recovers_exact_roofline():
    b = bl.fit_records(_encode(synthetic()))
    assert b.peak_flops / b.bandwidth == pytest.approx(P / B, rel=0.05)
    # coefficient ratios between kinds are identifiable (absolute scale is not)
    assert b.coef["fusion:kLoop"] / b.coef["dot"] == pytest.approx(2.0, rel=0.02)
    assert b.coef["elementwise"] / b.coef["dot"] == pytest.approx(4.0, rel=0.02)
    assert b.info["train_mape"] < 3.0
    assert b.info["kernels"] == 90 and b.info["programs"] == 3


def test_fit_with_given_peaks_recovers_coefficients():
    b = bl.fit_records(_encode(synthetic()), peak_flops=P, bandwidth=B)
    for kind, c in COEF.items():
        assert b.coef[kind] == pytest.approx(c, rel=1e-3)
    assert b.info["fitted_peaks"] is False
    rec = _encode(synthetic())[0]
    assert b.predict_record(rec) == pytest.approx(rec["runtime_ns"], rel=1e-3)


def test_fit_recovers_overhead():
    recs = _encode(synthetic(overhead_ns=6000.0))
    b = bl.fit_records(recs)
    assert b.overhead_ns == pytest.approx(6000.0, rel=0.1)
    assert b.info["train_mape"] < 5.0
    pure = bl.fit_records(recs, overhead=False)
    assert pure.overhead_ns == 0.0
    assert pure.info["train_mape"] > 3 * b.info["train_mape"]


def test_rare_and_unseen_kinds_use_other():
    recs = synthetic(n_per_kind=10)
    recs.append(new_record("graph", opcode="sort", kernel_feat=np.ones(5, np.float32),
                           runtime_ns=1000.0, program="p0", kernel="sort.1"))
    b = bl.fit_records(_encode(recs), min_kernels=3)
    assert "sort" not in b.coef and "other" in b.coef
    assert b.coefficient("never-seen") == b.coef["other"]


def test_fit_skips_unmeasured_and_rejects_featureless():
    recs = _encode(synthetic(n_per_kind=5))
    recs.append(new_record("graph", opcode="add", kernel_feat=np.ones(5, np.float32),
                           error="compile failed", program="p0", kernel="x"))
    stats = {}
    b = bl.fit_records(recs, stats=stats)
    assert stats["skipped"] == 1 and b.info["kernels"] == 15
    with pytest.raises(bl.TpuperfError, match="kernel_feat"):
        bl.fit_records([new_record("graph", opcode="add", runtime_ns=5.0)])
    with pytest.raises(bl.TpuperfError, match="no measured kernels"):
        bl.fit_records([])


def test_save_load_round_trip(tmp_path):
    b = bl.fit_records(_encode(synthetic()))
    path = tmp_path / "b.json"
    b.save(path)
    d = json.loads(path.read_text())
    assert d["format"] == "tpuperf-baseline" and "formula" in d
    b2 = bl.Baseline.load(path)
    assert b2.coef == pytest.approx(b.coef)
    assert b2.peak_flops == pytest.approx(b.peak_flops)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(bl.TpuperfError, match="not a baseline file"):
        bl.Baseline.load(bad)


def _shard(tmp_path, records, name="train.zst"):
    return write_stream(tmp_path / name, records)


def test_cli_fit_apply_show(tmp_path):
    from tpuperf_cli.commands.baseline import cli

    shard = _shard(tmp_path, synthetic(noise=0.1))
    shard2 = _shard(tmp_path, synthetic(seed=1, noise=0.1), "train2.zst")
    out = tmp_path / "b.json"
    runner = CliRunner()
    # `--data a b` (as a shell glob expands) and positional files both work
    r = runner.invoke(cli, ["fit", "--data", str(shard), str(shard2), "--out", str(out)])
    assert r.exit_code == 0, r.output + r.stderr
    assert "180 kernels" in r.stderr
    b = bl.Baseline.load(out)
    assert b.peak_flops / b.bandwidth == pytest.approx(P / B, rel=0.3)

    r = runner.invoke(cli, ["apply", "-b", str(out), str(shard)])
    assert r.exit_code == 0, r.stderr
    recs = list(read_records(io.BytesIO(r.stdout_bytes)))
    assert len(recs) == 90
    assert all(rec["baseline_ns"] > 0 and rec["baseline_kind"] for rec in recs)
    ape = [abs(rec["baseline_ns"] - rec["runtime_ns"]) / rec["runtime_ns"] for rec in recs]
    assert np.mean(ape) < 0.25  # 10 % log-normal noise

    r = runner.invoke(cli, ["show", str(out)])
    assert r.exit_code == 0 and "c[dot]" in r.stdout


def test_cli_fit_errors_are_one_line(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "tpuperf_cli", "baseline", "fit", "--data",
                        str(tmp_path / "missing.zst")], capture_output=True, text=True)
    assert p.returncode == 1
    assert "missing.zst" in p.stderr and "Traceback" not in p.stderr
    shard = _shard(tmp_path, synthetic(n_per_kind=3))
    p = subprocess.run([sys.executable, "-m", "tpuperf_cli", "baseline", "fit", str(shard),
                        "--peak-flops", "1e12"], capture_output=True, text=True)
    assert p.returncode == 1 and "both" in p.stderr
