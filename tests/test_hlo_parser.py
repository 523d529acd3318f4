"""The HLO parser and the attribute decoders, checked against XLA's own parser
(the HloModuleProto jaxlib makes of the same text) and hand-written cases."""

import doctest
import glob
import json
import math
import os
import pathlib

import pytest
from test_hlo_split import xla_view  # noqa: E402  (XLA's view of a module)

from tpuperf_cli.errors import ParseError
from tpuperf_cli.hlo import attrs
from tpuperf_cli.hlo.dump import read_hlo
from tpuperf_cli.hlo.parser import parse_file, parse_module, parse_shape

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "hlo"
EXAMPLES = sorted(glob.glob(str(ROOT / "examples" / "hlo" / "*.hlo.zst")))
TPU_SAMPLE = ROOT / "examples" / "tile" / "tpu_tile_sample.json"


def _same_as_xla(text, name="t"):
    """Every computation, instruction, opcode, operand list, call and root
    equals what XLA's parser built from the same text."""
    module = parse_module(text, name)
    view = xla_view(text)
    # XLA makes a wrapped computation for each async op printed as sugar
    # (`negate-start`); nothing else may differ
    wrapped = {c for v in view.values() for i in v["instrs"].values()
               if i["opcode"] == "async-start" for c in i["called"]}
    assert set(module.computations) == set(view) - (wrapped - set(module.computations))
    assert view[module.entry.name]["entry"]
    for cname, comp in module.computations.items():
        v = view[cname]
        assert [i.name for i in comp.instructions] and \
            sorted(i.name for i in comp.instructions) == sorted(v["instrs"]), cname
        assert comp.root.name == v["root"], cname
        for ins in comp.instructions:
            x = v["instrs"][ins.name]
            opcode = ins.opcode
            if x["opcode"] == "async-start" and opcode.endswith("-start"):
                opcode = "async-start"
            elif x["opcode"] == "async-done" and opcode.endswith("-done"):
                opcode = "async-done"
            assert opcode == x["opcode"], (cname, ins.name)
            assert ins.operands == x["operands"], (cname, ins.name)
            if x["opcode"] not in ("async-start", "async-done"):
                assert ins.called == x["called"], (cname, ins.name)
            if ins.opcode == "fusion":
                assert ins.fusion_kind == x["fusion_kind"]
    return module


@pytest.mark.skipif(not EXAMPLES, reason="examples/hlo/*.hlo.zst not generated yet")
@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
def test_example_programs_parse_like_xla(path):
    module = _same_as_xla(read_hlo(path).text, path)
    assert module.source == path
    for comp in module.computations.values():
        for ins in comp.instructions:
            assert ins.shape.text and ins.line > 0
            if ins.opcode == "parameter":
                assert ins.parameter_number is not None
            if ins.opcode == "constant":
                assert ins.literal is not None


@pytest.mark.parametrize("name", ["gpu_style", "tpu_style", "async_explicit"])
def test_fixtures_parse_like_xla(name):
    _same_as_xla((DATA / f"{name}.hlo").read_text(), name)


@pytest.mark.skipif(not TPU_SAMPLE.exists(), reason="no TPU sample data")
def test_tpu_sample_parses_like_xla():
    for item in json.loads(TPU_SAMPLE.read_text()):
        _same_as_xla(item["hlo"])


