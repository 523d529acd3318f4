"""Decoders from raw HLO attribute text to values.

The parser keeps every attribute as the text XLA printed
(`ins.attrs["window"] == "{size=3x3 stride=2x2 pad=1_1x1_1}"`); these turn
the ones featurize and the cost analysis need into numbers. Each takes the
raw text (or an instruction's attrs dict where several attributes belong
together) and raises ValueError on text it cannot read.

    >>> window("{size=3x3 stride=2x2 pad=0_1x0_1}")[0]
    {'size': 3, 'stride': 2, 'pad_low': 0, 'pad_high': 1, 'lhs_dilate': 1, 'rhs_dilate': 1, 'rhs_reversal': False}
"""

import json
import re

# an instruction's attributes as the parser keeps them: {key: raw text}
Attrs = dict[str, str]

__all__ = [
    "int_list", "int_lists", "replica_groups", "window", "padding", "slice_bounds",
    "conv_dims", "dot_dims", "gather_dims", "scatter_dims", "dynamic_slice_sizes",
    "backend_config", "known_trip_count", "string", "metadata", "frontend_attributes",
    "literal_values", "boolean",
]

_RE_INT = re.compile(r"-?\d+")


def int_list(text: str) -> list[int]:
    """`{1,2}` (or `1,2`, `{}`) -> [1, 2].

    >>> int_list("{0,2}")
    [0, 2]
    >>> int_list("{}")
    []
    """
    t = text.strip()
    if t.startswith("{") and t.endswith("}"):
        t = t[1:-1]
    t = t.strip()
    if not t:
        return []
    try:
        return [int(x) for x in t.split(",")]
    except ValueError:
        raise ValueError(f"expected a list of integers like {{1,2}}, got {text!r}") from None


def int_lists(text: str) -> list[list[int]]:
    """`{{0,1},{2,3}}` -> [[0, 1], [2, 3]] (one level of nesting).

    >>> int_lists("{{0,1},{2,3}}")
    [[0, 1], [2, 3]]
    >>> int_lists("{}")
    []
    """
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        raise ValueError(f"expected a list of lists like {{{{0,1}},{{2,3}}}}, got {text!r}")
    return [int_list(g) for g in re.findall(r"\{[^{}]*\}", t[1:-1])]


def replica_groups(text: str) -> list[list[int]]:
    """replica_groups in either printed form -> list of lists of ids.

    The explicit form `{{0,1},{2,3}}`, or the iota form
    `[G,S]<=[d0,d1,...]T(perm)` (G groups of S ids: iota over the dims,
    transposed by perm, reshaped to G x S).

    >>> replica_groups("{{0,2},{1,3}}")
    [[0, 2], [1, 3]]
    >>> replica_groups("[2,2]<=[2,2]T(1,0)")
    [[0, 2], [1, 3]]
    """
    t = text.strip()
    if t.startswith("{"):
        return int_lists(t)
    m = re.fullmatch(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", t.replace(" ", ""))
    if not m:
        raise ValueError(f"cannot read replica_groups {text!r}")
    g, s = int(m.group(1)), int(m.group(2))
    dims = [int(x) for x in m.group(3).split(",")]
    perm = [int(x) for x in m.group(4).split(",")] if m.group(4) else list(range(len(dims)))
    # ids of the iota array with dims `dims`, read in the order of the transposed array
    strides = [1] * len(dims)
    for k in range(len(dims) - 2, -1, -1):
        strides[k] = strides[k + 1] * dims[k + 1]
    tdims = [dims[p] for p in perm]
    ids = []
    index = [0] * len(tdims)
    total = 1
    for d in tdims:
        total *= d
    for _ in range(total):
        ids.append(sum(index[k] * strides[perm[k]] for k in range(len(tdims))))
        for k in range(len(tdims) - 1, -1, -1):
            index[k] += 1
            if index[k] < tdims[k]:
                break
            index[k] = 0
    if g * s != len(ids):
        raise ValueError(f"replica_groups {text!r}: {g}x{s} groups but {len(ids)} ids")
    return [ids[i * s:(i + 1) * s] for i in range(g)]


def window(text: str) -> list[dict]:
    """A window attribute -> one dict per spatial dimension.

    Keys: size, stride, pad_low, pad_high, lhs_dilate, rhs_dilate (all int,
    defaults 1 / 0) and rhs_reversal (bool).

    >>> window("{size=3x3 stride=2x2 pad=1_1x0_1 rhs_dilate=1x2}")[1]
    {'size': 3, 'stride': 2, 'pad_low': 0, 'pad_high': 1, 'lhs_dilate': 1, 'rhs_dilate': 2, 'rhs_reversal': False}
    >>> window("{}")
    []
    """
    t = text.strip()
    if t.startswith("{") and t.endswith("}"):
        t = t[1:-1]
    fields = {}
    for item in t.split():
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"bad window item {item!r} in {text!r}")
        fields[key] = value.split("x")
    if not fields:
        return []
    rank = len(next(iter(fields.values())))
    dims = [{"size": 1, "stride": 1, "pad_low": 0, "pad_high": 0, "lhs_dilate": 1,
             "rhs_dilate": 1, "rhs_reversal": False} for _ in range(rank)]
    for key, values in fields.items():
        if len(values) != rank:
            raise ValueError(f"window {text!r}: '{key}' has {len(values)} dims, expected {rank}")
        for d, v in zip(dims, values):
            if key == "pad":
                lo, _, hi = v.partition("_")
                d["pad_low"], d["pad_high"] = int(lo), int(hi)
            elif key == "rhs_reversal":
                d["rhs_reversal"] = v == "1"
            elif key in ("size", "stride", "lhs_dilate", "rhs_dilate"):
                d[key] = int(v)
            else:
                d[key] = v
    return dims


