"""hlo-split: kernels, counts, standalone modules and the tool, checked against
XLA's own parser (jaxlib's hlo_module_from_text and the HloModuleProto it
serialises) rather than against our own reading of the text."""

import glob
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tpuperf_cli.hlo.dump import read_hlo
from tpuperf_cli.hlo.parser import parse_module
from tpuperf_cli.hlo.split import find_kernels, fingerprint, kernel_module, kernel_records
from tpuperf_cli.stream import read_records

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "hlo"
EXAMPLES = sorted(glob.glob(str(ROOT / "examples" / "hlo" / "*.hlo.zst")))
TPU_SAMPLE = ROOT / "examples" / "tile" / "tpu_tile_sample.json"
HLO_SPLIT = [sys.executable, "-m", "tpuperf_cli", "hlo-split"]


# ---------------------------------------------------------------- XLA's view

# protobuf's wire format, read by the same helpers hlo-split reads dump protos with
from tpuperf_cli.hlo.dump import _fields, _varint  # noqa: E402


def _ints(wire, value):
    if wire == 0:
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = _varint(value, i)
        out.append(v)
    return out


def xla_view(text):
    """What XLA's parser makes of a module, from its HloModuleProto
    (xla/service/hlo.proto): {computation name: {"root": name, "entry": bool,
    "instrs": {name: {"opcode", "operands", "called", "backend_config",
    "fusion_kind"}}}}."""
    from jax._src.lib import xla_client as xc

    proto = xc._xla.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    entry_id = 0                # proto3 leaves zero values out
    comps = []
    for number, wire, value in _fields(proto):
        if number == 6:
            entry_id = value
        elif number == 3:
            comp = {"instrs": [], "id": 0, "root_id": 0, "name": None}
            for n2, w2, v2 in _fields(value):
                if n2 == 1:
                    comp["name"] = v2.decode()
                elif n2 == 5:
                    comp["id"] = v2
                elif n2 == 6:
                    comp["root_id"] = v2
                elif n2 == 2:
                    ins = {"operands": [], "called": [], "backend_config": b"", "fusion_kind": "",
                           "id": 0}
                    for n3, w3, v3 in _fields(v2):
                        if n3 == 1:
                            ins["name"] = v3.decode()
                        elif n3 == 2:
                            ins["opcode"] = v3.decode()
                        elif n3 == 35:
                            ins["id"] = v3
                        elif n3 == 36:
                            ins["operands"] += _ints(w3, v3)
                        elif n3 == 38:
                            ins["called"] += _ints(w3, v3)
                        elif n3 == 43:
                            ins["backend_config"] = v3
                        elif n3 == 11:
                            ins["fusion_kind"] = v3.decode()
                    comp["instrs"].append(ins)
            comps.append(comp)
    comp_names = {c["id"]: c["name"] for c in comps}
    view = {}
    for c in comps:
        ids = {i["id"]: i["name"] for i in c["instrs"]}
        view[c["name"]] = {
            "entry": c["id"] == entry_id,
            "root": ids[c["root_id"]],
            "instrs": {i["name"]: {"opcode": i["opcode"],
                                   "operands": [ids[o] for o in i["operands"]],
                                   "called": [comp_names[x] for x in i["called"]],
                                   "backend_config": i["backend_config"],
                                   "fusion_kind": i["fusion_kind"]}
                       for i in c["instrs"]},
            "order": [i["name"] for i in c["instrs"]],
        }
    return view


# The kernel rules, written again over XLA's view (independent of split.py).
_NOT_WORK = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while",
             "conditional", "call", "async-start", "async-update", "async-done", "after-all",
             "add-dependency", "opt-barrier", "domain", "all-gather-done", "all-reduce-done",
             "collective-permute-done", "copy-done", "send-done", "recv-done"}


