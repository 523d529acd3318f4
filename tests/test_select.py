"""tpuperf select: the K fastest-predicted tile configurations per kernel."""

import io
import os

import numpy as np
import pytest
from click.testing import CliRunner

from tpuperf_cli import metrics
from tpuperf_cli.cli import tpuperf
from tpuperf_cli.errors import StreamError
from tpuperf_cli.records import new_record
from tpuperf_cli.stream import read_records
from tpuperf_cli.tile.select import top_k

from conftest import stream_bytes


def rec(kernel, j, pred, runtime, program="p", **extra):
    return new_record("graph", program=program, kernel=kernel, config_index=j, pred_ns=pred,
                      runtime_ns=runtime, **extra)




def _select(records, args):
    res = CliRunner().invoke(tpuperf, ["select", *args], input=stream_bytes(records))
    return res, (list(read_records(io.BytesIO(res.stdout_bytes))) if res.exit_code == 0 else None)


# kernel a: predictions 30, 10, 20, 10 (tie), 50; kernel b interleaved.
RECORDS = [rec("a", 0, 30.0, 300), rec("b", 0, 7.0, 70), rec("a", 1, 10.0, 120),
           rec("a", 2, 20.0, 100), rec("b", 1, 5.0, 90), rec("a", 3, 10.0, 110),
           rec("a", 4, 50.0, 90), rec("b", 2, 6.0, 60)]


def test_top_k_order_rank_and_ties():
    out = list(top_k([dict(r) for r in RECORDS], 3))
    got = [(r["kernel"], r["config_index"], r["rank"], r["candidates"]) for r in out]
    # a: 10 (config 1, first seen) before 10 (config 3), then 20; b: 5, 6, 7
    assert got == [("a", 1, 1, 5), ("a", 3, 2, 5), ("a", 2, 3, 5),
                   ("b", 1, 1, 3), ("b", 2, 2, 3), ("b", 0, 3, 3)]


def test_top_k_keeps_all_when_fewer_configs_and_groups_by_program():
    recs = [rec("a", 0, 2.0, 1, program="x"), rec("a", 0, 1.0, 1, program="y"),
            rec("a", 1, 0.5, 1, program="x")]
    out = list(top_k(recs, 10))
    assert [(r["program"], r["config_index"], r["rank"]) for r in out] == [
        ("x", 1, 1), ("x", 0, 2), ("y", 0, 1)]


def test_select_cli_top_k_and_slim():
    recs = [dict(r, node_feat=[1, 2], edge_index=[0]) for r in RECORDS]
    res, out = _select(recs, ["--top", "2", "--slim"])
    assert res.exit_code == 0, res.output
    assert [(r["kernel"], r["config_index"], r["rank"]) for r in out] == [
        ("a", 1, 1), ("a", 3, 2), ("b", 1, 1), ("b", 2, 2)]
    assert all("node_feat" not in r and "edge_index" not in r for r in out)
    assert out[0]["runtime_ns"] == 120  # other fields pass through


def test_select_by_measured_runtime_lists_the_true_best():
    res, out = _select(RECORDS, ["-k", "1", "--by", "runtime_ns"])
    assert [(r["kernel"], r["config_index"]) for r in out] == [("a", 4), ("b", 2)]


def test_missing_prediction_is_a_clear_error():
    recs = RECORDS[:3] + [new_record("graph", program="p", kernel="a", runtime_ns=5)]
    with pytest.raises(StreamError, match=r"record 4: field 'pred_ns' is missing"):
        list(top_k(recs, 2))
    res, _ = _select(recs, ["-k", "2"])
    assert res.exit_code == 1 and "pred_ns" in str(res.exception)


def test_tile_size_ape_of_the_short_list_against_a_hand_computed_case():
    """The model's pick is select's rank 1. By hand:
    kernel a: pick config 1 (10 ns pred, tie with config 3 -> pessimistic
    metrics takes the slower, 120), best measured 90 -> |120 - 90| = 30;
    kernel b: pick config 1 (pred 5) runs 90, best 60 -> 30.
    Tile-Size APE = 100 * (30 + 30) / (90 + 60) = 40 %."""
    firsts = [r for r in top_k([dict(r) for r in RECORDS], 1)]
    assert [(r["kernel"], r["runtime_ns"]) for r in firsts] == [("a", 120), ("b", 90)]
    groups = {}
    for r in RECORDS:
        groups.setdefault(r["kernel"], ([], []))
        groups[r["kernel"]][0].append(r["pred_ns"])
        groups[r["kernel"]][1].append(r["runtime_ns"])
    assert metrics.tile_size_ape(groups.values()) == pytest.approx(40.0)
    # select's own pick (ties in input order: config 1, 120 ns; here also the
    # metric's pessimistic pick) gives the same figure
    best = {"a": 90, "b": 60}
    ape = 100 * sum(abs(r["runtime_ns"] - best[r["kernel"]]) for r in firsts) / sum(best.values())
    assert ape == pytest.approx(40.0)
    # top-2 slowdown by hand: a: min(120, 110) / 90 - 1; b: min(90, 60) / 60 - 1 = 0
    assert metrics.top_k_slowdown(groups.values(), 2) == pytest.approx(100 * (110 / 90 - 1) / 2)


