"""train --learner gbdt: gradient-boosted trees fitted by LightGBM, stored as
arrays, run in numpy by predict (model/trees.py)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.model.examples import example
from tpuperf_cli.stream import RecordWriter, decode_array, read_records

from conftest import stream_bytes
from synthetic import synthetic_records

lightgbm = pytest.importorskip("lightgbm")
torch = pytest.importorskip("torch")

from tpuperf_cli.model import trees as tree_walk  # noqa: E402
from tpuperf_cli.model.predict import load_model  # noqa: E402
from tpuperf_cli.model.trees import TreeConfig, TreeNet, TreeOptions, fit, from_lightgbm  # noqa: E402

PY = sys.executable
CPU = {"platform": "cpu", "device_kind": "cpu", "chip": "AMD EPYC", "jax": "0.6.2"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("trees")
    for p, recs in enumerate([synthetic_records(n_programs=1, kernels=40, seed=s, target=CPU)
                              for s in range(5)]):
        with RecordWriter(str(d / f"synth{p}.zst")) as w:
            for r in recs:
                r["program"] = f"synth{p}"
                w.write(r)
    (d / "split.json").write_text(json.dumps({"train": ["synth0", "synth1", "synth2"],
                                              "valid": ["synth3"], "test": ["synth4"]}))
    return d


def outcome(res):
    """(exit status, what the user reads) of a CliRunner result, as the
    tool's entry point reports a TpuperfError (one line on stderr)."""
    if isinstance(res.exception, TpuperfError):
        return res.exception.exit_code, str(res.exception)
    return res.exit_code, res.output


def train_cli(args):
    from tpuperf_cli.commands.train import cli

    return CliRunner().invoke(cli, args)


@pytest.fixture(scope="module")
def trees_model(data):
    out = data / "trees.pt"
    res = train_cli(["--learner", "gbdt", "--data", str(data / "*.zst"), "--split", str(data / "split.json"),
                     "-o", str(out), "--trees", "300", "--leaves", "7", "--threads", "1"])
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.parametrize("walk", ["numpy", "compiled"])
def test_walk_equals_lightgbm_on_every_row(walk):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 12)).astype(np.float32)
    x[:, 3] = rng.integers(0, 4, 400)            # ties on thresholds: integer-valued columns
    y = x[:, 0] * 2 + np.where(x[:, 3] > 1, 1.0, -1.0) + 0.1 * rng.normal(size=400)
    booster, keep, stopped = fit(x[:300], y[:300], None, x[300:], y[300:],
                                 TreeOptions(trees=200, leaves=8, patience=20), lambda _: None)
    assert 0 < keep <= 200 and stopped
    arrays = from_lightgbm(booster, keep)
    assert arrays["roots"].size == keep
    net = TreeNet(TreeConfig(num_opcodes=4, in_features=1), arrays)
    if walk == "compiled":
        net.walked = tree_walk.COMPILE_AFTER          # its numpy budget spent
    theirs = booster.predict(x, num_iteration=keep)
    np.testing.assert_allclose(net.predict_rows(x), theirs, rtol=1e-12, atol=1e-12)
    # float64 rows (values a float32 cannot hold) compare against the same thresholds
    np.testing.assert_allclose(net.predict_rows(x.astype(np.float64)), theirs, rtol=1e-12, atol=1e-12)


