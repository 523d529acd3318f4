"""Static cost analysis of a kernel: flops, transcendentals, bytes.

Follows the conventions of XLA's HloCostAnalysis (xla/service/
hlo_cost_analysis.cc), which is what `compiled.cost_analysis()` reports, so
the numbers mean what XLA users expect, without needing jaxlib:

- elementwise ops cost one flop per output element; exp, log, logistic,
  power, sqrt, cbrt, rsqrt, tanh, sine, cosine, tan, expm1, log1p, atan2
  and erf count as transcendentals instead;
- dot: 2 x output elements x contracted size (an FMA is 2 flops);
- convolution: 2 x (input features / feature groups) x output features x
  (batch / batch groups) x the number of valid (kernel, output) position
  pairs per spatial dimension (padding and dilation holes excluded);
- reduce: the reducer's cost x (input elements - output elements);
  reduce-window: the reducer's cost x (window size - 1) x output elements
  (with XLA's special case of a reduce-then-broadcast window); map,
  scatter, select-and-scatter: the called computation's cost per element;
- sort: n x ceil(log2 n) flops; fft: 8 x prod(floor(log2 fft_length)) x
  elements; rng: one transcendental per element; all-reduce: one flop per
  element; custom-call: unknown (0 here; XLA reports -1);
- data movement (copy, transpose, broadcast, slice, pad, concatenate,
  gather, iota, ...) costs no flops;
- a fusion costs the sum over its fused computation.

Bytes follow XLA's accounting for the kernel instruction: an unfused op reads
its operands and writes its output, except that slice, dynamic-slice and
gather read only what they produce, dynamic-update-slice writes only its
update (operand 0 is aliased), bitcasts and layout-preserving transposes
move nothing. A fusion writes its output (a dynamic-update-slice root: only
the update) and reads each parameter once, except where only a slice or a
dynamic-slice of it is used (then the slices' bytes), or where a broadcast
or reshape re-reads it; constants larger than a scalar are read too.
Arrays count element bytes only (no tuple pointer tables).

    >>> from tpuperf_cli.hlo.parser import parse_module
    >>> m = parse_module('''HloModule m
    ... ENTRY e {
    ...   a = f32[8,16]{1,0} parameter(0)
    ...   b = f32[16,4]{1,0} parameter(1)
    ...   ROOT d = f32[8,4]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
    ... }''', "m.hlo")
    >>> c = kernel_cost(m)
    >>> c["flops"], c["bytes_read"], c["bytes_written"]
    (1024, 768, 128)
"""

import math

from tpuperf_cli.hlo import attrs
from tpuperf_cli.hlo.ir import ELEMENT_BYTES, Computation, Instruction, Module, Shape
from tpuperf_cli.records import KERNEL_FEATURES

TRANSCENDENTAL = frozenset({
    "exponential", "log", "logistic", "power", "sqrt", "cbrt", "rsqrt", "tanh", "sine",
    "cosine", "exponential-minus-one", "log-plus-one", "atan2", "tan", "erf",
})

ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "complex", "convert",
    "cosine", "count-leading-zeros", "divide", "erf", "exponential", "exponential-minus-one",
    "floor", "imag", "is-finite", "log", "log-plus-one", "logistic", "maximum", "minimum",
    "multiply", "negate", "not", "or", "popcnt", "power", "real", "reduce-precision",
    "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "sqrt",
    "subtract", "tan", "tanh", "xor", "stochastic-convert", "bitcast-convert",
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh",
})


class CostError(ValueError):
    """An instruction the analysis cannot cost (missing operand, bad attribute)."""


def _log2_ceil(n):
    return (n - 1).bit_length() if n > 1 else 0


def _log2_floor(n):
    return n.bit_length() - 1 if n > 0 else 0