def test_gpu_style_details():
    m = parse_file(str(DATA / "gpu_style.hlo"))
    assert m.name == "jit_step"
    assert m.attrs["is_scheduled"] == "true"
    assert m.attrs["entry_computation_layout"].endswith("f32[16,8]{1,0})}")
    assert "/*" not in m.attrs["entry_computation_layout"]
    assert m.attrs["frontend_attributes"] == '{fingerprint_before_lhs="abc{1}"}'
    assert m.entry.name == "main.42" and m.entry.is_entry
    assert m.entry.signature.startswith("(a: f32[16,32]")
    e = m.entry.by_name
    assert e["a"].attrs["sharding"] == "{replicated}"
    assert e["n"].shape.tiles == ((128,),) and e["n"].shape.minor_to_major == ()
    gemm = e["gemm"]
    assert gemm.shape.is_tuple and [s.element_type for s in gemm.shape.tuple_shapes] == ["f32", "s8"]
    assert gemm.operands == ["a", "b"]                   # printed with their shapes
    assert attrs.string(gemm.attrs["custom_call_target"]) == "__cublas$gemm"
    cfg = attrs.backend_config(gemm.attrs["backend_config"])
    assert cfg["gemm_backend_config"]["dot_dimension_numbers"]["lhs_contracting_dimensions"] == ["1"]
    assert attrs.known_trip_count(e["loop"].attrs) == 4 and attrs.known_trip_count(e["loop.2"].attrs) is None
    assert e["loop"].called == ["body", "cond"]         # XLA's order: body, condition
    assert e["branch"].called == ["on_true", "on_false"]
    assert e["rowsum"].attrs["control-predecessors"] == "{%loop.2}"
    ds = e["ds"].shape
    assert ds.dims == (16, 8) and ds.dynamic == (True, False)
    assert attrs.literal_values(e["big.const"].literal)[:3] == [1, -2.5, math.inf]
    assert math.isnan(attrs.literal_values(e["big.const"].literal)[4])
    assert e["result"].is_root and m.entry.root is e["result"]
    assert len(e["result"].shape.tuple_shapes) == 3       # /*index=2*/ comment skipped
    body = m.computations["body"].by_name["v.next"]
    note = attrs.backend_config(body.attrs["backend_config"])["fusion_backend_config"]["note"]
    assert note == 'braces } { and "quotes" inside'
    # names printed without % parse the same
    w = m.computations["wrapped_negate_computation"]
    assert w.root.name == "neg.2" and w.root.operands == ["p"]


def test_tpu_layouts_and_memory_spaces():
    s = parse_shape("bf16[32,5,5,256]{3,0,2,1:T(8,128)(2,1)}")
    assert s.dims == (32, 5, 5, 256) and s.minor_to_major == (3, 0, 2, 1)
    assert s.tiles == ((8, 128), (2, 1)) and s.memory_space == 0
    s = parse_shape("f32[]{:T(256)S(6)}")
    assert s.dims == () and s.tiles == ((256,),) and s.memory_space == 6
    s = parse_shape("f32[128]{0:T(1024)(128)(2,1)S(1)}")
    assert s.tiles == ((1024,), (128,), (2, 1)) and s.memory_space == 1
    s = parse_shape("(f32[2]{0}, (s32[], token[]), u8[3,4])")
    assert s.is_tuple and s.tuple_shapes[1].tuple_shapes[1].element_type == "token"
    assert s.byte_size() == 8 + 4 + 12
    assert parse_shape("f32[<=4,?]").dynamic == (True, True)
    assert parse_shape("pred[3]").minor_to_major is None


def test_stack_frame_sections():
    m = parse_file(str(DATA / "stack_frames.hlo"))
    assert m.sections["FileNames"][0] == '1 "/tmp/x.py"'
    assert len(m.sections["StackFrames"]) == 2
    assert attrs.metadata(m.entry.root.attrs["metadata"])["stack_frame_id"] == "2"
    assert m.entry.root.opcode == "sine"


def test_comments_and_odd_spacing():
    text = """// leading comment
HloModule m /* inline */, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

/* a block
   comment */
ENTRY main.1 {
  x = f32[4]{0} parameter(0) // trailing
  c = f32[] constant(1)
  b = f32[4]{0} broadcast(c), dimensions={}
  ROOT y = (f32[4]{0}, /*index=1*/f32[4]{0}) tuple(x, /*index=1*/b), metadata={op_name="a/*b*/c"}
}
"""
    m = parse_module(text)
    root = m.entry.root
    assert root.operands == ["x", "b"]
    assert attrs.metadata(root.attrs["metadata"])["op_name"] == "a/*b*/c"
    xla_view(text)


