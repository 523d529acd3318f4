"""Split an HLO module into the kernels the compiler runs.

A kernel is one instruction that does work (a fusion or an unfused op) in
the entry computation, or in a computation the program runs as control flow:
while bodies and conditions, conditional branches, call targets and async
wrapped computations. Parameters, constants, tuples, get-tuple-element,
bitcasts and the control-flow ops themselves (while, conditional, call,
async-start/-update/-done, the -done half of async collectives, ...) are not
kernels. Fused computations, reducers (to_apply), sort comparators and the
computations a custom-call calls belong to their kernel and are not entered.

count is how many times a kernel runs per program run: the product of the
known trip counts of the while loops around it (XLA records them in the
while op's backend_config as known_trip_count; a condition runs trip+1
times). An unknown trip count (or a negative one, which XLA's parser lets
through) counts as 1 and makes count_known false, and so does being inside
a conditional branch (which branch runs is not known: count is then an
upper bound).

Each kernel gets a standalone HloModule text: the kernel instruction in an
entry computation with one parameter per distinct operand (shapes and
layouts, TPU tiling included, kept), plus every computation it calls,
transitively. Its fingerprint is a hash of the same module with names
canonicalised and metadata dropped, so identical kernels share it.
"""

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.hlo import attrs
from tpuperf_cli.hlo.ir import CALL_ATTRS, OPCODES, Computation, Instruction, Module, async_base
from tpuperf_cli.records import KERNEL_RECORD, Record, new_record

_CALL_SET = frozenset(CALL_ATTRS)      # for `in` tests on the hot path

# Instructions that are not kernels: they move no data or only orchestrate.
NOT_KERNELS = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast",
    "while", "conditional", "call", "async-start", "async-update", "async-done",
    "after-all", "add-dependency", "opt-barrier", "domain",
    "all-gather-done", "all-reduce-done", "collective-permute-done", "copy-done",
    "send-done", "recv-done",
})

# Attributes left out of a standalone kernel module: they name instructions
# that are not there.
_DROP_ATTRS = frozenset({"control-predecessors"})
# ... and, in addition, left out of the fingerprint: they do not change what runs.
_DROP_FINGERPRINT = frozenset({"metadata", "frontend_attributes", "statistics", "origin"})

_RE_LAYOUT = re.compile(r"\{[^{}]*\}")


@dataclass
class Kernel:
    """One kernel of a program (see the module docstring)."""

    name: str                 # unique in the program: instr, or "comp/instr" outside ENTRY
    instruction: Instruction
    computation: Computation  # the computation it sits in
    index: int                # order in the program
    count: int                # times run per program run (an upper bound if not count_known)
    count_known: bool

    @property
    def opcode(self) -> str | None:
        return work_opcode(self.instruction)

    @property
    def fusion_kind(self) -> str | None:
        return self.instruction.fusion_kind


def work_opcode(ins: Instruction) -> str | None:
    """The opcode of the work an instruction does as a kernel, or None if it
    is not a kernel. For XLA's async sugar (`negate-start`), the wrapped op."""
    op = ins.opcode
    if op in OPCODES:
        return None if op in NOT_KERNELS else op
    if op.endswith("-start"):
        return async_base(op)
    return None


def _async_sugar(ins):
    return ins.opcode not in OPCODES and ins.opcode.endswith("-start")