class _Analysis:
    def __init__(self, module):
        self.module = module
        self._comp_cost = {}

    # -------------------------------------------------------- flops

    def computation(self, name):
        """(flops, transcendentals) summed over a computation."""
        hit = self._comp_cost.get(name)
        if hit is not None:
            return hit
        try:
            comp = self.module.computations[name.lstrip("%")]
        except KeyError:
            raise CostError(f"computation '{name}' is not in the module") from None
        self._comp_cost[name] = (0, 0)       # guards against a cycle
        f = t = 0
        for ins in comp.instructions:
            a, b = self.instruction(comp, ins)
            f += a
            t += b
        self._comp_cost[name] = (f, t)
        return f, t

    def _operand(self, comp, ins, k):
        try:
            return comp.by_name[ins.operands[k]].shape
        except (IndexError, KeyError):
            raise CostError(f"instruction '{ins.name}' ({ins.opcode}): operand {k} "
                            f"is missing") from None

    def _callee(self, ins, key):
        name = ins.attrs.get(key)
        if name is None:
            if ins.called:
                return self.computation(ins.called[0])
            raise CostError(f"instruction '{ins.name}' ({ins.opcode}) has no {key}")
        return self.computation(name.strip().lstrip("%"))

    def instruction(self, comp, ins):
        """(flops, transcendentals) of one instruction."""
        op = ins.opcode
        if op in ELEMENTWISE:
            n = ins.shape.num_elements()
            return (0, n) if op in TRANSCENDENTAL else (n, 0)
        handler = _HANDLERS.get(op)
        if handler is None:
            return 0, 0
        return handler(self, comp, ins)

    # -------------------------------------------------------- bytes

    def param_read_bytes(self, comp, param, users):
        """XLA's FusionParameterReadBytes: bytes a fusion reads of one parameter."""
        size = 0
        seen_trivial = False
        full = param.shape.byte_size()
        for user in users.get(param.name, ()):
            op = user.opcode
            if op == "fusion":
                inner = self.module.computations[_called(user)]
                inner_users = _users(inner)
                params = inner.parameters
                for k, o in enumerate(user.operands):
                    if o == param.name and k < len(params):
                        size += self.param_read_bytes(inner, params[k], inner_users)
            elif op == "slice":
                size += user.shape.byte_size()
            elif op == "dynamic-slice":
                if user.operands and user.operands[0] == param.name:
                    size += user.shape.byte_size()
                elif not seen_trivial:
                    seen_trivial = True
                    size += full
            elif op == "dynamic-update-slice":
                if not (user.operands and user.operands[0] == param.name) and not seen_trivial:
                    seen_trivial = True
                    size += full
            elif op in ("broadcast", "reshape"):
                size += full
            else:
                if not seen_trivial:
                    seen_trivial = True
                    size += full
        return size


def scatter_indices(ins) -> int:
    """The operand number of a scatter's indices: its operands are the
    inputs, the indices, then as many updates as inputs."""
    return (len(ins.operands) - 1) // 2


def _called(ins):
    name = ins.attrs.get("calls")
    if name is not None:
        return name.strip().lstrip("%")
    if ins.called:
        return ins.called[0]
    raise CostError(f"fusion '{ins.name}' names no fused computation (calls=)")


def _users(comp):
    users = {}
    for ins in comp.instructions:
        seen = set()
        for o in ins.operands:
            if o not in seen:
                seen.add(o)
                users.setdefault(o, []).append(ins)
    return users


# ------------------------------------------------------------ handlers

def _dot(an, comp, ins):
    lhs = an._operand(comp, ins, 0)
    width = 1
    for d in attrs.int_list(ins.attrs.get("lhs_contracting_dims", "{}")):
        width *= lhs.dims[d]
    return 2 * ins.shape.num_elements() * width, 0


