"""Node feature vectors in the TpuGraphs layout (140 float32 per node).

The layout is the one the TpuGraphs README documents under "Node Features"
(what tpu_graphs/process_data/xla/featurizers.h FeaturizeHloInstruction
writes for the op-level tasks), index for index, so a model trained on the
TpuGraphs .npz files reads these vectors the same way:

    0        is_root
    1        element_size_in_bits (deprecated, always 0)
    2-20     element type one-hot: invalid pred s8 s16 s32 s64 u8 u16 u32 u64
             f16 f32 f64 bf16 c64 c128 tuple opaque token (other types,
             e.g. s4 or f8e4m3fn: all zero, as TpuGraphs' featurizer does)
    21-28    shape dimensions 0..5, sum, product (dynamic dims: their bound)
    29       tuple_shapes_size (top level)
    30       parameter_number
    31-36    dimensions 0..5 (broadcast, reduce, transpose, reverse,
             concatenate, sort, ...; iota: iota_dimension)
    37-92    window: size, stride, padding_low, padding_high,
             window_dilation (rhs_dilate), base_dilation (lhs_dilate), each
             6 entries + sum + product; window_reversal 6 entries + true
             count + false count
    93-106   convolution dimension numbers: input batch, input feature,
             input spatial 0..3, kernel input feature, kernel output feature,
             kernel spatial 0..3, output batch, output feature
    107-108  feature_group_count, batch_group_count
    109-120  slice start, stride, limit: each 2 entries + sum + product
    121-124  dynamic_slice_sizes: 2 entries + sum + product
    125-132  pad edge_padding_low, edge_padding_high: 2 entries + sum + product
    133      is_stable (sort)
    134-139  layout minor_to_major 0..5

"N entries + sum + product" follows featurizers.h: entries past the list's
length are 0, and an empty list has sum 0 and product 1. Fields an opcode
does not have are what an HloInstructionProto holds for them: 0 (and the
empty-list sum/product). feature_group_count and batch_group_count are the
instruction's for convolutions and custom-calls (1 when not printed), 0 for
every other op, as XLA writes them to the proto.

A shape printed without a layout gets XLA's default layout (minor_to_major
rank-1..0), as XLA's HLO parser gives it; tuples and tokens have no layout
(zeros). TPU tiles (`T(8,128)`) are not part of the 140 features.
"""

from tpuperf_cli.hlo import attrs
from tpuperf_cli.hlo.ir import Instruction, Shape
from tpuperf_cli.records import NODE_FEATURES

_ELEMENT_TYPES = ("invalid", "pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64",
                  "f16", "f32", "f64", "bf16", "c64", "c128", "tuple", "opaque", "token")
_TYPE_NAMES = {"invalid": "invalid_type", "opaque": "opaque_type"}


def _names():
    n = ["is_root", "element_size_in_bits"]
    n += ["shape_element_type_is_" + _TYPE_NAMES.get(t, t) for t in _ELEMENT_TYPES]

    def seq(prefix, k, agg=("sum", "product")):
        return [f"{prefix}_{i}" for i in range(k)] + [f"{prefix}_{a}" for a in agg]

    n += seq("shape_dimensions", 6)
    n += ["shape_tuple_shapes_size", "parameter_number"]
    n += seq("dimensions", 6, ())
    for w in ("size", "stride", "padding_low", "padding_high", "window_dilation",
              "base_dilation"):
        n += seq("window_" + w, 6)
    n += seq("window_window_reversal", 6, ("true_count", "false_count"))
    c = "convolution_dim_numbers_"
    n += [c + "input_batch_dim", c + "input_feature_dim"] + seq(c + "input_spatial_dims", 4, ())
    n += [c + "kernel_input_feature_dim", c + "kernel_output_feature_dim"]
    n += seq(c + "kernel_spatial_dims", 4, ())
    n += [c + "output_batch_dim", c + "output_feature_dim"]
    n += ["feature_group_count", "batch_group_count"]
    n += seq("slice_dims_start", 2) + seq("slice_dims_stride", 2) + seq("slice_dims_limit", 2)
    n += seq("dynamic_slice_sizes", 2)
    n += seq("padding_config_edge_padding_low", 2) + seq("padding_config_edge_padding_high", 2)
    n += ["is_stable"]
    n += seq("layout_minor_to_major", 6, ())
    return tuple(n)


NODE_FEATURE_NAMES = _names()
assert len(NODE_FEATURE_NAMES) == NODE_FEATURES

