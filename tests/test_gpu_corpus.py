"""The GPU corpus (examples/corpus-gpu) as data, the HLO that XLA:GPU wrote
as hlo-split's input, the bundled GPU model's choice by target, and
examples/gpu_corpus.py's logic on CPU (CI has no GPU)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpuperf_cli.hlo.parser import parse_module
from tpuperf_cli.hlo.split import kernel_records
from tpuperf_cli.measure.device import lower_quartile
from tpuperf_cli.records import target_identity
from tpuperf_cli.stream import RecordWriter, read_records

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "examples" / "corpus-gpu"
DATA = Path(__file__).resolve().parent / "data" / "hlo"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())


def split(name):
    path = DATA / f"xla_gpu_{name}.hlo"
    return list(kernel_records(parse_module(path.read_text(), str(path)), name))


def test_hlo_that_xla_gpu_wrote_splits_into_the_corpus_kernels():
    # the same program text the corpus was split from, on the H200
    kernels = split("mlp_s_train")
    shard = list(read_records(str(CORPUS / "kernels" / "mlp_s_train.zst")))
    assert [k["fingerprint"] for k in kernels] == [r["fingerprint"] for r in shard]
    kinds = {k.get("fusion_kind") for k in kernels}
    assert {"kCustom", "kLoop", "kInput"} <= kinds          # Triton gemm fusions among them
    assert any("__triton" in k["hlo"] for k in kernels if k.get("fusion_kind") == "kCustom")


def test_cudnn_convolutions_are_kernels_of_their_own_and_measured():
    kernels = split("cnn_s_train")
    convs = [k for k in kernels if k["opcode"] == "custom-call"]
    assert convs and all('custom_call_target="__cudnn$conv' in k["hlo"] for k in convs)
    shard = list(read_records(str(CORPUS / "kernels" / "cnn_s_train.zst")))
    assert len(shard) == len(kernels)
    # measure turns each back into the convolution it stands for (all but
    # the grouped backward ones), and XLA:GPU calls cuDNN for it again
    timed = [r for r in shard if r["opcode"] == "custom-call" and r.get("runtime_ns")]
    assert len(timed) == len(convs)


def test_only_the_sweeps_of_trainable_programs_are_in_the_corpus():
    sys.path.insert(0, str(ROOT / "examples"))
    import gpu_corpus

    keep = gpu_corpus.trainable()
    sweeps = [p for p in MANIFEST["programs"] if p["sweep_of"]]
    assert sweeps and all(p["sweep_of"] in keep for p in sweeps)
    assert not set(MANIFEST.get("sweeps_left_out", ())) & {p["name"] for p in MANIFEST["programs"]}


def test_the_manifest_names_the_gpu_and_its_software():
    target, machine = MANIFEST["target"], MANIFEST["machine"]
    assert target["platform"] == "gpu" and target["clock"] == "events"
    assert target["device_kind"] == machine["gpu"] == "NVIDIA H200"
    assert machine["driver"] and machine["cuda"] and MANIFEST["jax"] == target["jax"]
    noise = MANIFEST["measurement_noise"]
    assert noise["kernels"] > 0 and 0 <= noise["median"] <= noise["p90"]
    assert target_identity(noise["target"]) == target_identity(target)


def shard_of(p):
    """A program's shard name and its records' program name: a sweep's is a
    generated pseudo-program's, "sweeps:P"."""
    if p["sweep_of"]:
        return f"sweeps-{p['name']}", f"sweeps:{p['name']}"
    return p["name"], p["name"]


