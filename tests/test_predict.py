"""predict: model files, loading, predictions on records, the command."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from tpuperf_cli.errors import StreamError, TpuperfError
from tpuperf_cli.model import default_model_path
from tpuperf_cli.model.examples import example
from tpuperf_cli.records import new_record
from tpuperf_cli.stream import RecordWriter, read_records

from conftest import stream_bytes
from synthetic import synthetic_records

torch = pytest.importorskip("torch")

from tpuperf_cli.model.net import NetConfig  # noqa: E402
from tpuperf_cli.model.predict import Model, load_model, predict_batch, predict_records  # noqa: E402
from tpuperf_cli.model.train import TrainOptions, train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
CPU = {"platform": "cpu", "device_kind": "cpu", "chip": "AMD EPYC", "jax": "0.6.2"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("predict")
    shard = d / "train.zst"
    with RecordWriter(str(shard)) as w:
        for r in synthetic_records(n_programs=3, kernels=20, seed=7, target=CPU):
            w.write(r)
    out = d / "m.pt"
    train([str(shard)], out, NetConfig(hidden=16, opcode_dim=8, layers=2),
          TrainOptions(epochs=2, batch_size=8, lr=1e-2, threads=1), progress=lambda m: None)
    return out




def decode(data):
    return list(read_records(io.BytesIO(data)))


def run(args, data=b""):
    return subprocess.run([os.path.join(os.path.dirname(PY), "predict"), *args], input=data,
                          capture_output=True, cwd=ROOT, env={**os.environ, "TPUPERF_THREADS": "1"})


# ---------------------------------------------------------------- library

def test_saved_model_predicts_the_same_numbers(trained):
    recs = synthetic_records(n_programs=2, kernels=15, seed=11)
    m1 = load_model(str(trained))
    exs = [example(r) for r in recs]
    p1 = m1.predict_examples(exs)
    # write it again from the loaded weights and read it back
    from tpuperf_cli.model.predict import model_dict, read_model_file, save_atomic

    d = read_model_file(str(trained))
    save_atomic(d, trained.parent / "copy.pt")
    p2 = load_model(str(trained.parent / "copy.pt")).predict_examples(exs)
    np.testing.assert_array_equal(p1, p2)
    assert np.all(p1 > 0) and np.all(np.isfinite(p1))
    # batch size does not change the numbers (beyond float rounding)
    np.testing.assert_allclose(m1.predict_examples(exs, batch_size=3), p1, rtol=1e-5)
    np.testing.assert_allclose(predict_batch(m1, recs), p1, rtol=1e-6)
    assert isinstance(model_dict, object)


def test_model_file_holds_what_the_docs_say(trained):
    d = torch.load(trained, weights_only=True)
    for key in ("format", "version", "name", "task", "loss", "config", "state_dict", "scaling",
                "opcodes", "target", "trained"):
        assert key in d, key
    assert d["target"]["platform"] == "cpu" and d["target"]["chip"] == "AMD EPYC"
    assert d["name"].startswith("m-") and len(d["name"]) == len("m-") + 8
    assert d["config"]["hidden"] == 16 and d["trained"]["examples"] == 60


def test_predict_records_adds_fields_keeps_order_and_passthrough(trained):
    recs = synthetic_records(n_programs=1, kernels=7, seed=12)
    for i, r in enumerate(recs):
        r["extra"] = {"i": i}
    m = load_model(str(trained))
    out = list(predict_records(recs, m, batch_size=3))
    assert [r["kernel"] for r in out] == [f"fusion.{i}" for i in range(7)]
    assert all(r["model"] == m.name and r["pred_ns"] > 0 for r in out)
    assert [r["extra"]["i"] for r in out] == list(range(7))


def test_kernel_record_stops_after_writing_the_good_ones(trained):
    recs = synthetic_records(n_programs=1, kernels=3, seed=13)
    recs.insert(2, new_record("kernel", program="p", kernel="dot.1", hlo="HloModule m"))
    got = []
    with pytest.raises(StreamError, match="record 3 .*run featurize first"):
        for r in predict_records(recs, str(trained), batch_size=512):
            got.append(r)
    assert len(got) == 2 and all("pred_ns" in r for r in got)


@pytest.mark.parametrize("kernel_feat, got", [(None, "got none (no kernel_feat field)"),
                                               (np.zeros(3, np.float32), "got 3")])
def test_wrong_kernel_feat_is_a_one_line_error_after_the_good_records(trained, kernel_feat, got):
    recs = synthetic_records(n_programs=1, kernels=3, seed=13)
    if kernel_feat is None:
        del recs[1]["kernel_feat"]
    else:
        recs[1]["kernel_feat"] = kernel_feat
    res = run(["--model", str(trained)], stream_bytes(recs))
    err = res.stderr.decode()
    assert res.returncode == 1 and "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith("predict: error: <stdin>: record 2 (synth0/fusion.1)")
    assert f"expected 27 kernel features in kernel_feat, {got}" in err, err
    out = decode(res.stdout)
    assert [r["kernel"] for r in out] == ["fusion.0"] and out[0]["pred_ns"] > 0
    # the library: predict_examples (tpuperf eval) names the example too
    with pytest.raises(StreamError, match="example 2 .synth0/fusion.1.: expected 27 kernel features"):
        load_model(str(trained)).predict_examples([example(r) for r in recs])


def test_a_model_reads_the_first_kernel_features_of_records_featurized_later(trained):
    """KERNEL_FEATURES only grows by appending: a model reads the first
    kernel features of a record with more, as many as it was trained
    with, on the fast path and the slow."""
    recs = synthetic_records(n_programs=1, kernels=3, seed=13)
    longer = [dict(r, kernel_feat=np.concatenate([r["kernel_feat"], [7.0, 64, 32, 16]])
                   .astype(np.float32)) for r in recs]
    want = [r["pred_ns"] for r in decode(run(["--model", str(trained)], stream_bytes(recs)).stdout)]
    res = run(["--model", str(trained)], stream_bytes(longer))
    assert res.returncode == 0, res.stderr.decode()
    assert [r["pred_ns"] for r in decode(res.stdout)] == want
    got = load_model(str(trained)).predict_examples([example(r) for r in longer])
    assert np.allclose(got, want, rtol=1e-5)
    # batch alone too (calibrate trains through it)
    m = load_model(str(trained))
    b = m.batch([example(r) for r in longer])
    assert b.x.shape[1] == m.scaler.width


def test_wrong_node_and_config_widths_are_one_line_errors(trained):
    recs = synthetic_records(n_programs=1, kernels=3, seed=13)
    recs[1]["node_feat"] = np.zeros((recs[1]["node_opcode"].size, 139), np.float32)
    res = run(["--model", str(trained)], stream_bytes(recs))
    err = res.stderr.decode()
    assert res.returncode == 1 and "Traceback" not in err and "record 2 (synth0/fusion.1)" in err
    assert "node_feat has shape" in err and len(decode(res.stdout)) == 1
    recs = synthetic_records(n_programs=1, kernels=3, seed=13)
    recs[2]["config_feat"] = np.zeros(23, np.float32)
    res = run(["--model", str(trained)], stream_bytes(recs))
    err = res.stderr.decode()
    assert res.returncode == 1 and "Traceback" not in err and "record 3 (synth0/fusion.2)" in err
    assert "config_feat has 23 values, expected 24" in err and len(decode(res.stdout)) == 2
    recs = synthetic_records(n_programs=1, kernels=3, seed=13)
    recs[1]["kernel_feat"] = {"dtype": "<f4", "data": b"\0" * 20}       # an array map without shape
    res = run(["--model", str(trained)], stream_bytes(recs))
    err = res.stderr.decode()
    assert res.returncode == 1 and "Traceback" not in err and "kernel_feat" in err, err


def test_target_mismatch_warns_once(trained):
    recs = synthetic_records(n_programs=1, kernels=4, seed=14,
                             target={"platform": "tpu", "device_kind": "TPU v4", "chip": "v4"})
    msgs = []
    list(predict_records(recs, str(trained), warn=msgs.append))
    assert len(msgs) == 1 and "tpu" in msgs[0] and "AMD EPYC" in msgs[0]
    msgs.clear()
    list(predict_records(synthetic_records(1, 4, seed=15, target=CPU), str(trained), warn=msgs.append))
    list(predict_records(synthetic_records(1, 4, seed=15), str(trained), warn=msgs.append))
    assert msgs == []


# ---------------------------------------------------------------- bad model files

def test_bad_model_files_are_clear_errors(tmp_path, trained):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"this is not a model")
    with pytest.raises(TpuperfError, match="not a tpuperf model file"):
        load_model(str(junk))
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, other)
    with pytest.raises(TpuperfError, match="not a tpuperf model file"):
        load_model(str(other))
    d = torch.load(trained, weights_only=True)
    del d["scaling"]
    torch.save(d, tmp_path / "noscale.pt")
    with pytest.raises(TpuperfError, match="lacks field.*scaling"):
        load_model(str(tmp_path / "noscale.pt"))
    d = torch.load(trained, weights_only=True)
    d["config"]["hidden"] = 32
    torch.save(d, tmp_path / "mismatch.pt")
    with pytest.raises(TpuperfError, match="bad model file"):
        load_model(str(tmp_path / "mismatch.pt"))
    with pytest.raises(TpuperfError, match="No such file"):
        load_model(str(tmp_path / "missing.pt"))
    # a pickle that would run code is refused, not run
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    (tmp_path / "evil.pt").write_bytes(pickle.dumps({"format": Evil()}))
    with pytest.raises(TpuperfError, match="not a tpuperf model file"):
        load_model(str(tmp_path / "evil.pt"))
    assert not (tmp_path / "pwned").exists()


def test_bad_model_files_say_what_is_wrong_in_one_line(tmp_path, trained):
    def err(path):
        with pytest.raises(TpuperfError) as e:       # the command prints it as one line, exit 1
            load_model(str(path))
        text = str(e.value)
        assert e.value.exit_code == 1 and "\n" not in text, text
        return text

    def save(name, change):
        d = torch.load(trained, weights_only=True)
        change(d)
        torch.save(d, tmp_path / name)
        return tmp_path / name

    text = err(save("version.pt", lambda d: d.update(version="1")))
    assert "bad model file (version '1' is not a positive integer)" in text
    # a file torch refuses to load safely: no advice to load it unsafely
    (tmp_path / "pickle.pt").write_bytes(b"\x80\x02}q\x00.")
    for path in (tmp_path / "pickle.pt", tmp_path / "numpy.pt"):
        if path.name == "numpy.pt":
            torch.save({"format": np.zeros(3)}, path)
        text = err(path)
        assert "not a tpuperf model file" in text and "weights_only" not in text, text
        assert "will likely succeed" not in text, text
    (tmp_path / "empty.pt").write_bytes(b"")
    assert "not a tpuperf model file (the file is empty)" in err(tmp_path / "empty.pt")

    def swap(d):
        sd = d["state_dict"]
        sd["extra.weight"] = sd.pop("embed.weight")

    text = err(save("keys.pt", swap))
    assert "missing key(s) embed.weight" in text and "unexpected key(s) extra.weight" in text, text
    assert "Error(s) in loading state_dict" not in text
    text = err(save("shape.pt", lambda d: d["config"].update(hidden=32)))
    assert "other shape(s): " in text and "(expected [32" in text and "more" in text, text
    text = err(save("lo.pt", lambda d: d["scaling"].pop("lo")))
    assert "model file lacks scaling field 'lo'" in text and "('lo')" not in text, text
    text = err(save("scaling.pt", lambda d: d.update(scaling=[1, 2])))
    assert "bad model file (scaling is a list, not a map)" in text


def _packed(model, data, batch_size=512):
    from tpuperf_cli.model.predict import predict_packed

    return b"".join(b for b, _ in predict_packed(read_records(io.BytesIO(data), with_bytes=True),
                                                 model, batch_size))


def test_packed_stream_is_the_stream_of_predicted_records(trained):
    """predict_packed (the command's path: fields appended to each record's
    bytes) writes the bytes that packing predict_records' records would,
    also for a record with pred_ns already (replaced in place) and for small
    and very large map headers."""
    import msgpack

    model = load_model(str(trained))
    recs = synthetic_records(n_programs=2, kernels=9, seed=21)
    recs[3] = {**recs[3], "pred_ns": 1.0, "note": "old"}
    small = {k: recs[5][k] for k in ("type", "node_opcode", "node_feat", "edge_index", "kernel_feat")}
    recs[5] = small                                       # 5 fields + 2: a fixmap
    data = stream_bytes(recs)
    want = stream_bytes(predict_records(decode(data), model, batch_size=4))
    assert _packed(model, data, batch_size=4) == want
    replaced = decode(want)[3]
    assert replaced["pred_ns"] != 1.0 and list(replaced)[-3:] == ["pred_ns", "note", "model"]
    # a map header of 4 length bytes (msgpack writes 2 for these)
    one = msgpack.packb(decode(data)[0], use_bin_type=True)
    assert one[0] == 0xde
    wide = b"\xdf" + int.from_bytes(one[1:3], "big").to_bytes(4, "big") + one[3:]
    got = decode(_packed(model, wide))
    assert got == decode(stream_bytes(predict_records([decode(one)[0]], model)))


def test_packed_errors_keep_their_place(trained):
    model = load_model(str(trained))
    recs = synthetic_records(n_programs=1, kernels=6, seed=22)
    recs[4] = new_record("kernel", program="p", kernel="k")
    out = []
    from tpuperf_cli.model.predict import predict_packed

    with pytest.raises(StreamError, match="record 5"):
        for b, k in predict_packed(read_records(io.BytesIO(stream_bytes(recs)), with_bytes=True),
                                   model, batch_size=2):
            out.append((b, k))
    assert sum(k for _, k in out) == 4 and len(decode(b"".join(b for b, _ in out))) == 4


# ---------------------------------------------------------------- the command

def test_predict_command_in_a_pipe(trained):
    recs = synthetic_records(n_programs=2, kernels=5, seed=16)
    res = run(["--model", str(trained)], stream_bytes(recs))
    assert res.returncode == 0, res.stderr.decode()
    out = decode(res.stdout)
    assert len(out) == 10 and all(r["pred_ns"] > 0 for r in out)
    assert res.stderr == b""


def test_predict_command_reads_shards_and_writes_zst(trained, tmp_path):
    shard = tmp_path / "in.zst"
    with RecordWriter(str(shard)) as w:
        for r in synthetic_records(n_programs=1, kernels=5, seed=17):
            w.write(r)
    from tpuperf_cli.commands.predict import cli

    res = CliRunner().invoke(cli, ["-m", str(trained), str(shard), "-o", str(tmp_path / "out.zst")])
    assert res.exit_code == 0, res.output
    out = list(read_records(str(tmp_path / "out.zst")))
    assert len(out) == 5 and all("pred_ns" in r for r in out)


def test_predict_command_errors(trained, tmp_path):
    kernel = new_record("kernel", program="p", kernel="dot.1", hlo="HloModule m")
    res = run(["--model", str(trained)], stream_bytes([kernel]))
    err = res.stderr.decode()
    assert res.returncode == 1 and "predict: error:" in err and "featurize" in err
    assert "Traceback" not in err
    (tmp_path / "bad.pt").write_bytes(b"\x00" * 10)
    res = run(["--model", str(tmp_path / "bad.pt")], b"")
    assert res.returncode == 1 and "not a tpuperf model file" in res.stderr.decode()
    res = run(["--model", str(trained)], b"\x93garbage")
    assert res.returncode == 1 and "Traceback" not in res.stderr.decode()
    # empty input: nothing out, no error (predict is a filter)
    res = run(["--model", str(trained)], b"")
    assert res.returncode == 0 and res.stdout == b""


def test_show_model(trained):
    from tpuperf_cli.commands.predict import cli

    res = CliRunner().invoke(cli, ["-m", str(trained), "--show-model"])
    assert res.exit_code == 0
    assert '"task": "fusion"' in res.output and '"platform": "cpu"' in res.output


def test_bundled_model_loads_and_predicts():
    path = default_model_path()
    assert os.path.exists(path), "tpuperf_cli/data/default.pt is missing"
    assert os.path.getsize(path) < 5 * 1024 * 1024
    m = load_model(path)
    assert isinstance(m, Model) and m.task == "fusion"
    assert m.target and m.target["platform"] == "cpu"
    p = m.predict_examples([example(r) for r in synthetic_records(1, 3, seed=18)])
    assert np.all(np.isfinite(p)) and np.all(p > 0)


def test_save_atomic_removes_what_a_killed_save_left(tmp_path):
    """A save killed mid-write (SIGKILL: no cleanup) leaves its temporary;
    the next save of the same file removes it, but not a temporary of a
    process still running, nor another file's."""
    import subprocess
    import sys

    from tpuperf_cli.model.predict import save_atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    left = tmp_path / f".m.pt.{dead}.tmp-abc123.pt"
    left.write_bytes(b"half a model")
    alive = tmp_path / f".m.pt.{os.getppid()}.tmp-def456.pt"
    alive.write_bytes(b"being saved")
    other = tmp_path / f".n.pt.{dead}.tmp-ghi789.pt"
    other.write_bytes(b"another file's")
    save_atomic({"a": 1}, tmp_path / "m.pt")
    assert not left.exists() and alive.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".m.pt")) == [alive.name]


