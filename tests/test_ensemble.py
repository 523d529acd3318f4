"""tpuperf ensemble: model files that average several networks."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.model.examples import example

from synthetic import synthetic_records

torch = pytest.importorskip("torch")

from tpuperf_cli.model.net import NetConfig  # noqa: E402
from tpuperf_cli.model.predict import combine_models, load_model, save_atomic  # noqa: E402
from tpuperf_cli.model.train import TrainOptions, train  # noqa: E402
from tpuperf_cli.stream import RecordWriter  # noqa: E402

TINY = dict(hidden=16, opcode_dim=8, layers=2)
TPUPERF = os.path.join(os.path.dirname(sys.executable), "tpuperf")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Three tiny models of the same data: seeds 0 and 1, and one wider."""
    d = tmp_path_factory.mktemp("ens")
    records = synthetic_records(n_programs=3, kernels=20, seed=5)
    shard = d / "data.zst"
    with RecordWriter(str(shard)) as w:
        for r in records:
            w.write(r)
    paths = {}
    for name, seed, hidden in (("s0", 0, 16), ("s1", 1, 16), ("wide", 0, 24)):
        paths[name] = d / f"{name}.pt"
        train([str(shard)], paths[name], NetConfig(**{**TINY, "hidden": hidden}),
              TrainOptions(epochs=3, batch_size=8, lr=1e-2, seed=seed, threads=1),
              progress=lambda _m: None)
    return d, records, paths


def test_an_ensemble_predicts_the_geometric_mean_of_its_members(trained, tmp_path):
    d, records, paths = trained
    ens = tmp_path / "ens.pt"
    save_atomic(combine_models([str(paths["s0"]), str(paths["s1"])]), ens)
    ex = [example(r, i) for i, r in enumerate(records, 1)]
    p0 = load_model(str(paths["s0"])).predict_examples(ex)
    p1 = load_model(str(paths["s1"])).predict_examples(ex)
    assert not np.allclose(p0, p1)      # two seeds: two different models
    want = np.sqrt(p0 * p1)
    for engine in ("numpy", "dgl"):
        model = load_model(str(ens), engine=engine)
        assert model.engine == engine and model.describe()["members"] == 2
        np.testing.assert_allclose(model.predict_examples(ex), want, rtol=1e-5)
    # an ensemble given counts member by member: (s0, s1) + s0 weighs s0 twice
    again = tmp_path / "again.pt"
    save_atomic(combine_models([str(ens), str(paths["s0"])]), again)
    np.testing.assert_allclose(load_model(str(again)).predict_examples(ex),
                               np.cbrt(p0 * p1 * p0), rtol=1e-5)
    saved = torch.load(again, weights_only=True)
    assert saved["version"] == 2 and len(saved["members"]) == 2
    assert [m["members"] for m in saved["trained"]["ensemble"]] == [2, 1]


def test_models_of_other_shapes_do_not_join(trained):
    d, records, paths = trained
    with pytest.raises(TpuperfError, match=r"wide\.pt: cannot join .*s0\.pt.*network configs differ"):
        combine_models([str(paths["s0"]), str(paths["wide"])])
    with pytest.raises(TpuperfError, match="at least two"):
        combine_models([str(paths["s0"])])


def test_scalings_join_within_float_rounding_and_not_beyond(trained, tmp_path):
    """The same data scaled on another CPU differs in the last float32
    digits: such seeds join; a scaling of other data does not."""
    d, records, paths = trained
    saved = torch.load(paths["s1"], weights_only=True)
    lo = np.asarray(saved["scaling"]["lo"], dtype=np.float64)
    hi = np.asarray(saved["scaling"]["hi"], dtype=np.float64)
    for name, new_hi, joins in (("rounded", hi * (1 + 2e-7) + 1e-12, True),
                                ("other", hi + 0.01 * (hi - lo + 1), False)):
        changed = dict(saved, scaling=dict(saved["scaling"], hi=new_hi.tolist()))
        path = tmp_path / f"{name}.pt"
        torch.save(changed, path)
        if joins:
            combine_models([str(paths["s0"]), str(path)])
        else:
            with pytest.raises(TpuperfError, match="feature scalings"):
                combine_models([str(paths["s0"]), str(path)])


