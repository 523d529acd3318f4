"""tpuperf train: the model library (data, net, loop) on synthetic graph records."""

import json
import os
import re
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from tpuperf_cli.errors import StreamError, TpuperfError
from tpuperf_cli.model.data import Corpus, draw_rates, make_batch
from tpuperf_cli.model.examples import Scaler, example, topological_order
from tpuperf_cli.records import KERNEL_FEATURES, new_record
from tpuperf_cli.stream import RecordWriter, read_records

from synthetic import synthetic_records

torch = pytest.importorskip("torch")

from tpuperf_cli.model.net import NetConfig  # noqa: E402
from tpuperf_cli.model.train import TrainOptions, rank_loss, train  # noqa: E402

TINY = dict(hidden=16, opcode_dim=8, layers=2)


def write_shards(tmp_path, records, by="program"):
    paths = []
    groups = {}
    for r in records:
        groups.setdefault(r[by], []).append(r)
    for key, rs in groups.items():
        p = tmp_path / f"{key}.zst"
        with RecordWriter(str(p)) as w:
            for r in rs:
                w.write(r)
        paths.append(str(p))
    return paths


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    write_shards(d, synthetic_records(n_programs=5, kernels=24, seed=3))
    split = d / "split.json"
    split.write_text(json.dumps({"train": ["synth0", "synth1", "synth2"], "valid": ["synth3"],
                                 "test": ["synth4"]}))
    return d


def quiet(_msg):
    pass


class Crash(Exception):
    """Raised by crash_at's progress callback: a run killed mid-way."""


def crash_at(epoch):
    """A progress callback that interrupts a run as it reports `epoch`
    (before that epoch's model and state are saved)."""
    def progress(msg):
        if msg.startswith(f"epoch {epoch:3d}/"):
            raise Crash()
    return progress


def fast_opts(**kw):
    base = dict(epochs=6, batch_size=8, lr=1e-2, seed=0, threads=1)
    base.update(kw)
    return TrainOptions(**base)


# ---------------------------------------------------------------- data

def test_example_rejects_kernel_record_with_featurize_hint():
    rec = new_record("kernel", program="p", kernel="fusion.1", hlo="HloModule m")
    with pytest.raises(StreamError, match="run featurize first"):
        example(rec, 7, "in.zst")


def test_graph_record_lacking_a_field_is_told_which_not_to_featurize():
    rec = synthetic_records(1, 1)[0]
    rec["hlo"] = "HloModule m"            # graph records carry the kernel's hlo too
    del rec["edge_index"]
    with pytest.raises(StreamError) as e:
        example(rec, 3, "in.zst")
    msg = str(e.value)
    assert "record 3" in msg and "lacks field(s) edge_index" in msg, msg
    assert "featurize first" not in msg and "not a graph record" not in msg, msg


def test_example_checks_shapes():
    rec = synthetic_records(1, 1)[0]
    rec["node_feat"] = np.zeros((2, 3), np.float32)
    with pytest.raises(StreamError, match="node_feat has shape"):
        example(rec, 1)
    rec = synthetic_records(1, 1)[0]
    rec["edge_index"] = np.array([[0, 99]], np.int32)
    with pytest.raises(StreamError, match="refers to node 99"):
        example(rec, 1)


def test_scaler_min_max_from_training_data_and_round_trip():
    exs = [example(r) for r in synthetic_records(2, 10, seed=1)]
    s = Scaler()
    for ex in exs:
        s.update(ex)
    s.finish()
    b = make_batch(exs, s, s.opcode_table(139))
    assert b.x.shape == (sum(ex.n for ex in exs), 140 + len(KERNEL_FEATURES) + 24)
    assert b.x.min() >= -1e-6 and b.x.max() <= 1 + 1e-6
    assert abs(float(np.mean(b.y))) < 0.5          # standardised log runtime
    s2 = Scaler.from_dict(json.loads(json.dumps(s.to_dict())))
    b2 = make_batch(exs, s2, s2.opcode_table(139))
    np.testing.assert_array_equal(b.x, b2.x)
    # the whole scaling survives (a resumed run writes its model file from
    # it, and `tpuperf ensemble` joins models only of equal scalings)
    assert s2.to_dict() == s.to_dict() and s.count > 0
    # opcodes never seen in training map to row 0
    lut = s.opcode_table(139)
    assert lut[120] == 0 and lut[34] == 34


def test_label_floor_fits_runtimes_below_it_as_the_floor():
    """train --label-floor-us: labels below the floor count as the floor in
    the runtime scaling and the target, and a model file keeps it."""
    exs = [example(r) for r in synthetic_records(2, 10, seed=1)]
    rts = np.array([ex.runtime for ex in exs])
    floor = float(np.median(rts))
    plain, floored = Scaler(), Scaler(floor_ns=floor)
    for ex in exs:
        plain.update(ex)
        floored.update(ex)
    plain.finish()
    floored.finish()
    assert floored.mean == pytest.approx(np.mean(np.log(np.maximum(rts, floor))))
    assert floored.mean > plain.mean
    y = floored.target(rts)
    low = rts <= floor
    assert np.allclose(y[low], y[low][0]) and np.all(y[~low] > y[low][0])
    again = Scaler.from_dict(json.loads(json.dumps(floored.to_dict())))
    assert again.floor_ns == floor and np.allclose(again.target(rts), y)
    assert "label_floor_ns" not in plain.to_dict()      # models without one read as before
    assert Scaler.from_dict(plain.to_dict()).floor_ns == 0.0


def test_batch_truncates_neighbours_per_direction():
    n = 30
    # node 0 consumes nodes 1..29: 29 operands, truncated to 20
    edges = np.array([[0, v] for v in range(1, n)], np.int32)
    rec = synthetic_records(1, 1)[0]
    rec.update(node_opcode=np.full(n, 2, np.int32), node_feat=np.zeros((n, 140), np.float32),
               edge_index=edges)
    ex = example(rec)
    s = Scaler()
    s.update(ex)
    s.finish()
    b = make_batch([ex, ex], s, s.opcode_table(139), neighbors=20)
    assert Counter(b.in_dst.tolist()) == {0: 20, n: 20}        # per graph, offset by n
    assert len(b.out_src) == 2 * (n - 1)                         # each producer has one user
    assert set(b.in_src.tolist()) <= set(range(1, n)) | set(range(n + 1, 2 * n))


def test_topological_order_puts_operands_first():
    rec = synthetic_records(1, 1)[0]
    rec.update(node_opcode=np.array([2, 2, 2], np.int32), node_feat=np.zeros((3, 140), np.float32),
               edge_index=np.array([[1, 0], [1, 2]], np.int32))    # 1 consumes 0 and 2
    order = topological_order(example(rec)).tolist()
    assert order.index(2) < order.index(1) and order.index(0) < order.index(1)


def uneven_records():
    rs = synthetic_records(n_programs=1, kernels=60, seed=5)
    rs += synthetic_records(n_programs=1, kernels=6, seed=6)
    for r in rs[60:]:
        r["program"] = "small"
    return rs


@pytest.mark.parametrize("memory_mb", [2048, 0.02])
def test_epochs_draw_evenly_across_programs(tmp_path, memory_mb):
    paths = write_shards(tmp_path, uneven_records())
    c = Corpus(paths, memory_mb=memory_mb).scan()
    assert c.streaming == (memory_mb < 1)
    rng = np.random.default_rng(0)
    counts = Counter()
    for _ in range(20):
        counts.update(ex.program for ex in c.epoch(rng))
    big, small = counts["synth0"], counts["small"]
    assert abs(big - small) / (big + small) < 0.1, counts
    # without evenness the large program dominates
    counts = Counter(ex.program for ex in c.epoch(rng, even=False))
    assert counts == {"synth0": 60, "small": 6}


