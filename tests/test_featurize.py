"""featurize: TpuGraphs node/edge/config layout, pinned on hand-checked HLO."""

import io
import json
import pathlib
import subprocess
import sys

import msgpack
import numpy as np
import pytest
from click.testing import CliRunner

from tpuperf_cli.features import (
    CONFIG_FEATURES,
    KERNEL_FEATURES,
    NODE_FEATURES,
    FeaturizeError,
    config_features,
    featurize_kernel,
    featurize_module,
    kernel_nodes,
)
from tpuperf_cli.features.nodes import NODE_FEATURE_NAMES
from tpuperf_cli.features.opcodes import NUM_OPCODES, OPCODE_IDS, opcode_id, opcode_name
from tpuperf_cli.hlo.parser import OPCODES, parse_module
from tpuperf_cli.stream import decode_array

from conftest import stream_bytes

ROOT = pathlib.Path(__file__).resolve().parent.parent
TILE_SAMPLE = ROOT / "examples" / "tile" / "tpu_tile_sample.json"


def expected(entries):
    """A full 140-vector: featurizers.h defaults (empty-list products are 1)
    overridden by the hand-checked entries {index: value}."""
    row = np.zeros(NODE_FEATURES, np.float32)
    # products of empty lists: window size/stride/pad lo/pad hi/win dil/base dil,
    # slice start/stride/limit, dynamic_slice_sizes, pad low/high
    for i in (44, 52, 60, 68, 76, 84, 112, 116, 120, 124, 128, 132):
        row[i] = 1
    for i, v in entries.items():
        row[i] = v
    return row


def graph(hlo, config=None):
    return featurize_kernel({"hlo": hlo, "config": config})


def check_row(got, want):
    diff = [(i, NODE_FEATURE_NAMES[i], float(got[i]), float(want[i]))
            for i in range(NODE_FEATURES) if got[i] != want[i]]
    assert not diff, diff


# ---------------------------------------------------------------- opcodes

def test_opcode_ids_are_tpugraphs():
    # spot checks against tpu_graphs/process_data/xla/hlo_opcode.h
    for name, i in [("abs", 1), ("add", 2), ("broadcast", 13), ("convolution", 26),
                    ("dot", 34), ("fusion", 41), ("parameter", 63), ("reduce", 70),
                    ("slice", 92), ("tanh", 96), ("transpose", 98), ("tuple", 100),
                    ("while", 102), ("tan", 120), ("trace", 97), ("tuple-select", 101)]:
        assert opcode_id(name) == i, name
    assert opcode_id("no-such-op") == 0 and opcode_name(0) == "unknown"
    ids = sorted(OPCODE_IDS.values())
    assert ids == list(range(1, NUM_OPCODES)), "ids are dense 1..N-1"
    # every opcode XLA knows has a fixed id; the newer ones come after TpuGraphs' 120
    assert OPCODES <= set(OPCODE_IDS)
    assert opcode_id("erf") > 120 and opcode_id("topk") > 120


def test_feature_names_follow_the_readme():
    names = NODE_FEATURE_NAMES
    assert len(names) == 140
    for i, n in [(0, "is_root"), (13, "shape_element_type_is_f32"), (28, "shape_dimensions_product"),
                 (30, "parameter_number"), (37, "window_size_0"), (69, "window_window_dilation_0"),
                 (77, "window_base_dilation_0"), (92, "window_window_reversal_false_count"),
                 (93, "convolution_dim_numbers_input_batch_dim"),
                 (106, "convolution_dim_numbers_output_feature_dim"), (108, "batch_group_count"),
                 (109, "slice_dims_start_0"), (120, "slice_dims_limit_product"),
                 (124, "dynamic_slice_sizes_product"),
                 (132, "padding_config_edge_padding_high_product"), (133, "is_stable"),
                 (139, "layout_minor_to_major_5")]:
        assert names[i] == n


# ---------------------------------------------------------------- hand-checked nodes

CONV = """HloModule conv
ENTRY e {
  x = f32[2,17,19,3]{3,2,1,0} parameter(0)
  w = f32[3,3,3,5]{3,2,1,0} parameter(1)
  ROOT c = f32[2,8,38,5]{3,2,1,0} convolution(x, w), window={size=3x3 stride=2x1 pad=1_2x0_3 lhs_dilate=1x2 rhs_dilate=2x1}, dim_labels=b01f_01io->b01f
}
"""