def test_compiled_walk_agrees_at_thresholds_nan_and_the_lanes_tails():
    # hand-made trees whose float64 thresholds fall between float32 values,
    # walked by rows that sit on either side of them, NaN and infinities
    # among them, in a count of rows that leaves every kind of tail
    t = np.float64(np.float32(1.5)) + 1e-9                 # between two float32s
    arrays = {"roots": np.array([0, 3, -2], np.int32),     # the third tree is a single leaf
              "feature": np.array([0, 1, 0, 1], np.int32),
              "threshold": np.array([t, -t, 1e300, 0.0]),
              "left": np.array([1, -1, -3, -5], np.int32), "right": np.array([2, -2, -4, -6], np.int32),
              "leaf_value": np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])}
    net = TreeNet(TreeConfig(num_opcodes=4, in_features=1), arrays)
    values = np.array([np.float32(1.5), np.nextafter(np.float32(1.5), np.float32(2)), -np.float32(1.5),
                       np.nextafter(-np.float32(1.5), np.float32(-2)), 0.0, -0.0, np.nan, np.inf,
                       -np.inf, 3.4e38], np.float32)
    rng = np.random.default_rng(2)
    for n in (1, 7, 8, 9, 64, 65, 203):
        x = rng.choice(values, size=(n, 3)).astype(np.float32)
        want = tree_walk._numpy_walk(x, *(np.asarray(arrays[k]) for k in tree_walk.TREE_ARRAYS))
        net.walked = tree_walk.COMPILE_AFTER
        np.testing.assert_array_equal(net.predict_rows(x), want)
        np.testing.assert_array_equal(net.predict_rows(x.astype(np.float64)), want)
    # NaN goes left at every split, in both walks
    x = np.full((9, 3), np.nan, np.float32)
    np.testing.assert_array_equal(net.predict_rows(x), np.full(9, 1.0 + 16.0 + 2.0))


def test_walk_compiles_once_numpy_has_walked_its_share(monkeypatch):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 6)).astype(np.float32)
    booster, keep, _ = fit(x, x[:, 0] - x[:, 1] ** 2, None, None, None, TreeOptions(trees=40, leaves=6),
                           lambda _: None)
    net = TreeNet(TreeConfig(num_opcodes=4, in_features=1), from_lightgbm(booster, keep))
    numpy_walk, walks = tree_walk._numpy_walk, []
    monkeypatch.setattr(tree_walk, "COMPILE_AFTER", 250 * keep)
    monkeypatch.setattr(tree_walk, "_numpy_walk", lambda *a: walks.append(len(a[0])) or numpy_walk(*a))
    got = [net.predict_rows(x[i:i + 100]) for i in range(0, 300, 100)]
    # 100 and 100 rows fit the budget of 250; the third 100 would pass it
    assert walks == [100, 100] and net.walked == 200 * keep
    np.testing.assert_allclose(np.concatenate(got), booster.predict(x, num_iteration=keep), rtol=1e-12,
                               atol=1e-12)
    # one call larger than the whole budget compiles at once
    assert net.predict_rows(np.tile(x, (2, 1))).shape == (600,) and walks == [100, 100]


def test_single_leaf_trees_are_kept():
    x = np.zeros((50, 3), np.float32)
    booster, keep, _ = fit(x, np.full(50, 2.5), None, None, None, TreeOptions(trees=3), lambda _: None)
    arrays = from_lightgbm(booster, keep)
    assert arrays["feature"].size == 0 and arrays["leaf_value"].size == arrays["roots"].size >= 1
    net = TreeNet(TreeConfig(num_opcodes=4, in_features=1), arrays)
    np.testing.assert_allclose(net.predict_rows(x[:2]), [2.5, 2.5])