# ---------------------------------------------------------------- with the model

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "examples", "tile", "tpu_tile_sample.json")


def test_rank_loss_compares_configs_only_within_a_kernel():
    """The train helper's pairwise loss, by hand: two kernels whose scores
    are ordered right inside each kernel but wrong across them."""
    torch = pytest.importorskip("torch")
    from tpuperf_cli.model.train import rank_loss

    y = torch.tensor([1.0, 2.0, 10.0, 20.0])          # standardised log runtimes
    group = torch.tensor([0, 0, 1, 1])
    right = torch.tensor([0.0, 1.0, -5.0, -4.0])      # kernel 1 scored below kernel 0: fine
    assert float(rank_loss(right, y, group, "hinge", 0.1)) == pytest.approx(0.0)
    # the same scores as one kernel would be penalised (pairs across kernels)
    assert float(rank_loss(right, y, torch.zeros(4), "hinge", 0.1)) > 1.0
    # an inversion inside kernel 1: pairs (0,1) -> 0 and (2,3) -> relu(0.1 + 1) = 1.1
    wrong = torch.tensor([0.0, 1.0, -4.0, -5.0])
    assert float(rank_loss(wrong, y, group, "hinge", 0.1)) == pytest.approx(1.1 / 2)
    # logistic: mean of log(1 + exp(-(s_j - s_i))) over the two pairs
    expect = (np.log1p(np.exp(-1.0)) + np.log1p(np.exp(1.0))) / 2
    assert float(rank_loss(wrong, y, group, "logistic")) == pytest.approx(expect, rel=1e-5)


@pytest.fixture(scope="module")
def sample_graphs(tmp_path_factory):
    """The TPU sample, imported and featurized: one graph record per config."""
    import os
    import subprocess
    import sys

    if not os.path.exists(SAMPLE):
        pytest.skip("TPU sample data not here")
    d = tmp_path_factory.mktemp("tile")
    kernels, graphs = d / "kernels.msgpack", d / "graphs.msgpack"
    for args, src, dst in ((["import", "tuning-json", SAMPLE], None, kernels),
                           (["featurize"], kernels, graphs)):
        with open(dst, "wb") as out:
            res = subprocess.run([sys.executable, "-m", "tpuperf_cli", *args],
                                 stdin=open(src, "rb") if src else subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.PIPE)
        assert res.returncode == 0, res.stderr.decode()
    return graphs


def test_tile_batches_hold_whole_kernels_of_imported_records(sample_graphs):
    pytest.importorskip("torch")
    from tpuperf_cli.model.data import Corpus

    recs = list(read_records(str(sample_graphs)))
    assert len(recs) == 87 and all(r["type"] == "graph" for r in recs)
    corpus = Corpus([str(sample_graphs)], task="tile", configs=8).scan()
    assert corpus.examples == 87 and corpus.sizes == {"tpu_tile_sample": 3}
    seen = set()
    for examples, groups in corpus.batches(np.random.default_rng(0), batch_size=4):
        assert len(groups) == len(examples)
        for g in set(groups.tolist()):
            members = {(examples[i].program, examples[i].kernel)
                       for i in range(len(examples)) if groups[i] == g}
            assert len(members) == 1           # one group id = one kernel
            seen |= members
        kernels = [(e.program, e.kernel) for e in examples]
        # different kernels in a batch never share a group id
        assert len(set(groups.tolist())) == len(set(kernels))
    assert len(seen) == 3


def test_select_with_model_end_to_end(sample_graphs, tmp_path):
    """import -> featurize -> train --task tile -> select --model: K per kernel, in order."""
    pytest.importorskip("dgl")
    model = tmp_path / "tile.pt"
    res = CliRunner().invoke(tpuperf, [
        "train", "--task", "tile", "--data", str(sample_graphs), "--out", str(model),
        "--epochs", "2", "--hidden", "8", "--opcode-dim", "4", "--layers", "1",
        "--configs", "4", "--batch-size", "8"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(tpuperf, ["select", "--top", "3", "--model", str(model),
                                       "--slim", str(sample_graphs)])
    assert res.exit_code == 0, res.output
    out = list(read_records(io.BytesIO(res.stdout_bytes)))
    assert len(out) == 9
    for k in range(3):
        rows = out[3 * k: 3 * k + 3]
        assert len({r["kernel"] for r in rows}) == 1
        assert [r["rank"] for r in rows] == [1, 2, 3]
        preds = [r["pred_ns"] for r in rows]
        assert preds == sorted(preds)
        assert all(r["model"].startswith("tile") and "node_feat" not in r for r in rows)
    assert [r["candidates"] for r in out[::3]] == [61, 16, 10]