# Start index of each group (see the module docstring).
IS_ROOT = 0
ELEMENT_TYPE = 2
SHAPE_DIMS = 21
TUPLE_SIZE = 29
PARAMETER_NUMBER = 30
DIMENSIONS = 31
WINDOW = 37            # 6 groups of 8 (size, stride, pad lo, pad hi, win dil, base dil)
WINDOW_REVERSAL = 85
CONV_DIMS = 93
FEATURE_GROUP_COUNT = 107
BATCH_GROUP_COUNT = 108
SLICE = 109            # start, stride, limit: 3 groups of 4
DYNAMIC_SLICE_SIZES = 121
PADDING = 125          # low, high: 2 groups of 4
IS_STABLE = 133
LAYOUT = 134

_TYPE_INDEX = {t: ELEMENT_TYPE + k for k, t in enumerate(_ELEMENT_TYPES)}


def _empty_row():
    row = [0.0] * NODE_FEATURES
    # the product of an empty list is 1 (featurizers.h: zero_product_on_empty_source=false)
    for start in (WINDOW + 8 * k for k in range(6)):
        row[start + 7] = 1.0
    for start in (SLICE, SLICE + 4, SLICE + 8, DYNAMIC_SLICE_SIZES, PADDING, PADDING + 4):
        row[start + 3] = 1.0
    return row


EMPTY_ROW = tuple(_empty_row())


def _put_seq(row, start, values, k):
    """k leading values, then sum and product at start+k, start+k+1."""
    s = 0
    p = 1
    for i, v in enumerate(values):
        if i < k:
            row[start + i] = float(v)
        s += v
        p *= v
    row[start + k] = float(s)
    row[start + k + 1] = float(p)


def _put_list(row, start, values, k):
    for i, v in enumerate(values[:k]):
        row[start + i] = float(v)


# ---------------------------------------------------------------- shapes

_shape_cache = {}


def shape_features(shape: Shape) -> dict[int, float]:
    """{index: value} of the shape-dependent features (element type, dims,
    tuple size, layout) of an ir.Shape; cached by the shape's text."""
    key = shape.text
    if key is not None:
        hit = _shape_cache.get(key)
        if hit is not None:
            return hit
    row = {}
    t = _TYPE_INDEX.get(shape.element_type)
    if t is not None:
        row[t] = 1.0
    dims = shape.dims
    s = 0
    p = 1
    for i, d in enumerate(dims):
        if i < 6:
            row[SHAPE_DIMS + i] = float(d)
        s += d
        p *= d
    row[SHAPE_DIMS + 6] = float(s)
    row[SHAPE_DIMS + 7] = float(p)
    if shape.is_tuple:
        row[TUPLE_SIZE] = float(len(shape.tuple_shapes))
    elif shape.is_array:
        for i, d in enumerate(shape.layout):
            if i >= 6:
                break
            row[LAYOUT + i] = float(d)
    items = tuple((k, v) for k, v in row.items() if v != 0.0)
    if key is not None:
        if len(_shape_cache) > 50000:
            _shape_cache.clear()
        _shape_cache[key] = items
    return items


# ---------------------------------------------------------------- attributes

_attr_cache = {}


def _cached(kind, text, decode):
    key = (kind, text)
    hit = _attr_cache.get(key)
    if hit is None:
        hit = decode(text)
        if len(_attr_cache) > 50000:
            _attr_cache.clear()
        _attr_cache[key] = hit
    return hit


def _window_items(text):
    row = list(EMPTY_ROW)
    dims = attrs.window(text)
    for g, key in enumerate(("size", "stride", "pad_low", "pad_high", "rhs_dilate",
                             "lhs_dilate")):
        _put_seq(row, WINDOW + 8 * g, [d[key] for d in dims], 6)
    rev = [d["rhs_reversal"] for d in dims]
    _put_list(row, WINDOW_REVERSAL, [1 if r else 0 for r in rev], 6)
    row[WINDOW_REVERSAL + 6] = float(sum(1 for r in rev if r))
    row[WINDOW_REVERSAL + 7] = float(sum(1 for r in rev if not r))
    return tuple((i, row[i]) for i in range(WINDOW, CONV_DIMS))


def _conv_items(text):
    d = attrs.conv_dims(text)
    row = [0.0] * NODE_FEATURES
    row[CONV_DIMS] = d["input_batch"]
    row[CONV_DIMS + 1] = d["input_feature"]
    _put_list(row, CONV_DIMS + 2, d["input_spatial"], 4)
    row[CONV_DIMS + 6] = d["kernel_input_feature"]
    row[CONV_DIMS + 7] = d["kernel_output_feature"]
    _put_list(row, CONV_DIMS + 8, d["kernel_spatial"], 4)
    row[CONV_DIMS + 12] = d["output_batch"]
    row[CONV_DIMS + 13] = d["output_feature"]
    return tuple((i, float(row[i])) for i in range(CONV_DIMS, CONV_DIMS + 14) if row[i])