def test_every_shard_is_what_the_manifest_says():
    shards = sorted(p.stem for p in (CORPUS / "kernels").glob("*.zst"))
    assert shards == sorted(shard_of(p)[0] for p in MANIFEST["programs"])
    want = target_identity(MANIFEST["target"])
    measured, distinct = 0, set()
    for p in MANIFEST["programs"]:
        shard, program = shard_of(p)
        records = list(read_records(str(CORPUS / "kernels" / f"{shard}.zst")))
        assert len(records) == p["kernels"] <= p["kernels_in_program"]
        assert p["partial"] == (p["kernels"] < p["kernels_in_program"])
        assert {r["program"] for r in records} == {program}
        if p["sweep_of"]:
            assert {(r["source"], r["origin"]) for r in records} == {("sweeps", p["sweep_of"])}
        ok = [r for r in records if r.get("runtime_ns")]
        assert len(ok) == p["measured"]
        for r in ok:
            assert target_identity(r["target"]) == want
            assert r["runtime_ns"] == lower_quartile(r["runs"]) and len(r["runs"]) == 15
            distinct.add(r["fingerprint"])
        assert all(r.get("error") for r in records if not r.get("runtime_ns"))
        measured += len(ok)
    assert measured == MANIFEST["measured"] and len(distinct) == MANIFEST["distinct_measured"]
    assert sorted(n for n in MANIFEST["partial_programs"]) == sorted(
        p["name"] for p in MANIFEST["programs"] if p["partial"])


def test_records_of_the_h200_choose_the_bundled_gpu_model(tmp_path, monkeypatch):
    from tpuperf_cli.commands.options import resolve_model
    from tpuperf_cli.model.calibrated import bundled_model, default_choice

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))      # no calibrated models
    path, why = default_choice(MANIFEST["target"])
    assert Path(path).name == "gpu-nvidia-h200.pt" and why == "bundled for the records' target"
    assert resolve_model("gpu-nvidia-h200") == path
    assert bundled_model("gpu-nvidia-h200.pt") == path and bundled_model("../default") is None
    cpu_target = dict(MANIFEST["target"], platform="cpu", device_kind="cpu")
    assert Path(default_choice(cpu_target)[0]).name == "default.pt"
    # another GPU's records: the H200's model is nearer than the CPU's
    h100 = dict(MANIFEST["target"], device_kind="NVIDIA H100 80GB HBM3", chip="NVIDIA H100 80GB HBM3")
    path, why = default_choice(h100)
    assert Path(path).name == "gpu-nvidia-h200.pt" and "another gpu (NVIDIA H200)" in why
    assert Path(default_choice(dict(h100, platform="tpu"))[0]).name == "default.pt"