def padding(text: str) -> list[tuple[int, int, int]]:
    """A pad instruction's padding config -> [(low, high, interior), ...].

    >>> padding("0_0x1_1_2")
    [(0, 0, 0), (1, 1, 2)]
    >>> padding("-1_2")
    [(-1, 2, 0)]
    """
    out = []
    t = text.strip()
    if not t:
        return out
    for dim in t.split("x"):
        parts = [int(p) for p in dim.split("_")]
        if len(parts) == 2:
            parts.append(0)
        if len(parts) != 3:
            raise ValueError(f"bad padding {text!r}: expected low_high[_interior] per dim")
        out.append(tuple(parts))
    return out


def slice_bounds(text: str) -> list[tuple[int, int, int]]:
    """A slice attribute -> [(start, limit, stride), ...].

    >>> slice_bounds("{[0:4], [2:8:2]}")
    [(0, 4, 1), (2, 8, 2)]
    """
    out = []
    for m in re.finditer(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]", text):
        out.append((int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)))
    if not out and text.strip() not in ("{}", ""):
        raise ValueError(f"bad slice {text!r}: expected {{[start:limit:stride], ...}}")
    return out


def dim_labels(text: str) -> tuple[str, str, str]:
    """dim_labels -> its (input, kernel, output) labels.

    >>> dim_labels("b01f_01io->b01f")
    ('b01f', '01io', 'b01f')
    """
    m = re.fullmatch(r"\s*(\w+)_(\w+)->(\w+)\s*", text)
    if not m:
        raise ValueError(f"bad dim_labels {text!r}: expected e.g. b01f_01io->b01f")
    return m.groups()


def conv_dims(text: str) -> dict:
    """dim_labels of a convolution -> its dimension numbers.

    `b01f_01io->b01f`: b/f are batch and feature, i/o the kernel's input and
    output feature, digits the spatial dimensions in order.

    >>> d = conv_dims("b01f_01io->b01f")
    >>> d["input_batch"], d["input_feature"], d["input_spatial"]
    (0, 3, [1, 2])
    >>> d["kernel_input_feature"], d["kernel_output_feature"], d["kernel_spatial"]
    (2, 3, [0, 1])
    """
    lhs, rhs, out = dim_labels(text)

    def spatial(labels):
        digits = sorted((c, i) for i, c in enumerate(labels) if c.isdigit())
        return [i for _, i in digits]

    try:
        return {
            "input_batch": lhs.index("b"), "input_feature": lhs.index("f"),
            "input_spatial": spatial(lhs),
            "kernel_input_feature": rhs.index("i"), "kernel_output_feature": rhs.index("o"),
            "kernel_spatial": spatial(rhs),
            "output_batch": out.index("b"), "output_feature": out.index("f"),
            "output_spatial": spatial(out),
        }
    except ValueError:
        raise ValueError(f"bad dim_labels {text!r}: a b, f, i or o label is missing") from None


def _lists(attrs, keys):
    return {k: int_list(attrs[k]) if k in attrs else [] for k in keys}


def dot_dims(attrs: Attrs) -> dict[str, list[int]]:
    """A dot's dimension numbers from its attrs dict.

    >>> dot_dims({"lhs_contracting_dims": "{1}", "rhs_contracting_dims": "{0}"})
    {'lhs_batch_dims': [], 'lhs_contracting_dims': [1], 'rhs_batch_dims': [], 'rhs_contracting_dims': [0]}
    """
    return _lists(attrs, ("lhs_batch_dims", "lhs_contracting_dims",
                          "rhs_batch_dims", "rhs_contracting_dims"))


def gather_dims(attrs: Attrs) -> dict:
    """A gather's dimension numbers and slice sizes from its attrs dict.

    >>> g = gather_dims({"offset_dims": "{1,2}", "collapsed_slice_dims": "{}",
    ...                  "start_index_map": "{0,1}", "index_vector_dim": "1",
    ...                  "slice_sizes": "{2,1}"})
    >>> g["offset_dims"], g["index_vector_dim"], g["slice_sizes"]
    ([1, 2], 1, [2, 1])
    """
    out = _lists(attrs, ("offset_dims", "collapsed_slice_dims", "start_index_map",
                         "operand_batching_dims", "start_indices_batching_dims", "slice_sizes"))
    out["index_vector_dim"] = int(attrs.get("index_vector_dim", "0"))
    return out