def test_records_featurized_before_the_matmul_features_are_told_to_featurize_again():
    from types import SimpleNamespace

    from tpuperf_cli.model.examples import use_kernel_features
    from tpuperf_cli.records import KERNEL_FEATURES

    old = SimpleNamespace(kernel_feat=np.ones(5, np.float32), columns=None)
    msg = use_kernel_features(old, len(KERNEL_FEATURES), "in.zst: record 4")
    assert msg.startswith("in.zst: record 4: expected 27 kernel features in kernel_feat, got 5")
    assert "matmul_batch, matmul_m, matmul_n, matmul_k, matmul_m_align, matmul_n_align, " \
        "matmul_k_align, matmul_lhs_k_minor, matmul_rhs_k_minor, relayout_bytes, output_minor_dim, " \
        "output_minor_align, indexed_slices, touched_bytes, relayout_stride, relayout_stride_align, " \
        "reduce_bytes, reduce_kept_minor_bytes, reduce_kept_minor_align, minor_loop_unrolled, " \
        "matmul_rhs_row_align, needed_flops features: run featurize" in msg
    # records of the matmul features, before the alignment ones
    msg = use_kernel_features(SimpleNamespace(kernel_feat=np.ones(9, np.float32), columns=None), 26, "r")
    assert "before the matmul_m_align, matmul_n_align, matmul_k_align, matmul_lhs_k_minor, " \
        "matmul_rhs_k_minor, relayout_bytes, output_minor_dim, output_minor_align, indexed_slices, " \
        "touched_bytes, relayout_stride, relayout_stride_align, reduce_bytes, " \
        "reduce_kept_minor_bytes, reduce_kept_minor_align, minor_loop_unrolled, matmul_rhs_row_align " \
        "features" in msg                     # what a model reading 26 needs, no more
    new = SimpleNamespace(kernel_feat=np.arange(15, dtype=np.float32), columns=None)
    assert use_kernel_features(new, 5, "x") is None and new.kernel_feat.tolist() == [0, 1, 2, 3, 4]
    new = SimpleNamespace(kernel_feat=np.arange(15, dtype=np.float32), columns=None)
    assert use_kernel_features(new, 9, "x") is None and new.kernel_feat.tolist() == list(range(9))