def conv_flops(ins: Instruction, lhs: Shape, rhs: Shape, out: Shape) -> int:
    """XLA's GetConvolutionFlops for a convolution with these shapes."""
    a = ins.attrs
    d = attrs.conv_dims(a["dim_labels"]) if "dim_labels" in a else None
    if d is None:
        raise CostError(f"convolution '{ins.name}' has no dim_labels")
    window = attrs.window(a["window"]) if "window" in a else []
    fgc = int(a.get("feature_group_count", "1"))
    bgc = int(a.get("batch_group_count", "1"))
    input_feature = lhs.dims[d["input_feature"]]
    output_feature = out.dims[d["output_feature"]]
    batch = lhs.dims[d["input_batch"]]
    positions = 1
    for s, w in enumerate(window):
        k_lim = rhs.dims[d["kernel_spatial"][s]]
        o_lim = out.dims[d["output_spatial"][s]]
        i_lim = lhs.dims[d["input_spatial"][s]]
        stride, lo, hi = w["stride"], w["pad_low"], w["pad_high"]
        wdil, bdil = w["rhs_dilate"], w["lhs_dilate"]
        if (i_lim == o_lim and k_lim == o_lim and i_lim == bdil and wdil == 1
                and max(1, i_lim - 1) == stride and lo == 0 and hi == 0):
            positions *= i_lim
            continue
        if (i_lim == 1 and k_lim == o_lim and wdil == 1 and bdil == 1 and stride == 1
                and hi == o_lim - 1 and lo == o_lim - 1):
            positions *= o_lim
            continue
        count = 0
        for k in range(k_lim):
            base = k * wdil - lo
            if bdil == 1:
                # output positions o with 0 <= o*stride + base < i_lim
                lo_o = 0 if base >= 0 else (-base + stride - 1) // stride
                top = i_lim - 1 - base
                if top < 0:
                    continue
                hi_o = min(top // stride, o_lim - 1)
                if hi_o >= lo_o:
                    count += hi_o - lo_o + 1
            else:
                for o in range(o_lim):
                    u = o * stride + base
                    if u % bdil:
                        continue
                    x = u // bdil
                    if 0 <= x < i_lim:
                        count += 1
        positions *= count
    return 2 * (input_feature // fgc) * output_feature * (batch // bgc) * positions


def _convolution(an, comp, ins):
    return conv_flops(ins, an._operand(comp, ins, 0), an._operand(comp, ins, 1), ins.shape), 0


def matmul_shape(an, comp, ins) -> tuple[int, int, int, int]:
    """(batch, m, n, k) of the GEMM a dot or convolution amounts to:
    batch x (m x k) . (k x n). A dot: its batch dims, lhs free dims,
    rhs free dims, contracting dims. A convolution: the feature groups
    (x batch groups), batch x output positions, output features and input
    features x window taps per group."""
    lhs, rhs = an._operand(comp, ins, 0), an._operand(comp, ins, 1)
    a = ins.attrs
    if ins.opcode == "dot":
        def prod(shape, dims):
            return math.prod(shape.dims[d] for d in dims)

        lb = attrs.int_list(a.get("lhs_batch_dims", "{}"))
        lc = attrs.int_list(a.get("lhs_contracting_dims", "{}"))
        rb = attrs.int_list(a.get("rhs_batch_dims", "{}"))
        rc = attrs.int_list(a.get("rhs_contracting_dims", "{}"))
        batch, k = prod(lhs, lb), prod(lhs, lc)
        m = lhs.num_elements() // max(1, batch * k)
        n = rhs.num_elements() // max(1, prod(rhs, rb) * prod(rhs, rc))
        return batch, m, n, k
    d = attrs.conv_dims(a["dim_labels"])
    fgc = int(a.get("feature_group_count", "1"))
    bgc = int(a.get("batch_group_count", "1"))
    groups = fgc * bgc
    n = ins.shape.dims[d["output_feature"]] // groups
    m = ins.shape.num_elements() // max(1, ins.shape.dims[d["output_feature"]])
    k = lhs.dims[d["input_feature"]] // fgc * math.prod(rhs.dims[i] for i in d["kernel_spatial"])
    return groups, m, n, k


def matmul_layout(an, comp, ins) -> tuple[int, int]:
    """(lhs_k_minor, rhs_k_minor) of a dot or convolution: 1 where the
    operand's minor-most physical dimension is one it contracts over (a
    dot's contracting dims; a convolution's input features, of the input
    and of the kernel), else 0. A row-major GEMM's operands are (1, 0); a
    transposed rhs (1, 1) runs 2.6x slower on XLA:CPU at the same sizes."""
    lhs, rhs = an._operand(comp, ins, 0), an._operand(comp, ins, 1)
    a = ins.attrs
    if ins.opcode == "dot":
        lk = attrs.int_list(a.get("lhs_contracting_dims", "{}"))
        rk = attrs.int_list(a.get("rhs_contracting_dims", "{}"))
    else:
        d = attrs.conv_dims(a["dim_labels"])
        lk, rk = [d["input_feature"]], [d["kernel_input_feature"]]

    def minor(shape):           # its minor-most physical dim; -1 for a scalar
        return shape.layout[0] if shape.layout else -1

    return int(minor(lhs) in lk), int(minor(rhs) in rk)


def matmul_rhs_row_bytes(an, comp, ins) -> int:
    """The bytes between one row of a dot's or convolution's rhs and the
    next (its minor physical dim's size in bytes). Where the rhs is
    contracted along that dim (a weight stored transposed: matmul_layout's
    rhs_k_minor), XLA:CPU reads its rows side by side, and rows a power of
    two of bytes apart share cache sets: f32[16,512] by the transpose of
    f32[256,512] ran at 0.12x the untransposed dot's speed, 0.39x at other
    k (benchmarks/bench_dot_strides.py on an AMD EPYC family 25 model 17)."""
    rhs = an._operand(comp, ins, 1)
    return rhs.dims[rhs.layout[0]] * ELEMENT_BYTES.get(rhs.element_type, 4)


def _kernel_instructions(module: Module, comp, seen=None):
    """(computation, instruction) for every instruction of comp but its
    fusions, and in each fusion's place those of the computation it runs
    (each fused computation once, nested fusions too)."""
    seen = set() if seen is None else seen
    for ins in comp.instructions:
        if ins.opcode != "fusion":
            yield comp, ins
            continue
        name = _called(ins).strip().lstrip("%")
        fused = module.computations.get(name)
        if fused is not None and name not in seen:
            seen.add(name)
            yield from _kernel_instructions(module, fused, seen)


def relayout_bytes(module: Module, comp) -> int:
    """Bytes that the kernel's elementwise ops and copies read in another
    physical layout than they write (an operand of the same dims whose
    layout differs from the result's): a transposition in memory, which
    runs up to 10x slower than the same op without one. In comp and the
    computations its fusions run."""
    return sum(operand.byte_size() for operand, _ in _relayout_pairs(module, comp))


def _relayout_pairs(module: Module, comp):
    """(operand shape, result shape) of each elementwise op or copy of the
    kernel that reads an operand of its dims in another physical layout."""
    for c, ins in _kernel_instructions(module, comp):
        if (ins.opcode not in ELEMENTWISE and ins.opcode != "copy") or not ins.shape.is_array:
            continue
        for name in ins.operands:
            operand = c.by_name.get(name)
            shape = operand.shape if operand is not None else None
            if (shape is not None and shape.is_array and shape.dims == ins.shape.dims
                    and shape.layout != ins.shape.layout):
                yield shape, ins.shape


def relayout_stride(module: Module, comp) -> int:
    """Bytes between two elements of the operand read in another layout
    (the largest, as relayout_bytes counts them) that are neighbours in the
    result's minor-most dim: how far each step of the copy's inner loop
    jumps; 0 without one. In the corpus a relayout whose stride is a power
    of two from 1 to 4 KiB runs about 1.9x slower a byte than one of a
    stride just off it (cache sets: the jumps land in a few of them)."""
    best = None
    for operand, result in _relayout_pairs(module, comp):
        if best is None or operand.byte_size() > best[0].byte_size():
            best = (operand, result)
    if best is None:
        return 0
    operand, result = best
    order = list(operand.layout)
    if not order or not result.layout:
        return 0
    inner = order[:order.index(result.layout[0])]
    elements = math.prod(operand.dims) or 1
    return math.prod(operand.dims[d] for d in inner) * (operand.byte_size() // elements)


def reduce_shape(module: Module, comp) -> tuple[int, int]:
    """(bytes of the operand, bytes of its kept minor-most dim) of the
    kernel's largest reduce; (0, 0) without one, and (bytes, 0) for a
    reduce over the operand's minor-most dim (a row reduction). XLA:CPU
    runs a column reduction (the minor dim kept) of about the same bytes 2x
    slower with 32 or 64 floats kept than with 48 to 72 at 0.1 to 1 MB,
    and 3.6x to 6.2x at 3 to 5 MB, which neither the bytes nor the node
    features say."""
    best = (0, 0)
    for c, ins in _kernel_instructions(module, comp):
        if ins.opcode != "reduce" or not ins.operands:
            continue
        operand = c.by_name.get(ins.operands[0])
        if operand is None or not operand.shape.is_array or not operand.shape.dims:
            continue
        shape = operand.shape
        if shape.byte_size() <= best[0]:
            continue
        reduced = set(attrs.int_list(ins.attrs.get("dimensions", "{}")))
        minor = shape.layout[0]
        kept = 0 if minor in reduced else shape.dims[minor] * (shape.byte_size() // (math.prod(shape.dims) or 1))
        best = (shape.byte_size(), kept)
    return best


def output_minor_dim(shape) -> int:
    """Size of the minor-most physical dim of a kernel's result (of its
    largest array, for a tuple); 0 for a scalar or a token. XLA:CPU runs
    elementwise loops whose minor dim is 9 to 34 several times slower an
    element than those whose minor dim is 8, 40, 48, 56, 64 or 128, at any
    total size (most other sizes over 34 fall between)."""
    if shape.tuple_shapes:
        arrays = [s for s in shape.tuple_shapes if s.is_array]
        if not arrays:
            return 0
        shape = max(arrays, key=lambda s: s.byte_size())
    if not shape.is_array or not shape.dims:
        return 0
    return int(shape.dims[shape.layout[0]])


# Instructions of a loop kernel that cost no work of their own in its loop
# body (minor_loop_unrolled counts the others), and those it may hold at all:
# a reduce, dot, copy or transpose is emitted as another kind of loop.
_LOOP_FREE = frozenset({"parameter", "constant", "broadcast", "bitcast", "reshape", "tuple",
                        "get-tuple-element"})
_LOOP_OPS = ELEMENTWISE | _LOOP_FREE | frozenset({
    "iota", "slice", "concatenate", "pad", "dynamic-slice", "dynamic-update-slice", "reverse",
    "gather", "fusion"})
# Fitted on the corpus's generated kernels alone (not its programs): the
# loop is unrolled when minor dim x (UNROLL_BASE + ops) <= UNROLL_LIMIT.
UNROLL_BASE, UNROLL_LIMIT = 2, 108


def minor_loop_unrolled(module: Module, comp, root) -> int:
    """1 where the kernel is an elementwise loop (an unfused elementwise op
    or a loop fusion of them, with broadcasts, slices and their kin) whose
    minor-most loop LLVM unrolls whole, else 0. XLA:CPU emits one loop per
    dim of the result; when the innermost one is short and its body small,
    LLVM unrolls it and vectorizes the loop around it instead, with gathers
    and scatters across rows: f32[16,8,8,32] maximum(x, 0) ran at 1.1 ns an
    element, the same with a bias added (a bigger body, not unrolled) at
    0.2, and f32[16,8,8,64] maximum(x, 0) at 0.13. The rule: a minor dim
    over 8 (8 or fewer vectorize as one row) times UNROLL_BASE plus the
    body's ops (instructions but those in _LOOP_FREE: parameters,
    constants, broadcasts, bitcasts, reshapes and tuples) at most
    UNROLL_LIMIT. Of the f32 elementwise loop fusions of
    20,000 elements or more with a minor dim of 9 to 40 in the programs of
    the corpus measured on an AMD EPYC family 25 model 17 (2026-12-06),
    those it marks ran at a median 0.90 ns an element (125), the others
    0.14 (327); on the Intel Xeon family 6 model 207 of the committed
    corpus 0.56 and 0.38: the constants are that AMD machine's."""
    if root.opcode == "fusion" and root.fusion_kind != "kLoop":
        return 0
    ops = 0
    for _, ins in _kernel_instructions(module, comp):
        if ins.opcode not in _LOOP_OPS:
            return 0
        ops += ins.opcode not in _LOOP_FREE
    minor = output_minor_dim(root.shape)
    return int(8 < minor and minor * (UNROLL_BASE + ops) <= UNROLL_LIMIT)


def indexed_slices(module: Module, comp) -> int:
    """How many slices the kernel's gathers and scatters address (their
    index tuples: the indices' elements over the index vector's size), in
    comp and the computations its fusions run. XLA:CPU's scatter loop costs
    about 3 ns an index tuple however few elements each one moves: a
    scatter-add of 8,192 scalars and one of 8,192 rows of 32 floats both
    take about 25 us, which neither flops nor bytes say."""
    total = 0
    for c, ins in _kernel_instructions(module, comp):
        if ins.opcode == "gather":
            k, ivd = 1, attrs.gather_dims(ins.attrs)["index_vector_dim"]
        elif ins.opcode == "scatter":
            k, ivd = scatter_indices(ins), attrs.scatter_dims(ins.attrs)["index_vector_dim"]
        else:
            continue
        indices = c.by_name.get(ins.operands[k]) if k < len(ins.operands) else None
        if indices is None or not indices.shape.is_array:
            continue
        # index_vector_dim == rank: each element is one index
        total += math.prod(size for d, size in enumerate(indices.shape.dims) if d != ivd)
    return total


# the alignment features stop at 128 (2^7), a TPU's lane width
MAX_ALIGN_LOG2 = 7
# those of strides in bytes at 16 KiB (2^14), past a cache way's 4 KiB
MAX_STRIDE_ALIGN_LOG2 = 14


def alignment(size: int, cap: int = MAX_ALIGN_LOG2) -> int:
    """log2 of the largest power of two dividing size, at most cap
    (MAX_ALIGN_LOG2); 0 for 0 (no matmul) and odd sizes."""
    size = int(size)
    if size <= 0:
        return 0
    return min(cap, (size & -size).bit_length() - 1)


def _largest_matmul(an, comp):
    """(flops, (batch, m, n, k, lhs_k_minor, rhs_k_minor, rhs_row_bytes))
    of the dot or convolution with the most flops in comp and the
    computations its fusions run (matmul_shape, matmul_layout, and
    matmul_rhs_row_bytes where rhs_k_minor, else 0); (0, zeros) without."""
    best = (0, (0, 0, 0, 0, 0, 0, 0))
    for c, ins in _kernel_instructions(an.module, comp):
        if ins.opcode in ("dot", "convolution"):
            f, _ = an.instruction(c, ins)
            if f > best[0] or best[0] == 0:
                layout = matmul_layout(an, c, ins)
                row_bytes = matmul_rhs_row_bytes(an, c, ins) if layout[1] else 0
                best = (f, matmul_shape(an, c, ins) + layout + (row_bytes,))
    return best


def _reduce(an, comp, ins):
    f, t = an._callee(ins, "to_apply")
    arg = an._operand(comp, ins, 0)
    out = ins.shape.tuple_shapes[0] if ins.shape.is_tuple else ins.shape
    n = arg.num_elements() - out.num_elements()
    return f * n, t * n


def _reduce_window(an, comp, ins):
    f, t = an._callee(ins, "to_apply")
    window = attrs.window(ins.attrs.get("window", "{}"))
    wcount = 1
    for w in window:
        wcount *= w["size"]
    out = ins.shape.tuple_shapes[0] if ins.shape.is_tuple else ins.shape
    out_n = out.num_elements()
    n = (wcount - 1) * out_n
    reducing = [w for w in window if w["size"] != 1]
    padded = [w for w in window if w["pad_low"] != 0 or w["pad_high"] != 0]
    if len(reducing) == 1 and len(padded) == 1 and not ins.shape.is_tuple:
        for k, w in enumerate(window):
            if (w["size"] != 1 and w["pad_low"] != 0 and w["pad_high"] != 0
                    and w["pad_low"] == w["pad_high"] and w["size"] == 2 * w["pad_low"] + 1):
                if w["pad_low"] == ins.shape.dims[k] - 1:
                    size = ins.shape.dims[k]
                    n = out_n // size + (size - 1)
                break
    return f * n, t * n


def _select_and_scatter(an, comp, ins):
    sf, st = an._callee(ins, "select")
    cf, ct = an._callee(ins, "scatter")
    source = an._operand(comp, ins, 1).num_elements()
    wcount = 1
    for w in attrs.window(ins.attrs.get("window", "{}")):
        wcount *= w["size"]
    sel = source * (wcount - 1)
    return sf * sel + cf * source, st * sel + ct * source


def _map(an, comp, ins):
    f, t = an._callee(ins, "to_apply")
    n = ins.shape.num_elements()
    return f * n, t * n


def _scatter(an, comp, ins):
    f, t = an._callee(ins, "to_apply")
    updates = an._operand(comp, ins, scatter_indices(ins) + 1)
    n = updates.num_elements()
    return f * n, t * n


def _sort(an, comp, ins):
    n = an._operand(comp, ins, 0).num_elements()
    return n * _log2_ceil(n), 0


def _fft(an, comp, ins):
    shape = an._operand(comp, ins, 0)
    if shape.is_tuple:
        shape = shape.tuple_shapes[0]
    factors = 1
    for d in attrs.int_list(ins.attrs.get("fft_length", "{}")):
        factors *= _log2_floor(d)
    return 2 * 4 * factors * shape.num_elements(), 0


def _triangular_solve(an, comp, ins):
    a = an._operand(comp, ins, 0)
    b = an._operand(comp, ins, 1)
    return 2 * a.dims[-1] * b.num_elements(), 0


def _cholesky(an, comp, ins):
    a = an._operand(comp, ins, 0)
    return a.dims[-1] * a.num_elements() // 3, 0


def _rng(an, comp, ins):
    return 0, ins.shape.num_elements()


def _rng_bit_generator(an, comp, ins):
    return 0, sum(s.num_elements() for s in ins.shape.leaves())


def _all_reduce(an, comp, ins):
    return sum(s.num_elements() for s in ins.shape.leaves()), 0


def _fusion(an, comp, ins):
    return an.computation(_called(ins))


def _call(an, comp, ins):
    return an._callee(ins, "to_apply")


def _async_start(an, comp, ins):
    if ins.called:
        return an.computation(ins.called[0])
    return 0, 0


_HANDLERS = {
    "dot": _dot, "convolution": _convolution, "reduce": _reduce,
    "reduce-window": _reduce_window, "select-and-scatter": _select_and_scatter,
    "map": _map, "scatter": _scatter, "sort": _sort, "fft": _fft,
    "triangular-solve": _triangular_solve, "cholesky": _cholesky, "rng": _rng,
    "rng-bit-generator": _rng_bit_generator, "all-reduce": _all_reduce,
    "all-reduce-start": _all_reduce, "fusion": _fusion, "call": _call,
    "async-start": _async_start,
}


# ------------------------------------------------------------ bytes of a kernel

def _transpose_is_bitcast(ins, operand):
    perm = attrs.int_list(ins.attrs.get("dimensions", "{}"))
    out_m2m = ins.shape.layout
    in_m2m = operand.layout
    rank = len(ins.shape.dims)
    if len(perm) != rank or len(out_m2m) != rank or len(in_m2m) != rank:
        return False
    return all(perm[out_m2m[k]] == in_m2m[k] for k in range(rank))


def _large_constant_bytes(comp):
    total = 0
    for i in comp.instructions:
        if i.opcode == "constant" and i.shape.is_array and i.shape.num_elements() > 1:
            total += i.shape.byte_size()
    return total


def _kernel_bytes(an, comp, ins):
    """(bytes read, bytes written) of the kernel instruction."""
    op = ins.opcode
    out = ins.shape.byte_size()
    operands = [an._operand(comp, ins, k) for k in range(len(ins.operands))]
    if op in ("parameter", "constant", "get-tuple-element", "bitcast", "after-all",
              "add-dependency", "domain"):
        return 0, 0
    if op == "tuple":
        return 0, out
    if op == "transpose" and _transpose_is_bitcast(ins, operands[0]):
        return 0, 0
    if op == "slice":
        return out, out
    if op == "dynamic-slice":
        return out + sum(s.byte_size() for s in operands[1:]), out
    if op == "dynamic-update-slice":
        upd = operands[1].byte_size()
        return upd + sum(s.byte_size() for s in operands[2:]), upd
    if op == "gather":
        return out + operands[1].byte_size(), out
    if op == "scatter":
        n = scatter_indices(ins)
        upd = sum(s.byte_size() for s in operands[n + 1:])
        return 2 * upd + operands[n].byte_size(), upd
    if op == "triangular-solve":
        return operands[0].byte_size() / 2 + operands[1].byte_size(), out
    if op == "cholesky":
        half = operands[0].byte_size() / 2
        return half, half
    if op == "fusion":
        fused = an.module.computations[_called(ins)]
        root = fused.root
        written = 0
        if ins.shape.is_tuple:
            for k, s in enumerate(ins.shape.tuple_shapes):
                src = fused.by_name.get(root.operands[k]) if root.opcode == "tuple" \
                    and k < len(root.operands) else None
                if src is not None and src.opcode == "dynamic-update-slice":
                    written += fused.by_name[src.operands[1]].shape.byte_size()
                else:
                    written += s.byte_size()
        elif root.opcode == "dynamic-update-slice":
            written = fused.by_name[root.operands[1]].shape.byte_size()
        else:
            written = out
        users = _users(fused)
        read = _large_constant_bytes(fused)
        for p in fused.parameters:
            read += an.param_read_bytes(fused, p, users)
        return read, written
    return sum(s.byte_size() for s in operands), out




# elements a user needs of an operand: as many as it needs of its own
# output (the operand element each output element reads)
_ONE_TO_ONE = ELEMENTWISE | frozenset({
    "copy", "transpose", "reshape", "bitcast", "reverse", "slice", "convert", "select",
    "clamp", "bitcast-convert", "reduce-precision", "real", "imag"})


def touched_bytes(module: Module, comp, an: "_Analysis | None" = None) -> int:
    """Bytes the kernel needs of its inputs, following which of their
    elements its output depends on: a fusion that bitcasts a parameter and
    slices every second row of it, then every second of those, reads a
    quarter of it, where XLA's accounting (bytes_read) counts all of it.
    Demand flows back from a fusion's result: an elementwise op, copy,
    transpose, reshape or slice needs as many elements of its operand as
    are needed of it; a broadcast, pad or gather at most its operand; a
    concatenate its operands in proportion; a reduce or reduce-window the
    same fraction of its input as is needed of its output; anything else
    (dots, convolutions, scatters, sorts, nested fusions) all of its
    operands; a dynamic-update-slice's buffer, updated in place, nothing.
    Large constants count whole. An unfused kernel: bytes_read's count.
    On the example corpus's loop fusions of 8 us or more whose touched
    bytes are under half their bytes_read (ssm's scans of strided slices,
    gathers of a softmax, ...), a bytes roofline fitted on the others is
    off by 0.84 (log) at the median with touched bytes, 1.30 with
    bytes_read."""
    an = an or _Analysis(module)
    root = comp.root
    fused, need = _fusion_demand(module, root)
    if fused is None:
        return _kernel_bytes(an, comp, root)[0] if root is not None else 0
    total = _large_constant_bytes(fused)
    for p in fused.parameters:
        if p.shape.is_array and p.shape.num_elements():
            total += p.shape.byte_size() * need.get(p.name, 0) / p.shape.num_elements()
    return int(total)


def needed_flops(module: Module, comp, an: "_Analysis | None" = None) -> int:
    """Flops and transcendentals the kernel computes, following which
    elements its output depends on as touched_bytes does: a loop fusion
    computes an element of each op only where its result needs it, so a
    fusion that computes a [8,65,192] expression and sums the slice of one
    of its 65 rows costs a 65th of what XLA's accounting (flops +
    transcendentals, every op at its full size) says. Each fused op costs
    its flops and transcendentals times the fraction of its elements
    needed. An unfused kernel: flops + transcendentals."""
    an = an or _Analysis(module)
    root = comp.root
    if root is None:
        return 0
    fused, need = _fusion_demand(module, root)
    if fused is None:
        return sum(an.instruction(comp, root))
    work = 0.0
    for ins in fused.instructions:
        f, t = an.instruction(fused, ins)
        if f or t:
            out = max(ins.shape.num_elements(), 1) if ins.shape.is_array else 1
            work += (f + t) * min(need.get(ins.name, 0) / out, 1.0)
    return int(round(work))


def _fusion_demand(module: Module, root) -> tuple[Computation | None, dict[str, int]]:
    """(the fused computation of a fusion root, {instruction: elements of
    its output needed}) as touched_bytes describes the flow; (None, {}) for
    a kernel that is no fusion."""
    if root is None or root.opcode != "fusion":
        return None, {}
    fused = module.computations.get(_called(root))
    if fused is None or fused.root is None:
        return None, {}
    need = {}          # instruction name -> elements of its output needed

    def demand(name, n):
        ins = fused.by_name.get(name)
        if ins is None or not ins.shape.is_array:
            return
        need[name] = min(ins.shape.num_elements(), need.get(name, 0) + n)

    if fused.root.opcode == "tuple":
        for o in fused.root.operands:
            demand(o, fused.by_name[o].shape.num_elements() if o in fused.by_name else 0)
    else:
        need[fused.root.name] = fused.root.shape.num_elements() if fused.root.shape.is_array else 0
    for ins in reversed(fused.instructions):
        n = need.get(ins.name, 0)
        if ins.opcode in ("parameter", "constant", "iota", "tuple") or not ins.operands:
            continue
        out = max(ins.shape.num_elements(), 1) if ins.shape.is_array else 1
        share = n / out                      # fraction of the output needed
        op = ins.opcode
        for k, o in enumerate(ins.operands):
            src = fused.by_name.get(o)
            if src is None or not src.shape.is_array:
                continue
            size = src.shape.num_elements()
            if op in _ONE_TO_ONE or k == 0 and op in ("broadcast", "gather", "pad", "dynamic-slice"):
                demand(o, n)
            elif op == "concatenate" or op in ("reduce", "reduce-window") and k < len(ins.operands) // 2:
                demand(o, math.ceil(size * share))     # the inputs, not the init values
            elif op == "dynamic-update-slice" and k == 0:
                continue                     # updated in place: not read
            else:
                demand(o, size)
    return fused, need

# ------------------------------------------------------------ public

def kernel_instruction(module: Module) -> tuple[Computation, Instruction]:
    """The instruction a standalone kernel module runs: its ENTRY root."""
    if module.entry is None or module.entry.root is None:
        raise CostError("the module has no ENTRY computation with a ROOT instruction")
    return module.entry, module.entry.root


def kernel_cost(module: Module) -> dict[str, int | float]:
    """Static cost of a standalone kernel module (an ir.Module whose ENTRY
    runs one kernel, as hlo-split writes them).

    Returns {KERNEL_FEATURES: "flops", "transcendentals", "bytes_read",
    "bytes_written", "output_bytes", "matmul_batch", "matmul_m", "matmul_n",
    "matmul_k", "matmul_m_align", "matmul_n_align", "matmul_k_align",
    "matmul_lhs_k_minor", "matmul_rhs_k_minor", "relayout_bytes",
    "output_minor_dim", "output_minor_align", "indexed_slices",
    "touched_bytes", "relayout_stride", "relayout_stride_align",
    "reduce_bytes", "reduce_kept_minor_bytes", "reduce_kept_minor_align",
    "minor_loop_unrolled", "matmul_rhs_row_align", "needed_flops"} (ints,
    floats for the halves of triangular-solve and cholesky). flops and
    transcendentals are summed over every instruction of the ENTRY
    computation (parameters cost nothing), as XLA's
    HloCostAnalysis sums them; the bytes are those of the ENTRY root;
    matmul_* are matmul_shape of the dot or convolution with the most flops,
    in the ENTRY computation or a fusion's (zeros without one), and
    matmul_*_align the alignment() of its m, n and k, and
    matmul_*_k_minor its matmul_layout; relayout_bytes as relayout_bytes()
    counts them; output_minor_dim that of the ENTRY root's result, and
    output_minor_align its alignment(); indexed_slices as indexed_slices()
    counts them; touched_bytes as touched_bytes() counts them;
    relayout_stride as relayout_stride(), reduce_bytes and
    reduce_kept_minor_bytes as reduce_shape(), and the *_align ones their
    alignment() up to MAX_STRIDE_ALIGN_LOG2, minor_loop_unrolled as
    minor_loop_unrolled() finds it, and matmul_rhs_row_align the
    alignment() up to MAX_STRIDE_ALIGN_LOG2 of the largest matmul's
    matmul_rhs_row_bytes (0 when its rhs is not contracted along its minor
    dim), and needed_flops as needed_flops() counts them.
    Raises CostError for a module it cannot cost.
    """
    an = _Analysis(module)
    comp, root = kernel_instruction(module)
    flops = trans = 0
    for ins in comp.instructions:
        f, t = an.instruction(comp, ins)
        flops += f
        trans += t
    read = written = 0
    for ins in comp.instructions:
        if ins.opcode in ("parameter", "constant", "after-all"):
            continue
        r, w = _kernel_bytes(an, comp, ins)
        read += r
        written += w
    try:
        matmul = _largest_matmul(an, comp)[1]
    except (KeyError, ValueError, IndexError) as e:
        raise CostError(f"a dot or convolution of the kernel cannot be read as a matmul: "
                        f"{e}") from None
    aligned = [alignment(x) for x in matmul[1:4]]
    relayout = relayout_bytes(module, comp)
    minor = output_minor_dim(root.shape)
    stride = relayout_stride(module, comp)
    reduced, kept = reduce_shape(module, comp)
    return dict(zip(KERNEL_FEATURES, (flops, trans, read, written, root.shape.byte_size(),
                                      *matmul[:4], *aligned, *matmul[4:6], relayout,
                                      minor, alignment(minor),
                                      indexed_slices(module, comp),
                                      touched_bytes(module, comp, an),
                                      stride, alignment(stride, MAX_STRIDE_ALIGN_LOG2),
                                      reduced, kept, alignment(kept, MAX_STRIDE_ALIGN_LOG2),
                                      minor_loop_unrolled(module, comp, root),
                                      alignment(matmul[6], MAX_STRIDE_ALIGN_LOG2),
                                      needed_flops(module, comp, an))))


def computation_cost(module: Module, name: str) -> tuple[int | float, int | float]:
    """(flops, transcendentals) of one computation of a module, summed over
    its instructions (what XLA charges for one run of it)."""
    return _Analysis(module).computation(name)