def reference_kernels(view):
    """{(computation, instruction): [opcode, count, count_known]} from XLA's view."""
    out = {}
    entry = next(n for n, c in view.items() if c["entry"])

    def trip(ins):
        try:
            return int(json.loads(ins["backend_config"] or b"{}")["known_trip_count"]["n"])
        except (KeyError, ValueError, TypeError):
            return None

    def visit(name, mult, known):
        comp = view[name]
        for iname in comp["order"]:
            ins = comp["instrs"][iname]
            op = ins["opcode"]
            if op == "while":
                body, cond = ins["called"]          # XLA: body first, then condition
                n = trip(ins)
                visit(cond, mult * (n + 1) if n is not None else mult, known and n is not None)
                visit(body, mult * n if n is not None else mult, known and n is not None)
            elif op == "conditional":
                for c in ins["called"]:
                    visit(c, mult, False)
            elif op in ("call", "async-start"):
                for c in ins["called"]:
                    visit(c, mult, known)
            elif op not in _NOT_WORK:
                key = (name, iname)
                if key in out:
                    out[key][1] += mult
                    out[key][2] = out[key][2] and known
                else:
                    out[key] = [op, mult, known]

    visit(entry, 1, True)
    return out


def _ours(module, view=None):
    out = {}
    for k in find_kernels(module):
        key = (k.computation.name, k.instruction.name)
        if k.instruction.opcode != k.opcode and k.instruction.opcode.endswith("-start"):
            # async sugar (`negate-start`): XLA builds an async-start calling a
            # wrapped computation whose root is the op that does the work
            wrapped = view[key[0]]["instrs"][key[1]]["called"][0]
            key = (wrapped, view[wrapped]["root"])
        out[key] = [k.opcode, k.count, k.count_known]
    return out


def _entry(view):
    return next(c for c in view.values() if c["entry"])


def _check_program(text, name):
    """Kernels equal XLA's; every standalone module parses in XLA, has the
    kernel's opcode at its root and the same ops inside."""
    module = parse_module(text, name)
    view = xla_view(text)
    ours = _ours(module, view)
    assert ours == reference_kernels(view), name
    kernels = find_kernels(module)
    assert [k.index for k in kernels] == list(range(len(kernels)))
    assert len({k.name for k in kernels}) == len(kernels)
    for k in kernels:
        text_k = kernel_module(module, k)
        kview = xla_view(text_k)            # raises if XLA cannot parse it
        root = _entry(kview)["instrs"][_entry(kview)["root"]]
        assert root["opcode"] == k.opcode
        orig = view[k.computation.name]["instrs"][k.instruction.name]
        if orig["opcode"] == "async-start":
            wrapped = view[orig["called"][0]]
            orig = wrapped["instrs"][wrapped["root"]]
        assert len(root["operands"]) == len(orig["operands"])
        # the same computations, with the same instructions, come along
        for c in orig["called"]:
            assert sorted(kview[c]["instrs"]) == sorted(view[c]["instrs"]), (name, k.name, c)
            for i, ins in view[c]["instrs"].items():
                assert kview[c]["instrs"][i]["opcode"] == ins["opcode"]
        if k.opcode == "fusion":
            fused = orig["called"][0]
            assert len(kview[fused]["instrs"]) == len(view[fused]["instrs"])
            assert root["fusion_kind"] == orig["fusion_kind"]
    return module, kernels


# ---------------------------------------------------------------- programs

@pytest.mark.skipif(not EXAMPLES, reason="examples/hlo/*.hlo.zst not generated yet")
@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
def test_example_program_splits_like_xla(path):
    text = read_hlo(path).text
    module, kernels = _check_program(text, path)
    assert kernels, "a program without kernels"
    records = list(kernel_records(module, program="p"))
    assert len(records) == len(kernels)
    for r in records:
        assert re.fullmatch(r"[0-9a-f]{32}", r["fingerprint"])
        assert r["count"] >= 1


