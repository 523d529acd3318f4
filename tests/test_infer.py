"""The numpy engine (model.infer) against the DGL network: the same
predictions, for the bundled model on the whole committed corpus and for
small freshly trained models of every architecture `tpuperf train` makes."""

import glob
import io
import os
import subprocess
import sys

import numpy as np
import pytest

from tpuperf_cli.errors import StreamError, TpuperfError
from tpuperf_cli.stream import RecordWriter, read_records

from synthetic import synthetic_records

torch = pytest.importorskip("torch")

from tpuperf_cli.model.config import MINOR_FEATURE, NetConfig  # noqa: E402
from tpuperf_cli.model.predict import load_model, predict_records  # noqa: E402
from tpuperf_cli.model.train import TrainOptions, train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTOL = 1e-5


def predicted(model, records, batch_size=512):
    recs = [dict(r) for r in records]
    return np.array([r["pred_ns"] for r in predict_records(recs, model, batch_size)])


def assert_same(a, b):
    rel = np.abs(a - b) / np.abs(b)
    assert rel.max() <= RTOL, f"max relative difference {rel.max():.2e} at {int(rel.argmax())}"


def test_bundled_model_same_on_the_whole_corpus():
    shards = sorted(glob.glob(os.path.join(ROOT, "examples/corpus/graphs/*.zst")))
    if not shards:
        pytest.skip("no committed corpus")
    recs = [r for p in shards for r in read_records(p)]
    fast = load_model(engine="numpy")
    slow = load_model(engine="dgl")
    assert fast.engine == "numpy" and slow.engine == "dgl"
    assert fast.name == slow.name
    assert_same(predicted(fast, recs), predicted(slow, recs))
    # the examples path (eval, select) too, on a slice
    exs = [__import__("tpuperf_cli.model.data", fromlist=["example"]).example(r) for r in recs[:700]]
    assert_same(fast.predict_examples(exs), slow.predict_examples(exs))