def test_large_literal_constant():
    values = ", ".join(str(i * 0.5) for i in range(20000))
    text = f"""HloModule m
ENTRY %e {{
  ROOT %c = f32[20000]{{0}} constant({{{values}}})
}}
"""
    m = parse_module(text)
    lit = m.entry.root.literal
    assert lit.startswith("{0.0, 0.5") and lit.endswith("9999.5}")
    assert attrs.literal_values(lit, limit=100) is None
    assert attrs.literal_values(lit, limit=30000)[-1] == 9999.5


# A fused computation, then an ENTRY whose last line is `ROOT %r = f32[2]{0} ` + the rest.
_F = "HloModule m\nf {\n  ROOT p = f32[2]{0} parameter(0)\n}\nENTRY %e {\n  %a = f32[2]{0} parameter(0)\n"
_W = ("HloModule m\nc {\n  p = s32[] parameter(0)\n  ROOT t = pred[] constant(true)\n}\n"
      "b {\n  ROOT p = s32[] parameter(0)\n}\nENTRY e {\n  a = s32[] parameter(0)\n")


@pytest.mark.parametrize("text,where,what", [
    # a file cut right after `calls=` (was an IndexError)
    (_F + "  ROOT %r = f32[2]{0} fusion(%a), kind=kLoop, calls=", "7:53",
     "expected a computation name after 'calls='"),
    (_F + "  ROOT %r = f32[2]{0} fusion(%a), kind=kLoop, calls=, metadata={}\n}\n", "7:53",
     "expected a computation name after 'calls='"),
    # XLA: calls/to_apply/body/... take one name, not a braced list
    (_F + "  ROOT %r = f32[2]{0} fusion(%a), kind=kLoop, calls={f}\n}\n", "7:53",
     "computation name after 'calls='"),
    (_F + "  ROOT %r = f32[2]{0} fusion(%a), kind=kLoop, calls=f g\n}\n", "7:53",
     "found 'f g'"),
    # ... and called_computations a braced one
    (_F + '  ROOT %r = f32[2]{0} custom-call(%a), custom_call_target="x", called_computations=f\n}\n',
     "7:84", "expected '{' (a list of computation names) after 'called_computations='"),
    (_F + '  ROOT %r = f32[2]{0} custom-call(%a), custom_call_target="x", '
          'called_computations={f,,f}\n}\n', "7:84",
     "expected a computation name after 'called_computations='"),
    # `body={}` on a while (was a KeyError in hlo-split)
    (_W + "  ROOT w = s32[] while(a), condition=c, body={}\n}\n", "11:46",
     "expected a computation name after 'body='"),
    # callees come before their callers, as XLA's parser wants: no cycles
    (_W + "  ROOT w = s32[] while(a), condition=c, body=e\n}\n", "11:1",
     "'e', which is not defined before 'e'"),
    ("HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  ROOT r = f32[2] call(a), to_apply=f\n}\n"
     "f {\n  ROOT p = f32[2] parameter(0)\n}\n", "4:1", "'f', which is not defined before 'e'"),
    # bad tiles and memory spaces in a layout (was a ValueError from int())
    ("HloModule m\nENTRY e {\n  ROOT a = f32[4]{0:T(a,b)} parameter(0)\n}\n", "3:22",
     "expected tile sizes (integers or '*') in T(...), found 'a,b'"),
    ("HloModule m\nENTRY e {\n  ROOT a = f32[4,8]{1,0:T(8,128)(2,x)} parameter(0)\n}\n", "3:33",
     "found '2,x'"),
    ("HloModule m\nENTRY e {\n  ROOT a = f32[4]{0:T(4,)} parameter(0)\n}\n", "3:22", "found '4,'"),
    ("HloModule m\nENTRY e {\n  ROOT a = f32[4]{0:T(-2)} parameter(0)\n}\n", "3:22", "found '-2'"),
    ("HloModule m\nENTRY e {\n  ROOT a = f32[4]{0:S(x)} parameter(0)\n}\n", "3:23",
     "expected an integer memory space in S(...)"),
])
def test_malformed_attributes_and_layouts_are_parse_errors(text, where, what):
    with pytest.raises(ParseError) as e:
        parse_module(text, "f.hlo")
    msg = str(e.value)
    assert msg.startswith(f"f.hlo:{where}:"), msg
    assert what in msg, msg
    if "T(-" in text:
        return                      # XLA's parser aborts the process (a CHECK) on this one
    with pytest.raises(Exception) as x:
        xla_view(text)              # XLA's parser rejects each too
    assert "parse" in str(x.value).lower() or "error" in str(x.value).lower()