def test_a_model_reading_fewer_kernel_features_leaves_the_callers_examples_whole():
    """The bundled model reads 16 kernel features; the corpus's records carry
    27. Predicting with it must not cut the caller's examples, which a model
    reading all 27 predicts next (benchmarks compare such models on one list)."""
    from tpuperf_cli.records import KERNEL_FEATURES

    records = synthetic_records(n_programs=1, kernels=6, seed=3)
    examples = [example(r, i) for i, r in enumerate(records, 1)]
    assert examples[0].kernel_feat.size == len(KERNEL_FEATURES) == 27
    model = load_model(None, engine="numpy")
    assert model.scaler.kernel_features == 16
    before = [ex.kernel_feat.copy() for ex in examples]
    pred = model.predict_examples(examples)
    model.batch(examples)
    assert all(np.array_equal(ex.kernel_feat, b) for ex, b in zip(examples, before))
    # what it reads is the first 16 of each: the same as records cut to them
    cut = [ex.cut(16) for ex in examples]
    assert all(c.kernel_feat.size == 16 and c.program == ex.program for c, ex in zip(cut, examples))
    np.testing.assert_array_equal(model.predict_examples(cut), pred)


# ---------------------------------------------------------------- known kernels

def hashed(records, salt=""):
    """The records with real (32 hex digit) fingerprints, as hlo-split writes them."""
    import hashlib

    for r in records:
        r["fingerprint"] = hashlib.blake2b(f"{salt}{r['fingerprint']}".encode(),
                                           digest_size=16).hexdigest()
    return records


