"""hlo-split on what XLA writes: dump directories, HLO protos, and programs
before optimization (refused, or compiled with --compile). The dumps are
real: a small jax program run in a subprocess with XLA_FLAGS=--xla_dump_to."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from tpuperf_cli.stream import read_records

ROOT = pathlib.Path(__file__).resolve().parent.parent
HLO_SPLIT = [sys.executable, "-m", "tpuperf_cli", "hlo-split"]

PROGRAM = textwrap.dedent("""
    import jax, jax.numpy as jnp
    def loss(w, x):
        return jnp.tanh(x @ w).sum()
    step = jax.jit(jax.grad(loss))
    step(jnp.ones((32, 16)), jnp.ones((8, 32))).block_until_ready()
    scan = jax.jit(lambda c: jax.lax.fori_loop(0, 5, lambda i, c: jnp.sin(c) * 2, c))
    scan(jnp.ones(64)).block_until_ready()
""")


def _env(**extra):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **extra}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """A real XLA dump directory (text and protos) of two jitted functions."""
    d = tmp_path_factory.mktemp("dump")
    subprocess.run([sys.executable, "-c", PROGRAM], check=True, cwd=d, env=_env(
        XLA_FLAGS=f"--xla_dump_to={d} --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"))
    return d


def _run(args, input=None):
    """hlo-split as a program: exit status and the one-line errors."""
    return subprocess.run(HLO_SPLIT + [str(a) for a in args], input=input, capture_output=True,
                          cwd=ROOT, env=_env())


def _split(args, input=None):
    """hlo-split in this process (no start-up cost): its records; it must succeed."""
    from click.testing import CliRunner

    from tpuperf_cli.cli import load_command

    result = CliRunner().invoke(load_command("hlo-split"), ["-q"] + [str(a) for a in args],
                                input=input)
    assert result.exit_code == 0, (result.output, result.exception)
    return _records(result.stdout_bytes)


def _records(out):
    import io

    return list(read_records(io.BytesIO(out)))


def _optimized(dump):
    return sorted(dump.glob("module_*.jit_*after_optimizations.txt"))


def _name(path):
    # module_0007.jit_loss.cpu_after_optimizations.txt -> module_0007.jit_loss
    ident, module = path.name.split(".")[:2]
    return f"{ident}.{module}"


def test_a_dump_directory_splits_every_optimized_module(dump):
    result = _run([dump])
    assert result.returncode == 0, result.stderr
    records = _records(result.stdout)
    files = _optimized(dump)
    assert len(files) >= 2
    assert {r["program"] for r in records} == {_name(f) for f in files}
    # the same kernels as splitting each optimized file by itself
    for f in files:
        alone = _split([f])
        mine = [r for r in records if r["program"] == _name(f)]
        assert [(r["kernel"], r["fingerprint"], r["count"]) for r in mine] == \
            [(r["kernel"], r["fingerprint"], r["count"]) for r in alone]
        assert all(r["program"] == _name(f) for r in alone)   # named alike
    err = result.stderr.decode()
    n_before = len(list(dump.glob("*before_optimizations*")))
    assert f"{len(files)} module(s)" in err
    assert f"{n_before} before optimization" in err
    assert "LLVM IR and object code" in err and "debug options" in err
    assert "buffer assignments" in err
    assert f"{len(files)} protos of modules also dumped as text" in err
    assert _run(["-q", dump]).stderr == b""
    # the fori_loop's body runs 5 times (XLA's known_trip_count)
    assert any(r["count"] == 5 for r in records if r["program"].endswith("jit__lambda_"))


def test_module_picks_modules_by_name(dump):
    result = _run(["--module", "jit_loss", dump])
    assert result.returncode == 0, result.stderr
    programs = {r["program"] for r in _records(result.stdout)}
    assert programs and all(p.endswith(".jit_loss") for p in programs)
    assert re.search(rb"\d+ modules not matching --module", result.stderr)
    none = _run(["--module", "no_such_thing", dump])
    assert none.returncode == 1 and none.stdout == b""
    err = none.stderr.decode().strip().splitlines()[-1]
    assert "no module matches --module 'no_such_thing'" in err and "jit_loss" in err
    bad = _run(["--module", "(", dump])
    assert bad.returncode == 2 and b"not a regular expression" in bad.stderr
    nodir = _run(["--module", "x", _optimized(dump)[0]])
    assert nodir.returncode == 2 and b"give a directory" in nodir.stderr


def test_protos_read_through_jaxlib_give_the_same_kernels(dump, tmp_path):
    for text_file in _optimized(dump):
        proto = pathlib.Path(str(text_file)[: -len(".txt")] + ".hlo.pb")
        assert proto.exists()
        ra, rb = _split([text_file]), _split([proto])
        assert [(r["program"], r["kernel"], r["fingerprint"]) for r in ra] == \
            [(r["program"], r["kernel"], r["fingerprint"]) for r in rb]
    # a directory of protos only (--xla_dump_hlo_as_proto alone)
    for p in dump.glob("*.pb"):
        shutil.copy(p, tmp_path)
    only = _split([tmp_path])
    assert {r["program"] for r in only} == {_name(f) for f in _optimized(dump)}
    # an HloModuleProto (not wrapped in an HloProto) from stdin
    from jax._src.lib import xla_client as xc

    text = _optimized(dump)[0].read_text()
    module_proto = xc._xla.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    piped = _split([], input=module_proto)
    assert [r["fingerprint"] for r in piped] == \
        [r["fingerprint"] for r in _split([_optimized(dump)[0]])]


def test_a_broken_proto_is_one_line(tmp_path):
    bad = tmp_path / "x.hlo.pb"
    bad.write_bytes(b"\x0a\x05abc")
    result = _run([bad])
    assert result.returncode == 1
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tpuperf: error: ") and str(bad) in lines[0]


def test_stablehlo_is_refused_or_compiled(tmp_path):
    code = ("import jax, jax.numpy as jnp\n"
            "f = jax.jit(lambda x, w: jnp.tanh(x @ w) * 2)\n"
            "args = jnp.ones((16, 32)), jnp.ones((32, 8))\n"
            "open('f.mlir', 'w').write(f.lower(*args).as_text())\n"
            "open('f.hlo', 'w').write(f.lower(*args).compile().as_text())\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, env=_env())
    refused = _run([tmp_path / "f.mlir"])
    assert refused.returncode == 2 and refused.stdout == b""
    msg = refused.stderr.decode().strip()
    assert len(msg.splitlines()) == 1
    assert "StableHLO" in msg and "compile().as_text()" in msg and "--compile" in msg
    got = _split(["--compile", "cpu", tmp_path / "f.mlir"])
    want = _split([tmp_path / "f.hlo"])
    # XLA compiled it the way jax.jit(f).lower(...).compile() does
    assert sorted(r["fingerprint"] for r in got) == sorted(r["fingerprint"] for r in want)
    assert {r["program"] for r in got} == {"f"}
    # from stdin too
    piped = _split(["-c", "cpu"], input=(tmp_path / "f.mlir").read_bytes())
    assert len(piped) == len(got)


def test_before_optimization_dumps_are_refused_or_compiled(dump, tmp_path):
    before = sorted(dump.glob("module_*.jit_loss.before_optimizations.txt"))[0]
    refused = _run([before])
    assert refused.returncode == 2
    assert b"before optimization" in refused.stderr and b"--compile" in refused.stderr
    compiled = _split(["-c", "cpu", before])
    after = [f for f in _optimized(dump) if _name(f) == _name(before)][0]
    assert sorted(r["fingerprint"] for r in compiled) == \
        sorted(r["fingerprint"] for r in _split([after]))
    # a directory where a module was dumped only before optimization
    only = tmp_path / "only"
    only.mkdir()
    shutil.copy(before, only)
    none = _run([only])
    assert none.returncode == 1
    assert b"1 modules dumped only before optimization (--compile compiles them)" in none.stderr
    assert _split(["--compile", "cpu", only])


def test_unscheduled_hlo_without_fusions_gets_a_warning(tmp_path):
    text = ("HloModule jit_f, entry_computation_layout={(f32[8]{0})->f32[8]{0}}\n\n"
            "ENTRY main {\n  x = f32[8]{0} parameter(0)\n  ROOT y = f32[8]{0} sine(x)\n}\n")
    f = tmp_path / "f.hlo"
    f.write_text(text)
    result = _run([f])
    assert result.returncode == 0 and len(_records(result.stdout)) == 1
    assert b"looks like HLO before optimization" in result.stderr
    assert _run(["-q", f]).stderr == b""
    scheduled = text.replace("jit_f,", "jit_f, is_scheduled=true,")
    f.write_text(scheduled)
    assert _run([f]).stderr == b""


def test_an_empty_directory_is_an_error(tmp_path):
    result = _run([tmp_path])
    assert result.returncode == 1
    assert b"no optimized HLO module in this directory" in result.stderr


@pytest.mark.parametrize("filename, name", [
    ("examples/hlo/mlp_s_train.hlo.zst", "mlp_s_train"), ("prog.hlo", "prog"),
    ("prog.txt", "prog"), ("dir/prog.pb", "prog"), ("prog.pbtxt", "prog"),
    ("prog.mlir", "prog"), ("a.b.hlo", "a.b"), ("prog", "prog"), (".hlo", "")])
def test_file_program_is_hlo_splits_name_of_a_file(filename, name):
    # one rule for hlo-split, the Python API and the generators' origins
    from tpuperf_cli.hlo.dump import file_program

    assert file_program(filename) == name