def test_convolution_with_window_stride_padding_dilation():
    g = graph(CONV)
    assert g["node_opcode"].tolist() == [63, 63, 26]
    assert g["edge_index"].tolist() == [[2, 0], [2, 1]]
    want = expected({
        0: 1, 13: 1,                                    # root, f32
        21: 2, 22: 8, 23: 38, 24: 5, 27: 53, 28: 3040,  # dims, sum, product
        37: 3, 38: 3, 43: 6, 44: 9,                     # window size
        45: 2, 46: 1, 51: 3, 52: 2,                     # stride
        53: 1, 54: 0, 59: 1, 60: 0,                     # padding low
        61: 2, 62: 3, 67: 5, 68: 6,                     # padding high
        69: 2, 70: 1, 75: 3, 76: 2,                     # window (rhs) dilation
        77: 1, 78: 2, 83: 3, 84: 2,                     # base (lhs) dilation
        91: 0, 92: 2,                                   # reversal: 0 true, 2 false
        93: 0, 94: 3, 95: 1, 96: 2,                     # input b, f, spatial
        99: 2, 100: 3, 101: 0, 102: 1,                  # kernel i, o, spatial
        105: 0, 106: 3,                                 # output b, f
        107: 1, 108: 1,                                 # group counts
        134: 3, 135: 2, 136: 1, 137: 0,                 # minor_to_major
    })
    check_row(g["node_feat"][2], want)
    # the kernel parameter node: parameter_number 1, not root
    check_row(g["node_feat"][1], expected({13: 1, 21: 3, 22: 3, 23: 3, 24: 5, 27: 14, 28: 135,
                                           30: 1, 134: 3, 135: 2, 136: 1, 137: 0}))


def test_slice():
    g = graph("""HloModule s
ENTRY e {
  p = f32[16,32]{1,0} parameter(0)
  ROOT s = f32[4,8]{1,0} slice(p), slice={[2:10:2], [0:32:4]}
}
""")
    check_row(g["node_feat"][1], expected({
        0: 1, 13: 1, 21: 4, 22: 8, 27: 12, 28: 32,
        109: 2, 110: 0, 111: 2, 112: 0,      # start 2, 0: sum 2, product 0
        113: 2, 114: 4, 115: 6, 116: 8,      # stride
        117: 10, 118: 32, 119: 42, 120: 320,  # limit
        134: 1, 135: 0}))


def test_pad():
    g = graph("""HloModule p
ENTRY e {
  p = bf16[5,7]{1,0} parameter(0)
  c = bf16[] constant(0)
  ROOT q = bf16[8,16]{1,0} pad(p, c), padding=1_2x3_0_1
}
""")
    assert [n for n in g["node_opcode"]] == [63, 24, 62]
    check_row(g["node_feat"][2], expected({
        0: 1, 15: 1, 21: 8, 22: 16, 27: 24, 28: 128,
        125: 1, 126: 3, 127: 4, 128: 3,      # edge padding low
        129: 2, 130: 0, 131: 2, 132: 0,      # edge padding high (interior is not a feature)
        134: 1, 135: 0}))
    # the scalar constant: bf16, no dims (sum 0, product 1), no layout entries
    check_row(g["node_feat"][1], expected({15: 1, 28: 1}))


REDUCE = """HloModule r
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[8,16,32]{2,1,0} parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[16]{0} reduce(p, c), dimensions={0,2}, to_apply=add
}
"""