def test_jax_program_with_loops_conditionals_and_sort():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(x, w):
        y = jax.lax.fori_loop(0, 7, lambda i, c: jnp.tanh(c @ w) + i, x)
        z = jax.lax.cond(y.sum() > 0, lambda a: a * 2, lambda a: a - 1, y)
        inner = jax.lax.fori_loop(0, 3, lambda i, c: jax.lax.fori_loop(
            0, 5, lambda j, d: jnp.sin(d) * j, c), z)
        return jnp.sort(inner, axis=1), jnp.argmax(z, axis=0)

    x = jnp.ones((8, 8))
    text = jax.jit(f).lower(x, x).compile().as_text()
    module, kernels = _check_program(text, "jax")
    counts = sorted({k.count for k in kernels})
    assert 7 in counts and 15 in counts          # 7 trips; 3 x 5 nested
    assert any(not k.count_known for k in kernels)   # the conditional's branches
    cond_kernels = [k for k in kernels if k.count == 8]  # a 7-trip loop's condition
    assert cond_kernels


def test_jax_program_with_many_op_kinds():
    """Scatter, gather, reduce-window and its gradient, FFT, Cholesky and
    triangular solve (LAPACK custom calls), top-k, cumsum, RNG and a while
    loop whose trip count XLA cannot know."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(x, idx, key):
        a = x.at[idx].add(1.0)
        b = jnp.take(x, idx, axis=0)
        c = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (2, 2), (1, 1), "SAME")
        d = jnp.fft.fft(x).real
        e = jnp.linalg.cholesky(x @ x.T + 8 * jnp.eye(8))
        g = jax.lax.top_k(x, 3)[0]
        h = jnp.cumsum(x, axis=1)
        r = jax.random.normal(key, (8, 8))
        n = jax.lax.while_loop(lambda s: s[0] < x.sum(),
                               lambda s: (s[0] * 2 + 1, jnp.sin(s[1])), (1.0, x))[1]
        m = jax.grad(lambda y: jax.lax.reduce_window(
            y, -jnp.inf, jax.lax.max, (2, 2), (2, 2), "VALID").sum())(x)
        return a, b, c, d, e, g, h, r, n, m, jnp.linalg.solve(e, x)

    x = jnp.arange(64.0).reshape(8, 8) / 64
    text = jax.jit(f).lower(x, jnp.array([1, 3]), jax.random.PRNGKey(0)).compile().as_text()
    module, kernels = _check_program(text, "many")
    opcodes = {k.opcode for k in kernels}
    assert {"fusion", "custom-call", "fft"} <= opcodes
    unknown = [k for k in kernels if not k.count_known]
    assert unknown and all(k.count == 1 for k in unknown)


def test_gpu_style_fixture():
    text = (DATA / "gpu_style.hlo").read_text()
    module, kernels = _check_program(text, "gpu_style.hlo")
    by = {k.name: k for k in kernels}
    assert by["cond/lt"].count == 5 and by["cond/lt"].count_known      # trip 4: 5 tests
    assert by["body/v.next"].count == 4 and by["body/v.next"].fusion_kind == "kLoop"
    assert not by["body.2/tanh.2"].count_known                         # no known_trip_count
    assert not by["on_true/sine"].count_known and not by["on_false/cosine"].count_known
    assert by["called/abs"].count == 1 and by["called/abs"].count_known
    assert by["start"].opcode == "negate"                              # negate-start sugar
    assert by["gemm"].opcode == "custom-call" and by["rowsum"].fusion_kind == "kInput"
    assert "control-predecessors" not in kernel_module(module, by["rowsum"])
    assert "__cublas$gemm" in kernel_module(module, by["gemm"])
    # not kernels: parameters, constants, tuples, gte, while, conditional, call, -done
    names = set(by)
    for n in ("a", "dot", "init", "loop", "branch", "done", "called.r", "result", "big.const"):
        assert n not in names


def test_explicit_async_wrapper_is_entered():
    text = (DATA / "async_explicit.hlo").read_text()
    module, kernels = _check_program(text, "async_explicit.hlo")
    assert module.computations["wrapped"].attrs == {"execution_thread": '"parallel"'}
    assert [(k.name, k.opcode) for k in kernels] == [("wrapped/n", "negate")]


def test_tpu_style_fixture_keeps_tiled_layouts():
    module = parse_module((DATA / "tpu_style.hlo").read_text(), "tpu_style.hlo")
    (k,) = find_kernels(module)
    assert (k.opcode, k.fusion_kind, k.count) == ("fusion", "kOutput", 1)
    text = kernel_module(module, k)
    assert "bf16[8,128,256]{2,1,0:T(8,128)(2,1)} parameter(0)" in text
    assert "f32[256]{0:T(256)S(1)} parameter(1)" in text
    assert "s32[]{:T(128)S(6)} parameter(2)" in text
    xla_view(text)


@pytest.mark.skipif(not TPU_SAMPLE.exists(), reason="no TPU sample data")
def test_tpu_sample_kernels_split_into_their_one_kernel():
    for item in json.loads(TPU_SAMPLE.read_text()):
        module = parse_module(item["hlo"], "tpu")
        kernels = find_kernels(module)
        assert len(kernels) == 1
        (k,) = kernels
        assert k.instruction is module.entry.root
        assert k.count == 1 and k.count_known
        _check_program(item["hlo"], "tpu")
        text = kernel_module(module, k)
        assert ":T(8,128)" in text
        # the standalone module splits again into the same kernel
        again = parse_module(text, "again")
        (k2,) = find_kernels(again)
        assert fingerprint(again, k2) == fingerprint(module, k)


_COMPILE_ALL = r"""
import sys
import jax
from jax._src.lib import xla_client as xc
from tpuperf_cli.hlo.parser import parse_module
from tpuperf_cli.hlo.compilable import timing_module
from tpuperf_cli.hlo.dump import read_hlo
from tpuperf_cli.hlo.split import kernel_records
client = jax.devices("cpu")[0].client
devices = xc.DeviceList(tuple(jax.devices("cpu")[:1]))
n = 0
for path in sys.argv[1:]:
    for r in kernel_records(parse_module(read_hlo(path).text, path)):
        text = timing_module(r["hlo"])
        comp = xc.XlaComputation(xc._xla.hlo_module_from_text(text).as_serialized_hlo_module_proto())
        mlir = xc._xla.mlir.xla_computation_to_mlir_module(comp)
        client.compile_and_load(mlir, devices, xc.CompileOptions())
        n += 1