def find_kernels(module: Module, warn: Callable[[str], None] | None = None) -> list[Kernel]:
    """The kernels of an ir.Module, in program order (list of Kernel).

    warn(message) is called once for each while loop whose trip count is
    unknown and each conditional (their kernels get count_known False).
    A computation run from several places has its kernels listed once, with
    the counts added up.
    """
    found = {}     # (computation name, instruction name) -> Kernel
    order = []
    comps = module.computations

    def visit(comp, mult, known, depth):
        if depth > 64:
            raise TpuperfError(f"{module.source or '<string>'}:{comp.line}: computations nest "
                               f"deeper than 64 levels at '{comp.name}': not supported")
        for ins in comp.instructions:
            op = ins.opcode
            if op == "while":
                body = comps[ins.attrs["body"].lstrip("%")] if "body" in ins.attrs else None
                cond = comps[ins.attrs["condition"].lstrip("%")] if "condition" in ins.attrs else None
                trip = attrs.known_trip_count(ins.attrs)
                if trip is not None and trip < 0:
                    # XLA's parser takes any int64 here (backend_config is
                    # not checked): the module is valid, the count unknown
                    if warn:
                        warn(f"{_source_line(module, ins)}: while loop '{ins.name}' has a "
                             f"negative known_trip_count ({trip}): counted as unknown, its "
                             f"kernels once (count_known false)")
                elif trip is None and warn:
                    warn(f"{_source_line(module, ins)}: while loop '{ins.name}' has no "
                         f"known_trip_count: its kernels are counted once (count_known false)")
                if trip is None or trip < 0:
                    if cond is not None:
                        visit(cond, mult, False, depth + 1)
                    if body is not None:
                        visit(body, mult, False, depth + 1)
                else:
                    if cond is not None:
                        visit(cond, mult * (trip + 1), known, depth + 1)
                    if body is not None:
                        visit(body, mult * trip, known, depth + 1)
            elif op == "conditional":
                if warn:
                    warn(f"{_source_line(module, ins)}: conditional '{ins.name}': which branch "
                         f"runs is not known; each branch's kernels get count_known false")
                for c in ins.called:
                    visit(comps[c], mult, False, depth + 1)
            elif op in ("call", "async-start"):
                for c in ins.called:
                    visit(comps[c], mult, known, depth + 1)
            elif work_opcode(ins) is not None:
                key = (comp.name, ins.name)
                k = found.get(key)
                if k is None:
                    name = ins.name if comp.is_entry else f"{comp.name}/{ins.name}"
                    k = Kernel(name, ins, comp, len(order), mult, known)
                    found[key] = k
                    order.append(k)
                else:
                    k.count += mult
                    k.count_known = k.count_known and known

    visit(module.entry, 1, True, 0)
    return order


def _source_line(module, ins):
    return f"{module.source or '<string>'}:{ins.line}"


# ---------------------------------------------------------------- standalone HLO

def _closure(module, names):
    """Computations called from `names`, transitively, callees first."""
    out = []
    seen = set()
    comps = module.computations

    def walk(name):
        if name in seen:
            return
        seen.add(name)
        for ins in comps[name].instructions:
            for c in ins.called:
                walk(c)
        out.append(name)

    for n in names:
        walk(n)
    return out


def _signature(params, root_shape):
    ps = ", ".join(f"{p}: {_RE_LAYOUT.sub('', s.text)}" for p, s in params)
    return f"({ps}) -> {_RE_LAYOUT.sub('', root_shape.text)}"


def _print_instruction(ins, iname, cname, normalize, is_root=None, operands=None):
    root = ins.is_root if is_root is None else is_root
    op = ins.opcode
    shape = ins.shape
    if _async_sugar(ins):
        # `negate-start` stands for an async-start wrapping a negate: its
        # kernel is the negate, with the wrapped op's result shape.
        op = async_base(op)
        if shape.is_tuple and len(shape.tuple_shapes) >= 2:
            shape = shape.tuple_shapes[1]
    if op == "constant":
        inner = ins.literal
    elif op == "parameter":
        inner = str(ins.parameter_number)
    else:
        inner = ", ".join("%" + iname(o) for o in (operands or ins.operands))
    parts = [f"{'ROOT ' if root else ''}%{iname(ins.name)} = {shape.text} {op}({inner})"]
    for key, value in ins.attrs.items():
        if key in _DROP_ATTRS or (normalize and key in _DROP_FINGERPRINT):
            continue
        if op is not ins.opcode and key == "async_execution_thread":
            continue
        if key in CALL_ATTRS:
            if value.startswith("{"):
                names = [x.strip().lstrip("%") for x in value[1:-1].split(",") if x.strip()]
                value = "{" + ", ".join("%" + cname(n) for n in names) + "}"
            else:
                value = "%" + cname(value.lstrip("%"))
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def _print_computation(comp, cname, normalize, entry=False):
    if normalize:
        index = {ins.name: f"i{k}" for k, ins in enumerate(comp.instructions)}
        iname = index.__getitem__
    else:
        def iname(n):
            return n
    params = [(iname(p.name), p.shape) for p in comp.parameters]
    root = comp.root
    lines = [f"{'ENTRY ' if entry else ''}%{cname(comp.name)} {_signature(params, root.shape)} {{"]
    for ins in comp.instructions:
        lines.append("  " + _print_instruction(ins, iname, cname, normalize,
                                               is_root=ins is root))
    tail = ", ".join(f"{k}={v}" for k, v in comp.attrs.items()) if not entry else ""
    lines.append("}, " + tail if tail else "}")
    return "\n".join(lines)


