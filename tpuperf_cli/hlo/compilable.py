"""A kernel's standalone module rewritten for timing it: what `measure` compiles.

Optimized HLO is not what XLA's compiler expects as input. Through StableHLO
(the way jaxlib 0.6 compiles), a fusion keeps its body as a region without
the layouts of its instructions, which XLA:CPU then aborts on (a failed
CHECK, not an error), and a bitcast gets the wrong layout attributes. So
`compilable_module`:

* unfuses every fusion: its fused computation's instructions take its place
  (renamed apart; the fused root takes the fusion's name), nested fusions
  too, and XLA's pipeline fuses the plain ops again;
* turns bitcasts into reshapes (after layout assignment a bitcast is a
  reshape that moves no data; values do not matter for timing);
* turns XLA:GPU's cuDNN convolution custom calls back into the plain
  convolutions (with bias and relu) they stand for, which XLA:GPU hands
  to cuDNN again (below: their window and dim_labels do not survive
  StableHLO).

`timing_module` then puts the kernel inside a while loop that runs it `n`
times in one executable call, `n` being a parameter of the executable:

    ENTRY (p0, ..., pk, n) -> R
      while i < n: out = kernel(p0, ..., pk)

The loop carries the inputs through an opt-barrier, so XLA cannot see that
they do not change and hoist the kernel out of the loop; the output slot is
rewritten every trip, so the kernel writes into the same warm buffer each
time, as a kernel does inside a program, instead of a fresh allocation per
call. The time of one trip is then the kernel's own time on the device, with
neither Python nor the PJRT dispatch in it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from tpuperf_cli.hlo import attrs as A
from tpuperf_cli.hlo.cost import scatter_indices
from tpuperf_cli.hlo.ir import Instruction, Shape
from tpuperf_cli.hlo.parser import parse_module
from tpuperf_cli.hlo.split import _closure, _print_computation, _signature

# Names of the computations and instructions the timing loop adds; a kernel
# that already uses one gets a suffix.
_LOOP_NAMES = ("timing.kernel", "timing.body", "timing.cond", "timing.main")


def _inline_fusions(module, comp, taken):
    """comp's instructions with every fusion replaced by the instructions
    of its fused computation, recursively. taken: names in use (updated)."""
    out = []
    for ins in comp.instructions:
        if ins.opcode != "fusion" or not ins.called:
            out.append(ins)
            continue
        fused = module.computations[ins.called[0]]
        inner = _inline_fusions(module, fused, taken)
        root = next((f for f in inner if f.is_root), inner[-1])
        rename = {}
        for f in inner:
            if f.opcode == "parameter":
                rename[f.name] = ins.operands[f.parameter_number]
            elif f is root:
                rename[f.name] = ins.name
            else:
                rename[f.name] = _fresh(f"{f.name}.{ins.name}", taken)
        for f in inner:
            if f.opcode == "parameter":
                continue
            out.append(dataclasses.replace(
                f, name=rename[f.name], operands=[rename.get(o, o) for o in f.operands],
                is_root=ins.is_root and f is root))
    return out


def _plain(ins):
    return dataclasses.replace(ins, opcode="reshape") if ins.opcode == "bitcast" else ins


# ---------------------------------------------------------------- cuDNN
# XLA:GPU's optimized HLO holds convolutions as custom calls to cuDNN whose
# window and dim_labels are HLO attributes StableHLO has no place for:
# compiled alone through StableHLO they lose them, and XLA aborts (every
# one of the GPU corpus's 1,159). They go back to the convolutions they
# stand for, in the form JAX's gradient rules write them (so XLA:GPU's
# conv rewriter makes the same cuDNN call of them again): the forward
# window and dim_labels are the custom call's, the operands (input,
# filter), (output gradient, filter) and (input, output gradient).
_CUDNN = ("__cudnn$convForward", "__cudnn$convBiasActivationForward",
          "__cudnn$convBackwardInput", "__cudnn$convBackwardFilter")


def _dilated(size, dilation):
    return 0 if size == 0 else 1 + dilation * (size - 1)


def _window_text(dims):
    def part(key, fmt, default):
        values = [fmt(d) for d in dims]
        return f" {key}=" + "x".join(values) if any(v != default for v in values) else ""
    return ("{size=" + "x".join(str(d["size"]) for d in dims)
            + part("stride", lambda d: str(d["stride"]), "1")
            + part("pad", lambda d: f"{d['pad_low']}_{d['pad_high']}", "0_0")
            + part("lhs_dilate", lambda d: str(d["lhs_dilate"]), "1")
            + part("rhs_dilate", lambda d: str(d["rhs_dilate"]), "1") + "}")


def _relabel(labels, swap):
    return "".join(swap.get(c, c) for c in labels)


def _spatial_sizes(shape, labels):
    """The sizes of a shape's spatial dims, in the order of their digit."""
    return [shape.dims[labels.index(str(k))] for k in range(sum(c.isdigit() for c in labels))]