print(n)
"""


def test_kernels_compile_on_cpu():
    """Every kernel compiles with XLA:CPU (through StableHLO, as jaxlib
    compiles), inside measure's timing loop; in a child process, because XLA
    aborts the process on some inputs instead of raising."""
    pytest.importorskip("jax")
    files = [p for p in EXAMPLES if os.path.basename(p) in ("mlp_s_train.hlo.zst", "cnn_s_train.hlo.zst")]
    if not files:
        pytest.skip("examples/hlo/*.hlo.zst not generated yet")
    p = subprocess.run([sys.executable, "-c", _COMPILE_ALL, *files], capture_output=True,
                       cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert int(p.stdout.split()[-1]) > 50


def test_compilable_module_unfuses_the_root_fusion():
    from tpuperf_cli.hlo.compilable import compilable_module

    text = _KERNEL.replace("ROOT %m = f32[8,8]{1,0} multiply(%p0, %p1)",
                           "%t = f32[64]{0} bitcast(%p0)\n  %u = f32[8,8]{1,0} bitcast(%t)\n"
                           "  ROOT %m = f32[8,8]{1,0} multiply(%u, %p1)")
    m = parse_module(text)
    (k,) = find_kernels(m)
    out = compilable_module(kernel_module(m, k))
    again = parse_module(out)
    assert [i.opcode for i in again.entry.instructions] == \
        ["parameter", "parameter", "reshape", "reshape", "multiply"]
    assert len(again.computations) == 1


# ---------------------------------------------------------------- fingerprints

_KERNEL = """HloModule m

%f (p0: f32[8,8], p1: f32[8,8]) -> f32[8,8] {
  %p0 = f32[8,8]{1,0} parameter(0)
  %p1 = f32[8,8]{1,0} parameter(1)
  ROOT %m = f32[8,8]{1,0} multiply(%p0, %p1), metadata={op_name="a"}
}