@pytest.fixture(scope="module")
def knowing(tmp_path_factory):
    """A model trained on records with real fingerprints: two programs to
    train on, one to validate (the split), a kernel measured twice."""
    import json

    d = tmp_path_factory.mktemp("known")
    recs = hashed(synthetic_records(n_programs=3, kernels=12, seed=21, target=CPU))
    twice = dict(recs[0], program="synth1", kernel="again", runtime_ns=recs[0]["runtime_ns"] * 4)
    write_recs = recs + [twice]
    with RecordWriter(str(d / "train.zst")) as w:
        for r in write_recs:
            w.write(r)
    (d / "split.json").write_text(json.dumps({"train": ["synth0", "synth1"], "valid": ["synth2"],
                                              "test": []}))
    out = d / "k.pt"
    train([str(d / "train.zst")], out, NetConfig(hidden=16, opcode_dim=8, layers=2),
          TrainOptions(epochs=2, batch_size=8, lr=1e-2, threads=1), split=str(d / "split.json"),
          progress=lambda m: None)
    return {"model": out, "records": recs, "twice": twice}


def test_train_stores_the_training_kernels_measured_runtimes(knowing):
    recs = knowing["records"]
    m = load_model(str(knowing["model"]))
    trained = [r for r in recs if r["program"] != "synth2"]
    assert set(m.known) == {r["fingerprint"] for r in trained}     # not the validation program's
    for r in trained[1:]:
        assert m.known[r["fingerprint"]] == pytest.approx(r["runtime_ns"], rel=1e-12)
    # measured twice (4x apart): the geometric mean
    assert m.known[recs[0]["fingerprint"]] == pytest.approx(recs[0]["runtime_ns"] * 2, rel=1e-12)