def _cudnn_convolution(ins, by_name, taken):
    """The instructions of a plain convolution (and a bias, an activation)
    computing what cuDNN custom call `ins` does, its last the value; None
    for a custom call this cannot express (grouped backward convolutions,
    an activation other than relu)."""
    target = A.string(ins.attrs.get("custom_call_target", ""))
    if ins.opcode != "custom-call" or target not in _CUDNN or not ins.shape.is_tuple:
        return None
    try:
        lhs, rhs, out = A.dim_labels(ins.attrs.get("dim_labels", ""))
    except ValueError:
        return None
    if "window" not in ins.attrs:
        return None
    window = A.window(ins.attrs["window"])
    groups = int(ins.attrs.get("feature_group_count", "1"))
    if int(ins.attrs.get("batch_group_count", "1")) != 1 or any(d["lhs_dilate"] != 1 for d in window):
        return None
    backward = target.startswith("__cudnn$convBackward")
    if backward and any(d["rhs_reversal"] for d in window):
        return None
    result = ins.shape.tuple_shapes[0]
    config = A.backend_config(ins.attrs.get("backend_config"))
    conv_cfg = config.get("cudnn_conv_backend_config", {}) if isinstance(config, dict) else {}
    operands = [by_name[o].shape for o in ins.operands]
    new = []

    def add(name, opcode, shape, ops, literal=None, **attrs):
        new.append(Instruction(_fresh(f"{ins.name}.{name}", taken), opcode, shape, list(ops),
                               attrs=dict(attrs), literal=literal))
        return new[-1].name

    def splat(name, value):
        """A scalar constant broadcast to the result's shape."""
        scalar = Shape(result.element_type, (), text=f"{result.element_type}[]")
        return add(f"{name}.b", "broadcast", result,
                   [add(f"{name}.c", "constant", scalar, [], literal=value)], dimensions="{}")

    extra = {"feature_group_count": str(groups)} if groups != 1 else {}
    if target in ("__cudnn$convForward", "__cudnn$convBiasActivationForward"):
        value = add("conv", "convolution", result, ins.operands[:2], window=ins.attrs["window"],
                    dim_labels=f"{lhs}_{rhs}->{out}", **extra)
        if target.endswith("BiasActivationForward"):
            mode = conv_cfg.get("activation_mode", "kNone")
            if mode not in ("kNone", "kRelu") or len(ins.operands) > 4:
                return None
            scale = float(conv_cfg.get("conv_result_scale", 1))
            if scale != 1:
                value = add("scaled", "multiply", result, [value, splat("scale", repr(scale))])
            if len(ins.operands) > 2:
                bias = add("bias", "broadcast", result, [ins.operands[2]],
                           dimensions="{" + str(out.index("f")) + "}")
                value = add("biased", "add", result, [value, bias])
            side = float(conv_cfg.get("side_input_scale", 0))
            if len(ins.operands) > 3 and side != 0:
                sided = add("side", "multiply", result, [ins.operands[3], splat("side", repr(side))])
                value = add("plus_side", "add", result, [value, sided])
            if mode == "kRelu":
                value = add("relu", "maximum", result, [value, splat("zero", "0")])
        return new
    if groups != 1:
        return None
    if target == "__cudnn$convBackwardInput":
        # the forward input's gradient: conv(dy, reversed filter) with the
        # stride as the input's dilation (jax's _conv_general_vjp_lhs_padding)
        grad, filt = operands
        ins_sizes, outs = _spatial_sizes(result, lhs), _spatial_sizes(grad, out)
        dims = []
        for d, n_in, n_out in zip(window, ins_sizes, outs):
            k = _dilated(d["size"], d["rhs_dilate"])
            lo = k - d["pad_low"] - 1
            dims.append({"size": d["size"], "stride": 1, "pad_low": lo,
                         "pad_high": n_in + k - 1 - _dilated(n_out, d["stride"]) - lo,
                         "lhs_dilate": d["stride"], "rhs_dilate": d["rhs_dilate"]})
        spatial = [str(rhs.index(str(k))) for k in range(len(window))]
        rev = add("reversed", "reverse", filt, [ins.operands[1]],
                  dimensions="{" + ",".join(spatial) + "}")
        add("conv", "convolution", result, [ins.operands[0], rev], window=_window_text(dims),
            dim_labels=f"{out}_{_relabel(rhs, {'i': 'o', 'o': 'i'})}->{lhs}")
        return new
    # __cudnn$convBackwardFilter: the filter's gradient: conv(x, dy) with
    # batch and feature swapped (jax's _conv_general_vjp_rhs_padding)
    x, grad = operands
    ins_sizes, outs = _spatial_sizes(x, lhs), _spatial_sizes(grad, out)
    dims = []
    for d, n_in, n_out in zip(window, ins_sizes, outs):
        k = _dilated(d["size"], d["rhs_dilate"])
        dims.append({"size": n_out, "stride": d["rhs_dilate"], "pad_low": d["pad_low"],
                     "pad_high": _dilated(n_out, d["stride"]) - n_in + k - d["pad_low"] - 1,
                     "lhs_dilate": 1, "rhs_dilate": d["stride"]})
    labels = (f"{_relabel(lhs, {'b': 'f', 'f': 'b'})}_{_relabel(out, {'b': 'i', 'f': 'o'})}"
              f"->{_relabel(rhs, {'i': 'b', 'o': 'f'})}")
    add("conv", "convolution", result, ins.operands, window=_window_text(dims), dim_labels=labels)
    return new


