"""The Python API (tpuperf_cli.estimate, estimate_hlo, compare) and `tpuperf
compare`: the same figures as the tools' pipeline, from jitted functions,
HLO text, files, protos and dump directories."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

import tpuperf_cli as tp
from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.hlo.dump import read_hlo

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "hlo" / "mlp_s_train.hlo.zst"
BASE = ROOT / "examples" / "hlo" / "mlp_m_train.hlo.zst"


def _env():
    env = {**os.environ}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _pipeline(path):
    """pred_ns of the tools: hlo-split | featurize | predict | score."""
    tool = [sys.executable, "-m", "tpuperf_cli"]
    out = subprocess.run(
        f"{' '.join(tool)} hlo-split {path} | {' '.join(tool)} featurize | "
        f"{' '.join(tool)} predict | {' '.join(tool)} score --format json",
        shell=True, capture_output=True, check=True, env=_env()).stdout
    return [json.loads(line) for line in out.decode().splitlines()]


def test_importing_tpuperf_cli_loads_no_heavy_library():
    code = ("import sys, tpuperf_cli as tp; tp.estimate; tp.compare; tp.Estimate\n"
            "print(sorted(m for m in ('torch', 'dgl', 'jax', 'numpy', 'pandas') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=_env()).stdout
    assert out.strip() == "[]"


def test_estimate_hlo_matches_the_tools():
    est = tp.estimate_hlo(EXAMPLE)
    (program,) = _pipeline(EXAMPLE)
    assert est.program == program["program"] == "mlp_s_train"
    # the same predictions, summed in another order (float32 per kernel)
    assert est.total_ns == pytest.approx(program["pred_ns"], rel=1e-6)
    assert len(est.kernels) == program["kernels"]
    assert est.model == program["model"]
    assert sum(k.total_ns for k in est.kernels) == pytest.approx(est.total_ns)
    assert sum(k.share for k in est.kernels) == pytest.approx(1.0)
    assert [k.total_ns for k in est.kernels] == sorted((k.total_ns for k in est.kernels),
                                                       reverse=True)
    for k in est.kernels:
        assert k.total_ns == pytest.approx(k.pred_ns * k.count)
    # text and a path give the same
    same = tp.estimate_hlo(read_hlo(EXAMPLE).text, name="x")
    assert same.program == "x" and same.total_ns == pytest.approx(est.total_ns, rel=1e-12)
    frame = est.to_pandas()
    assert list(frame.columns) == ["name", "opcode", "fusion_kind", "count", "count_known",
                                   "pred_ns", "total_ns", "share", "fingerprint", "spread"]
    assert len(frame) == len(est.kernels)
    assert all(k.spread is None for k in est.kernels)      # one network: no members to part
    seeds = tp.estimate_hlo(EXAMPLE, model="default-seeds")
    assert all(k.spread is not None and k.spread >= 0 for k in seeds.kernels)
    assert frame["total_ns"].sum() == pytest.approx(est.total_ns)
    text = str(est)
    assert "mlp_s_train" in text and est.kernels[0].name in text
    assert sum(est.by_opcode().values()) == pytest.approx(est.total_ns)


def test_estimate_compiles_a_jitted_function_on_jax_s_own_backend(tmp_path):
    import jax
    import jax.numpy as jnp

    def loss(w, x):
        return jnp.tanh(x @ w).sum()

    step = jax.jit(jax.grad(loss))
    w, x = jnp.ones((64, 32)), jnp.ones((16, 64))
    platforms = jax.config.jax_platforms
    backend = jax.default_backend()
    est = tp.estimate(step, w, x)
    assert jax.config.jax_platforms == platforms and jax.default_backend() == backend
    assert est.platform == backend
    assert est.program == "loss"
    assert est.total_ns > 0 and est.kernels
    # the same as its HLO (estimate_hlo is checked against the tools above)
    f = tmp_path / "step.hlo"
    f.write_text(est.hlo)
    assert tp.estimate_hlo(f).total_ns == pytest.approx(est.total_ns, rel=1e-12)
    # a Lowered, a Compiled and a plain function are taken too
    lowered = step.lower(w, x)
    assert tp.estimate(lowered).total_ns == pytest.approx(est.total_ns)
    assert tp.estimate(lowered.compile(), name="c").total_ns == pytest.approx(est.total_ns)
    assert tp.estimate(jax.grad(loss), w, x).total_ns == pytest.approx(est.total_ns)
    with pytest.raises(TpuperfError, match="takes no arguments"):
        tp.estimate(lowered, w)


def test_estimate_hlo_reads_protos_dump_directories_and_compiles(tmp_path):
    import jax
    import jax.numpy as jnp
    from jax._src.lib import xla_client as xc

    f = jax.jit(lambda x: jnp.sin(x) @ x.T)
    x = jnp.ones((32, 16))
    text = f.lower(x).compile().as_text()
    est = tp.estimate_hlo(text)
    proto = xc._xla.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    assert tp.estimate_hlo(proto).total_ns == pytest.approx(est.total_ns)
    mlir = f.lower(x).as_text()
    with pytest.raises(TpuperfError, match="StableHLO"):
        tp.estimate_hlo(mlir)
    compiled = tp.estimate_hlo(mlir, compile="cpu")
    assert sorted(k.fingerprint for k in compiled.kernels) == \
        sorted(k.fingerprint for k in est.kernels)
    # a dump directory: one module picked by name
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "module_0003.jit__lambda_.cpu_after_optimizations.txt").write_text(text)
    (dump / "module_0004.jit__lambda_.cpu_after_optimizations.txt").write_text(text)
    (dump / "module_0003.jit__lambda_.debug_options").write_text("")
    with pytest.raises(TpuperfError, match="2 modules; pick one with module=REGEX"):
        tp.estimate_hlo(dump)
    picked = tp.estimate_hlo(dump, module="0003")
    assert picked.program == "module_0003.jit__lambda_"
    assert picked.total_ns == pytest.approx(est.total_ns)


def test_compare_ranks_and_explains_the_difference():
    import jax
    import jax.numpy as jnp

    def loss(w, x):
        return jnp.tanh(x @ w).sum()

    step = jax.jit(jax.grad(loss))
    w, x = jnp.ones((128, 64)), jnp.ones((32, 128))
    lowered = step.lower(w, x)
    result = tp.compare({
        "default": lowered.compile(),
        "no fusion": lowered.compile(compiler_options={"xla_disable_hlo_passes": "fusion"}),
        "jitted": step,
        "file": BASE,
    }, w, x)
    totals = [e.total_ns for e in result.estimates]
    assert totals == sorted(totals)
    assert result.best is result.estimates[0]
    assert {e.program for e in result.estimates} == {"default", "no fusion", "jitted", "file"}
    assert result["jitted"].total_ns == pytest.approx(result["default"].total_ns)
    # the differences, all of them, add up to the difference of the totals
    for e in result.estimates:
        diffs = result.differences(e.program, top=10_000)
        assert sum(d.delta_ns for d in diffs) == pytest.approx(e.total_ns - result.best.total_ns,
                                                              rel=1e-6, abs=1e-3)
    nofuse = result.differences("no fusion", top=3)
    assert len(nofuse) == 3
    assert abs(nofuse[0].delta_ns) >= abs(nofuse[1].delta_ns) >= abs(nofuse[2].delta_ns)
    frame = result.to_pandas()
    assert list(frame["program"]) == [e.program for e in result.estimates]
    assert frame["vs_fastest"].iloc[0] == 1.0
    text = str(result)
    assert "no fusion against" in text and "vs fastest" in text


def test_tpuperf_compare_prints_the_api_s_ranking():
    from click.testing import CliRunner

    from tpuperf_cli.cli import load_command

    compare = load_command("compare")
    small = ROOT / "examples" / "hlo" / "autoenc_s_train.hlo.zst"
    out = CliRunner().invoke(compare, ["--format", "json", "--top", "2", str(small), str(EXAMPLE)])
    assert out.exit_code == 0, (out.output, out.exception)
    doc = json.loads(out.stdout)
    api = tp.compare([small, EXAMPLE])
    assert [p["program"] for p in doc["programs"]] == [e.program for e in api.estimates]
    assert [p["pred_ns"] for p in doc["programs"]] == \
        pytest.approx([e.total_ns for e in api.estimates])
    assert doc["programs"][0]["differences"] == []
    assert len(doc["programs"][1]["differences"]) == 2
    table = CliRunner().invoke(compare, [str(EXAMPLE), str(small)])
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["rank", "program", "predicted", "vs", "fastest", "kernels"]
    assert lines[1].split()[1] == api.best.program
    assert f"{api.estimates[1].program} against {api.best.program}" in table.stdout
    # as a program: bad input is one line and exit status 2
    bad = subprocess.run([sys.executable, "-m", "tpuperf_cli", "compare",
                          str(ROOT / "tests" / "data" / "hlo" / "empty.hlo")],
                         capture_output=True, text=True, env=_env())
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_model_argument_takes_a_path_or_a_loaded_model():
    from tpuperf_cli.model import default_model_path

    a = tp.estimate_hlo(EXAMPLE, model=default_model_path())
    b = tp.estimate_hlo(EXAMPLE, model=tp.load_model(default_model_path()))
    assert a.total_ns == pytest.approx(b.total_ns) and a.model == b.model
    with pytest.raises(TpuperfError, match="model"):
        tp.estimate_hlo(EXAMPLE, model=str(EXAMPLE))


def test_the_readme_python_example_runs(capsys):
    import re

    readme = (ROOT / "README.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "vs fastest" in out and "default" in out and "no fusion" in out


def test_a_program_compiled_for_a_gpu_gets_the_gpu_model_by_default(tmp_path, monkeypatch):
    """model=None: for a program jax compiled for a GPU (its client says
    "cuda"), the bundled GPU model, or one calibrated for GPUs here; the
    CPU's default otherwise."""
    import shutil

    from tpuperf_cli import api
    from tpuperf_cli.model.calibrated import default_choice, write_sidecar

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setattr(api, "_MODELS", {})
    root = pathlib.Path(__file__).resolve().parent.parent / "tpuperf_cli" / "data"
    gpu = api.load_model(None, "cuda")
    assert pathlib.Path(gpu.path).name == "gpu-nvidia-h200.pt" and "bundled for gpu" in gpu.chosen
    for platform in (None, "cpu", "tpu"):     # the CPU's default (this machine's, where bundled)
        assert api.load_model(None, platform).path == default_choice()[0]
    est = tp.estimate_hlo(str(pathlib.Path(__file__).parent / "data/hlo/xla_gpu_mlp_s_train.hlo"),
                          model=gpu)
    est.platform = "cuda"
    api._check_target(est, gpu)
    assert not [w for w in est.warnings if "compiled for" in w]
    # a model calibrated for GPUs on this machine comes first
    mine = tmp_path / "tpuperf" / "models" / "gpu-mine.pt"
    mine.parent.mkdir(parents=True)
    shutil.copy(root / "gpu-nvidia-h200.pt", mine)
    target = json.loads((root / "gpu-nvidia-h200.target.json").read_text())["target"]
    write_sidecar(str(mine), dict(target, device_kind="NVIDIA A100"), "gpu-mine")
    monkeypatch.setattr(api, "_MODELS", {})
    assert api.load_model(None, "gpu").path == str(mine)