@pytest.mark.parametrize("engine", ["numpy", "dgl"])
def test_known_kernels_are_predicted_at_their_runtime_and_others_by_the_network(knowing, engine):
    recs = knowing["records"]
    m = load_model(str(knowing["model"]), engine=engine)
    exs = [example(r) for r in recs]
    got = m.predict_examples(exs)
    known = np.array([r["program"] != "synth2" for r in recs])
    assert m.known_hits == known.sum()
    network = load_model(str(knowing["model"]), engine=engine)
    network.known = None
    alone = network.predict_examples(exs)
    for r, k, g, a in zip(recs, known, got, alone):
        assert g == (m.known[r["fingerprint"]] if k else a)
    assert not np.allclose(got[:5], alone[:5])      # the network does not know them exactly
    # the records path (predict's) agrees with the examples path: the known
    # kernels exactly, the network's to float rounding (another batch size)
    out = np.array([r["pred_ns"] for r in predict_records([dict(r) for r in recs], m, batch_size=5)])
    np.testing.assert_array_equal(out[known], got[known])
    np.testing.assert_allclose(out, got, rtol=1e-6)


def test_predict_command_says_how_many_kernels_it_knew_and_no_known_turns_it_off(knowing):
    recs = knowing["records"]
    res = run(["--model", str(knowing["model"])], stream_bytes(recs))
    assert res.returncode == 0, res.stderr.decode()
    assert "24 of 36 kernel(s) at the runtime model" in res.stderr.decode()
    first = decode(res.stdout)
    res = run(["--model", str(knowing["model"]), "--no-known"], stream_bytes(recs))
    assert res.returncode == 0 and res.stderr == b""
    alone = decode(res.stdout)
    m = load_model(str(knowing["model"]))
    for r, a, b in zip(recs, first, alone):
        if r["fingerprint"] in m.known:
            assert a["pred_ns"] == m.known[r["fingerprint"]] != b["pred_ns"]
        else:
            assert a["pred_ns"] == b["pred_ns"]
    res = run(["--model", str(knowing["model"]), "--quiet"], stream_bytes(recs))
    assert res.returncode == 0 and res.stderr == b""