def test_salvage_keeps_the_whole_records_of_a_stopped_measure(tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    import gpu_corpus

    tmp, dest = tmp_path / "p.tmp", tmp_path / "p.msgpack"
    with RecordWriter(str(tmp)) as w:
        for i in range(3):
            w.write({"type": "kernel", "index": i, "hlo": "x" * 100})
    tmp.write_bytes(tmp.read_bytes()[:-40])          # killed while writing the third
    assert gpu_corpus.salvage(tmp, dest) == 2 and not tmp.exists()
    assert [r["index"] for r in read_records(str(dest))] == [0, 1]


def test_tasks_name_each_program_once_and_sweep_only_trainable_ones():
    sys.path.insert(0, str(ROOT / "examples"))
    import gpu_corpus

    todo = gpu_corpus.tasks(set(), sweeps=True)
    names = [n for n, _ in todo]
    assert len(names) == len(set(names))
    keep = gpu_corpus.trainable()
    assert "gpt_s_train" not in keep and "mlp_s_train" in keep    # test and train programs
    swept = {point[0] for _, point in todo if point}
    assert swept and swept <= keep


def test_a_program_cut_short_is_measured_again(tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    import gpu_corpus

    dest = tmp_path / "p.msgpack"
    assert not gpu_corpus.measured_whole(dest)
    dest.write_bytes(b"")
    assert gpu_corpus.measured_whole(dest)
    dest.with_suffix(".partial").touch()           # what --stop leaves
    assert not gpu_corpus.measured_whole(dest)


def test_gpu_corpus_builds_and_installs_a_program_on_cpu(tmp_path):
    work, into = tmp_path / "work", tmp_path / "corpus"
    script = str(ROOT / "examples" / "gpu_corpus.py")
    p = subprocess.run([sys.executable, script, "--work", str(work), "--backend", "cpu",
                        "--only", "mlp_s_train", "--jobs", "1", "--samples", "3",
                        "--archive", str(tmp_path / "out" / "c"), "--parts", "2"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "mlp_s_train: " in p.stderr and "1 programs measured" in p.stderr
    assert sorted(f.name for f in (tmp_path / "out").iterdir()) == [
        "c-kernels-0.tar.xz", "c-kernels-1.tar.xz", "c-meta.tar.xz"]
    p = subprocess.run([sys.executable, script, "--install", str(work), "--into", str(into)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads((into / "manifest.json").read_text())
    (prog,) = doc["programs"]
    assert prog["name"] == "mlp_s_train" and prog["family"] == "mlp" and not prog["partial"]
    assert doc["target"]["platform"] == "cpu" and doc["measured"] == prog["measured"] > 0
    assert len(list(read_records(str(into / "kernels" / "mlp_s_train.zst")))) == prog["kernels"]


@pytest.mark.parametrize("argv", [["--backend", "cpu"], []])
def test_gpu_corpus_needs_a_work_folder(argv):
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "gpu_corpus.py"), *argv],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "--work is required" in p.stderr


def test_the_gpu_session_script_runs_its_steps_on_cpu(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "out"), WORK=str(tmp_path / "work"),
               BACKEND="cpu", BUDGET="1", STOP="120", NOISE="1", PY=sys.executable)
    p = subprocess.run(["sh", str(ROOT / "examples" / "gpu_session.sh")], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "featurize ran on mlp_s_train.msgpack" in p.stdout
    out = sorted(f.name for f in (tmp_path / "out").iterdir())
    assert out == ["corpus-gpu-kernels-0.tar.xz", "corpus-gpu-kernels-1.tar.xz",
                   "corpus-gpu-kernels-2.tar.xz", "corpus-gpu-kernels-3.tar.xz",
                   "corpus-gpu-meta.tar.xz", "noise.json"]
    assert json.loads((tmp_path / "out" / "noise.json").read_text())["kernels"] > 0


def test_train_gpu_model_script_rebuilds_the_bundled_model(tmp_path):
    """examples/train_gpu_model.sh makes the bundled GPU model again: the
    same trees, up to another CPU's floating point in the features."""
    import numpy as np

    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.predict import load_model

    out = tmp_path / "gpu.pt"
    res = subprocess.run(["sh", str(ROOT / "examples/train_gpu_model.sh")], capture_output=True, text=True,
                         env={**os.environ, "PY": sys.executable, "OUT": str(out)}, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "gradient-boosted trees" in res.stderr and "split random.json 'test'" in res.stdout
    assert json.loads((tmp_path / "gpu.target.json").read_text())["target"]["device_kind"] == "NVIDIA H200"
    bundled = load_model(str(ROOT / "tpuperf_cli/data/gpu-nvidia-h200.pt"))
    rebuilt = load_model(str(out))
    assert abs(rebuilt.cfg.trees - bundled.cfg.trees) <= bundled.cfg.trees // 10
    test = json.loads((ROOT / "examples/splits/random.json").read_text())["test"]
    records = [r for name in test for r in read_records(str(ROOT / f"examples/corpus-gpu/graphs/{name}.zst"))]
    examples = [example(r, i) for i, r in enumerate(records, 1)]
    ratio = rebuilt.predict_examples(examples) / bundled.predict_examples(examples)
    assert np.median(np.abs(ratio - 1)) < 0.01, np.median(np.abs(ratio - 1))


@pytest.mark.slow
def test_the_gpu_calibrate_script_runs_the_benchmark_on_cpu(tmp_path):
    """examples/gpu_calibrate.sh, as it ran on the H100, checked on a CPU:
    the GPU corpus's test kernels timed, calibrate run, the table printed."""
    env = dict(os.environ, OUT=str(tmp_path / "out"), BACKEND="cpu", CLI="0", PY=sys.executable,
               BASE=str(ROOT / "tpuperf_cli" / "data" / "gpu-nvidia-h200.pt"),
               BUDGET="40s", TEST_SECONDS="15", TEST_KERNELS="12")
    p = subprocess.run(["sh", str(ROOT / "examples" / "gpu_calibrate.sh")], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "calibrated / base" in p.stdout
    assert "base (gpu-nvidia-h200" in p.stdout     # the --model base, named for what it is
    figures = json.loads((tmp_path / "out" / "calibrate.json").read_text())
    assert figures["rows"]["bundled"]["n"] >= 5
    assert (tmp_path / "out" / "cache" / "measurements.sqlite3").exists()


def test_grow_measures_what_the_corpus_lacks_and_merge_adds_it_on_cpu(tmp_path):
    """--grow: the check program measured again, then one sweep the corpus
    lacks; --install --merge adds the sweep and compares the check program
    with the corpus's labels."""
    script = str(ROOT / "examples" / "gpu_corpus.py")
    into = tmp_path / "corpus"

    def run(*argv, timeout=600):
        p = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True,
                           timeout=timeout)
        assert p.returncode == 0, p.stderr
        return p.stderr

    common = ["--backend", "cpu", "--only", "mlp_s_train", "--jobs", "1", "--samples", "3"]
    run("--work", str(tmp_path / "w1"), *common)
    run("--install", str(tmp_path / "w1"), "--into", str(into))
    first = json.loads((into / "manifest.json").read_text())
    err = run("--work", str(tmp_path / "w2"), *common, "--sweeps", "--grow", str(into),
              "--check", "mlp_s_train", "--limit", "1")
    assert "2 programs, backend cpu" in err
    err = run("--install", str(tmp_path / "w2"), "--into", str(into), "--merge")
    doc = json.loads((into / "manifest.json").read_text())
    names = [p["name"] for p in doc["programs"]]
    assert names[0] == "mlp_s_train" and len(names) == 2
    sweep = doc["programs"][1]
    assert sweep["sweep_of"] == "mlp_s_train"
    records = list(read_records(str(into / "kernels" / f"sweeps-{sweep['name']}.zst")))
    assert len(records) == sweep["kernels"] and {r["program"] for r in records} == {f"sweeps:{sweep['name']}"}
    assert doc["measured"] == first["measured"] + sweep["measured"]
    (grown,) = doc["grown"]
    assert grown["programs_added"] == 1 and grown["check"]["kernels"] == first["distinct_measured"]
    assert 0 < grown["check"]["p10"] <= grown["check"]["median_ratio"] <= grown["check"]["p90"]
    assert doc["target"] == first["target"]
    # a second --grow finds nothing new to take but the check program
    sys.path.insert(0, str(ROOT / "examples"))
    import gpu_corpus

    todo = gpu_corpus.tasks({"mlp_s_train"}, True, doc, ["mlp_s_train"], 3)
    assert [n for n, _ in todo][0] == "mlp_s_train" and sweep["name"] not in [n for n, _ in todo]
    assert len(todo) == 4


def test_merge_refuses_another_target(tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    import gpu_corpus

    (tmp_path / "w").mkdir()
    (tmp_path / "c").mkdir()
    (tmp_path / "w" / "manifest.json").write_text(json.dumps(
        {"target": dict(MANIFEST["target"], device_kind="NVIDIA H100"), "programs": []}))
    (tmp_path / "c" / "manifest.json").write_text(json.dumps(MANIFEST))
    with pytest.raises(SystemExit, match="a corpus comes from one machine"):
        gpu_corpus.install(tmp_path / "w", tmp_path / "c", merge=True)