def test_generated_share_bounds_the_pseudo_programs(tmp_path):
    # two real programs and six generated pseudo-programs of 10 kernels
    rs = synthetic_records(n_programs=8, kernels=10, seed=7)
    for r in rs:
        n = int(r["program"][5:])
        if n >= 2:
            r["program"] = f"ops:op{n}"
    c = Corpus(write_shards(tmp_path, rs)).scan()
    rng = np.random.default_rng(0)
    counts = Counter()
    for _ in range(50):
        counts.update(ex.program for ex in c.epoch(rng, generated_share=0.2))
    real = counts["synth0"] + counts["synth1"]
    generated = sum(v for k, v in counts.items() if k.startswith("ops:"))
    # 20 real kernels a draw each, then 20 * 0.2 / 0.8 = 5 generated draws
    assert abs(real / 50 - 20) < 2 and abs(generated / 50 - 5) < 1, counts
    assert len([k for k in counts if k.startswith("ops:")]) == 6
    # without the option a pseudo-program weighs as much as a program
    counts = Counter(ex.program for ex in c.epoch(rng))
    assert sum(v for k, v in counts.items() if k.startswith("ops:")) > 40


def two_generated_sources(tmp_path):
    """Two programs, and generated kernels of two sources: heavy, one
    pseudo-program; sweeps, five."""
    rs = synthetic_records(n_programs=8, kernels=10, seed=7)
    for r in rs:
        n = int(r["program"][5:])
        if n >= 2:
            r["program"] = "heavy:conv" if n == 2 else f"sweeps:s{n}"
    return Corpus(write_shards(tmp_path, rs)).scan()


def test_generated_share_even_across_sources(tmp_path):
    """--generated-even source: a source of one pseudo-program draws as much
    as a source of five, where by program it draws a sixth."""
    c = two_generated_sources(tmp_path)
    rng = np.random.default_rng(0)
    for even, heavy_part in (("source", 1 / 2), ("program", 1 / 6)):
        counts = Counter()
        for _ in range(200):
            counts.update(ex.program for ex in c.epoch(rng, generated_share=0.5,
                                                         generated_even=even))
        generated = sum(v for k, v in counts.items() if ":" in k)
        real = counts["synth0"] + counts["synth1"]
        assert abs(generated / real - 1) < 0.1, (even, counts)
        assert abs(counts["heavy:conv"] / generated - heavy_part) < 0.05, (even, counts)


def test_source_weight_scales_a_sources_part(tmp_path):
    """--source-weight heavy=0.5: heavy draws half of what sweeps draws, the
    generated kernels still half of the epoch; an unknown source is refused."""
    c = two_generated_sources(tmp_path)
    rng = np.random.default_rng(0)
    counts = Counter()
    for _ in range(200):
        counts.update(ex.program for ex in c.epoch(rng, generated_share=0.5, generated_even="source",
                                                     source_weights={"heavy": 0.5}))
    generated = sum(v for k, v in counts.items() if ":" in k)
    assert abs(generated / (counts["synth0"] + counts["synth1"]) - 1) < 0.1, counts
    assert abs(counts["heavy:conv"] / generated - 1 / 3) < 0.05, counts
    with pytest.raises(TpuperfError, match="indexd.*has heavy, sweeps"):
        draw_rates(c.sizes, True, 0.5, "source", {"indexd": 1.0})
    assert draw_rates(c.sizes, True, 0.5, "source", {"heavy": 0.0})["heavy:conv"] == 0


@pytest.mark.parametrize("memory_mb", [2048, 0.02])
def test_time_weight_draws_a_programs_kernels_by_their_time(tmp_path, memory_mb):
    """--time-weight 1: a kernel drawn in proportion to count x runtime, its
    program's total draws unchanged; generated kernels as before; 0 alike."""
    rs = synthetic_records(n_programs=2, kernels=4, seed=3)
    for i, r in enumerate(rs[:4]):          # synth0: 10, 20, 30 us once each, 40 us run twice
        r["runtime_ns"], r["count"] = 10_000.0 * (i + 1), 2 if i == 3 else 1
    for r in rs[4:]:
        r["program"] = "ops:dot"
    c = Corpus(write_shards(tmp_path, rs), memory_mb=memory_mb).scan()
    assert {p: list(t) for p, t in c.times.items()} == {"synth0": [10_000.0, 20_000.0, 30_000.0, 80_000.0]}
    rng = np.random.default_rng(0)
    for power, parts in ((1.0, [1, 2, 3, 8]), (0.0, [1, 1, 1, 1])):
        counts = Counter()
        for _ in range(3000):
            counts.update((ex.program, ex.runtime) for ex in c.epoch(rng, time_weight=power))
        drawn = [counts["synth0", 10_000.0 * (i + 1)] for i in range(4)]
        assert abs(sum(drawn) / 3000 - 4) < 0.1, (power, counts)       # the program's 4 draws
        assert np.allclose(np.array(drawn) / sum(drawn), np.array(parts) / sum(parts), atol=0.02), drawn
        assert abs(sum(v for (p, _), v in counts.items() if p == "ops:dot") / 3000 - 4) < 0.1


def test_streaming_buffer_stays_bounded(tmp_path):
    paths = write_shards(tmp_path, uneven_records())
    c = Corpus(paths, memory_mb=0.02, shuffle_items=8).scan()
    assert c.streaming and c.cache is None
    items = list(c.epoch(np.random.default_rng(1)))
    assert len(items) > 50


# ---------------------------------------------------------------- losses

def test_rank_loss_orders_two_configs():
    # two configurations of one kernel: config 0 ran faster than config 1
    y = torch.tensor([1.0, 2.0])
    group = torch.tensor([0, 0])
    for kind in ("hinge", "logistic"):
        score = torch.tensor([0.5, -0.5], requires_grad=True)    # wrong order at the start
        opt = torch.optim.SGD([score], lr=0.5)
        for _ in range(50):
            opt.zero_grad()
            loss = rank_loss(score, y, group, kind, margin=0.1)
            loss.backward()
            opt.step()
        assert score[0] < score[1], kind
    right = rank_loss(torch.tensor([0.0, 1.0]), y, group, "hinge", 0.1)
    wrong = rank_loss(torch.tensor([1.0, 0.0]), y, group, "hinge", 0.1)
    assert float(right) == 0.0 and float(wrong) > 1.0
    # pairs across groups do not count
    assert float(rank_loss(torch.tensor([1.0, 0.0]), y, torch.tensor([0, 1]))) == 0.0


def test_ape_loss_is_the_relative_error_and_stays_linear_far_out():
    from tpuperf_cli.model.train import ape_of_log_error

    d = torch.tensor([0.0, np.log(3.0), -np.log(3.0), 2.0, 3.0], requires_grad=True)
    a = ape_of_log_error(d)
    # 3x over costs 200%, 3x under 67%: what MAPE counts
    assert a[:3].detach().numpy() == pytest.approx([0.0, 2.0, 2 / 3], rel=1e-5)
    # continuous at d = 2, then a straight line with the slope it had there
    assert float(a[3]) == pytest.approx(np.exp(2) - 1, rel=1e-5)
    assert float(a[4]) == pytest.approx(np.exp(2) - 1 + np.exp(2), rel=1e-5)
    a.sum().backward()
    assert np.isfinite(d.grad.numpy()).all() and float(d.grad[4]) == pytest.approx(np.exp(2), rel=1e-5)


def trained_with_loss(shards, tmp_path, loss, **opts):
    """(validation losses by epoch, the model file, the loaded model) of a
    tiny model trained 8 epochs with --loss (and `opts`); its training loss
    fell and the file records the loss."""
    from tpuperf_cli.model.predict import load_model

    out = tmp_path / f"{loss}.pt"
    r = train([str(shards / "*.zst")], out, NetConfig(**TINY), fast_opts(epochs=8, loss=loss, **opts),
              split=str(shards / "split.json"), progress=quiet)
    losses = [h["train_loss"] for h in r["history"]]
    assert losses[-1] < 0.8 * losses[0], losses
    assert torch.load(out, weights_only=True)["loss"] == loss
    model = load_model(str(out))
    assert model.meta["loss"] == loss
    return [h["valid_loss"] for h in r["history"]], out, model


def test_ape_loss_trains_a_fusion_model_and_validates_on_mean_ape(shards, tmp_path):
    valid, _, _ = trained_with_loss(shards, tmp_path, "ape")
    # the validation loss is a mean |pred/runtime - 1|, not an MSE of standardised logs
    assert all(0 <= v < 50 for v in valid) and min(valid) < valid[0]