def test_reduce_and_its_reducer_are_nodes():
    g = graph(REDUCE)
    # p, c, then the reducer (a, b, s) just before the reduce that calls it
    assert g["node_opcode"].tolist() == [63, 24, 63, 63, 2, 70]
    # the reduce consumes its operands and the reducer's root (TpuGraphs' call edge)
    assert g["edge_index"].tolist() == [[4, 2], [4, 3], [5, 0], [5, 1], [5, 4]]
    # is_root: the root of each node's own computation (featurizers.h)
    assert g["node_feat"][:, 0].tolist() == [0, 0, 0, 0, 1, 1]
    check_row(g["node_feat"][5], expected({0: 1, 13: 1, 21: 16, 27: 16, 28: 16,
                                           31: 0, 32: 2, 134: 0}))
    check_row(g["node_feat"][4], expected({0: 1, 13: 1, 28: 1}))    # f32[] add
    kf = dict(zip(KERNEL_FEATURES, g["kernel_feat"]))
    assert kf["flops"] == 8 * 16 * 32 - 16                 # one add per reduced element
    assert kf["output_bytes"] == 64


def reduce_window(reducer):
    return f"""HloModule rw
{reducer}
ENTRY e {{
  p = bf16[8,64,64]{{2,1,0}} parameter(0)
  c = bf16[] constant(0)
  ROOT r = bf16[8,32,32]{{2,1,0}} reduce-window(p, c), window={{size=1x2x2 stride=1x2x2}}, to_apply=red
}}
"""


BF16_VIA_F32 = """red {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ca = f32[] convert(a)
  cb = f32[] convert(b)
  s = f32[] add(ca, cb)
  ROOT r = bf16[] convert(s)
}"""

BF16_ADD = """red {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}"""


def test_reduce_window_reducer_that_converts_is_seen():
    # the same reduce-window node; on XLA:CPU the converting reducer is ~10x slower
    slow = graph(reduce_window(BF16_VIA_F32))
    fast = graph(reduce_window(BF16_ADD))
    assert np.array_equal(slow["node_feat"][-1], fast["node_feat"][-1])
    convert, add = opcode_id("convert"), opcode_id("add")
    assert slow["node_opcode"].tolist() == [63, 24, 63, 63, convert, convert, add, convert,
                                            opcode_id("reduce-window")]
    assert fast["node_opcode"].tolist() == [63, 24, 63, 63, add, opcode_id("reduce-window")]
    assert [8, 7] in slow["edge_index"].tolist() and [5, 4] in fast["edge_index"].tolist()
    # the f32 add inside the reducer is a node of its own (element type f32)
    assert slow["node_feat"][6, 13] == 1 and fast["node_feat"][4, 15] == 1


def test_called_computations_once_nested_and_in_order():
    # a fusion with two reduces sharing one reducer, a nested fusion, and a sort
    # whose comparator calls a computation of its own
    hlo = """HloModule f
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
inner {
  x = f32[4]{0} parameter(0)
  ROOT e = f32[4]{0} exponential(x)
}
less {
  l = f32[] parameter(0)
  r = f32[] parameter(1)
  ROOT lt = pred[] compare(l, r), direction=LT
}
cmp {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT c = pred[] call(p0, p1), to_apply=less
}
fused {
  q = f32[4]{0} parameter(0)
  z = f32[] constant(0)
  n = f32[4]{0} fusion(q), kind=kLoop, calls=inner
  st = f32[4]{0} sort(n), dimensions={0}, to_apply=cmp
  r1 = f32[] reduce(st, z), dimensions={0}, to_apply=add
  r2 = f32[] reduce(q, z), dimensions={0}, to_apply=add
  ROOT t = (f32[], f32[]) tuple(r1, r2)
}
ENTRY e {
  p = f32[4]{0} parameter(0)
  ROOT f = (f32[], f32[]) fusion(p), kind=kLoop, calls=fused
}
"""
    module = parse_module(hlo, "f.hlo")
    nodes, comp = kernel_nodes(module)
    assert [n.name for n in nodes] == ["q", "z", "n", "st", "r1", "r2", "t"]
    names = graph_names(module)
    assert names == ["q", "z", "x", "e", "n", "p0", "p1", "l", "r", "lt", "c", "st",
                     "a", "b", "s", "r1", "r2", "t"]
    g = featurize_module(module)
    roots = g["node_feat"][:, 0]
    assert [names[k] for k, r in enumerate(roots) if r] == ["e", "lt", "c", "s", "t"]
    edges = [(names[u], names[v]) for u, v in g["edge_index"].tolist()]
    for call in [("n", "e"), ("c", "lt"), ("st", "c"), ("r1", "s"), ("r2", "s")]:
        assert call in edges
    # operands before users throughout: the order is topological
    assert all(u > v for u, v in g["edge_index"].tolist())
    assert g["node_feat"].shape == (18, NODE_FEATURES)