def test_a_malformed_known_entry_is_a_clear_error(knowing, tmp_path):
    from tpuperf_cli.model.predict import read_model_file, save_atomic

    d = read_model_file(str(knowing["model"]))
    d["known"]["runtime_ns"] = d["known"]["runtime_ns"][:3]
    save_atomic(d, tmp_path / "bad.pt")
    for engine in ("numpy", "dgl"):
        with pytest.raises(TpuperfError, match="bad model file \\(its known kernels"):
            load_model(str(tmp_path / "bad.pt"), engine=engine)
    res = run(["--model", str(tmp_path / "bad.pt")], b"")
    assert res.returncode == 1 and b"its known kernels" in res.stderr and b"Traceback" not in res.stderr


def test_records_without_a_real_fingerprint_store_nothing(trained):
    assert load_model(str(trained)).known is None
    assert "known" not in torch.load(trained, weights_only=True)


def test_the_bundled_models_know_their_training_kernels():
    m = load_model(default_model_path())
    assert m.known and len(m.known) > 50_000
    seeds = load_model(os.path.join(ROOT, "tpuperf_cli", "data", "default-seeds.pt"))
    assert seeds.known == m.known


def test_eval_scores_known_kernels_as_predict_does_and_no_known_scores_the_network(knowing, tmp_path):
    import json

    from tpuperf_cli.commands.eval import cli

    from conftest import write_stream

    src = write_stream(tmp_path / "m.msgpack", knowing["records"])
    args = ["-m", str(knowing["model"]), str(src), "--format", "json", "--no-baseline"]
    got = CliRunner().invoke(cli, args)
    assert got.exit_code == 0, got.output
    assert "24 of 36 kernel(s) at the runtime model" in got.stderr
    alone = CliRunner().invoke(cli, args + ["--no-known"])
    assert alone.exit_code == 0 and "at the runtime model" not in alone.stderr
    assert json.loads(got.stdout) != json.loads(alone.stdout)