def _plain_convolutions(instructions, taken):
    """instructions with each cuDNN custom call replaced by its plain
    convolution; a get-tuple-element of its value becomes that value, and
    a custom call that is the root leaves its value as the root."""
    by_name = {i.name: i for i in instructions}
    # a call read other than through its element 0 (its value), as a whole
    # or its scratch buffer, stays as it is
    read_whole = {o for i in instructions for o in i.operands
                  if not (i.opcode == "get-tuple-element" and i.attrs.get("index") == "0")}
    out, value_of = [], {}
    for ins in instructions:
        if ins.opcode == "get-tuple-element" and ins.operands[0] in value_of \
                and ins.attrs.get("index") == "0":
            out.append(Instruction(ins.name, "reshape", ins.shape, [value_of[ins.operands[0]]],
                                   is_root=ins.is_root))
            continue
        new = None if ins.name in read_whole else _cudnn_convolution(ins, by_name, taken)
        if new is None:
            out.append(ins)
            continue
        value_of[ins.name] = new[-1].name
        if ins.is_root:
            new[-1] = dataclasses.replace(new[-1], is_root=True)
        out += new
    return out


# Ops an index array passes through unchanged in value on its way from a
# parameter to a gather or scatter.
_INDEX_PASS = {"convert", "reshape", "bitcast", "copy", "broadcast", "slice", "transpose"}


def index_bounds(text: str, filename: str = "<kernel>") -> dict[int, int]:
    """{parameter number: bound} for the kernel's parameters that hold the
    indices of a gather or scatter (directly, or through reshapes,
    converts and the like): any index in [0, bound) keeps every slice in
    bounds in every dimension it indexes (the smallest over the dims and
    the ops that read it). measure draws such indices on an accelerator,
    where all-zero indices would queue a scatter's atomic updates on one
    row."""
    _, instructions, _, _ = _compilable_parts(text, filename)
    by_name = {i.name: i for i in instructions}
    bounds = {}
    for ins in instructions:
        if ins.opcode == "scatter":
            k = scatter_indices(ins)
            operand, updates = by_name[ins.operands[0]].shape, by_name[ins.operands[k + 1]].shape
            dims = A.scatter_dims(ins.attrs)
            windows = iter(dims["update_window_dims"])
            unit = set(dims["inserted_window_dims"]) | set(dims["input_batching_dims"])
            size = {d: 1 if d in unit else updates.dims[next(windows)] for d in range(operand.rank)}
            targets, indices = dims["scatter_dims_to_operand_dims"], ins.operands[k]
        elif ins.opcode == "gather":
            operand = by_name[ins.operands[0]].shape
            dims = A.gather_dims(ins.attrs)
            size = dict(enumerate(dims["slice_sizes"]))
            targets, indices = dims["start_index_map"], ins.operands[1]
        else:
            continue
        if not targets or not operand.is_array:
            continue
        bound = min(operand.dims[d] - size.get(d, 1) + 1 for d in targets)
        source = by_name.get(indices)
        while source is not None and source.operands:
            # jax's take wraps negative indices: select(i < 0, i + n, i)
            step = {"select": 2, "clamp": 1}.get(source.opcode, 0 if source.opcode in _INDEX_PASS else None)
            if step is None:
                break
            source = by_name.get(source.operands[step])
        if source is not None and source.opcode == "parameter" and bound >= 1:
            n = source.parameter_number
            bounds[n] = min(bound, bounds.get(n, bound))
    return bounds