def test_huber_loss_is_squared_near_and_linear_far_and_validates_on_its_mean(shards, tmp_path):
    from tpuperf_cli.model.train import HUBER_DELTA, huber_of_log_error

    d = np.array([0.0, 0.1, -0.1, HUBER_DELTA, 1.0, -np.log(3.0)])
    expected = torch.nn.functional.huber_loss(torch.tensor(d), torch.zeros(6), reduction="none",
                                              delta=HUBER_DELTA).numpy()
    assert huber_of_log_error(d) == pytest.approx(expected)
    # within 1.25x squared; a kernel 3x off costs linearly, as much more as it is further
    assert huber_of_log_error(np.array([0.1]))[0] == pytest.approx(0.005)
    far = huber_of_log_error(np.array([np.log(3.0), np.log(9.0)]))
    assert far[1] - far[0] == pytest.approx(HUBER_DELTA * np.log(3.0))
    valid, out, model = trained_with_loss(shards, tmp_path, "huber")
    assert min(valid) < valid[0]
    # the validation loss is the mean Huber loss of the log error of what the model predicts
    examples = [example(r) for r in read_records(str(shards / "synth3.zst")) if r.get("runtime_ns")]
    pred = model.predict_examples(examples)
    true = np.array([ex.runtime for ex in examples])
    assert np.mean(huber_of_log_error(np.log(pred / true))) == pytest.approx(
        torch.load(out, weights_only=True)["trained"]["valid_figures"]["valid_loss"], rel=1e-3)


def test_huber_within_sets_where_the_loss_turns_linear_in_training_and_validation(shards, tmp_path):
    from tpuperf_cli.model.options import TrainOptions
    from tpuperf_cli.model.train import huber_of_log_error

    delta = np.log(1.1)
    d = np.array([0.0, 0.05, -0.2, 1.0])
    expected = torch.nn.functional.huber_loss(torch.tensor(d), torch.zeros(4), reduction="none",
                                              delta=delta).numpy()
    assert huber_of_log_error(d, delta) == pytest.approx(expected)
    with pytest.raises(TpuperfError, match="--huber-within shapes --loss huber"):
        TrainOptions(loss="mse", huber_within=1.1).check()
    with pytest.raises(TpuperfError, match="ratio above 1"):
        TrainOptions(loss="huber", huber_within=0.9).check()
    from tpuperf_cli.commands.train import cli
    from tpuperf_cli.model.options import HUBER_WITHIN

    # the command's default is the options' (written out there for start-up's sake)
    assert next(p for p in cli.params if p.name == "huber_within").default == HUBER_WITHIN
    _, out, model = trained_with_loss(shards, tmp_path, "huber", huber_within=1.1)
    trained = torch.load(out, weights_only=True)["trained"]
    assert trained["options"]["huber_within"] == 1.1        # calibrate reads it
    examples = [example(r) for r in read_records(str(shards / "synth3.zst")) if r.get("runtime_ns")]
    err = np.log(model.predict_examples(examples) / np.array([ex.runtime for ex in examples]))
    assert np.mean(huber_of_log_error(err, delta)) == pytest.approx(
        trained["valid_figures"]["valid_loss"], rel=1e-3)
    assert np.mean(huber_of_log_error(err)) != pytest.approx(trained["valid_figures"]["valid_loss"],
                                                             rel=1e-3)


def test_noise_weights_halve_at_the_scale_and_keep_unknown_noise():
    from tpuperf_cli.model.train import noise_weights

    w = noise_weights(np.array([0.0, 0.05, np.nan, 0.5]), 0.05, "cpu").numpy()
    assert w.mean() == pytest.approx(1.0)
    assert w[1] == pytest.approx(w[0] / 2) and w[2] == pytest.approx(w[0])
    assert w[3] < w[1] / 10


def test_noisy_kernels_pull_the_model_less(tmp_path):
    """Two copies of one kernel, one steady and one whose label is off by
    5x and noisy: with --noise-scale the model follows the steady one."""
    rec = synthetic_records(n_programs=1, kernels=1, seed=7)[0]
    steady = [{**rec, "kernel": f"s{i}", "runtime_ns": 1e4, "noise": 0.01} for i in range(8)]
    noisy = [{**rec, "kernel": f"n{i}", "runtime_ns": 5e4, "noise": 0.5} for i in range(8)]
    (shard,) = write_shards(tmp_path, steady + noisy)
    preds = {}
    for scale in (0.0, 0.05):
        out = tmp_path / f"m{scale}.pt"
        train([shard], out, NetConfig(**TINY), fast_opts(epochs=30, noise_scale=scale, ema=0),
              progress=quiet)
        from tpuperf_cli.model.predict import load_model, predict_batch

        model = load_model(str(out))
        preds[scale] = float(predict_batch(model, [steady[0]])[0])
    assert abs(np.log(preds[0.05] / 1e4)) < abs(np.log(preds[0.0] / 1e4))


# ---------------------------------------------------------------- training

def test_tiny_model_trains_and_loss_falls(shards, tmp_path):
    out = tmp_path / "m.pt"
    r = train([str(shards / "*.zst")], out, NetConfig(**TINY), fast_opts(epochs=8),
              split=str(shards / "split.json"), progress=quiet)
    assert out.exists() and not os.path.exists(str(out) + ".resume")
    losses = [h["train_loss"] for h in r["history"]]
    assert losses[-1] < 0.6 * losses[0], losses
    valid = [h["valid_loss"] for h in r["history"]]
    assert min(valid) < valid[0]
    d = torch.load(out, weights_only=True)
    assert d["format"] == "tpuperf-model" and d["task"] == "fusion"
    assert d["trained"]["programs"] == ["synth0", "synth1", "synth2"]
    assert d["trained"]["split"].endswith("split.json")
    assert d["scaling"]["kernel_features"] == len(KERNEL_FEATURES) and 34 in d["opcodes"]


def test_valid_shards_take_precedence_over_the_splits_valid_programs(shards, tmp_path):
    msgs = []
    r = train([str(shards / "*.zst")], tmp_path / "v.pt", NetConfig(**TINY), fast_opts(epochs=1),
              valid=[str(shards / "synth4.zst")], split=str(shards / "split.json"),
              progress=msgs.append)
    assert any("validation 24 examples, 1 programs" in m for m in msgs), msgs
    assert not any("no validation examples" in m for m in msgs), msgs
    assert np.isfinite(r["history"][0]["valid_loss"])
    # training still keeps only the split's "train" programs
    d = torch.load(tmp_path / "v.pt", weights_only=True)
    assert d["trained"]["programs"] == ["synth0", "synth1", "synth2"]


def test_split_training_leaves_out_kernels_generated_from_held_out_programs(tmp_path):
    # sweeps drawn from a train program, the valid one and the test one: the
    # train list's "sweeps:*" takes all three, but the model learns only the
    # first, and the scan counts the others once even when streaming
    rs = synthetic_records(n_programs=6, kernels=8, seed=5)
    origins = {"synth3": "synth0", "synth4": "synth1", "synth5": "synth2"}
    for r in rs:
        if r["program"] in origins:
            r["origin"] = origins[r["program"]]
            r["program"] = f"sweeps:{r['origin']}_b2"
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": ["synth0", "sweeps:*"], "valid": ["synth1"], "test": ["synth2"]}))
    data = write_shards(tmp_path, rs)
    for memory_mb in (2048, 1e-3):
        c = Corpus(data, ["synth0", "sweeps:*"], memory_mb=memory_mb, held_out=["synth1", "synth2"]).scan()
        list(c.epoch(np.random.default_rng(0)))
        assert set(c.sizes) == {"synth0", "sweeps:synth0_b2"} and c.drawn_from_held_out == 16
    msgs = []
    train(data, tmp_path / "m.pt", NetConfig(**TINY), fast_opts(epochs=1), split=str(split),
          progress=msgs.append)
    assert any("(16 generated from the split's valid or test programs left out)" in m for m in msgs), msgs
    d = torch.load(tmp_path / "m.pt", weights_only=True)
    assert d["trained"]["programs"] == ["sweeps:synth0_b2", "synth0"]