def test_good_tiles_and_call_lists():
    m = parse_module("HloModule m\nENTRY e {\n  ROOT a = f32[4,8]{1,0:T(2,*)(1)T( 4 )S(1)} "
                     "parameter(0)\n}\n")
    assert m.entry.root.shape.tiles == ((2, -1), (1,)) and m.entry.root.shape.memory_space == 1
    m = parse_module("HloModule m\nENTRY e {\n  ROOT a = f32[4]{0:T()} parameter(0)\n}\n")
    assert m.entry.root.shape.tiles == ((),)
    text = _F + '  ROOT %r = f32[2]{0} custom-call(%a), custom_call_target="x", called_computations={}\n}\n'
    assert parse_module(text).entry.root.called == []
    _same_as_xla(text)
    text = _F + '  ROOT %r = f32[2]{0} custom-call(%a), custom_call_target="x", called_computations={%f, f}\n}\n'
    assert parse_module(text).entry.root.called == ["f", "f"]


@pytest.mark.parametrize("text,where,what", [
    ("", "1:1", "empty input"),
    ("HloModule m\n", "1:1", "no computation"),
    ("HloModule m\nENTRY %e {\n  %a = f32[2]{0} parameter(0)\n  %a = f32[2]{0} negate(%a)\n}\n",
     "4:1", "defined twice"),
    ("HloModule m\nENTRY %e {\n  ROOT %a = f32[2]{0} negate(%zz)\n}\n", "3:1", "'zz'"),
    ("HloModule m\nENTRY %e {\n  ROOT %a = f32[2]{0} fusion(), kind=kLoop, calls=%nope\n}\n",
     "3:1", "'nope'"),
    ("HloModule m\nENTRY %e {\n  ROOT %a = f32[2]{0,1} parameter(0)\n}\n", "3:19", "layout"),
    ("HloModule m\nENTRY %e {\n  ROOT %a = f33[2] parameter(0)\n}\n", "3:13", "element type 'f33'"),
    ("HloModule m\nENTRY %e {\n  ROOT %a = f32[2] negate\n}\n", "3:19", "opcode"),
    ("HloModule m\nENTRY %e {\n  ROOT %a = f32[2] parameter(0) junk\n}\n", "3:33", "expected ','"),
    ("HloModule m\nENTRY %e {\n  ROOT %a = f32[2] parameter(0), dims\n}\n", "3:34", "name=value"),
    ("HloModule m\nENTRY %e {\n  ROOT %a = f32[2] parameter(0)\n}\n}\n", "5:1", "unbalanced '}'"),
    ("HloModule m\nhello world\n", "2:1", "expected 'HloModule'"),
    ("HloModule m\nENTRY %e {\n  ROOT %a = f32[2] parameter(0)\n", "4:1", "expected '}'"),
    ("HloModule m\nENTRY %e {\n  ROOT %a = f32[2] constant({1, 2)\n}\n", "3:34", "expected '}'"),
    ('HloModule m\nENTRY %e {\n  ROOT %a = f32[2] parameter(0), metadata={op_name="x}\n}\n',
     "3:", "'\"'"),
])
def test_errors_name_file_line_and_column(text, where, what):
    with pytest.raises(ParseError) as e:
        parse_module(text, "f.hlo")
    msg = str(e.value)
    assert msg.startswith(f"f.hlo:{where}"), msg
    assert what in msg, msg
    assert e.value.exit_code == 2