_COPY_RE = re.compile(r"^(\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*[a-z][a-z0-9]*\[[\d,]*\](?:\{[^}]*\})?\s+)copy\(",
                      re.M)


def copies_as_reshapes(text: str) -> str:
    """A module's text with each array `copy` a `reshape` to its own
    shape: the same values, for a jaxlib that cannot take copy through
    StableHLO (measure falls back to this only then)."""
    return _COPY_RE.sub(r"\1reshape(", text)


def _compilable_parts(text, filename):
    """(module, entry instructions, kept computation names, names taken)
    after unfusing."""
    module = parse_module(text, filename)
    taken = {i.name for c in module.computations.values() for i in c.instructions}
    instructions = [_plain(i) for i in _inline_fusions(module, module.entry, taken)]
    instructions = _plain_convolutions(instructions, taken)
    callees = [c for i in instructions for c in i.called]
    return module, instructions, _closure(module, callees), taken


def _print_kept(module, names):
    out = []
    for name in names:
        comp = module.computations[name]
        plain = dataclasses.replace(comp, instructions=[_plain(i) for i in comp.instructions])
        out.append(_print_computation(plain, _same, False))
        out.append("")
    return out


def _same(name):
    return name


def compilable_module(text: str, filename: str = "<kernel>") -> str:
    """A kernel's module that XLA's compile pipeline takes (see the module
    docstring): same work, same shapes. Raises ParseError on bad text."""
    module, instructions, kept, _ = _compilable_parts(text, filename)
    entry = dataclasses.replace(module.entry, instructions=instructions)
    out = [f"HloModule {module.name}", ""] + _print_kept(module, kept)
    out.append(_print_computation(entry, _same, False, entry=True))
    out.append("")
    return "\n".join(out)


def _zeros(shape, name, lines):
    """Instructions making a zero value of `shape` (nested tuples too);
    returns the name of the value."""
    if shape.is_tuple:
        parts = [_zeros(s, f"{name}.{k}", lines) for k, s in enumerate(shape.tuple_shapes)]
        lines.append(f"  %{name} = {shape.text} tuple({', '.join('%' + p for p in parts)})")
    else:
        zero = {"pred": "false", "c64": "(0, 0)", "c128": "(0, 0)"}.get(shape.element_type, "0")
        lines.append(f"  %{name}.z = {shape.element_type}[] constant({zero})")
        lines.append(f"  %{name} = {shape.text} broadcast(%{name}.z), dimensions={{}}")
    return name


def _memory_order(shape):
    """The dims of an array in the order they lie in memory, outermost
    first (its layout's minor_to_major reversed; row-major if none)."""
    m2m = shape.minor_to_major
    if not m2m or len(m2m) != shape.rank:
        return tuple(range(shape.rank))
    return tuple(reversed(m2m))


def _flat(shape):
    return _array(shape.element_type, [shape.num_elements()])


def _array(element_type, dims):
    text = f"{element_type}[{','.join(str(d) for d in dims)}]"
    return Shape(element_type, tuple(dims), text=text)


def _dims_attr(dims):
    return {"dimensions": "{" + ",".join(str(d) for d in dims) + "}"}


def _in_memory_order(name, shape, taken, out):
    """Instructions (appended to out) that lay a value out in memory order
    and flatten it; returns the flat value's name."""
    order = _memory_order(shape)
    if order != tuple(range(shape.rank)):
        moved = _fresh(f"{name}.memory", taken)
        out.append(Instruction(moved, "transpose", _array(shape.element_type,
                                                          [shape.dims[d] for d in order]),
                               [name], attrs=_dims_attr(order)))
        name = moved
    flat = _fresh(f"{name}.flat", taken)
    out.append(Instruction(flat, "reshape", _flat(shape), [name]))
    return flat