def test_ensemble_command_writes_a_model_predict_reads(trained, tmp_path):
    d, records, paths = trained
    out = tmp_path / "e.pt"
    res = subprocess.run([TPUPERF, "ensemble", str(paths["s0"]), str(paths["s1"]), "-o", str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "2 network(s) from 2 files" in res.stderr and out.exists()
    res = subprocess.run([TPUPERF, "predict", "-m", str(out), str(d / "data.zst")],
                         capture_output=True)
    assert res.returncode == 0, res.stderr
    # a file that is not a model: one line naming it, no traceback, nothing written
    bad = tmp_path / "bad.pt"
    bad.write_text("not a model")
    res = subprocess.run([TPUPERF, "ensemble", str(paths["s0"]), str(bad), "-o", str(tmp_path / "x.pt")],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "bad.pt" in res.stderr and "not a tpuperf model file" in res.stderr
    assert not (tmp_path / "x.pt").exists()


def test_calibrate_fits_every_members_head():
    from tpuperf_cli.calibrate import head_params
    from tpuperf_cli.model.net import EnsembleNet, Net

    cfg = NetConfig(**TINY)
    nets = [Net(cfg), Net(cfg)]
    ens = EnsembleNet(nets)
    got = {id(p) for p in head_params(ens)}
    assert got == {id(p) for n in nets for p in head_params(n)} and len(got) > 0


def test_an_ensemble_gives_its_members_spread_and_one_network_none(trained, tmp_path):
    """pred_spread: the members' standard deviation of log runtime, the same
    from both engines, from predict_examples, from the records path and from
    the packed bytes predict writes; a model of one member writes none (and
    drops one an earlier model wrote), a known kernel's is 0."""
    import io

    from tpuperf_cli.model.predict import predict_packed, predict_records
    from tpuperf_cli.stream import read_records

    from conftest import stream_bytes

    d, records, paths = trained
    ens = tmp_path / "ens.pt"
    save_atomic(combine_models([str(paths["s0"]), str(paths["s1"])]), ens)
    ex = [example(r, i) for i, r in enumerate(records, 1)]
    logs = np.log([load_model(str(paths[s]), engine="numpy").predict_examples(ex) for s in ("s0", "s1")])
    want = np.abs(logs[0] - logs[1]) / np.sqrt(2)          # the sample deviation of two
    assert want.max() > 0.01
    for engine in ("numpy", "dgl"):
        model = load_model(str(ens), engine=engine)
        model.known = None
        assert model.has_spread
        pred, spread = model.predict_examples(ex, with_spread=True)
        np.testing.assert_allclose(spread, want, rtol=1e-3, atol=1e-5)
        np.testing.assert_array_equal(pred, model.predict_examples(ex))
    model = load_model(str(ens))
    model.known = None
    out = list(predict_records([dict(r) for r in records], model, batch_size=7))
    np.testing.assert_allclose([r["pred_spread"] for r in out], want, rtol=1e-3, atol=1e-5)
    packed = b"".join(b for b, _ in predict_packed(
        ((r, raw) for r, raw in read_records(io.BytesIO(stream_bytes(records)), with_bytes=True)),
        model, batch_size=7))
    assert packed == stream_bytes(out)
    # known kernels: their measured runtime, spread 0
    model.known = {r["fingerprint"]: 1000.0 for r in records[:3]}
    pred, spread = model.predict_examples(ex[:5], with_spread=True)
    assert list(pred[:3]) == [1000.0] * 3 and list(spread[:3]) == [0.0] * 3 and spread[3] > 0
    # one network: no spread, and an earlier model's spread is dropped
    single = load_model(str(paths["s0"]))
    assert not single.has_spread
    assert single.predict_examples(ex, with_spread=True)[1] is None
    again = list(predict_records([dict(r) for r in out], single))
    assert all("pred_spread" not in r for r in again)
    repacked = b"".join(b for b, _ in predict_packed(
        ((r, raw) for r, raw in read_records(io.BytesIO(stream_bytes(out)), with_bytes=True)), single))
    assert repacked == stream_bytes(again)