ENTRY %main (x: f32[8,8], y: f32[8,8]) -> f32[8,8] {
  %x = f32[8,8]{1,0} parameter(0)
  %y = f32[8,8]{1,0} parameter(1)
  ROOT %fusion = f32[8,8]{1,0} fusion(%x, %y), kind=kLoop, calls=%f, metadata={op_name="b"}
}
"""


def _fp(text):
    m = parse_module(text)
    (k,) = find_kernels(m)
    return fingerprint(m, k)


def test_fingerprint_ignores_names_and_metadata():
    renamed = (_KERNEL.replace("%f", "%fused_computation.12").replace("%m ", "%mul.3 ")
               .replace("%fusion", "%multiply_fusion.7").replace('op_name="a"', 'op_name="zzz"')
               .replace("%x", "%Arg_0.1").replace('op_name="b"', 'op_type="Mul"'))
    assert _fp(renamed) == _fp(_KERNEL)


def test_fingerprint_sees_shapes_layouts_and_ops():
    base = _fp(_KERNEL)
    assert _fp(_KERNEL.replace("multiply(", "add(")) != base
    assert _fp(_KERNEL.replace("f32[8,8]{1,0}", "f32[8,8]{0,1}")) != base
    assert _fp(_KERNEL.replace("f32", "bf16")) != base


def test_repeated_operand_gets_one_parameter():
    text = _KERNEL.replace("fusion(%x, %y)", "fusion(%x, %x)")
    m = parse_module(text)
    (k,) = find_kernels(m)
    out = kernel_module(m, k)
    assert out.count("parameter(") == 2 + 1     # two in %f, one in ENTRY
    assert "fusion(%arg.0, %arg.0)" in out
    xla_view(out)


def test_computation_called_twice_adds_counts():
    text = """HloModule m