def test_trained_file_loads_without_lightgbm_and_learns(trees_model, data):
    d = torch.load(trees_model, weights_only=True)
    assert d["version"] == 3 and d["config"]["learner"] == "gbdt" and d["config"]["trees"] > 10
    assert d["target"]["platform"] == "cpu" and d["trained"]["valid_figures"]["valid_mape"] < 50
    # predict's numpy engine reads the file without torch, and runs no LightGBM
    code = ("import sys; sys.modules['lightgbm'] = None; sys.modules['torch'] = None\n"
            "from tpuperf_cli.model.predict import load_model\n"
            f"m = load_model({str(trees_model)!r}); print(m.kind)")
    res = subprocess.run([PY, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("gbdt, ")
    model = load_model(str(trees_model))
    test = [example(r) for r in read_records(str(data / "synth4.zst"))]
    pred = model.predict_examples(test)
    true = np.array([ex.runtime for ex in test])
    assert np.median(np.abs(pred / true - 1)) < 0.5
    # the DGL engine's loader gives the same model
    np.testing.assert_array_equal(load_model(str(trees_model), engine="dgl").predict_examples(test), pred)


def test_predict_command_runs_trees_as_the_library_does(trees_model, data):
    recs = list(read_records(str(data / "synth4.zst")))
    res = subprocess.run([PY, "-m", "tpuperf_cli", "predict", "-m", str(trees_model)],
                         input=stream_bytes(recs), capture_output=True)
    assert res.returncode == 0, res.stderr.decode()
    import msgpack

    out = list(msgpack.Unpacker(__import__("io").BytesIO(res.stdout), raw=False))
    lib = load_model(str(trees_model)).predict_examples([example(r) for r in recs])
    np.testing.assert_array_equal([r["pred_ns"] for r in out], lib)
    assert out[0]["model"].startswith("trees-")


def test_show_model_and_eval_name_the_trees(trees_model, data):
    from tpuperf_cli.commands.eval import cli as evaluate
    from tpuperf_cli.commands.predict import cli

    res = CliRunner().invoke(cli, ["-m", str(trees_model), "--show-model"])
    assert res.exit_code == 0 and '"learner": "gbdt"' in res.output
    res = CliRunner().invoke(evaluate, ["-m", str(trees_model), "--no-baseline", "--format", "json",
                                        "--data", str(data / "synth4.zst")])
    assert res.exit_code == 0, res.output
    assert "(fusion task, gbdt, " in res.stderr and json.loads(res.stdout)


def test_bad_tree_arrays_are_a_bad_model_file(trees_model, tmp_path):
    for key, node, value, said in (("left", 0, 10 ** 6, "points past"), ("left", 1, 0, "points back up"),
                                   ("feature", 0, 10 ** 6, "a feature the rows do not have")):
        d = torch.load(trees_model, weights_only=True)
        d["state_dict"][key][node] = value       # past the arrays; a loop (a walk never ends); ...
        bad = tmp_path / "bad.pt"
        torch.save(d, bad)
        for engine in ("numpy", "dgl"):
            with pytest.raises(TpuperfError, match=f"bad model file .*{said}"):
                load_model(str(bad), engine=engine)


def test_ensemble_refuses_trees_alone(trees_model, tmp_path):
    from tpuperf_cli.commands.ensemble import cli as ensemble

    code, said = outcome(CliRunner().invoke(ensemble, [str(trees_model), str(trees_model), "-o",
                                                        str(tmp_path / "e.pt")]))
    assert code == 1 and "gradient-boosted trees; an ensemble joins networks" in said


@pytest.fixture(scope="module")
def net_model(data):
    """A network on the trees' data and split: the same feature scaling."""
    out = data / "net.pt"
    res = train_cli(["--data", str(data / "*.zst"), "--split", str(data / "split.json"), "-o", str(out),
                     "--epochs", "2", "--hidden", "8", "--opcode-dim", "4", "--threads", "1", "-q"])
    assert res.exit_code == 0, res.output
    return out


def test_ensemble_joins_networks_and_trees(net_model, trees_model, data, tmp_path):
    """tpuperf ensemble NET TREES: the trees count as one member more of
    the geometric mean, in both engines, in predict and after a reload."""
    from tpuperf_cli.commands.ensemble import cli as ensemble

    test = [example(r) for r in read_records(str(data / "synth4.zst"))]
    net = load_model(str(net_model)).predict_examples(test)
    trees = load_model(str(trees_model)).predict_examples(test)
    for files, want in (([net_model, trees_model], np.sqrt(net * trees)),
                        ([net_model, net_model, trees_model], np.cbrt(net * net * trees))):
        joined = tmp_path / "joined.pt"
        res = CliRunner().invoke(ensemble, [*map(str, files), "-o", str(joined)])
        assert res.exit_code == 0, res.output
        d = torch.load(joined, weights_only=True)
        assert d["version"] == 4 and d["trees"]["config"]["learner"] == "gbdt"
        assert len(d["members"]) == len(files) - 2
        for engine in ("numpy", "dgl"):
            model = load_model(str(joined), engine=engine)
            assert model.kind.startswith("sage/") and "+ gbdt, " in model.kind
            assert model.describe()["members"] == len(files)
            np.testing.assert_allclose(model.predict_examples(test), want, rtol=1e-4)
            # the trees count in the members' spread as in the mean
            members = np.log([net] * (len(files) - 1) + [trees])
            spread = model.predict_examples(test, with_spread=True)[1]
            np.testing.assert_allclose(spread, members.std(0, ddof=1), rtol=1e-3, atol=1e-5)
    recs = list(read_records(str(data / "synth4.zst")))
    res = subprocess.run([PY, "-m", "tpuperf_cli", "predict", "-m", str(joined)],
                         input=stream_bytes(recs), capture_output=True)
    assert res.returncode == 0, res.stderr.decode()
    import msgpack

    out = list(msgpack.Unpacker(__import__("io").BytesIO(res.stdout), raw=False))
    np.testing.assert_allclose([r["pred_ns"] for r in out], want, rtol=1e-4)
    # a joined file joins on as its parts: its networks and its trees
    again = tmp_path / "again.pt"
    res = CliRunner().invoke(ensemble, [str(net_model), str(joined), "-o", str(again)])
    assert res.exit_code == 0, res.output
    np.testing.assert_allclose(load_model(str(again)).predict_examples(test),
                               np.exp((3 * np.log(net) + np.log(trees)) / 4), rtol=1e-4)


def test_ensemble_refuses_what_cannot_join_trees(net_model, trees_model, data, tmp_path):
    from tpuperf_cli.commands.ensemble import cli as ensemble

    def join(*files):
        return outcome(CliRunner().invoke(ensemble, [*map(str, files), "-o", str(tmp_path / "e.pt")]))

    code, said = join(net_model, trees_model, trees_model)
    assert code == 1 and "a second tree model" in said, said
    # trees of other data: another feature scaling
    other = tmp_path / "other.pt"
    (tmp_path / "split.json").write_text(json.dumps({"train": ["synth0"], "valid": ["synth3"],
                                                     "test": ["synth4"]}))
    res = train_cli(["--learner", "gbdt", "--data", str(data / "*.zst"), "--split",
                     str(tmp_path / "split.json"), "-o", str(other), "--trees", "20", "--threads", "1"])
    assert res.exit_code == 0, res.output
    code, said = join(net_model, other)
    assert code == 1 and "feature scalings (trained on other data?) differ" in said, said
    # a network that keeps other neighbors than the trees count
    d = torch.load(trees_model, weights_only=True)
    d["config"]["neighbors"] = 5
    torch.save(d, tmp_path / "five.pt")
    code, said = join(net_model, tmp_path / "five.pt")
    assert code == 1 and "edges of 5 neighbors, the network keeps 20" in said, said
    assert not os.path.exists(tmp_path / "e.pt")


def test_gbdt_refuses_what_it_cannot_do(data, tmp_path):
    base = ["--learner", "gbdt", "--data", str(data / "*.zst"), "-o", str(tmp_path / "m.pt")]
    for extra, said in ((["--task", "tile"], "tile"), (["--loss", "ape"], "mse"), (["--resume"], "--resume"),
                        (["--time-weight", "0.5"], "--time-weight")):
        code, text = outcome(train_cli(base + extra))
        assert code == 2 and said in text, text
    assert not os.path.exists(tmp_path / "m.pt")


def test_gbdt_without_lightgbm_says_what_to_install(data, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "lightgbm", None)
    code, said = outcome(train_cli(["--learner", "gbdt", "--data", str(data / "*.zst"), "-o",
                                    str(tmp_path / "m.pt")]))
    assert code == 2 and "tpuperf[gbdt]" in said


def test_calibrate_refuses_network_methods_for_trees(trees_model, tmp_path):
    from tpuperf_cli.commands.calibrate import cli

    code, said = outcome(CliRunner().invoke(cli, ["--model", str(trees_model), "--methods", "scale,head",
                                                  "--budget", "1m", "-o", str(tmp_path / "c.pt")]))
    assert code == 1 and "gradient-boosted trees; method(s) head adapt networks" in said, said
    assert "scale, boost" in said


def test_calibrate_boosts_a_tree_model_with_more_trees(trees_model, data, tmp_path):
    """adapt on a tree base: `boost` appends trees fitted to the base's
    errors on another machine's timings; the result saves and loads as a
    tree model that predicts the same."""
    from tpuperf_cli.calibrate import TREE_METHODS, adapt
    from tpuperf_cli.model.predict import build, read_model_file, save_atomic
    from tpuperf_cli.model.trees import tree_model_dict

    records = [r for p in range(5) for r in read_records(str(data / f"synth{p}.zst"))]
    examples = [example(r, i, "measured") for i, r in enumerate(records, 1)]
    for i, ex in enumerate(examples):
        ex.program = f"p{i % 10}"
        # another machine: slower by a factor that grows with the kernel's node count
        ex.runtime = ex.runtime * (1.0 + 0.4 * ex.n)
    base = build(read_model_file(str(trees_model)), str(trees_model))
    result = adapt(base, examples, log=lambda m: None, seconds=60, methods=TREE_METHODS, threads=1)
    model = result["model"]
    assert result["method"] == "boost" and result["members"] == 1, result["scores"]
    assert result["scores"]["boost"] < 0.5 * result["scores"]["base"], result["scores"]
    assert model.cfg.trees > base.cfg.trees
    np.testing.assert_array_equal(model.net.roots[:base.cfg.trees], base.net.roots)
    assert base.net.roots.size == base.cfg.trees           # the base itself is left alone
    path = tmp_path / "cal.pt"
    save_atomic(tree_model_dict(model.net.cfg, model.net.arrays(), model.scaler, "cal", CPU, {}), path)
    np.testing.assert_allclose(load_model(str(path)).predict_examples(examples),
                               model.predict_examples(examples), rtol=1e-12)


def test_boost_reads_kernels_featurized_after_the_model(trees_model, data):
    """Records with more kernel features than a tree base reads (featurized
    by a newer tpuperf, as the GPU corpus is for the bundled GPU trees) are
    cut to the base's, as predict cuts them: boost adds the same trees."""
    import copy

    from tpuperf_cli.model.predict import build, read_model_file
    from tpuperf_cli.model.trees import boost

    records = [r for p in range(5) for r in read_records(str(data / f"synth{p}.zst"))]
    examples = [example(r, i, "measured") for i, r in enumerate(records, 1)]
    for i, ex in enumerate(examples):
        ex.program = f"p{i % 10}"
        ex.runtime = ex.runtime * (1.0 + 0.4 * ex.n)
    wider = []
    for ex in examples:
        w = copy.copy(ex)
        w.kernel_feat = np.concatenate([ex.kernel_feat, [7.0, 8.0, 9.0]]).astype(ex.kernel_feat.dtype)
        wider.append(w)

    def boosted(fit, valid):
        model = build(read_model_file(str(trees_model)), str(trees_model))
        return boost(model, fit, valid, lambda _line: None, seconds=60)

    want, added = boosted(examples[:150], examples[150:])
    got, added_wide = boosted(wider[:150], wider[150:])
    assert added_wide == added > 0
    np.testing.assert_array_equal(got.net.arrays()["threshold"], want.net.arrays()["threshold"])
    assert wider[0].kernel_feat.size == examples[0].kernel_feat.size + 3     # the caller's left alone


def test_fit_stops_at_the_time_limit_with_the_best_trees_so_far():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 6)).astype(np.float32)
    y = x[:, 0] + 0.1 * rng.normal(size=300)
    booster, keep, stopped = fit(x[:200], y[:200], None, x[200:], y[200:],
                                 TreeOptions(trees=2000, leaves=4, patience=2000), lambda _: None,
                                 max_time=1e-9)
    assert stopped.startswith("time limit") and keep == 1
    assert from_lightgbm(booster, keep)["roots"].size == 1


def test_predict_warns_of_kernels_larger_than_the_trees_know(trees_model, data):
    recs = list(read_records(str(data / "synth0.zst")))        # a training program
    res = subprocess.run([PY, "-m", "tpuperf_cli", "predict", "-m", str(trees_model)],
                         input=stream_bytes(recs), capture_output=True)
    assert res.returncode == 0 and b"larger" not in res.stderr, res.stderr.decode()
    for r in recs[:3]:
        r["kernel_feat"] = decode_array(r["kernel_feat"]) * 1e4      # 10,000x the flops and bytes
    res = subprocess.run([PY, "-m", "tpuperf_cli", "predict", "-m", str(trees_model)],
                         input=stream_bytes(recs), capture_output=True)
    err = res.stderr.decode()
    assert res.returncode == 0 and "3 distinct kernel(s) are larger (flops or bytes)" in err, err