def scatter_dims(attrs: Attrs) -> dict:
    """A scatter's dimension numbers from its attrs dict.

    >>> s = scatter_dims({"update_window_dims": "{1}", "inserted_window_dims": "{0}",
    ...                   "scatter_dims_to_operand_dims": "{0}", "index_vector_dim": "1"})
    >>> s["update_window_dims"], s["index_vector_dim"]
    ([1], 1)
    """
    out = _lists(attrs, ("update_window_dims", "inserted_window_dims",
                         "scatter_dims_to_operand_dims", "input_batching_dims",
                         "scatter_indices_batching_dims"))
    out["index_vector_dim"] = int(attrs.get("index_vector_dim", "0"))
    return out


def dynamic_slice_sizes(text: str) -> list[int]:
    """dynamic_slice_sizes={2,4} -> [2, 4].

    >>> dynamic_slice_sizes("{2,4}")
    [2, 4]
    """
    return int_list(text)


def string(text: str) -> str:
    """A quoted attribute value -> the Python string (escapes undone).

    >>> string('"__cublas$gemm"')
    '__cublas$gemm'
    >>> string('"a\\\\"b"')
    'a"b'
    """
    t = text.strip()
    if len(t) >= 2 and t[0] == '"' and t[-1] == '"':
        try:
            return json.loads(t)
        except ValueError:
            return t[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    return t


def backend_config(text: str | None) -> dict | str:
    """backend_config as JSON (`{...}`) or a quoted string -> a dict where it
    is JSON, else the string ("" for none).

    >>> backend_config('{"known_trip_count":{"n":"10"}}')["known_trip_count"]
    {'n': '10'}
    >>> backend_config('"{\\\\"x\\\\":1}"')
    {'x': 1}
    """
    if text is None:
        return {}
    t = text.strip()
    if t.startswith('"'):
        t = string(t)
    if not t:
        return {}
    if t.startswith("{"):
        try:
            return json.loads(t)
        except ValueError:
            return t
    return t


def known_trip_count(attrs: Attrs) -> int | None:
    """The trip count XLA recorded on a while op, or None when unknown.

    >>> known_trip_count({"backend_config": '{"known_trip_count":{"n":"10"}}'})
    10
    >>> known_trip_count({}) is None
    True
    """
    cfg = backend_config(attrs.get("backend_config"))
    if isinstance(cfg, dict):
        n = (cfg.get("known_trip_count") or {}).get("n")
        if n is not None:
            try:
                return int(n)
            except (TypeError, ValueError):
                return None
    return None


def _key_values(text):
    t = text.strip()
    if t.startswith("{") and t.endswith("}"):
        t = t[1:-1]
    out = {}
    for m in re.finditer(r'([\w.\-]+)\s*=\s*("(?:[^"\\]|\\.)*"|\{[^{}]*\}|[^\s,]+)', t):
        v = m.group(2)
        out[m.group(1)] = string(v) if v.startswith('"') else v
    return out


def metadata(text: str) -> dict[str, str]:
    """metadata={op_type="Relu" op_name="a/b" source_line=3} -> dict of strings.

    >>> metadata('{op_type="Relu" op_name="a/b" source_line=3}')
    {'op_type': 'Relu', 'op_name': 'a/b', 'source_line': '3'}
    """
    return _key_values(text)


def frontend_attributes(text: str) -> dict[str, str]:
    """frontend_attributes={_xla_stream="1",k="v"} -> dict of strings.

    >>> frontend_attributes('{_xla_stream="1",k="v"}')
    {'_xla_stream': '1', 'k': 'v'}
    """
    return _key_values(text)


def boolean(text: str) -> bool:
    """true/false attribute values -> bool.

    >>> boolean("true")
    True
    """
    t = text.strip().lower()
    if t not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return t == "true"


_RE_LITERAL_ITEM = re.compile(r"[-+]?(?:inf|nan(?:\([^)]*\))?|\d[\w.+\-]*|\.\d[\w.+\-]*)|true|false",
                              re.I)


def literal_values(text: str, limit: int = 4096) -> list | None:
    """A constant's literal -> flat list of its values (row-major), or None
    when it has more than `limit` values or cannot be read.

    Ints stay int, floats float (nan/inf too), pred true/false bool.

    >>> literal_values("{ {1, 2}, {3, 4} }")
    [1, 2, 3, 4]
    >>> literal_values("-inf")
    [-inf]
    >>> literal_values("(1, {true, false})")
    [1, True, False]
    """
    if text is None:
        return None
    if text.count(",") > limit:
        return None
    out = []
    for m in _RE_LITERAL_ITEM.finditer(text):
        v = m.group()
        low = v.lower()
        if low == "true":
            out.append(True)
        elif low == "false":
            out.append(False)
        elif "nan" in low:
            out.append(float("nan"))
        else:
            try:
                out.append(int(v))
            except ValueError:
                try:
                    out.append(float(v))
                except ValueError:
                    return None
        if len(out) > limit:
            return None
    return out