def _slice_items(text):
    row = list(EMPTY_ROW)
    b = attrs.slice_bounds(text)
    _put_seq(row, SLICE, [x[0] for x in b], 2)
    _put_seq(row, SLICE + 4, [x[2] for x in b], 2)
    _put_seq(row, SLICE + 8, [x[1] for x in b], 2)
    return tuple((i, row[i]) for i in range(SLICE, SLICE + 12))


def _dss_items(text):
    row = list(EMPTY_ROW)
    _put_seq(row, DYNAMIC_SLICE_SIZES, attrs.dynamic_slice_sizes(text), 2)
    return tuple((i, row[i]) for i in range(DYNAMIC_SLICE_SIZES, DYNAMIC_SLICE_SIZES + 4))


def _pad_items(text):
    row = list(EMPTY_ROW)
    p = attrs.padding(text)
    _put_seq(row, PADDING, [x[0] for x in p], 2)
    _put_seq(row, PADDING + 4, [x[1] for x in p], 2)
    return tuple((i, row[i]) for i in range(PADDING, PADDING + 8))


def _dims_items(text):
    return tuple((DIMENSIONS + i, float(v)) for i, v in enumerate(attrs.int_list(text)[:6]) if v)


_GROUP_COUNT_OPS = frozenset({"convolution", "custom-call"})


def node_features(ins: Instruction, is_root: bool | None = None) -> list[float]:
    """The 140 TpuGraphs features of one ir.Instruction, as a list of floats.

    is_root defaults to ins.is_root. Raises ValueError for attribute text
    that cannot be read.
    """
    row = list(EMPTY_ROW)
    if ins.is_root if is_root is None else is_root:
        row[IS_ROOT] = 1.0
    for i, v in shape_features(ins.shape):
        row[i] = v
    op = ins.opcode
    if op == "parameter":
        row[PARAMETER_NUMBER] = float(ins.parameter_number or 0)
        return row
    a = ins.attrs
    if not a:
        return row
    t = a.get("dimensions")
    if t is not None:
        for i, v in _cached("dims", t, _dims_items):
            row[i] = v
    elif op == "iota":
        t = a.get("iota_dimension")
        if t is not None:
            row[DIMENSIONS] = float(int(t))
    t = a.get("window")
    if t is not None:
        for i, v in _cached("window", t, _window_items):
            row[i] = v
    t = a.get("dim_labels")
    if t is not None:
        for i, v in _cached("conv", t, _conv_items):
            row[i] = v
    if op in _GROUP_COUNT_OPS:
        row[FEATURE_GROUP_COUNT] = float(int(a.get("feature_group_count", "1")))
        row[BATCH_GROUP_COUNT] = float(int(a.get("batch_group_count", "1")))
    t = a.get("slice")
    if t is not None and op == "slice":
        for i, v in _cached("slice", t, _slice_items):
            row[i] = v
    t = a.get("dynamic_slice_sizes")
    if t is not None:
        for i, v in _cached("dss", t, _dss_items):
            row[i] = v
    t = a.get("padding")
    if t is not None and op == "pad":
        for i, v in _cached("pad", t, _pad_items):
            row[i] = v
    if op == "sort" and a.get("is_stable", "false").strip().lower() == "true":
        row[IS_STABLE] = 1.0
    return row


def feature_name(index: int) -> str:
    """The TpuGraphs name of a node feature index (0..139)."""
    return NODE_FEATURE_NAMES[index]


# ---------------------------------------------------------------- fast path

# Attributes that feed node features; with the opcode, shape text, is_root
# and parameter number they determine a node's row.
_ROW_ATTRS = ("dimensions", "iota_dimension", "window", "dim_labels", "feature_group_count",
              "batch_group_count", "slice", "dynamic_slice_sizes", "padding", "is_stable")
_ROW_ATTR_SET = frozenset(_ROW_ATTRS)
_row_cache = {}


def node_row_bytes(ins: Instruction, is_root: bool) -> bytes:
    """node_features(ins, is_root) as 560 bytes of little-endian float32,
    cached by everything the row depends on (featurize joins these)."""
    a = ins.attrs
    text = ins.shape.text
    if a:
        if _ROW_ATTR_SET.isdisjoint(a):     # the common case: metadata, kind, calls
            key = (ins.opcode, text, is_root, ins.parameter_number, True)
        else:
            key = (ins.opcode, text, is_root, ins.parameter_number, *map(a.get, _ROW_ATTRS))
    else:
        key = (ins.opcode, text, is_root, ins.parameter_number)
    hit = _row_cache.get(key) if text is not None else None
    if hit is None:
        import numpy as np

        hit = np.array(node_features(ins, is_root), dtype="<f4").tobytes()
        if text is not None:
            if len(_row_cache) > 100000:
                _row_cache.clear()
            _row_cache[key] = hit
    return hit