_C = "HloModule m\nc {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n"


@pytest.mark.parametrize("text,where,what", [
    # a missing '}': was "expected an instruction" at the next header
    (_C + "\nENTRY e {\n  ROOT a = f32[4] parameter(0)\n}\n", "6:1",
     "computation 'c' (opened on line 2) is not closed: expected '}' before the next "
     "computation, 'e'"),
    (_C + "%d.1 (x: f32[4]) -> f32[4] {\n  ROOT x = f32[4] parameter(0)\n}\n", "5:1",
     "computation 'c' (opened on line 2) is not closed: expected '}' before the next "
     "computation, 'd.1'"),
    (_C + "FileNames\n1 \"a.py\"\n", "5:1", "computation 'c' (opened on line 2) is not closed: "
     "expected '}' before 'FileNames'"),
    # a stray '}'
    (_C + "}\n}\n", "6:1", "unbalanced '}': no computation is open (the last one, 'c', was "
     "closed on line 5)"),
    ("HloModule m\n  }, execution_thread=\"x\"\n", "2:3", "unbalanced '}': no computation is open"),
    (_C + "} junk\n", "5:3", "expected ',' or end of line after the '}' closing computation 'c', "
     "found 'junk'"),
])
def test_brace_errors_name_the_computation(text, where, what):
    with pytest.raises(ParseError) as e:
        parse_module(text, "f.hlo")
    msg = str(e.value)
    assert msg == f"f.hlo:{where}: {what}", msg
    with pytest.raises(Exception):
        xla_view(text)


def test_instruction_lines_ending_in_a_brace_are_not_headers():
    text = ("HloModule m\nENTRY e {\n  a = f32[4]{0} parameter(0), frontend_attributes={\n"
            "    k=\"v\"}\n  ROOT n = f32[4]{0} negate(a)\n}\n")
    _same_as_xla(text)


def _sig(sig):
    return f"HloModule m\nENTRY %e {sig} {{\n  ROOT %a = f32[4] parameter(0)\n}}\n"


@pytest.mark.parametrize("sig,col,what", [
    ("(a: f32[4] -> f32[4]", 21, "expected ',' or ')' after a parameter's shape, found '-> f32[4]'"),
    ("(a: f32[4]", 20, "expected ',' or ')' after a parameter's shape"),
    ("(a: (f32[4], s32[]) -> f32[4]", 30, "expected ',' or ')' after a parameter's shape"),
    ("(a: f32[x]) -> f32[4]", 18, "bad dimension 'x'"),
    ("(a: f33[4]) -> f32[4]", 14, "unknown element type 'f33'"),
    ("(a: f32[4]{0:T(a)}) -> f32[4]", 24, "expected tile sizes"),
    ("(a: f32[4]) -> (f32[4]", 25, "expected ')' to close the tuple shape"),
    ("(f32[4]) -> f32[4]", 11, "expected a parameter 'name: shape' or ')'"),
    ("(a: f32[4],) -> f32[4]", 21, "expected a parameter 'name: shape' or ')'"),
    ("(a: f32[4], b) -> f32[4]", 22, "expected a parameter 'name: shape' or ')'"),
    ("(%a: f32[4]) -> f32[4]", 11, "expected a parameter 'name: shape' or ')'"),
    ("(a: f32[4])", 21, "expected '->' and the result shape after the parameter list"),
    ("(a: f32[4]) - > f32[4]", 22, "expected '->'"),
    ("(a: f32[4]) ->", 24, "expected a shape"),
    ("(a: f32[4]) -> f32[4] x", 31, "expected '{' after the result shape"),
])
def test_signature_errors_name_line_and_column(sig, col, what):
    # a computation's `(params) -> shape`, as XLA's parser reads it
    text = _sig(sig)
    with pytest.raises(ParseError) as e:
        parse_module(text, "f.hlo")
    msg = str(e.value)
    assert msg.startswith(f"f.hlo:2:{col}: "), msg
    assert what in msg, msg
    with pytest.raises(Exception):
        xla_view(text)