def test_auto_picks_numpy_and_imports_no_torch():
    code = ("import sys; from tpuperf_cli.model.predict import load_model; m = load_model(); "
            "print(m.engine, 'torch' in sys.modules, 'dgl' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["numpy", "False", "False"]


VARIANTS = {
    "sage-column": dict(),
    "sage-per-node-dropout": dict(reduction="per-node", dropout=0.1),
    "sage-undirected-sum-plain": dict(directed=False, aggregate="sum", residual=False,
                                      normalize=False, kernel_head=False),
    "sage-lstm-2": dict(reduction="lstm", seq_layers=2),
    "sage-transformer": dict(reduction="transformer", heads=2),
    "gat-column": dict(gnn="gat", heads=2),
    "gat-undirected-per-node": dict(gnn="gat", heads=4, directed=False, reduction="per-node"),
    "gat-transformer-2": dict(gnn="gat", heads=2, reduction="transformer", seq_layers=2),
    "none-column": dict(gnn="none"),
    "none-lstm-no-head": dict(gnn="none", reduction="lstm", kernel_head=False),
    "sage-column-short-seq": dict(reduction="transformer", max_nodes=4, heads=4),
    "sage-column-counts": dict(counts=True),
    "none-per-node-counts-no-head": dict(gnn="none", reduction="per-node", counts=True,
                                         kernel_head=False),
    "sage-column-counts-minor": dict(counts=True, minor_dim=4),
    "none-column-minor-no-head": dict(gnn="none", minor_dim=3, kernel_head=False),
}


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    d = tmp_path_factory.mktemp("infer")
    path = d / "train.zst"
    with RecordWriter(str(path)) as w:
        for r in synthetic_records(n_programs=3, kernels=12, seed=3, nodes=(2, 14)):
            w.write(r)
    return path


def _graphs_out_of_order(n=20, seed=5):
    """Records whose edges do not follow node order (not featurize's
    layout): the sequence reductions must sort them topologically."""
    out = []
    for r in synthetic_records(n_programs=1, kernels=n, seed=seed, nodes=(3, 10)):
        k = len(r["node_opcode"])
        perm = np.random.default_rng(seed).permutation(k)
        inv = np.argsort(perm)
        r["node_opcode"] = r["node_opcode"][perm]
        r["node_feat"] = r["node_feat"][perm]
        r["edge_index"] = inv[r["edge_index"]].astype(np.int64)      # int64: the slow path
        out.append(r)
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_fresh_models_of_every_kind_agree(variant, shard, tmp_path):
    cfg = NetConfig(hidden=16, opcode_dim=8, layers=2, **VARIANTS[variant])
    out = tmp_path / "m.pt"
    train([str(shard)], out, cfg, TrainOptions(epochs=1, batch_size=16, lr=1e-2, threads=1, ema=0),
          progress=lambda m: None)
    fast = load_model(str(out), engine="numpy")
    slow = load_model(str(out), engine="dgl")
    assert fast.engine == "numpy"
    assert load_model(str(out)).engine == "numpy"            # auto
    recs = synthetic_records(n_programs=2, kernels=25, seed=9, nodes=(1, 30)) + _graphs_out_of_order()
    want = predicted(slow, recs, batch_size=7)
    assert_same(predicted(fast, recs, batch_size=7), want)
    # and all in one batch
    fast = load_model(str(out), engine="numpy")
    assert_same(predicted(fast, recs, batch_size=512), want)


def test_counts_reach_the_network(shard, tmp_path):
    """--counts: f1 reads two more columns (operands, users), the head one
    more (nodes), and the prediction depends on them."""
    from tpuperf_cli.model.predict import read_model_file

    out = tmp_path / "c.pt"
    cfg = NetConfig(hidden=16, opcode_dim=8, layers=2, counts=True)
    train([str(shard)], out, cfg, TrainOptions(epochs=1, batch_size=16, lr=1e-2, threads=1, ema=0),
          progress=lambda m: None)
    d = read_model_file(str(out))
    assert d["config"]["counts"] is True
    state = d["state_dict"]
    assert state["f1.0.weight"].shape[1] == 8 + d["config"]["in_features"] + 2
    plain = NetConfig(hidden=16, opcode_dim=8, layers=2)
    assert state["head.0.weight"].shape[1] == 2 * 16 + 1 + plain.in_features - 140
    recs = synthetic_records(n_programs=1, kernels=20, seed=2, nodes=(1, 30))
    before = predicted(load_model(str(out), engine="numpy"), recs)
    blind = load_model(str(out), engine="numpy")       # a fresh one: predictions are memoised
    blind.net.f1_counts[:] = 0
    assert np.abs(predicted(blind, recs) / before - 1).max() > 1e-4


def _with_minor(records, sizes):
    """Copies of records whose kernel's output_minor_dim (kernel feature 16)
    takes each of sizes in turn (synthetic records leave it 0)."""
    out = []
    for i, r in enumerate(records):
        r = dict(r)
        kf = np.array(r["kernel_feat"], np.float32)
        kf[MINOR_FEATURE] = sizes[i % len(sizes)]
        r["kernel_feat"] = kf
        out.append(r)
    return out


def test_minor_embedding_reaches_the_network(shard, tmp_path):
    """--minor-embedding: each output minor dim up to 128 has a token of its
    own (larger ones share one), f1 and the head read its embedding, numpy
    and DGL agree on it, and kernels alike but for the minor dim differ."""
    from tpuperf_cli.model.config import MINOR_MAX, minor_tokens
    from tpuperf_cli.model.predict import read_model_file

    assert minor_tokens(np.array([[0] * MINOR_FEATURE + [v] for v in (1, 8, 33, 128, 129, 5000)],
                                 np.float32)).tolist() == [1, 8, 33, 128, 129, MINOR_MAX + 1]
    assert minor_tokens(np.zeros((2, MINOR_FEATURE), np.float32)).tolist() == [0, 0]
    sizes = (1, 8, 16, 33, 40, 300)
    path = tmp_path / "minor.zst"
    with RecordWriter(str(path)) as w:
        for r in _with_minor(synthetic_records(n_programs=3, kernels=12, seed=3, nodes=(2, 14)), sizes):
            w.write(r)
    out = tmp_path / "m.pt"
    cfg = NetConfig(hidden=16, opcode_dim=8, layers=2, minor_dim=4)
    train([str(path)], out, cfg, TrainOptions(epochs=1, batch_size=16, lr=1e-2, threads=1, ema=0),
          progress=lambda m: None)
    d = read_model_file(str(out))
    assert d["config"]["minor_dim"] == 4
    assert d["state_dict"]["minor.weight"].shape == (MINOR_MAX + 2, 4)
    recs = synthetic_records(n_programs=1, kernels=6, seed=2, nodes=(1, 30))
    fast, slow = load_model(str(out), engine="numpy"), load_model(str(out), engine="dgl")
    by_size = [predicted(fast, _with_minor(recs, (v,))) for v in (8, 16, 40)]
    for v, want in zip((8, 16, 40), by_size):
        assert_same(predicted(slow, _with_minor(recs, (v,))), want)
    assert np.abs(by_size[0] / by_size[1] - 1).max() > 1e-4
    assert np.abs(by_size[1] / by_size[2] - 1).max() > 1e-4


def test_minor_embedding_needs_the_minor_dim(shard, tmp_path):
    with pytest.raises(TpuperfError, match="--kernel-features 16 or more"):
        train([str(shard)], tmp_path / "x.pt", NetConfig(hidden=16, opcode_dim=8, minor_dim=4),
              TrainOptions(epochs=1, batch_size=16, threads=1, ema=0, kernel_features=5),
              progress=lambda m: None)


def test_unknown_weights_fall_back_to_dgl(tmp_path):
    """A file the numpy engine does not understand runs on DGL under auto,
    and --engine numpy says so."""
    from tpuperf_cli.model.predict import read_model_file, save_atomic

    d = read_model_file(None or os.path.join(ROOT, "tpuperf_cli/data/default.pt"))
    d["state_dict"]["extra.weight"] = torch.zeros(3)
    path = tmp_path / "odd.pt"
    save_atomic(d, path)
    with pytest.raises(TpuperfError, match="unexpected key"):      # DGL names what is wrong
        load_model(str(path))
    with pytest.raises(TpuperfError, match="unexpected key"):
        load_model(str(path), engine="numpy")


def test_repeated_graphs_are_computed_once_and_errors_keep_their_place():
    recs = synthetic_records(n_programs=1, kernels=6, seed=1)
    stream = recs + recs[:3]
    model = load_model(engine="numpy")
    preds = predicted(model, stream, batch_size=4)
    assert np.array_equal(preds[6:], preds[:3])
    # a bad edge in the middle: the records before it come out, then the error
    bad = [dict(r) for r in recs]
    bad[4]["edge_index"] = np.array([[0, 99]], np.int32)
    got = []
    with pytest.raises(StreamError, match=r"record 5 .*edge_index refers to node 99"):
        for r in predict_records(bad, model, batch_size=512):
            got.append(r)
    assert len(got) == 4
    nan = [dict(r) for r in recs]
    feat = nan[2]["node_feat"].copy()
    feat[0, 3] = np.nan
    nan[2]["node_feat"] = feat
    got = []
    with pytest.raises(StreamError, match=r"record 3 .*NaN"):
        for r in predict_records(nan, model, batch_size=2):
            got.append(r)
    assert len(got) == 2


def test_stream_through_both_engines_is_the_same_bytes_but_pred(tmp_path):
    recs = synthetic_records(n_programs=1, kernels=5, seed=2)
    buf = io.BytesIO()
    w = RecordWriter(buf)
    for r in recs:
        w.write(r)
    w.flush()
    a = list(predict_records(read_records(io.BytesIO(buf.getvalue())), load_model(engine="numpy")))
    b = list(predict_records(read_records(io.BytesIO(buf.getvalue())), load_model(engine="dgl")))
    assert [sorted(r) for r in a] == [sorted(r) for r in b]
    assert_same(np.array([r["pred_ns"] for r in a]), np.array([r["pred_ns"] for r in b]))


def test_predict_command_engines_agree():
    from click.testing import CliRunner

    from tpuperf_cli.commands.predict import cli

    recs = synthetic_records(n_programs=1, kernels=8, seed=4)
    buf = io.BytesIO()
    w = RecordWriter(buf)
    for r in recs:
        w.write(r)
    w.flush()
    got = {}
    for engine in ("auto", "dgl"):
        res = CliRunner().invoke(cli, ["--engine", engine, "--threads", "1"], input=buf.getvalue())
        assert res.exit_code == 0, res.output
        got[engine] = np.array([r["pred_ns"] for r in read_records(io.BytesIO(res.stdout_bytes))])
    assert len(got["auto"]) == 8
    assert_same(got["auto"], got["dgl"])