AMD_MODEL = "cpu-amd-epyc-26-2"


def test_records_measured_on_a_bundled_cpu_target_choose_its_model(tmp_path, monkeypatch):
    """The bundled model of the AMD EPYC family 26 model 2 (trained on that
    machine's labels of the corpus, examples/corpus/labels/) is the default
    for records measured there, and for records not measured on such a
    machine, and predicts that machine's timings of a held-out program's
    kernels nearer than the Intel corpus's model does."""
    import json
    import pathlib

    from tpuperf_cli.commands.options import resolve_model
    from tpuperf_cli.measure.labels import read_label_file
    from tpuperf_cli.model import calibrated
    from tpuperf_cli.model.calibrated import default_choice

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))      # no calibrated models
    root = pathlib.Path(ROOT)
    labels = read_label_file(root / "examples" / "corpus" / "labels" / "amd-epyc-26-2.zst")
    sidecar = json.loads((root / "tpuperf_cli" / "data" / f"{AMD_MODEL}.target.json").read_text())
    assert sidecar["target"] == labels.target
    path, why = default_choice(labels.target)
    assert os.path.basename(path) == f"{AMD_MODEL}.pt" and why == "bundled for the records' target"
    assert resolve_model(AMD_MODEL) == path
    other = dict(labels.target, cpu=dict(labels.target["cpu"], model="17"))     # another machine
    assert default_choice(other)[0] == default_model_path()
    # records not measured: the model of this machine, when it is that CPU
    monkeypatch.setattr(calibrated, "machine_target", lambda: {**labels.target, "cores": 8})
    assert default_choice() == (path, "bundled for this machine")
    monkeypatch.setattr(calibrated, "machine_target", lambda: other)
    assert default_choice() == (default_model_path(), "the bundled model; no calibrated model for this machine")
    # what calibrate names when its model takes that one's place
    assert calibrated.bundled_for(labels.target) == path and calibrated.bundled_for(other) is None
    amd = load_model(path)
    assert amd.known and len(amd.known) > 50_000

    # a test program of the random split (neither model trained on it), at that machine's labels
    program = json.loads((root / "examples" / "splits" / "random.json").read_text())["test"][0]
    records = [dict(r, runtime_ns=labels.labels[r["fingerprint"]][0], target=labels.target)
               for r in read_records(str(root / "examples" / "corpus" / "graphs" / f"{program}.zst"))
               if r["fingerprint"] in labels.labels and labels.labels[r["fingerprint"]][0] >= 5e3]
    assert len(records) >= 10

    def median_error(model):
        got = list(predict_records(records, model, warn=lambda _: None))
        return float(np.median([abs(np.log(r["pred_ns"] / r["runtime_ns"])) for r in got]))

    assert median_error(amd) < median_error(load_model(default_model_path()))