def test_while_body_and_condition_are_nodes():
    g = graph("""HloModule w
body {
  s = (s32[], f32[4]{0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[4]{0} get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  t = f32[4]{0} tanh(v)
  ROOT n = (s32[], f32[4]{0}) tuple(j, t)
}
cond {
  s = (s32[], f32[4]{0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  k = s32[] constant(10)
  ROOT lt = pred[] compare(i, k), direction=LT
}
ENTRY e {
  p = (s32[], f32[4]{0}) parameter(0)
  ROOT w = (s32[], f32[4]{0}) while(p), condition=cond, body=body
}
""")
    ops = g["node_opcode"].tolist()
    assert len(ops) == 1 + 4 + 7 + 1 and ops[-1] == opcode_id("while")
    assert opcode_id("tanh") in ops and opcode_id("compare") in ops
    # the while consumes its operand and both called roots
    assert [u for u, v in g["edge_index"].tolist()].count(12) == 3


def test_call_to_a_missing_computation_or_a_cycle_is_an_error():
    module = parse_module(REDUCE, "r.hlo")
    module.entry.root.called = ["nowhere"]
    with pytest.raises(FeaturizeError, match="calls computation 'nowhere'"):
        featurize_module(module)
    # a module built in code, not parsed (the parser refuses both)
    module = parse_module(REDUCE, "r.hlo")
    module.computations["add"].root.called = ["add"]
    with pytest.raises(FeaturizeError, match="'add' calls itself"):
        featurize_module(module)


DOT = """HloModule d
ENTRY e {
  a = f32[4,16,32]{2,1,0} parameter(0)
  b = f32[4,32,8]{2,1,0} parameter(1)
  ROOT d = f32[4,16,8]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""


def test_dot():
    g = graph(DOT)
    assert g["node_opcode"].tolist() == [63, 63, 34]
    check_row(g["node_feat"][2], expected({0: 1, 13: 1, 21: 4, 22: 16, 23: 8, 27: 28, 28: 512,
                                           134: 2, 135: 1, 136: 0}))
    kf = dict(zip(KERNEL_FEATURES, g["kernel_feat"]))
    assert kf["flops"] == 2 * 4 * 16 * 8 * 32
    assert kf["bytes_read"] == 4 * (4 * 16 * 32 + 4 * 32 * 8)
    assert kf["bytes_written"] == kf["output_bytes"] == 4 * 4 * 16 * 8


def test_transpose_with_non_default_layout():
    g = graph("""HloModule t
ENTRY e {
  p = f32[8,16,32]{2,1,0} parameter(0)
  ROOT t = f32[32,8,16]{0,2,1} transpose(p), dimensions={2,0,1}
}
""")
    check_row(g["node_feat"][1], expected({0: 1, 13: 1, 21: 32, 22: 8, 23: 16, 27: 56, 28: 4096,
                                           31: 2, 32: 0, 33: 1,
                                           134: 0, 135: 2, 136: 1}))
    # the layouts make this transpose a bitcast: XLA counts no bytes for it
    kf = dict(zip(KERNEL_FEATURES, g["kernel_feat"]))
    assert kf["bytes_read"] == kf["bytes_written"] == 0 and kf["output_bytes"] == 4 * 4096


def test_sort_is_stable_and_tuple_shape():
    g = graph("""HloModule s
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY e {
  k = f32[64]{0} parameter(0)
  v = s32[64]{0} parameter(1)
  ROOT s = (f32[64]{0}, s32[64]{0}) sort(k, v), dimensions={0}, is_stable=true, to_apply=cmp
}
""")
    # after k, v and the comparator's 5 nodes: the sort, a tuple: one-hot
    # "tuple", no dims (product 1), tuple size 2, no layout
    assert g["node_opcode"].tolist()[-1] == opcode_id("sort")
    check_row(g["node_feat"][7], expected({0: 1, 18: 1, 28: 1, 29: 2, 31: 0, 133: 1}))


def test_default_layout_when_none_printed_and_dynamic_slice():
    g = graph("""HloModule ds