%sub (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  ROOT %e = f32[4]{0} exponential(%a)
}
ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %c1 = f32[4]{0} call(%x), to_apply=%sub
  ROOT %c2 = f32[4]{0} call(%c1), to_apply=%sub
}
"""
    m = parse_module(text)
    (k,) = find_kernels(m)
    assert (k.name, k.count) == ("sub/e", 2)
    assert _ours(m) == reference_kernels(xla_view(text))


# ---------------------------------------------------------------- the tool

def _run(args, input=None):
    return subprocess.run(HLO_SPLIT + args, input=input, capture_output=True, cwd=ROOT)


def test_cli_writes_kernel_records():
    from tpuperf_cli.cli import load_command

    result = CliRunner().invoke(load_command("hlo-split"), [str(DATA / "gpu_style.hlo")])
    assert result.exit_code == 0, result.output
    import io

    records = list(read_records(io.BytesIO(result.stdout_bytes)))
    assert len(records) == 17
    r = records[0]
    assert r["type"] == "kernel" and r["v"] == 1
    assert set(r) >= {"program", "kernel", "index", "count", "count_known", "hlo", "opcode",
                      "fusion_kind", "fingerprint", "computation"}
    assert r["program"] == "gpu_style"
    assert [x["index"] for x in records] == list(range(17))


def test_cli_stdin_program_name_and_summary():
    text = (DATA / "tpu_style.hlo").read_bytes()
    p = _run(["-", "--program", "tpu", "--summary"], input=text)
    assert p.returncode == 0, p.stderr
    import io

    (r,) = list(read_records(io.BytesIO(p.stdout)))
    assert r["program"] == "tpu" and r["kernel"] == "fusion.77" and r["fusion_kind"] == "kOutput"
    assert b"1 kernels" in p.stderr and b"fusion.77" in p.stderr
    p = _run([], input=text)
    (r,) = list(read_records(io.BytesIO(p.stdout)))
    assert r["program"] == "fusion.77"      # the HloModule name when reading stdin


def test_cli_warns_about_unknown_trip_counts():
    p = _run([str(DATA / "gpu_style.hlo")])
    assert p.returncode == 0
    assert b"loop.2" in p.stderr and b"known_trip_count" in p.stderr
    assert _run(["-q", str(DATA / "gpu_style.hlo")]).stderr == b""


def test_cli_several_files_and_zstd(tmp_path):
    import zstandard

    z = tmp_path / "prog.hlo.zst"
    z.write_bytes(zstandard.ZstdCompressor().compress((DATA / "tpu_style.hlo").read_bytes()))
    p = _run(["-q", str(DATA / "gpu_style.hlo"), str(z)])
    assert p.returncode == 0, p.stderr
    import io

    progs = [r["program"] for r in read_records(io.BytesIO(p.stdout))]
    assert progs == ["gpu_style"] * 17 + ["prog"]
    p = _run(["--program", "x", str(DATA / "gpu_style.hlo"), str(z)])
    assert p.returncode == 2 and b"one input" in p.stderr


def test_cli_closed_pipe_is_quiet():
    big = EXAMPLES[-1] if EXAMPLES else str(DATA / "gpu_style.hlo")
    cmd = " ".join(HLO_SPLIT) + f" '{big}' | head -c 100 > /dev/null"
    p = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], capture_output=True, cwd=ROOT)
    assert b"Traceback" not in p.stderr and b"Error" not in p.stderr, p.stderr


@pytest.mark.parametrize("name,where,what", [
    ("truncated", r":34:3:", "expected '}' to close computation 'body'"),
    ("unbalanced", r":5:44:", "expected '}' to close '{'"),
    ("unknown_opcode", r":5:23:", "unknown opcode 'frobnicate'"),
    ("bad_shape", r":4:12:", "bad dimension 'x'"),
    ("empty", r":1:1:", "empty input"),
    ("no_entry", r":1:1:", "no ENTRY computation"),
])
def test_cli_malformed_input_exits_2_with_position(name, where, what):
    path = DATA / f"{name}.hlo"
    p = _run([str(path)])
    err = p.stderr.decode()
    assert p.returncode == 2, err
    assert "Traceback" not in err
    assert err.startswith("hlo-split: error: ") or "error: " in err
    assert f"{path}{where}" in err, err
    assert what in err, err
    assert p.stdout == b""


def test_cli_missing_file_exits_1():
    p = _run(["/nonexistent/x.hlo"])
    assert p.returncode in (1, 2) and b"Traceback" not in p.stderr
    assert b"x.hlo" in p.stderr


def test_cli_truncated_zstd_input_is_an_error(tmp_path):
    import zstandard

    text = (DATA / "gpu_style.hlo").read_bytes()
    z = tmp_path / "cut.hlo.zst"
    z.write_bytes(zstandard.ZstdCompressor().compress(text)[:-5])
    p = _run([str(z)])
    assert p.returncode == 1, p.stderr
    assert f"{z}: truncated zstd stream".encode() in p.stderr and b"Traceback" not in p.stderr
    assert p.stdout == b""
    # a module compressed as several frames is read whole, not just its first frame
    c = zstandard.ZstdCompressor()
    z.write_bytes(c.compress(text[:1000]) + c.compress(text[1000:]))
    p = _run(["-q", str(z)])
    assert p.returncode == 0, p.stderr
    import io

    assert len(list(read_records(io.BytesIO(p.stdout)))) == 17


# ---------------------------------------------------------------- malformed input

_WHILE = """HloModule m
%cond (p: s32[]) -> pred[] {
  %p = s32[] parameter(0)
  ROOT %t = pred[] constant(true)
}
%body (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  ROOT %n = s32[] negate(%p)
}
ENTRY %e (a: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  ROOT %w = s32[] while(%a), condition=%cond, body=BODY, backend_config=CONFIG
}
"""


@pytest.mark.parametrize("text,where,what", [
    # the audit's cases, each a Python traceback (exit 1) before
    (_WHILE.replace("BODY", "{}").replace(", backend_config=CONFIG", ""), ":12:52:",
     "expected a computation name after 'body='"),
    ("HloModule m\nENTRY %e {\n  ROOT %a = f32[4]{0:T(a,b)} parameter(0)\n}\n", ":3:23:",
     "expected tile sizes"),
])
def test_cli_malformed_attributes_exit_2(tmp_path, text, where, what):
    path = tmp_path / "bad.hlo"
    path.write_text(text)
    p = _run([str(path)])
    err = p.stderr.decode()
    assert p.returncode == 2 and "Traceback" not in err, err
    assert f"{path}{where} {what}" in err, err
    assert p.stdout == b""


@pytest.mark.skipif(not (ROOT / "examples" / "hlo" / "bnmlp_m_train.hlo.zst").exists(),
                    reason="examples/hlo/bnmlp_m_train.hlo.zst not generated yet")
def test_cli_file_cut_after_calls_exits_2(tmp_path):
    # `zstd -dc examples/hlo/bnmlp_m_train.hlo.zst | head -c 70590`: an IndexError before
    data = read_hlo(ROOT / "examples" / "hlo" / "bnmlp_m_train.hlo.zst").text.encode()
    cut = data[:data.index(b"calls=", 70000) + len(b"calls=")]
    path = tmp_path / "t.hlo"
    path.write_bytes(cut)
    p = _run([str(path)])
    err = p.stderr.decode()
    line = cut.count(b"\n") + 1
    assert p.returncode == 2 and "Traceback" not in err, err
    assert f"{path}:{line}:" in err and "expected a computation name after 'calls='" in err, err


def _library_entry(text):
    """What hlo-split does with one module, short of writing records."""
    return list(kernel_records(parse_module(text, "cut.hlo")))


def test_truncated_files_parse_or_raise_parse_error():
    # a small fuzz: every cut of a module either parses (and splits) or is a
    # ParseError (`file:line:col: ...`, exit 2); never another exception
    import random

    from tpuperf_cli.errors import ParseError

    rng = random.Random(1234)
    sources = [DATA / "gpu_style.hlo", DATA / "tpu_style.hlo", DATA / "async_explicit.hlo",
               DATA / "stack_frames.hlo"]
    if EXAMPLES:
        sources.append(pathlib.Path(min(EXAMPLES, key=os.path.getsize)))
    for path in sources:
        data = path.read_bytes()
        offsets = sorted(set(rng.randrange(1, len(data)) for _ in range(200)))
        parsed = 0
        for cut in offsets:
            text = data[:cut].decode("utf-8", errors="replace")
            try:
                _library_entry(text)
                parsed += 1
            except ParseError as e:
                assert re.match(r"cut\.hlo:\d+:\d+: ", str(e)), str(e)
        # and with the computations after the cut put back (a lost stretch
        # in the middle of the file)
        for cut in offsets[:50]:
            end = min(len(data), cut + rng.randrange(1, 60))
            text = (data[:cut] + data[end:]).decode("utf-8", errors="replace")
            try:
                _library_entry(text)
            except ParseError as e:
                assert re.match(r"cut\.hlo:\d+:\d+: ", str(e)), str(e)


def test_negative_known_trip_count_is_unknown_with_a_warning():
    # XLA's parser takes it (backend_config is not checked); a count cannot be negative
    text = _WHILE.replace("BODY", "%body").replace(
        "CONFIG", '{"known_trip_count":{"n":"-3"}}')
    xla_view(text)
    warnings = []
    ks = find_kernels(parse_module(text, "neg.hlo"), warn=warnings.append)
    assert [(k.name, k.count, k.count_known) for k in ks] == [("body/n", 1, False)]
    assert len(warnings) == 1 and warnings[0].startswith("neg.hlo:12: ")
    assert "negative known_trip_count (-3)" in warnings[0]
    p = _run(["-"], input=text.encode())
    assert p.returncode == 0 and b"negative known_trip_count" in p.stderr
    import io

    (r,) = read_records(io.BytesIO(p.stdout))
    assert r["count"] == 1 and r["count_known"] is False