def _flat_io(kernel, taken):
    """The kernel with its parameters and results laid out as the loop must
    carry them. Returns the new instructions.

    Through StableHLO layouts are lost, and inside the timing loop the
    compiler chooses the layouts of what the loop carries. Row-major arrays
    stay row-major (the ENTRY's own layout flows into the loop), so a kernel
    whose parameters and results are all row-major is left alone. A
    parameter with another layout arrives as the flat array it is in memory,
    and a reshape and a transpose give back the logical array (free
    bitcasts to the compiler). Then the results leave flat too, in their
    memory order: otherwise the compiler could keep a result in its
    operand's layout and a layout-changing copy or transpose would become a
    memcpy. A rank-1 array has one layout only."""
    out = []
    moved = False
    for ins in kernel.instructions:
        order = _memory_order(ins.shape) if ins.opcode == "parameter" and ins.shape.is_array \
            else ()
        if order == tuple(range(len(order))):
            out.append(dataclasses.replace(ins, is_root=False) if ins.is_root else ins)
            continue
        moved = True
        shape = ins.shape
        flat = _fresh(f"{ins.name}.flat", taken)
        out.append(dataclasses.replace(ins, name=flat, shape=_flat(shape)))
        memname = _fresh(f"{ins.name}.memory", taken)
        out.append(Instruction(memname, "reshape",
                               _array(shape.element_type, [shape.dims[d] for d in order]), [flat]))
        out.append(Instruction(ins.name, "transpose", shape, [memname],
                               attrs=_dims_attr(order.index(i) for i in range(len(order)))))
    root = kernel.root
    leaves = root.shape.tuple_shapes if root.shape.is_tuple else (root.shape,)

    def relaid(shape):
        return shape.is_array and shape.rank >= 2 and (
            moved or _memory_order(shape) != tuple(range(shape.rank)))

    result = root.name
    if root.shape.is_tuple and any(relaid(s) for s in leaves):
        parts = []
        for k, leaf in enumerate(leaves):
            name = _fresh(f"{root.name}.{k}", taken)
            out.append(Instruction(name, "get-tuple-element", leaf, [root.name],
                                   attrs={"index": str(k)}))
            if relaid(leaf):
                name, leaf = _in_memory_order(name, leaf, taken, out), _flat(leaf)
            parts.append((name, leaf))
        text = "(" + ", ".join(s.text for _, s in parts) + ")"
        shape = Shape("tuple", tuple_shapes=tuple(s for _, s in parts), text=text)
        result = _fresh(f"{root.name}.flat", taken)
        out.append(Instruction(result, "tuple", shape, [n for n, _ in parts]))
    elif not root.shape.is_tuple and relaid(root.shape):
        result = _in_memory_order(root.name, root.shape, taken, out)
    return [dataclasses.replace(i, is_root=True) if i.name == result else i for i in out]


def _fresh(name, taken):
    while name in taken:
        name += "_"
    taken.add(name)
    return name


@dataclasses.dataclass
class Looped:
    """A kernel inside its timing loop, as computations to print into a
    module: `lines` (its computations, the loop's entry last, printed as a
    plain computation named `entry` unless it is the module's ENTRY),
    `params` (the kernel's parameter shapes, then n: s32[]) and `result`."""

    lines: list[str]
    entry: str
    params: list[Shape]
    result: Shape