@pytest.mark.parametrize("sig", ["(a: f32[4]) -> f32[4]", "() -> f32[4]", "(a f32[4]) -> f32[4]",
                                 "(a: (f32[4], s32[]), b.1: s32[]) -> f32[4]{0}",
                                 "(a:f32[4])->f32[4]", "(p: f32[4]{0:T(4)S(1)}) -> f32[4]"])
def test_good_signatures(sig):
    _same_as_xla(_sig(sig))
    assert parse_module(_sig(sig)).entry.signature == sig


# ---------------------------------------------------------------- attrs

def test_attrs_doctests():
    result = doctest.testmod(attrs)
    assert result.attempted > 20 and result.failed == 0


def test_attrs_on_real_instructions():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(x, k, idx):
        c = jax.lax.conv_general_dilated(x, k, (2, 1), [(1, 1), (0, 2)], rhs_dilation=(1, 2),
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        s = jax.lax.slice(x, (0, 1, 0, 0), (2, 9, 8, 3), (1, 2, 1, 1))
        d = jax.lax.dynamic_slice(x, (0, idx, 0, 0), (1, 4, 4, 3))
        p = jax.lax.pad(x, 0.0, [(0, 0, 0), (1, 2, 1), (0, 0, 0), (0, 0, 0)])
        g = jnp.einsum("bij,bjk->bik", x[..., 0], x[:, :8, :, 1])
        return c, s.sum(), d.sum(), p.sum(), g

    args = (jnp.ones((2, 10, 8, 3)), jnp.ones((3, 3, 3, 4)), 2)
    text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    m = parse_module(text)
    found = set()
    for comp in m.computations.values():
        for ins in comp.instructions:
            a = ins.attrs
            if ins.opcode == "convolution":
                w = attrs.window(a["window"])
                assert [d["stride"] for d in w] == [2, 1]
                assert [(d["pad_low"], d["pad_high"]) for d in w] == [(1, 1), (0, 2)]
                assert [d["rhs_dilate"] for d in w] == [1, 2]
                dims = attrs.conv_dims(a["dim_labels"])
                assert dims["input_feature"] == 3 and dims["kernel_output_feature"] == 3
                found.add("conv")
            elif ins.opcode == "slice":
                if attrs.slice_bounds(a["slice"]) == [(0, 2, 1), (1, 9, 2), (0, 8, 1), (0, 3, 1)]:
                    found.add("slice")
            elif ins.opcode == "dynamic-slice":
                assert attrs.dynamic_slice_sizes(a["dynamic_slice_sizes"]) == [1, 4, 4, 3]
                found.add("ds")
            elif ins.opcode == "pad":
                assert attrs.padding(a["padding"]) == [(0, 0, 0), (1, 2, 1), (0, 0, 0), (0, 0, 0)]
                found.add("pad")
            elif ins.opcode == "dot":
                d = attrs.dot_dims(a)
                assert d["lhs_batch_dims"] == [0] and d["lhs_contracting_dims"] == [2]
                assert d["rhs_contracting_dims"] == [1]
                found.add("dot")
    assert found == {"conv", "slice", "ds", "pad", "dot"}


def test_attrs_errors_are_value_errors():
    for fn, text in [(attrs.int_list, "{a}"), (attrs.padding, "1_2_3_4"), (attrs.conv_dims, "bf_io"),
                     (attrs.slice_bounds, "{0:4}"), (attrs.boolean, "maybe"), (attrs.replica_groups, "[2]")]:
        with pytest.raises(ValueError):
            fn(text)


def test_trip_count_in_a_quoted_backend_config():
    # TPU dumps print backend_config as a quoted string
    quoted = {"backend_config": '"{\\"known_trip_count\\":{\\"n\\":\\"12\\"}}"'}
    assert attrs.known_trip_count(quoted) == 12
    assert attrs.known_trip_count({"backend_config": '""'}) is None
    assert attrs.known_trip_count({"backend_config": '"opaque bytes"'}) is None


def _ir(module):
    """Everything the parser puts in an ir.Module, as plain values."""
    out = [module.name, module.attrs, module.sections, module.entry.name]
    for c in module.computations.values():
        out.append((c.name, c.is_entry, c.line, c.signature, c.attrs))
        out += [(i.name, i.opcode, i.shape, i.shape.text, i.operands, i.attrs, i.is_root,
                 i.line, i.parameter_number, i.literal, i.called) for i in c.instructions]
    return out


_ROW_CASES = [
    "HloModule m\n\nENTRY %e (p: f32[4]) -> f32[4] {\n  %p = f32[4]{0} parameter(0)\n"
    "  %c = f32[] constant(2)\n  %b = f32[4]{0} broadcast(%c), dimensions={}\n"
    "  ROOT %m = f32[4]{0} multiply(%p, %b), metadata={op_name=\"a//b\"}\n}\n",
    # tuple shapes, a comment inside one, operands with shapes, names without %
    "HloModule m\nENTRY e {\n  p = (f32[2], /*index=1*/s32[]) parameter(0)\n"
    "  a = f32[2]{0} get-tuple-element((f32[2], s32[]) p), index=0\n"
    "  ROOT t = (f32[2]{0}, f32[2]{0}) tuple(f32[2]{0} a, a) // done\n}\n",
    # a reducer called twice, an attribute spanning two lines, a literal
    "HloModule m\n%add (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n"
    "  %y = f32[] parameter(1)\n  ROOT %s = f32[] add(%x, %y)\n}\n\n"
    "ENTRY %e (p: f32[2,3]) -> f32[2] {\n  %p = f32[2,3]{1,0} parameter(0)\n"
    "  %z = f32[] constant(0)\n  %r = f32[2]{0} reduce(%p, %z), dimensions={1}, to_apply=%add\n"
    "  %k = f32[2]{0} constant({1, 2})\n  ROOT %o = f32[2]{0} reduce(%p, %z), dimensions={1}, "
    "to_apply=%add, metadata={op_name=\"o\"\n    source_line=3}\n}\n",
]


@pytest.mark.parametrize("text", _ROW_CASES + [p for p in EXAMPLES[:3]])
def test_rows_read_as_the_careful_way_does(text, monkeypatch):
    """The parser reads instructions printed the usual way from one regex
    pass (rows); the IR must be what the line-by-line way builds."""
    from tpuperf_cli.hlo import parser

    if text.endswith(".hlo.zst"):
        text = read_hlo(text).text
    parser.clear_caches()
    fast = _ir(parse_module(text, "t"))
    parser.clear_caches()
    monkeypatch.setattr(parser._Parser, "_row_instruction", lambda self, row, lineno: None)
    assert _ir(parse_module(text, "t")) == fast


def test_rows_leave_bad_lines_to_the_careful_way():
    """An instruction line the rows cannot read whole still gets the
    careful way's error, with its line and column."""
    text = ("HloModule m\nENTRY %e {\n  %p = f32[4]{0} parameter(0)\n"
            "  ROOT %n = f32[4]{0} negate(%p), metadata={op_name=\"x\"\n}\n")
    with pytest.raises(ParseError, match=r"t:4:\d+: expected '\}'"):
        parse_module(text, "t")
    text = "HloModule m\nENTRY %e {\n  %p = f32[4]{0} parameter(0)\n  ROOT %n = f32[4]{0} negate(%q)\n}\n"
    with pytest.raises(ParseError, match="t:4:1: instruction 'n' uses 'q', which is not defined"):
        parse_module(text, "t")