def test_split_training_says_how_many_records_no_list_names(tmp_path):
    """A split written before a generator source existed ("layers") names
    none of its kernels: they are left out, and train says so on stderr
    rather than dropping them unsaid."""
    rs = synthetic_records(n_programs=5, kernels=8, seed=6)
    for r in rs:
        if r["program"] in ("synth3", "synth4"):
            r["program"] = f"layers:{r['program']}"
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": ["synth0", "synth1"], "valid": ["synth2"], "test": []}))
    data = write_shards(tmp_path, rs)
    msgs = []
    train(data, tmp_path / "m.pt", NetConfig(**TINY), fast_opts(epochs=1), split=str(split),
          progress=msgs.append)
    warned = [m for m in msgs if "no list of" in m]
    assert len(warned) == 1 and "16 records" in warned[0] and "16 of layers:*" in warned[0], msgs
    msgs = []
    split.write_text(json.dumps({"train": ["synth0", "synth1", "layers:*"], "valid": ["synth2"]}))
    train(data, tmp_path / "m2.pt", NetConfig(**TINY), fast_opts(epochs=1), split=str(split),
          progress=msgs.append)
    assert not any("no list of" in m for m in msgs), msgs
    assert "layers:synth3" in torch.load(tmp_path / "m2.pt", weights_only=True)["trained"]["programs"]


def noise_valid(tmp_path):
    """A validation shard of noise: the validation loss soon stops improving."""
    recs = synthetic_records(n_programs=1, kernels=20, seed=4)
    rng = np.random.default_rng(0)
    for r in recs:
        r["program"] = "noise"
        r["runtime_ns"] = float(rng.uniform(1e3, 1e6))
    (noise,) = write_shards(tmp_path, recs)
    return noise


def test_model_file_records_epochs_run_best_epoch_and_total_seconds(shards, tmp_path):
    from tpuperf_cli.model.predict import weights_digest

    noise = noise_valid(tmp_path)
    out = tmp_path / "p.pt"
    r = train([str(shards / "synth0.zst"), str(shards / "synth1.zst")], out, NetConfig(**TINY),
              fast_opts(epochs=20, patience=1, ema=0), valid=[noise], progress=quiet)
    assert r["stopped"].startswith("no better validation loss") and r["epochs"] > r["best_epoch"], r
    d = torch.load(out, weights_only=True)
    t = d["trained"]
    assert t["epochs"] == r["epochs"] == len(r["history"])       # epochs run, not the best one
    assert t["best_epoch"] == r["best_epoch"] and t["stopped"] == r["stopped"]
    assert t["seconds"] == r["seconds"] and 0 < t["best_seconds"] <= t["seconds"]
    assert t["valid_figures"] == r["history"][r["best_epoch"] - 1]
    # the weights are still the best epoch's: the name (their hash) is the one written then
    assert d["name"] == r["model"] == f"p-{weights_digest(d['state_dict'])}"


def test_tail_average_is_the_mean_of_the_weights_from_the_best_epoch_on(shards, tmp_path, monkeypatch):
    from tpuperf_cli.model import train as training
    from tpuperf_cli.model.predict import load_model

    seen = []           # (improved, the saved weights) at each epoch's end, as the run adds them
    add = training.TrainingRun.add_to_tail

    def spy(run, improved):
        seen.append((improved, {k: v.clone() for k, v in run.saved_net.state_dict().items()}))
        add(run, improved)

    monkeypatch.setattr(training.TrainingRun, "add_to_tail", spy)
    tail = tmp_path / "tail.pt"
    r = train([str(shards / "synth0.zst"), str(shards / "synth1.zst")], tmp_path / "p.pt",
              NetConfig(**TINY), fast_opts(epochs=30, patience=4, tail_average=str(tail)),
              valid=[noise_valid(tmp_path)], progress=quiet)
    assert r["epochs"] > r["best_epoch"] and len(seen) == r["epochs"], r
    assert seen[r["best_epoch"] - 1][0] and not any(imp for imp, _ in seen[r["best_epoch"]:])
    d = torch.load(tail, weights_only=True)
    t = d["trained"]
    assert t["tail_average"] == {"epochs": [r["best_epoch"], r["epochs"]],
                                 "snapshots": r["epochs"] - r["best_epoch"] + 1}
    kept = [w for _, w in seen[r["best_epoch"] - 1:]]
    for k, v in d["state_dict"].items():
        want = torch.stack([w[k].double() for w in kept]).mean(0).float()
        assert torch.allclose(v, want, atol=1e-6), k
    # not the best epoch's weights, and validated on its own
    best = torch.load(tmp_path / "p.pt", weights_only=True)
    assert d["name"].startswith("tail-") and d["name"] != best["name"]
    assert set(t["valid_figures"]) == {"valid_loss", "valid_mape", "valid_tau"}
    assert t["valid_figures"] != best["trained"]["valid_figures"]
    assert load_model(str(tail)).predict_examples(
        [example(x, i) for i, x in enumerate(read_records(str(shards / "synth4.zst")), 1)]).min() > 0


def test_tail_average_survives_a_resume(shards, tmp_path):
    noise = noise_valid(tmp_path)
    data = [str(shards / "synth0.zst"), str(shards / "synth1.zst")]

    def opts(tail):
        return fast_opts(epochs=12, patience=50, tail_average=str(tail))

    train(data, tmp_path / "full.pt", NetConfig(**TINY), opts(tmp_path / "full-tail.pt"),
          valid=[noise], progress=quiet)

    out = tmp_path / "crashed.pt"
    with pytest.raises(Crash):
        train(data, out, NetConfig(**TINY), opts(tmp_path / "crashed-tail.pt"), valid=[noise],
              progress=crash_at(9))
    train(data, out, resume=True, valid=[noise], progress=quiet)
    a = torch.load(tmp_path / "full-tail.pt", weights_only=True)
    b = torch.load(tmp_path / "crashed-tail.pt", weights_only=True)
    assert a["trained"]["tail_average"] == b["trained"]["tail_average"]
    assert a["trained"]["tail_average"]["snapshots"] > 1
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])


def test_tail_average_needs_validation_and_a_network(shards, tmp_path):
    from tpuperf_cli.commands.train import cli

    base = ["--data", str(shards / "synth0.zst"), "--out", str(tmp_path / "m.pt"),
            "--tail-average", str(tmp_path / "t.pt"), "--epochs", "1"]
    for extra, message in (([], "give validation programs"), (["--learner", "gbdt"], "--learner gbdt")):
        e = CliRunner().invoke(cli, base + extra, standalone_mode=False).exception
        assert isinstance(e, TpuperfError) and e.exit_code == 2, e
        assert "--tail-average" in str(e) and message in str(e), e
    assert not (tmp_path / "t.pt").exists() and not (tmp_path / "m.pt").exists()


def test_training_is_repeatable(shards, tmp_path):
    runs = [train([str(shards / "synth0.zst"), str(shards / "synth1.zst")], tmp_path / f"{i}.pt",
                  NetConfig(**TINY), fast_opts(epochs=2), progress=quiet) for i in range(2)]
    assert runs[0]["history"] == runs[1]["history"]