def looped_kernel(text: str, filename: str = "<kernel>", prefix: str = "",
                  as_entry: bool = True) -> Looped:
    """The kernel inside a loop that runs it `n` times (see the module
    docstring), every computation's name prefixed by `prefix` (to put
    several kernels in one module). Raises ParseError on bad text,
    ValueError for a kernel whose result holds a token."""
    module, instructions, kept, taken = _compilable_parts(text, filename)
    names = {n: n for n in _LOOP_NAMES}
    for n in names:
        while names[n] in module.computations:
            names[n] += "_"
    names = {k: prefix + v for k, v in names.items()}

    def cname(name):
        return prefix + name

    kernel = dataclasses.replace(module.entry, instructions=instructions)
    kernel = dataclasses.replace(kernel, name=names["timing.kernel"][len(prefix):],
                                 instructions=_flat_io(kernel, taken))
    params = kernel.parameters
    result = kernel.root.shape
    if any(s.element_type == "token" for s in _all_shapes(result)):
        raise ValueError(f"the kernel's result {result.text} holds a token; it cannot be looped")
    carried = ["s32[]", "s32[]"] + [p.shape.text for p in params] + [result.text]
    state = "(" + ", ".join(carried) + ")"
    out_index = len(carried) - 1

    body = [f"%{names['timing.body']} (s: {state}) -> {state} {{",
            f"  %s = {state} parameter(0)",
            f"  %b = {state} opt-barrier(%s)",
            "  %i = s32[] get-tuple-element(%b), index=0",
            "  %n = s32[] get-tuple-element(%b), index=1",
            "  %one = s32[] constant(1)",
            "  %next = s32[] add(%i, %one)"]
    for k, p in enumerate(params):
        body.append(f"  %a{k} = {p.shape.text} get-tuple-element(%b), index={k + 2}")
    args = ", ".join(f"%a{k}" for k in range(len(params)))
    body.append(f"  %r = {result.text} call({args}), to_apply=%{names['timing.kernel']}")
    passed = ", ".join(["%next", "%n"] + [f"%a{k}" for k in range(len(params))] + ["%r"])
    body += [f"  ROOT %t = {state} tuple({passed})", "}", ""]

    cond = [f"%{names['timing.cond']} (s: {state}) -> pred[] {{",
            f"  %s = {state} parameter(0)",
            "  %i = s32[] get-tuple-element(%s), index=0",
            "  %n = s32[] get-tuple-element(%s), index=1",
            "  ROOT %more = pred[] compare(%i, %n), direction=LT",
            "}", ""]

    trips = Shape("s32", text="s32[]")
    sig = _signature([(f"p{k}", p.shape) for k, p in enumerate(params)] + [("n", trips)], result)
    entry = [f"{'ENTRY ' if as_entry else ''}%{names['timing.main']} {sig} {{"]
    for k, p in enumerate(params):
        entry.append(f"  %p{k} = {p.shape.text} parameter({k})")
    entry.append(f"  %n = s32[] parameter({len(params)})")
    entry.append("  %zero = s32[] constant(0)")
    init_out = _zeros(result, "init.out", entry)
    init = ", ".join(["%zero", "%n"] + [f"%p{k}" for k in range(len(params))] + ["%" + init_out])
    entry += [f"  %init = {state} tuple({init})",
              f"  %w = {state} while(%init), condition=%{names['timing.cond']}, "
              f"body=%{names['timing.body']}",
              f"  ROOT %out = {result.text} get-tuple-element(%w), index={out_index}",
              "}", ""]

    out = []
    for name in kept:
        comp = module.computations[name]
        plain = dataclasses.replace(comp, instructions=[_plain(i) for i in comp.instructions])
        out += [_print_computation(plain, cname, False), ""]
    out += [_print_computation(kernel, cname, False), ""]
    return Looped(out + body + cond + entry, names["timing.main"],
                  [p.shape for p in params] + [trips], result)


def timing_module(text: str, filename: str = "<kernel>") -> str:
    """The kernel inside a loop that runs it `n` times (see the module
    docstring). The ENTRY takes the kernel's parameters, in order, then
    `n: s32[]`, and returns the kernel's result. Raises ParseError on bad
    text, ValueError for a kernel whose result holds a token."""
    module_name = parse_module(text, filename).name
    return "\n".join([f"HloModule {module_name}", ""] + looped_kernel(text, filename).lines)


def bundle_module(kernels: Sequence[Looped]) -> str:
    """One module holding several looped kernels (made by looped_kernel
    with distinct prefixes and as_entry=False): its ENTRY takes every
    kernel's parameters and trip count in turn and returns a tuple of their
    results. Each kernel's loop runs its own n trips, so a call with one
    kernel's n > 0 and the others' 0 times that kernel alone; compiling
    many kernels in one executable pays XLA's per-executable cost once."""
    lines = ["HloModule bundle", ""]
    entry, calls, results = [], [], []
    at = 0
    for k, looped in enumerate(kernels):
        lines += looped.lines
        args = []
        for shape in looped.params:
            entry.append(f"  %q{at} = {shape.text} parameter({at})")
            args.append(f"%q{at}")
            at += 1
        calls.append(f"  %c{k} = {looped.result.text} call({', '.join(args)}), "
                     f"to_apply=%{looped.entry}")
        results.append(looped.result)
    out = "(" + ", ".join(r.text for r in results) + ")"
    params = [(f"q{i}", s) for i, s in enumerate(s for lk in kernels for s in lk.params)]
    lines.append(f"ENTRY %bundle.main {_signature(params, Shape('tuple', text=out))} {{")
    lines += entry + calls
    lines += [f"  ROOT %all = {out} tuple({', '.join(f'%c{k}' for k in range(len(kernels)))})",
              "}", ""]
    return "\n".join(lines)


def _all_shapes(shape):
    yield shape
    for s in shape.tuple_shapes:
        yield from _all_shapes(s)