ENTRY e {
  p = f32[10,20] parameter(0)
  i = s32[] parameter(1)
  ROOT d = f32[2,20] dynamic-slice(p, i, i), dynamic_slice_sizes={2,20}
}
""")
    check_row(g["node_feat"][2], expected({0: 1, 13: 1, 21: 2, 22: 20, 27: 22, 28: 40,
                                           121: 2, 122: 20, 123: 22, 124: 40,
                                           134: 1, 135: 0}))
    assert g["edge_index"].tolist() == [[2, 0], [2, 1]]   # one edge per distinct operand


def test_fusion_nodes_edges_and_topological_order():
    # printed out of order on purpose: m uses x before x is defined
    hlo = """HloModule f
fused {
  m = f32[4]{0} multiply(x, y)
  x = f32[4]{0} parameter(0)
  y = f32[4]{0} parameter(1)
  ROOT a = f32[4]{0} add(m, x)
}
ENTRY e {
  p0 = f32[4]{0} parameter(0)
  p1 = f32[4]{0} parameter(1)
  ROOT f = f32[4]{0} fusion(p0, p1), kind=kLoop, calls=fused
}
"""
    module = parse_module(hlo, "f.hlo")
    nodes, comp = kernel_nodes(module)
    assert comp.name == "fused"
    assert [n.name for n in nodes] == ["x", "y", "m", "a"]
    g = featurize_module(module)
    assert g["node_opcode"].tolist() == [63, 63, 59, 2]
    # row [u, v]: u consumes v's output
    assert g["edge_index"].tolist() == [[2, 0], [2, 1], [3, 0], [3, 2]]
    assert g["node_feat"][:, 0].tolist() == [0, 0, 0, 1]
    assert g["node_feat"][1, 30] == 1
    kf = dict(zip(KERNEL_FEATURES, g["kernel_feat"]))
    assert kf["flops"] == 8 and kf["bytes_read"] == 32 and kf["bytes_written"] == 16


def graph_names(module):
    """Instruction names of the graph's nodes, called computations' included."""
    from tpuperf_cli.features import _topological
    from tpuperf_cli.features.called import graph_with_called

    nodes, comp = kernel_nodes(module)
    order, _, _ = graph_with_called(module, comp, nodes, _topological, FeaturizeError)
    return [n.name for n in order]


def tile_sample():
    if not TILE_SAMPLE.exists():
        pytest.skip("tpu_tile_sample.json not available")
    return json.loads(TILE_SAMPLE.read_text())


def test_tpu_kernel_with_tiled_layouts():
    kernel = tile_sample()[0]
    cfg = dict(kernel["configs"][0]["tile"])       # {"output_bounds": [2, 26, 4, 2]}
    g = graph(kernel["hlo"], config=cfg)
    module = parse_module(kernel["hlo"], "tpu")
    nodes, comp = kernel_nodes(module)
    names = [n.name for n in nodes]
    assert comp.name == "fused_computation.17.clone" and len(names) == 14
    names = graph_names(module)                  # with the reducers' nodes
    feat = g["node_feat"]
    # %convert.179 = pred[32,26,26,192]{3,0,2,1:T(8,128)(4,1)}: tiles are not
    # features, minor_to_major is
    k = names.index("convert.179")
    check_row(feat[k], expected({3: 1, 21: 32, 22: 26, 23: 26, 24: 192, 27: 276,
                                 28: 32 * 26 * 26 * 192, 134: 3, 135: 0, 136: 2, 137: 1}))
    # %iota.74 = u32[32,26,26,192]{3,0,2,1:T(8,128)} iota(), iota_dimension=1
    k = names.index("iota.74")
    check_row(feat[k], expected({10: 1, 21: 32, 22: 26, 23: 26, 24: 192, 27: 276,
                                 28: 32 * 26 * 26 * 192, 31: 1, 134: 3, 135: 0, 136: 2, 137: 1}))
    # %broadcast.557 = u32[32,26,26,192]{...} broadcast(%param_1.400), dimensions={0,2,3}
    k = names.index("broadcast.557")
    assert feat[k, 31:37].tolist() == [0, 2, 3, 0, 0, 0]
    # ROOT %reduce.100 = f32[192]{0:T(256)} reduce(...), dimensions={0,1,2}
    k = names.index("reduce.100")
    check_row(feat[k], expected({0: 1, 13: 1, 21: 192, 27: 192, 28: 192, 31: 0, 32: 1, 33: 2,
                                 134: 0}))
    k = names.index("param_1.400")
    assert feat[k, 30] == 1 and feat[k, 10] == 1
    assert g["node_opcode"][names.index("shift-left.66")] == 87
    # config: kernel and input bounds empty (product 0), output [2, 26, 4, 2]
    want = np.zeros(24, np.float32)
    want[8:16] = [2, 26, 4, 2, 0, 0, 34, 416]
    assert g["config_feat"].tolist() == want.tolist()


def test_config_features():
    assert config_features(None) == [0.0] * CONFIG_FEATURES
    got = config_features({"kernel_bounds": [1, 2, 3, 4, 5, 6, 7], "output_bounds": [],
                           "input_bounds": [0, 9]})
    assert got[:8] == [1, 2, 3, 4, 5, 6, 28, 5040]          # 7 entries: 6 kept, sum/product of all
    assert got[8:16] == [0] * 8                               # empty: product 0 (TpuGraphs)
    assert got[16:] == [0, 9, 0, 0, 0, 0, 9, 0]
    with pytest.raises(ValueError):
        config_features({"output_bounds": ["x"]})


def test_bad_hlo_is_an_error():
    with pytest.raises(FeaturizeError):
        featurize_kernel({"hlo": ""})
    from tpuperf_cli.errors import ParseError

    with pytest.raises(ParseError, match="not defined"):
        featurize_kernel({"hlo": "HloModule m\nENTRY e {\n  ROOT a = f32[2]{0} add(x, x)\n}\n"})


# ---------------------------------------------------------------- the command



def kernel_record(i, hlo, **extra):
    return {"v": 1, "type": "kernel", "program": "p", "kernel": f"k{i}", "index": i,
            "count": 1, "count_known": True, "hlo": hlo, "opcode": "dot", "fusion_kind": None,
            "fingerprint": f"{i:032x}", "computation": "e", **extra}


def read_out(data):
    return list(msgpack.Unpacker(io.BytesIO(data), raw=False))


def run(args, data):
    from tpuperf_cli.commands.featurize import cli
    from tpuperf_cli.errors import TpuperfError

    runner = CliRunner()
    result = runner.invoke(cli, args, input=data)
    if isinstance(result.exception, TpuperfError):
        return result, str(result.exception)
    return result, None


def test_command_keeps_fields_and_adds_arrays():
    data = stream_bytes([kernel_record(0, DOT, extra_field={"x": [1, 2]}),
                          kernel_record(1, REDUCE)])
    result, err = run([], data)
    assert result.exit_code == 0 and err is None, result.output
    out = read_out(result.stdout_bytes)
    assert len(out) == 2
    r = out[0]
    assert r["type"] == "graph" and r["kernel"] == "k0" and r["extra_field"] == {"x": [1, 2]}
    assert r["fingerprint"] == f"{0:032x}" and r["hlo"] == DOT
    arrays = {k: decode_array(r[k], k) for k in
              ("node_opcode", "node_feat", "edge_index", "kernel_feat", "config_feat")}
    assert arrays["node_opcode"].dtype == np.int32 and arrays["node_opcode"].shape == (3,)
    assert arrays["node_feat"].dtype == np.float32 and arrays["node_feat"].shape == (3, 140)
    assert arrays["edge_index"].dtype == np.int32 and arrays["edge_index"].shape == (2, 2)
    assert arrays["kernel_feat"].dtype == np.float32 and arrays["kernel_feat"].shape == (len(KERNEL_FEATURES),)
    assert arrays["config_feat"].tolist() == [0.0] * 24
    assert r["node_feat"]["dtype"] == "<f4" and r["edge_index"]["dtype"] == "<i4"


def test_bad_record_names_record_and_kernel_and_keeps_earlier_output(tmp_path):
    bad = "HloModule m\nENTRY e {\n  ROOT a = f32[2]{0} add(x, \n"
    data = stream_bytes([kernel_record(0, DOT), kernel_record(1, bad), kernel_record(2, DOT)])
    src = tmp_path / "k.msgpack"
    src.write_bytes(data)
    out = tmp_path / "g.msgpack"
    result, err = run([str(src), "-o", str(out)], b"")
    assert result.exit_code != 0
    assert "record 2" in err and "k1" in err and str(src) in err
    assert [r["kernel"] for r in read_out(out.read_bytes())] == ["k0"]


def test_unknown_shape_is_a_parse_error_exit_2():
    data = stream_bytes([kernel_record(0, "HloModule m\nENTRY e {\n  ROOT p = f33[2]{0} parameter(0)\n}\n")])
    proc = subprocess.run([sys.executable, "-m", "tpuperf_cli", "featurize"], input=data,
                          capture_output=True)
    assert proc.returncode == 2
    assert b"record 1 (p/k0)" in proc.stderr
    assert b"f33" in proc.stderr and b"Traceback" not in proc.stderr


def test_same_hlo_with_many_configs():
    kernel = tile_sample()[0]
    recs = [featurize_kernel({"hlo": kernel["hlo"], "config": c["tile"]}) for c in kernel["configs"][:3]]
    assert recs[0]["node_feat"].tolist() == recs[2]["node_feat"].tolist()
    assert recs[0]["config_feat"].tolist() != recs[1]["config_feat"].tolist()
    assert recs[1]["config_feat"][8:12].tolist() == kernel["configs"][1]["tile"]["output_bounds"]


def test_skip_bad(tmp_path):
    import zstandard

    bad = "HloModule m\nENTRY e {\n  ROOT a = f32[2]{0} add(x, \n"
    data = stream_bytes([kernel_record(0, DOT), kernel_record(1, bad), kernel_record(2, DOT),
                          {"v": 1, "type": "kernel", "kernel": "nohlo"}])
    src = tmp_path / "k.zst"
    src.write_bytes(zstandard.ZstdCompressor().compress(data))
    proc = subprocess.run([sys.executable, "-m", "tpuperf_cli", "featurize", "--skip-bad", str(src)],
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert [r["kernel"] for r in read_out(proc.stdout)] == ["k0", "k2"]
    assert b"skipped 2 record" in proc.stderr and b"k1" in proc.stderr


def test_help_documents_the_edge_convention():
    from tpuperf_cli.commands.featurize import cli

    text = CliRunner().invoke(cli, ["--help"]).output
    assert "consumes" in text and "TpuGraphs" in text
    for name in KERNEL_FEATURES:
        assert name in text


def test_fast_start_no_heavy_imports():
    code = ("import sys, tpuperf_cli.commands.featurize, tpuperf_cli.features, "
            "tpuperf_cli.hlo.cost; "
            "heavy = [m for m in ('jax', 'jaxlib', 'torch', 'dgl') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pipeline_from_hlo_split():
    hlo = ROOT / "examples" / "hlo" / "mlp_s_train.hlo.zst"
    if not hlo.exists():
        pytest.skip("examples not generated")
    split = subprocess.run([sys.executable, "-m", "tpuperf_cli", "hlo-split", "-q", str(hlo)],
                           capture_output=True, check=True)
    feat = subprocess.run([sys.executable, "-m", "tpuperf_cli", "featurize"],
                          input=split.stdout, capture_output=True)
    assert feat.returncode == 0, feat.stderr
    kernels = read_out(split.stdout)
    graphs = read_out(feat.stdout)
    assert len(graphs) == len(kernels) > 10
    for k, g in zip(kernels, graphs):
        assert g["kernel"] == k["kernel"]
        n = decode_array(g["node_opcode"]).shape[0]
        feat_ = decode_array(g["node_feat"])
        edges = decode_array(g["edge_index"])
        # is_root: the kernel's root (printed last) and each called computation's
        assert feat_.shape == (n, 140) and feat_[-1, 0] == 1
        assert (edges[:, 0] > edges[:, 1]).all()          # topological: operands first
        assert (decode_array(g["node_opcode"]) > 0).all()