def test_resume_continues_an_interrupted_run_exactly(shards, tmp_path):
    data = [str(shards / "*.zst")]
    split = str(shards / "split.json")
    full = train(data, tmp_path / "full.pt", NetConfig(**TINY), fast_opts(epochs=4), split=split,
                 progress=quiet)

    out = tmp_path / "crashed.pt"
    with pytest.raises(Crash):
        train(data, out, NetConfig(**TINY), fast_opts(epochs=4), split=split, progress=crash_at(2))
    assert os.path.exists(str(out) + ".resume")
    # epoch 2's model and state were not saved (the crash came first), epoch 1's were
    resumed = train(data, out, resume=True, split=split, progress=quiet)
    assert resumed["history"] == full["history"]
    a = torch.load(tmp_path / "full.pt", weights_only=True)["state_dict"]
    b = torch.load(out, weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_can_add_epochs_and_change_patience(shards, tmp_path):
    from tpuperf_cli.commands.train import cli

    out = tmp_path / "more.pt"
    base = ["--data", str(shards / "*.zst"), "--split", str(shards / "split.json"), "--out", str(out),
            "--hidden", "16", "--opcode-dim", "8", "--layers", "2", "--threads", "1",
            "--batch-size", "8", "--lr", "0.01"]
    res = CliRunner().invoke(cli, base + ["--epochs", "2", "--keep-state"])
    assert res.exit_code == 0, res.stderr
    # the same command line, with --resume and more epochs (and another patience): 2 more epochs
    res = CliRunner().invoke(cli, base + ["--epochs", "4", "--patience", "7", "--resume", "--keep-state"])
    assert res.exit_code == 0, res.stderr
    assert "--epochs 4 (was 2)" in res.stderr and "--patience 7 (was 10)" in res.stderr
    assert "epoch   3/4" in res.stderr and "epoch   4/4" in res.stderr, res.stderr
    d = torch.load(out, weights_only=True)
    assert d["trained"]["epochs"] == 4 and d["trained"]["options"]["epochs"] == 4
    assert d["trained"]["options"]["patience"] == 7
    state = torch.load(str(out) + ".resume", weights_only=False)
    assert state["epoch"] == 4 and state["opts"]["epochs"] == 4 and len(state["history"]) == 4
    # the first run's schedule had ended at a tenth of --lr: the added epochs keep that rate
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(1e-3)


class _Planted:
    """Pickles to a call of os.system: what a planted resume file could run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


@pytest.mark.parametrize("content", ["planted", "corrupt"])
def test_resume_reads_its_state_as_plain_data_only(shards, tmp_path, content):
    import pickle

    from tpuperf_cli.commands.train import cli

    out = tmp_path / "m.pt"
    ran = tmp_path / "code-ran"
    resume_file = tmp_path / "m.pt.resume"
    if content == "planted":
        resume_file.write_bytes(pickle.dumps({"epoch": 1, "x": _Planted(ran)}))
    else:
        resume_file.write_bytes(b"PK\x03\x04 not a zip at all")
    res = CliRunner().invoke(cli, ["--data", str(shards / "*.zst"), "--out", str(out), "--resume",
                                   "--epochs", "2", "--threads", "1"])
    from tpuperf_cli.errors import TpuperfError

    # CliRunner hands the error over as it is; the tools print it as one line
    assert isinstance(res.exception, TpuperfError), res.output
    message = str(res.exception)
    assert "is not a training state" in message and "\n" not in message
    assert "arbitrary code" not in message and not ran.exists()


def test_extended_run_resumes_exactly_too(shards, tmp_path):
    import shutil

    data = [str(shards / "*.zst")]
    split = str(shards / "split.json")
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    with pytest.raises(Crash):
        train(data, a, NetConfig(**TINY), fast_opts(epochs=4), split=split, progress=crash_at(2))
    shutil.copy(str(a) + ".resume", str(b) + ".resume")
    shutil.copy(a, b)
    # extended mid-schedule from 4 to 6 epochs: uninterrupted, and interrupted again then resumed
    full = train(data, a, opts=fast_opts(epochs=6), resume=True, split=split, given={"epochs"},
                 progress=quiet)
    assert len(full["history"]) == 6
    with pytest.raises(Crash):
        train(data, b, opts=fast_opts(epochs=6), resume=True, split=split, given={"epochs"},
              progress=crash_at(4))
    again = train(data, b, resume=True, split=split, progress=quiet)
    assert again["history"] == full["history"]


def test_cosine_tail_decays_from_the_current_rate_to_the_minimum():
    from tpuperf_cli.model.resume import CosineTail

    class Opt:
        param_groups = [{"lr": 5e-3}]

    tail = CosineTail(Opt, 2, 5e-3, 6, 1e-3)
    lrs = []
    for _ in range(6):
        tail.step()
        lrs.append(Opt.param_groups[0]["lr"])
    assert 5e-3 > lrs[0] > lrs[1] > lrs[2] > lrs[3] and lrs[3:] == pytest.approx([1e-3] * 3)
    again = CosineTail.from_state(Opt, tail.state_dict())
    assert (again.start, again.lr0, again.end, again.last) == (2, 5e-3, 6, 8)


def test_resume_refuses_other_changes_and_nothing_to_do(shards, tmp_path):
    from tpuperf_cli.commands.train import cli

    out = tmp_path / "r.pt"
    base = ["--data", str(shards / "synth0.zst"), "--out", str(out), "--hidden", "16",
            "--layers", "1", "--threads", "1", "--epochs", "1"]
    res = CliRunner().invoke(cli, base + ["--keep-state"])
    assert res.exit_code == 0, res.stderr
    res = CliRunner().invoke(cli, base + ["--resume", "--epochs", "2", "--hidden", "32", "--lr", "0.1",
                                          "--label-floor-us", "2"], standalone_mode=False)
    e = res.exception
    assert isinstance(e, TpuperfError) and e.exit_code == 2, res.stderr
    assert "--resume cannot change --hidden (the run has 16, not 32), --label-floor-us (the run " \
           "has 0.0, not 2.0), --lr (the run has 0.001, not 0.1)" in str(e)
    # the run already has all its epochs: say so rather than rewrite the model untouched
    res = CliRunner().invoke(cli, base + ["--resume"], standalone_mode=False)
    e = res.exception
    assert isinstance(e, TpuperfError) and e.exit_code == 2 and "give a larger --epochs" in str(e)
    assert os.path.exists(str(out) + ".resume")


def test_resume_without_state_is_a_clear_error(shards, tmp_path):
    with pytest.raises(TpuperfError, match="no .*resume to resume from"):
        train([str(shards / "*.zst")], tmp_path / "x.pt", resume=True, progress=quiet)


def test_streamed_corpus_trains(shards, tmp_path):
    opts = fast_opts(epochs=2, memory_mb=0.01)
    r = train([str(shards / "*.zst")], tmp_path / "s.pt", NetConfig(**TINY), opts, progress=quiet)
    assert len(r["history"]) == 2


@pytest.mark.parametrize("variant", [
    dict(gnn="gat"), dict(gnn="none"), dict(reduction="per-node"),
    dict(reduction="lstm"), dict(reduction="transformer", heads=2), dict(directed=False),
    dict(counts=True), dict(minor_dim=4),
])
def test_architecture_options_train(shards, tmp_path, variant):
    cfg = NetConfig(**{**TINY, **variant})
    r = train([str(shards / "synth0.zst")], tmp_path / "v.pt", cfg, fast_opts(epochs=1), progress=quiet)
    assert np.isfinite(r["history"][0]["train_loss"])


def test_tile_task_learns_to_rank_configs(tmp_path):
    recs = synthetic_records(n_programs=2, kernels=6, configs=6, seed=4)
    paths = write_shards(tmp_path, recs)
    from tpuperf_cli.metrics import group_indices, mean_kernel_tau
    from tpuperf_cli.model.predict import load_model

    out = tmp_path / "tile.pt"
    # 30 epochs without early stopping: a tiny net's ranking can sit still
    # for more than the default patience before it starts to learn
    r = train(paths, out, NetConfig(**TINY), fast_opts(task="tile", epochs=30, configs=6, patience=100),
              valid=paths, progress=quiet)
    assert r["history"][-1]["train_loss"] < r["history"][0]["train_loss"]
    m = load_model(str(out))
    assert m.task == "tile" and m.meta["loss"] == "hinge"
    exs = [example(x) for x in recs]
    pred = m.predict_examples(exs)
    true = np.array([ex.runtime for ex in exs])
    groups = group_indices([ex.group for ex in exs]).values()
    assert mean_kernel_tau([(pred[i], true[i]) for i in groups]) > 0.5


def test_records_with_another_number_of_kernel_features_are_clear_errors(shards, tmp_path):
    recs = synthetic_records(n_programs=1, kernels=4, seed=9)
    recs[2]["kernel_feat"] = np.zeros(3, np.float32)
    (bad,) = write_shards(tmp_path, recs)
    with pytest.raises(StreamError, match=r"record 3 \(synth0/fusion.2\): expected 27 kernel "
                                          r"features in kernel_feat, got 3; the training data has 27"):
        train([str(shards / "synth1.zst")], tmp_path / "m.pt", NetConfig(**TINY), fast_opts(epochs=1),
              valid=[bad], progress=quiet)
    with pytest.raises(StreamError, match=r"record 3 \(synth0/fusion.2\): expected 27 kernel "
                                          r"features in kernel_feat, got 3; the records before it"):
        train([bad], tmp_path / "m.pt", NetConfig(**TINY), fast_opts(epochs=1), progress=quiet)
    # resumed on other data: checked against the stored scaling
    train([str(shards / "synth1.zst")], tmp_path / "k.pt", NetConfig(**TINY), fast_opts(epochs=1),
          keep_state=True, progress=quiet)
    with pytest.raises(StreamError, match=r"record 3 \(synth0/fusion.2\): expected 27 kernel "
                                          r"features in kernel_feat, got 3; the training data has 27"):
        train([bad], tmp_path / "k.pt", opts=fast_opts(epochs=2), resume=True, given={"epochs"},
              progress=quiet)


def test_no_examples_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty.msgpack"
    empty.write_bytes(b"")
    with pytest.raises(TpuperfError, match="no training examples"):
        train([str(empty)], tmp_path / "m.pt", progress=quiet)
    kernels = tmp_path / "k.msgpack"
    with RecordWriter(str(kernels)) as w:
        w.write(new_record("kernel", program="p", kernel="k", hlo="HloModule m", runtime_ns=5.0))
    with pytest.raises(StreamError, match="run featurize first"):
        train([str(kernels)], tmp_path / "m.pt", progress=quiet)
    with pytest.raises(TpuperfError, match="no files match"):
        train([str(tmp_path / "nothing*.zst")], tmp_path / "m.pt", progress=quiet)


# ---------------------------------------------------------------- the command

@pytest.mark.parametrize("loss", ["ape", "huber"])
def test_runtime_losses_for_the_tile_task_are_refused(loss):
    from tpuperf_cli.model.options import TrainOptions

    with pytest.raises(TpuperfError, match=f"--loss {loss} fits runtimes"):
        TrainOptions(task="tile", loss=loss).check()


def test_time_weight_is_for_the_fusion_task():
    from tpuperf_cli.model.options import TrainOptions

    with pytest.raises(TpuperfError, match="--time-weight draws.*--task fusion"):
        TrainOptions(task="tile", time_weight=0.5).check()
    assert TrainOptions(time_weight=0.5).check().time_weight == 0.5


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
def test_rank_loss_for_the_fusion_task_is_a_usage_error(shards, tmp_path, loss):
    import subprocess
    import sys

    tpuperf = os.path.join(os.path.dirname(sys.executable), "tpuperf")
    res = subprocess.run([tpuperf, "train", "--data", str(shards / "synth0.zst"), "--out",
                          str(tmp_path / "m.pt"), "--task", "fusion", "--loss", loss, "--epochs", "1"],
                         capture_output=True, text=True, env={**os.environ, "TPUPERF_THREADS": "1"})
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert f"--loss {loss} is a pairwise rank loss" in res.stderr and "--task tile" in res.stderr
    assert not (tmp_path / "m.pt").exists()


def test_train_command(shards, tmp_path):
    from tpuperf_cli.commands.train import cli

    out = tmp_path / "cli.pt"
    res = CliRunner().invoke(cli, [
        "--data", str(shards / "*.zst"), "--split", str(shards / "split.json"), "--out", str(out),
        "--epochs", "2", "--hidden", "16", "--layers", "1", "--threads", "1", "--batch-size", "16"])
    assert res.exit_code == 0, res.stderr
    assert "epoch   1/2" in res.stderr and "valid loss" in res.stderr and "MAPE" in res.stderr
    assert res.stdout == ""
    assert out.exists()


def test_train_command_errors(tmp_path):
    from tpuperf_cli.commands.train import cli

    res = CliRunner().invoke(cli, ["--out", str(tmp_path / "m.pt")],
                                             standalone_mode=False)
    assert isinstance(res.exception, TpuperfError) and "no training data" in str(res.exception)
    bad = tmp_path / "split.json"
    bad.write_text("[1, 2]")
    res = CliRunner().invoke(cli, ["--data", str(bad), "--split", str(bad),
                                                   "--out", str(tmp_path / "m.pt")],
                                             standalone_mode=False)
    assert isinstance(res.exception, TpuperfError) and "expected" in str(res.exception)


@pytest.mark.parametrize("field", ["node_opcode", "node_feat", "edge_index"])
def test_example_rejects_a_null_graph_field(field):
    # found by the fuzz suite: AttributeError on None in predict
    record = dict(synthetic_records(n_programs=1, kernels=1)[0], **{field: None})
    with pytest.raises(StreamError, match=f"record 4 .*: field.s. {field} are null"):
        example(record, 4, "g.msgpack")


@pytest.mark.parametrize("memory_mb", [2048, 0.01])
def test_kernel_features_option_reads_the_first_ones(shards, tmp_path, memory_mb):
    """--kernel-features N trains on the first N kernel features of records
    with more (in memory and streamed); the model reads the first N of any
    record after it, and records with fewer are a clear error."""
    from tpuperf_cli.model.predict import load_model

    out = tmp_path / "k5.pt"
    train([str(shards / "*.zst")], out, NetConfig(**TINY),
          fast_opts(epochs=2, memory_mb=memory_mb, kernel_features=5), split=str(shards / "split.json"),
          progress=quiet)
    d = torch.load(out, weights_only=True)
    assert d["scaling"]["kernel_features"] == 5
    recs = synthetic_records(n_programs=1, kernels=4, seed=21)
    assert recs[0]["kernel_feat"].size == len(KERNEL_FEATURES)
    pred = load_model(str(out)).predict_examples([example(r) for r in recs])
    assert pred.shape == (4,) and np.all(pred > 0)
    few = synthetic_records(n_programs=1, kernels=2, seed=22, kernel_features=3)
    (bad,) = write_shards(tmp_path, few)
    with pytest.raises(StreamError, match=r"record 1 \(synth0/fusion.0\): expected 5 kernel features "
                                          r"in kernel_feat, got 3; --kernel-features asks for 5"):
        train([str(bad)], tmp_path / "m.pt", NetConfig(**TINY), fast_opts(epochs=1, kernel_features=5),
              progress=quiet)


def test_kernel_features_option_on_the_command_line(shards, tmp_path):
    out = tmp_path / "cli.pt"
    from tpuperf_cli.commands.train import cli

    res = CliRunner().invoke(cli, ["--data", str(shards / "synth0.zst"), "-o", str(out), "--epochs", "1",
                                   "--hidden", "8", "--opcode-dim", "4", "--layers", "1",
                                   "--kernel-features", "9", "-q"])
    assert res.exit_code == 0, res.output
    assert torch.load(out, weights_only=True)["scaling"]["kernel_features"] == 9


@pytest.mark.parametrize("weight", ["indexed", "indexed=-1", "=2", "indexed=nan"])
def test_source_weight_must_be_source_equals_weight(shards, tmp_path, weight):
    from tpuperf_cli.commands.train import cli

    res = CliRunner().invoke(cli, ["--data", str(shards / "synth0.zst"), "-o", str(tmp_path / "m.pt"),
                                   "--generated-even", "source", "--source-weight", weight])
    assert res.exit_code == 2 and "give SOURCE=W" in res.output, res.output
    assert not (tmp_path / "m.pt").exists()


def test_source_weight_without_generated_even_source_is_a_usage_error(shards, tmp_path):
    import subprocess
    import sys

    tpuperf = os.path.join(os.path.dirname(sys.executable), "tpuperf")
    res = subprocess.run([tpuperf, "train", "--data", str(shards / "synth0.zst"), "-o",
                          str(tmp_path / "m.pt"), "--source-weight", "indexed=0.5", "--epochs", "1"],
                         capture_output=True, text=True, env={**os.environ, "TPUPERF_THREADS": "1"})
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert "--source-weight weighs the sources of --generated-even source" in res.stderr
    assert not (tmp_path / "m.pt").exists()


# ---------------------------------------------------------------- distillation

@pytest.fixture(scope="module")
def teacher(shards, tmp_path_factory):
    out = tmp_path_factory.mktemp("teacher") / "teacher.pt"
    train([str(p) for p in sorted(shards.glob("*.zst"))], out, NetConfig(**TINY),
          fast_opts(epochs=2), split=str(shards / "split.json"), progress=quiet)
    return out


def test_teacher_blends_its_predictions_into_the_training_labels(shards, teacher):
    from tpuperf_cli.model.predict import load_model
    from tpuperf_cli.model.train import blend_teacher, load_data

    paths = [str(p) for p in sorted(shards.glob("*.zst"))]
    opts = fast_opts(teacher=str(teacher), teacher_weight=0.25).check()
    train_set, valid_set, _ = load_data(paths, None, str(shards / "split.json"), opts, progress=quiet)
    examples = [ex for exs in train_set.cache.values() for ex in exs]
    measured = np.array([ex.runtime for ex in examples])
    predicted = load_model(str(teacher)).predict_examples(examples)
    valid_before = [ex.runtime for ex in valid_set.iter_examples()]
    lines = []
    blend_teacher(train_set, opts, lines.append)
    blended = np.array([ex.runtime for ex in examples])
    np.testing.assert_allclose(blended, measured ** 0.75 * predicted ** 0.25, rtol=1e-6)  # float32 batches
    assert not np.allclose(blended, measured)
    assert [ex.runtime for ex in valid_set.iter_examples()] == valid_before  # validation keeps its labels
    assert "labels blended with 0.25 of teacher" in lines[0], lines


def test_a_run_with_a_teacher_records_it(shards, teacher, tmp_path):
    out = tmp_path / "student.pt"
    train([str(p) for p in sorted(shards.glob("*.zst"))], out, NetConfig(**TINY),
          fast_opts(epochs=1, teacher=str(teacher)), split=str(shards / "split.json"), progress=quiet)
    trained = torch.load(out, weights_only=True)["trained"]
    assert trained["options"]["teacher"] == str(teacher) and trained["options"]["teacher_weight"] == 0.5
    assert trained["teacher"]["members"] == 1 and trained["teacher"]["weight"] == 0.5
    assert trained["teacher"]["name"].startswith("teacher-") and trained["teacher"]["examples"] > 0


def test_a_teacher_needs_the_examples_in_memory(shards, teacher):
    from tpuperf_cli.model.train import blend_teacher, load_data

    opts = fast_opts(teacher=str(teacher), memory_mb=0.001).check()
    train_set, _, _ = load_data([str(shards / "synth0.zst")], None, None, opts, progress=quiet)
    assert train_set.streaming
    with pytest.raises(TpuperfError, match="--teacher needs the training examples in memory") as e:
        blend_teacher(train_set, opts, quiet)
    assert e.value.exit_code == 2


@pytest.fixture
def unlabelled(tmp_path):
    """Graph records no one timed: two programs of the split's training side
    (one of them a generated kernel drawn from a test program), one of its
    test side."""
    records = synthetic_records(n_programs=3, kernels=10, seed=11)
    for r in records:
        for f in ("runtime_ns", "runs", "noise", "target"):
            r.pop(f, None)
        r["program"] = {"synth0": "new0", "synth1": "fusions:new1", "synth2": "synth4"}[r["program"]]
        if r["program"] == "fusions:new1":
            r["origin"] = "synth4" if r["index"] % 2 else "synth0"
    path = tmp_path / "unlabelled.zst"
    with RecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    return path, records


def test_teacher_data_is_labelled_by_the_teacher(shards, teacher, unlabelled, tmp_path):
    from tpuperf_cli.model.predict import load_model, predict_batch
    from tpuperf_cli.model.train import label_with_teacher

    path, records = unlabelled
    opts = fast_opts(teacher=str(teacher), teacher_data=(str(path),)).check()
    lines = []
    info = label_with_teacher(opts, str(tmp_path / "t.msgpack"), ["synth3", "synth4"], lines.append)
    out = list(read_records(str(tmp_path / "t.msgpack")))
    kept = [r for r in records if r["program"] != "synth4" and r.get("origin") != "synth4"]
    assert 0 < len(kept) < len(records)
    assert len(out) == len(kept) == info["examples"] and info["left_out"] == len(records) - len(kept)
    assert [r["program"] for r in out] == ["teacher:" + r["program"] for r in kept]
    assert {r["source"] for r in out} == {"teacher"} and not any("pred_ns" in r for r in out)
    expected = predict_batch(load_model(str(teacher)), kept)
    # float32 inside: batched otherwise, a kernel may round differently (one
    # of 15 was 2e-8 off on an AMD EPYC family 25 model 17, 2026-12-06)
    np.testing.assert_allclose([r["runtime_ns"] for r in out], expected, rtol=1e-6)
    assert all(r["label_from"] == info["name"] for r in out)
    assert f"{len(kept)} kernels of --teacher-data labelled by teacher" in lines[0], lines
    assert "of validation or test programs left out" in lines[0], lines


def test_a_run_trains_on_teacher_data(shards, teacher, unlabelled, tmp_path):
    path, _ = unlabelled
    out = tmp_path / "student.pt"
    lines = []
    train([str(p) for p in sorted(shards.glob("*.zst"))], out, NetConfig(**TINY),
          fast_opts(epochs=1, teacher=str(teacher), teacher_weight=0, teacher_data=(str(path),),
                    generated_share=0.5, generated_even="source", source_weight={"teacher": 2}),
          split=str(shards / "split.json"), progress=lines.append)
    trained = torch.load(out, weights_only=True)["trained"]
    assert "teacher:new0" in trained["programs"] and "teacher:fusions:new1" in trained["programs"]
    assert not any("synth4" in p for p in trained["programs"])
    assert trained["teacher_data"]["data"] == [str(path)] and trained["teacher_data"]["examples"] > 0
    assert "teacher" not in trained          # --teacher-weight 0: the measured labels kept
    assert not any("labels blended" in line for line in lines), lines
    assert trained["data"] == [str(p) for p in sorted(shards.glob("*.zst"))]   # no temporary file


def test_a_run_with_teacher_data_resumes(shards, teacher, unlabelled, tmp_path):
    """The labelled shard is made again on resume (it lived as long as the
    run), and --teacher-data given again is the run's own, not a change."""
    path, _ = unlabelled
    out = tmp_path / "student.pt"
    data = [str(p) for p in sorted(shards.glob("*.zst"))]
    opts = dict(teacher=str(teacher), teacher_weight=0, teacher_data=(str(path),))
    train(data, out, NetConfig(**TINY), fast_opts(epochs=1, **opts), split=str(shards / "split.json"),
          keep_state=True, progress=quiet)
    lines = []
    summary = train(data, out, NetConfig(**TINY), fast_opts(epochs=2, **opts),
                    split=str(shards / "split.json"), resume=True,
                    given=["epochs", "teacher", "teacher_weight", "teacher_data"], progress=lines.append)
    assert summary["epochs"] == 2, lines
    assert any("kernels of --teacher-data labelled by teacher" in line for line in lines), lines


@pytest.mark.parametrize("args, message", [
    (["--teacher", "missing.pt"], "--teacher: "),
    (["--teacher-data", "UNLABELLED"], "--teacher-data is labelled by a teacher: give --teacher"),
    (["--teacher", "TEACHER", "--learner", "gbdt"], "--learner gbdt fits the measured ones"),
    (["--teacher", "TEACHER", "--teacher-weight", "1.5"], "--teacher-weight"),
])
def test_teacher_mistakes_are_usage_errors(shards, teacher, unlabelled, tmp_path, args, message):
    from tpuperf_cli.commands.train import cli

    names = {"TEACHER": str(teacher), "missing.pt": str(tmp_path / "missing.pt"),
             "UNLABELLED": str(unlabelled[0])}
    args = [names.get(a, a) for a in args]
    res = CliRunner().invoke(cli, ["--data", str(shards / "synth0.zst"), "-o", str(tmp_path / "m.pt"),
                                   "--epochs", "1", "--hidden", "8", "--opcode-dim", "4", "-q"] + args)
    # click's own checks exit 2 here; a TpuperfError reaches the CLI's handler (tpuperf_cli.cli),
    # which prints its one line and exits with its exit_code
    if isinstance(res.exception, TpuperfError):
        assert res.exception.exit_code == 2 and message in str(res.exception), res.exception
    else:
        assert res.exit_code == 2 and message in res.output, res.output
    assert not (tmp_path / "m.pt").exists()


# ------------------------------------------------------ kernel feature names

ROW_ALIGN = KERNEL_FEATURES.index("matmul_rhs_row_align")


def test_kernel_features_spec_names_columns():
    """--kernel-features N, N+NAME..., NAME+...: a first-N selection stays a
    count (model files say only N, as before), any other is its columns in
    kernel_feat order."""
    from tpuperf_cli.model.examples import kernel_columns

    assert kernel_columns("16") == (16, None)
    assert kernel_columns("0") == (0, None)
    assert kernel_columns("16+matmul_rhs_row_align") == (17, tuple(range(16)) + (ROW_ALIGN,))
    assert kernel_columns("15+output_minor_dim") == (16, None)          # the first 16 after all
    assert kernel_columns("bytes_read+flops") == (2, (0, 2))
    with pytest.raises(TpuperfError, match="'row_align' is not a kernel feature .*matmul_rhs_row_align"):
        kernel_columns("16+row_align")
    with pytest.raises(TpuperfError, match=f"at most {len(KERNEL_FEATURES)} kernel features"):
        kernel_columns(str(len(KERNEL_FEATURES) + 1))


def test_picked_columns_are_not_taken_for_a_record_of_fewer():
    """A record of exactly as many kernel features as a selection reads,
    featurized before the named one existed, is an error, not a record
    whose columns were already picked; a picked example stays as it is."""
    from tpuperf_cli.model.examples import kernel_columns, pick_kernel_features, use_kernel_features

    n, columns = kernel_columns("16+matmul_rhs_row_align")
    (rec,) = synthetic_records(n_programs=1, kernels=1, seed=5)
    rec["kernel_feat"] = np.arange(len(KERNEL_FEATURES), dtype=np.float32)
    ex = example(rec)
    assert use_kernel_features(ex, n, "r", rec, columns=columns) is None
    assert ex.kernel_feat.tolist() == list(range(16)) + [ROW_ALIGN] and ex.columns == columns
    assert pick_kernel_features(ex, n, columns) is ex.kernel_feat          # picked once only
    assert pick_kernel_features(ex, 17, None) is None                      # not a first 17 now
    old = dict(rec, kernel_feat=np.arange(17, dtype=np.float32))
    msg = use_kernel_features(example(old), n, "record 3", old, columns=columns)
    assert msg.startswith(f"record 3: expected {ROW_ALIGN + 1} kernel features in kernel_feat, "
                          "got 17 (the model reads matmul_rhs_row_align)")
    assert "run featurize on them again" in msg


def test_scaling_keeps_the_names_of_its_columns():
    _, columns = kernel_columns_of("5+matmul_rhs_row_align")
    s = Scaler(columns=columns)
    s.update(_picked(synthetic_records(n_programs=1, kernels=3, seed=6), columns))
    d = s.finish().to_dict()
    assert d["kernel_features"] == 6 and d["kernel_columns"] == list(KERNEL_FEATURES[:5]) + [
        "matmul_rhs_row_align"]
    back = Scaler.from_dict(d)
    assert back.columns == columns and back.kernel_features == 6 and back.minor_column is None
    first = Scaler(16)
    first.update(example(synthetic_records(n_programs=1, kernels=1, seed=6)[0]).cut(16))
    assert "kernel_columns" not in first.finish().to_dict() and first.minor_column == 15
    with pytest.raises(ValueError, match="does not know \\['future_feature'\\]"):
        Scaler.from_dict(dict(d, kernel_columns=d["kernel_columns"][:5] + ["future_feature"]))


def kernel_columns_of(spec):
    from tpuperf_cli.model.examples import kernel_columns

    return kernel_columns(spec)


def _picked(records, columns):
    from tpuperf_cli.model.examples import use_kernel_features

    ex = example(records[0])
    assert use_kernel_features(ex, len(columns), "r", columns=columns) is None
    return ex


@pytest.mark.parametrize("memory_mb", [2048, 0.01])
def test_a_model_reads_the_named_kernel_features_alone(tmp_path, memory_mb):
    """train --kernel-features 5+matmul_rhs_row_align reads those six
    columns (in memory and streamed): predict, on either engine, gives the
    same for records that differ only in a column it does not read, and
    another figure where the named column differs; a record without that
    column is an error naming it."""
    from tpuperf_cli.model.predict import load_model, predict_records

    recs = synthetic_records(n_programs=3, kernels=16, seed=8)
    rng = np.random.default_rng(0)
    for r in recs:
        r["kernel_feat"] = r["kernel_feat"].copy()
        r["kernel_feat"][ROW_ALIGN] = rng.integers(0, 13)
    paths = write_shards(tmp_path, recs)
    out = tmp_path / "named.pt"
    n, columns = kernel_columns_of("5+matmul_rhs_row_align")
    train(paths, out, NetConfig(hidden=8, opcode_dim=4, layers=1),
          fast_opts(epochs=2, memory_mb=memory_mb, kernel_features=n, kernel_columns=columns), progress=quiet)
    scaling = torch.load(out, weights_only=True)["scaling"]
    assert scaling["kernel_features"] == 6 and scaling["kernel_columns"][-1] == "matmul_rhs_row_align"
    assert load_model(str(out)).describe()["kernel_features"] == scaling["kernel_columns"]

    def with_column(column, value):
        rs = [dict(r) for r in recs[:6]]
        for r in rs:
            r["kernel_feat"] = r["kernel_feat"].copy()
            r["kernel_feat"][column] = value
        return rs

    for engine in ("numpy", "dgl"):
        model = load_model(str(out), engine=engine)

        def pred(rs):
            return np.array([r["pred_ns"] for r in predict_records([dict(r) for r in rs], model, 4)])

        base = pred(with_column(ROW_ALIGN, 3))
        np.testing.assert_allclose(pred(with_column(9, 7)), pred(recs[:6]), rtol=1e-6)
        assert np.abs(pred(with_column(ROW_ALIGN, 12)) / base - 1).max() > 1e-4
        np.testing.assert_allclose(model.predict_examples([example(r) for r in with_column(ROW_ALIGN, 3)]),
                                   base, rtol=1e-5)
        old = [dict(recs[0], kernel_feat=recs[0]["kernel_feat"][:6].copy())]
        with pytest.raises(StreamError, match=r"record 1 \(synth0/fusion.0\): expected "
                                              f"{ROW_ALIGN + 1} kernel features .*got 6 "
                                              r"\(the model reads matmul_rhs_row_align\)"):
            list(predict_records(old, model, 4))


def test_named_kernel_features_on_the_command_line_are_checked(shards, tmp_path):
    from tpuperf_cli.commands.train import cli

    args = ["--data", str(shards / "synth0.zst"), "-o", str(tmp_path / "x.pt"), "--epochs", "1", "-q"]
    res = CliRunner().invoke(cli, args + ["--kernel-features", "16+row_align"])
    assert res.exit_code == 2 and "'row_align' is not a kernel feature" in res.output
    # a TpuperfError reaches the CLI's handler (tpuperf_cli.cli), which exits with its exit_code
    res = CliRunner().invoke(cli, args + ["--kernel-features", "3+matmul_rhs_row_align", "--learner", "gbdt"])
    assert isinstance(res.exception, TpuperfError) and res.exception.exit_code == 2
    assert "--learner gbdt reads the first 5 kernel features" in str(res.exception)
    res = CliRunner().invoke(cli, args + ["--kernel-features", "16+matmul_rhs_row_align", "--hidden", "8",
                                          "--opcode-dim", "4", "--minor-embedding", "4"])
    assert res.exit_code == 0, res.output                  # output_minor_dim is among the 16
    res = CliRunner().invoke(cli, args + ["--kernel-features", "flops+matmul_rhs_row_align",
                                          "--minor-embedding", "4"])
    assert isinstance(res.exception, TpuperfError) and res.exception.exit_code == 2
    assert "name output_minor_dim in --kernel-features" in str(res.exception)


def test_a_run_on_named_kernel_features_resumes_with_them_only(shards, tmp_path):
    from tpuperf_cli.commands.train import cli

    out = tmp_path / "named.pt"
    base = ["--data", str(shards / "synth0.zst"), "-o", str(out), "--hidden", "8", "--opcode-dim", "4",
            "--layers", "1", "--threads", "1", "--kernel-features", "16+matmul_rhs_row_align"]
    res = CliRunner().invoke(cli, base + ["--epochs", "1", "--keep-state"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, base + ["--epochs", "2", "--resume", "--keep-state"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, base[:-1] + ["16+minor_loop_unrolled", "--epochs", "3", "--resume"])
    assert isinstance(res.exception, TpuperfError) and res.exception.exit_code == 2
    assert re.search(r"--resume cannot change --kernel-features \(the run has .*\+matmul_rhs_row_align, "
                     r"not .*\+minor_loop_unrolled\)", str(res.exception)), res.exception