def _print_both(comp, cmap):
    """The plain and the normalised text of a computation called by a kernel
    (as _print_computation prints them with cname identity and with cmap),
    in one pass over its instructions."""
    index = {ins.name: f"i{k}" for k, ins in enumerate(comp.instructions)}
    root = comp.root
    params = [p for p in comp.parameters]
    root_text = _RE_LAYOUT.sub("", root.shape.text)
    sig_p = ", ".join(f"{p.name}: {_RE_LAYOUT.sub('', p.shape.text)}" for p in params)
    sig_n = ", ".join(f"{index[p.name]}: {_RE_LAYOUT.sub('', p.shape.text)}" for p in params)
    plain = [f"%{comp.name} ({sig_p}) -> {root_text} {{"]
    norm = [f"%{cmap[comp.name]} ({sig_n}) -> {root_text} {{"]
    call_attrs = _CALL_SET
    drop = _DROP_ATTRS
    drop_fp = _DROP_FINGERPRINT
    for ins in comp.instructions:
        op = ins.opcode
        shape = ins.shape
        sugar = op not in OPCODES and op.endswith("-start")
        if sugar:
            op = async_base(op)
            if shape.is_tuple and len(shape.tuple_shapes) >= 2:
                shape = shape.tuple_shapes[1]
        if op == "constant":
            inner_p = inner_n = ins.literal
        elif op == "parameter":
            inner_p = inner_n = str(ins.parameter_number)
        else:
            ops = ins.operands
            inner_p = ", ".join(["%" + o for o in ops])
            inner_n = ", ".join(["%" + index[o] for o in ops])
        head = "  ROOT %" if ins is root else "  %"
        text = f" = {shape.text} {op}("
        line_p = f"{head}{ins.name}{text}{inner_p})"
        line_n = f"{head}{index[ins.name]}{text}{inner_n})"
        if ins.attrs:
            tail_p = []
            tail_n = []
            for key, value in ins.attrs.items():
                if key in drop or (sugar and key == "async_execution_thread"):
                    continue
                if key in call_attrs:
                    if value.startswith("{"):
                        names = [x.strip().lstrip("%") for x in value[1:-1].split(",") if x.strip()]
                        tail_p.append(f"{key}={{{', '.join('%' + n for n in names)}}}")
                        tail_n.append(f"{key}={{{', '.join('%' + cmap[n] for n in names)}}}")
                    else:
                        name = value.lstrip("%")
                        tail_p.append(f"{key}=%{name}")
                        tail_n.append(f"{key}=%{cmap[name]}")
                    continue
                part = f"{key}={value}"
                tail_p.append(part)
                if key not in drop_fp:
                    tail_n.append(part)
            if tail_p:
                line_p = ", ".join([line_p, *tail_p])
            if tail_n:
                line_n = ", ".join([line_n, *tail_n])
        plain.append(line_p)
        norm.append(line_n)
    tail = ", ".join(f"{k}={v}" for k, v in comp.attrs.items())
    plain.append("}, " + tail if tail else "}")
    norm.append("}, " + tail if tail else "}")
    return "\n".join(plain), "\n".join(norm)


def kernel_texts(module: Module, kernel: Kernel | tuple[Computation, Instruction]) -> tuple[str, str]:
    """(standalone module text, its normalised form) of a Kernel or a
    (computation, instruction) pair: kernel_module(module, kernel) and
    kernel_module(module, kernel, normalize=True), made together."""
    if isinstance(kernel, Kernel):
        comp, ins = kernel.computation, kernel.instruction
    else:
        comp, ins = kernel
    called = _closure(module, ins.called)
    cmap = {n: f"c{k}" for k, n in enumerate(called)}
    entry_name = "main"
    while entry_name in module.computations:
        entry_name += "_kernel"
    distinct = list(dict.fromkeys(ins.operands))       # one parameter per distinct operand
    used = set()
    comps = module.computations
    for c in called:
        used.update(comps[c].by_name)
    out_p = [f"HloModule {_module_name(kernel_label(comp, ins))}", ""]
    out_n = ["HloModule kernel", ""]
    for c in called:
        p, n = _print_both(comps[c], cmap)
        out_p += (p, "")
        out_n += (n, "")
    root_shape = ins.shape
    if _async_sugar(ins) and root_shape.is_tuple and len(root_shape.tuple_shapes) >= 2:
        root_shape = root_shape.tuple_shapes[1]
    for normalize, out in ((False, out_p), (True, out_n)):
        kname = "k" if normalize else ins.name
        pnames = {}
        lines = []
        params = []
        for k, o in enumerate(distinct):
            shape = comp.by_name[o].shape
            p = f"a{k}" if normalize else f"arg.{k}"
            while p == kname or p in used:
                p += "_"
            pnames[o] = p
            if shape.element_type == "token":
                lines.append(f"  %{p} = token[] after-all()")
            else:
                lines.append(f"  %{p} = {shape.text} parameter({len(params)})")
                params.append((p, shape))
        cname = cmap.__getitem__ if normalize else _same
        body = _print_instruction(ins, lambda x: pnames.get(x, kname), cname, normalize,
                                  is_root=True)
        lines.append("  " + body)
        out.append(f"ENTRY %{'main' if normalize else entry_name} {_signature(params, root_shape)} {{")
        out.extend(lines)
        out.append("}")
        out.append("")
    return "\n".join(out_p), "\n".join(out_n)


def _same(name: str) -> str:
    return name


def kernel_module(module: Module, kernel: Kernel | tuple[Computation, Instruction],
                  normalize: bool = False) -> str:
    """A standalone HloModule text for one Kernel (or (computation,
    instruction) pair) that XLA's parser accepts.

    normalize=True gives the canonical form the fingerprint hashes:
    computations c0.., instructions i0.., no metadata.
    """
    return kernel_texts(module, kernel)[1 if normalize else 0]


def kernel_label(comp: Computation, ins: Instruction) -> str:
    return ins.name if comp.is_entry else f"{comp.name}/{ins.name}"


def _module_name(label):
    return re.sub(r"[^\w.\-]", "_", label)


def fingerprint(module: Module, kernel: Kernel, normalized: str | None = None) -> str:
    """Hex digest (32 chars) of the kernel's normalised standalone module
    (normalized: that text, if already made): equal for identical kernels
    whatever their names and metadata."""
    text = normalized if normalized is not None else kernel_module(module, kernel, normalize=True)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def module_fingerprint(text: str, filename: str = "<kernel>") -> str:
    """The fingerprint of a standalone kernel module's text (what `measure`
    keys its cache by). For a module hlo-split wrote it equals the record's
    fingerprint; for a module of several instructions it hashes the whole
    module in the same normalised form. Raises ParseError on bad text."""
    from tpuperf_cli.hlo.parser import parse_module

    module = parse_module(text, filename)
    entry = module.entry
    root = entry.root
    glue = ("parameter", "after-all")
    if root is not None and root.opcode not in glue and all(
            i is root or i.opcode in glue for i in entry.instructions):
        return fingerprint(module, (entry, root))
    names = {n: f"c{k}" for k, n in enumerate(module.computations)}
    body = "\n".join(_print_computation(c, names.__getitem__, True, entry=c.is_entry)
                     for c in module.computations.values())
    return hashlib.blake2b(body.encode(), digest_size=16).hexdigest()


def kernel_records(module: Module, program: str | None = None,
                   warn: Callable[[str], None] | None = None) -> Iterator[Record]:
    """Kernel records (dicts, see the record format) for every kernel of an
    ir.Module, in program order."""
    program = program or module.name
    for k in find_kernels(module, warn=warn):
        hlo, normalized = kernel_texts(module, k)
        yield new_record(
            KERNEL_RECORD,
            program=program,
            kernel=k.name,
            index=k.index,
            count=k.count,
            count_known=k.count_known,
            hlo=hlo,
            opcode=k.opcode,
            fusion_kind=k.fusion_kind,
            fingerprint=fingerprint(module, k, normalized),
            computation=k.computation.name,
        )
