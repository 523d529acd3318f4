"""The `fusions` source: fusion kernels drawn from real programs, the
paper's way of getting fusion data.

Each program (an HLO file) is read with its fusion undone: every fusion's
computation, and every `call` XLA's parallel task assigner wraps a kernel in,
is inlined where it is called, so each op stands alone in one flat graph per
computation that runs (entry, while bodies and conditions, conditional
branches). Inlining was chosen over recompiling the program with fusion off
because an HLO file is already optimized and carries no pre-optimization
program to recompile; the inlined graph holds the very ops XLA fused, after
its simplifications, at the program's real shapes.

From those graphs random connected producer-consumer groups of fusible ops
are drawn (elementwise, broadcast, reshape, transpose, slice, reduce,
concatenate, pad, convert, ...; one op to dozens): a group grows from a
random op, mostly up through its producers as XLA's producer-consumer fusion
does, with one output (XLA:CPU makes no multi-output fusions). Each group
becomes a standalone module (its inputs from outside are parameters, small
constants are copied in, its output is the root, layouts are left to XLA),
is compiled by XLA:CPU, and is kept only when the optimized module holds
exactly one kernel: a group XLA would split is not a kernel XLA can emit. The record's hlo is that kernel as XLA
made it (hlo-split's standalone form of the optimized module's one kernel).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.hlo.cost import ELEMENTWISE, TRANSCENDENTAL
from tpuperf_cli.hlo.ir import Instruction, Module
from tpuperf_cli.records import Record

SOURCE_NAME = "fusions"

# Ops a CPU fusion may hold besides the elementwise ones.
SHAPE_OPS = frozenset({
    "broadcast", "reshape", "transpose", "slice", "concatenate", "pad", "reverse", "iota",
    "copy", "bitcast", "dynamic-slice", "reduce",
})
FUSIBLE = ELEMENTWISE | SHAPE_OPS
# Ops XLA counts expensive (instruction_fusion.cc IsExpensive; a reduce too)
# and ops that read an operand's elements many times: XLA fuses no expensive
# producer into such a consumer.
EXPENSIVE = TRANSCENDENTAL | {"reduce", "divide", "remainder", "power", "atan2", "acos", "acosh",
                              "asin", "asinh", "atan", "atanh", "cosh", "sinh"}
REUSES_ELEMENTS = frozenset({"broadcast", "pad", "concatenate", "dynamic-slice"})

# Group sizes: log-uniform from one op to MAX_OPS, so small groups (many
# distinct ones) and large ones (few, but the kernels XLA makes of whole
# layers) both occur.
MAX_OPS = 40
# A group grows to a consumer of its output instead of a producer this
# often: mostly up, as XLA's producer-consumer fusion does. A group keeps one
# output: XLA:CPU makes no multi-output fusions, a group of two outputs is
# two kernels.
GROW_DOWN = 0.2
# A constant whose literal is longer is a parameter instead of copied in.
MAX_LITERAL = 200
# The source ends when this many candidates in a row brought nothing new.
GIVE_UP_AFTER = 3000
LOG_EVERY_S = 10.0

# Attributes left out of a group's module: they describe the program, not
# what the op computes, or name instructions that are not there.
_DROP_ATTRS = frozenset({"metadata", "backend_config", "control-predecessors",
                         "frontend_attributes", "statistics", "origin", "sharding"})
_RE_LAYOUT = re.compile(r"\{[^{}]*\}")


@dataclass
class Graph:
    """One computation of a program with its fusions inlined."""

    program: str                     # the program's name (its file's stem)
    module: Module                   # the program, for the computations ops call
    nodes: dict                      # flat name -> Instruction, in topological order
    users: dict                      # flat name -> names of the nodes that use it
    fusible: list                    # names of the fusible nodes, the groups' ops


def generate(seed: int, programs: Sequence[str],
             log: Callable[[str], None]) -> Iterator[Record]:
    """Kernel records of random fusion groups of the HLO files `programs`
    that XLA:CPU compiles to one kernel, deterministically for a seed (and
    the programs' order). Ends when GIVE_UP_AFTER candidates in a row were
    repeats or rejected; otherwise runs forever."""
    return draw_kernels(seed, programs, log, SOURCE_NAME)


# vary(graph, group, rng) -> (graph, group) with some ops changed, or None
# to skip the group (the `variants` source)
Vary = Callable[[Graph, list, random.Random], "tuple[Graph, list] | None"]


def draw_kernels(seed: int, programs: Sequence[str], log: Callable[[str], None],
                 source: str, vary: Vary | None = None) -> Iterator[Record]:
    """generate() for a source: each group drawn goes through `vary` (when
    given) before it becomes a module; without it the rng is drawn from as
    it always was, so a seed gives the fusions it gave before."""
    from tpuperf_cli.generate import kernel_record

    if not programs:
        raise TpuperfError(f"--source {source}: needs programs (HLO files) to draw from")
    graphs = load_graphs(programs)
    if not graphs:
        raise TpuperfError(f"--source {source}: the programs hold no fusible ops")
    # each program as likely as another, each of its ops as likely as another
    by_program = {}
    for g in graphs:
        by_program.setdefault(g.program, []).append(g)
    names = list(by_program)
    weights = {p: [len(g.fusible) for g in gs] for p, gs in by_program.items()}
    log(f"{source}: {len(names)} programs, {sum(len(g.fusible) for g in graphs)} fusible ops "
        f"to draw groups from")
    rng = random.Random(seed)
    seen = set()                      # digests of candidate modules already compiled
    count = {"tried": 0, "kept": 0, "failed": 0}
    fresh_streak = 0
    t0 = last_log = time.monotonic()
    try:
        while fresh_streak < GIVE_UP_AFTER:
            program = rng.choice(names)
            graph = rng.choices(by_program[program], weights[program])[0]
            size = int(math.exp(rng.uniform(0.0, math.log(MAX_OPS + 1))))
            group = draw_group(graph, rng, size)
            varied = (graph, group) if vary is None else vary(graph, group, rng)
            fresh_streak += 1
            if varied is None:
                continue
            text = group_module(*varied)
            digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
            if digest in seen:
                continue
            seen.add(digest)
            count["tried"] += 1
            record = None
            try:
                optimized = compile_cpu(text)
                if count_kernels(optimized) == 1:
                    record = kernel_record(optimized, source=source,
                                           program=f"{source}:{graph.program}",
                                           origin=graph.program)
            except TpuperfError:
                count["failed"] += 1
            now = time.monotonic()
            if now - last_log >= LOG_EVERY_S:
                last_log = now
                log(progress_line(source, count, now - t0))
            if record is not None:
                count["kept"] += 1
                fresh_streak = 0
                yield record
        log(progress_line(source, count, time.monotonic() - t0)
            + f"; stopped: {GIVE_UP_AFTER} candidates in a row brought no new kernel")
    except GeneratorExit:
        # the driver has what it wanted (--limit): the last figures
        log(progress_line(source, count, time.monotonic() - t0))
        raise


def progress_line(source, count, seconds):
    rate = count["kept"] / seconds if seconds > 0 else 0.0
    share = 100.0 * count["kept"] / count["tried"] if count["tried"] else 0.0
    return (f"{source}: {count['tried']} groups compiled, {count['kept']} kept ({share:.0f}%), "
            f"{count['failed']} failed to compile, {rate:.1f} kernels/s")


# ---------------------------------------------------------------- programs

def load_graphs(paths: Sequence[str]) -> list[Graph]:
    """The flat graphs (fusions inlined) of the computations that run in
    each HLO file (text, plain or zstd, or a proto), those with at least
    one fusible op."""
    from tpuperf_cli.hlo.dump import file_program, read_hlo
    from tpuperf_cli.hlo.parser import parse_module

    graphs = []
    for path in paths:
        module = parse_module(read_hlo(path).text, str(path))
        program = file_program(path)
        for comp in _running_computations(module):
            nodes = flatten(module, comp)
            users = {name: [] for name in nodes}
            for ins in nodes.values():
                for o in dict.fromkeys(ins.operands):
                    users[o].append(ins.name)
            fusible = [n for n, ins in nodes.items() if ins.opcode in FUSIBLE]
            if fusible:
                graphs.append(Graph(program, module, nodes, users, fusible))
    return graphs


def _running_computations(module: Module) -> list:
    """The computations that run as control flow (not inlined): the entry,
    while bodies and conditions, conditional branches, in call order."""
    out, seen = [], set()

    def visit(comp, depth):
        if comp.name in seen or depth > 64:
            return
        seen.add(comp.name)
        out.append(comp)
        for ins in comp.instructions:
            if ins.opcode in ("while", "conditional"):
                for c in ins.called:
                    visit(module.computations[c], depth + 1)
            elif ins.opcode in ("fusion", "call"):
                # inlined, but what runs inside them may run loops
                for c in ins.called:
                    for inner in module.computations[c].instructions:
                        if inner.opcode in ("while", "conditional"):
                            for cc in inner.called:
                                visit(module.computations[cc], depth + 1)

    visit(module.entry, 0)
    return out


def flatten(module: Module, comp) -> dict:
    """The instructions of a computation with every fusion and call inlined
    (flat name -> Instruction, in topological order). Operand names are flat
    names; a get-tuple-element of an inlined tuple is its element."""
    nodes = {}
    tuples = {}                      # flat name of a tuple -> its operands' flat names

    def inline(comp, names, prefix, depth):
        for ins in comp.instructions:
            if prefix and ins.opcode == "parameter":
                continue             # bound by the caller
            ops = [names[o] for o in ins.operands]
            flat = prefix + ins.name
            callee = ins.attrs.get("calls" if ins.opcode == "fusion" else "to_apply", "")
            if ins.opcode in ("fusion", "call") and depth < 16 and callee:
                inner_comp = module.computations[callee.lstrip("%")]
                inner = {p.name: ops[p.parameter_number] for p in inner_comp.parameters}
                inline(inner_comp, inner, flat + ".", depth + 1)
                names[ins.name] = inner[inner_comp.root.name]
                continue
            if ins.opcode == "get-tuple-element" and ops[0] in tuples:
                index = int(ins.attrs.get("index", "0"))
                names[ins.name] = tuples[ops[0]][index]
                continue
            if ins.opcode == "tuple":
                tuples[flat] = ops
            nodes[flat] = Instruction(flat, ins.opcode, ins.shape, ops, ins.attrs,
                                      False, ins.line, ins.parameter_number, ins.literal,
                                      list(ins.called))
            names[ins.name] = flat

    inline(comp, {}, "", 0)
    return nodes


# ---------------------------------------------------------------- groups

def draw_group(graph: Graph, rng: random.Random, size: int) -> list[str]:
    """A connected group of up to `size` fusible ops of a graph with one
    output, in topological order: grown from a random op up through the
    producers of its members and, now and then, down to a consumer of its
    output, avoiding what XLA:CPU would not fuse (see fusible_into and
    recomputes_expensive): about 96% of the groups drawn from the example programs
    compile to one kernel."""
    nodes, users = graph.nodes, graph.users
    refused = set()

    def producers():
        return {o for m in members for o in nodes[m].operands
                if o not in members and o not in refused and fusible_into(nodes[o], nodes[m])}

    def consumers():
        return {u for u in users[root]
                if u not in refused and fusible_into(nodes[root], nodes[u])}

    root = rng.choice(graph.fusible)
    members = {root}
    while len(members) < size:
        down = rng.random() < GROW_DOWN
        options = (consumers() or producers()) if down else (producers() or consumers())
        if not options:
            break
        pick = rng.choice(sorted(options))
        members.add(pick)
        if recomputes_expensive(graph, members):
            members.discard(pick)
            refused.add(pick)
        elif pick in users[root]:
            root = pick
    return [n for n in nodes if n in members]


def fusible_into(producer: Instruction, consumer: Instruction) -> bool:
    """Whether XLA:CPU may fuse a producer into its consumer, as far as one
    edge tells: both are fusible (recomputes_expensive checks the rest)."""
    return producer.opcode in FUSIBLE and consumer.opcode in FUSIBLE


def recomputes_expensive(graph: Graph, members: set) -> bool:
    """Whether a group has an expensive op below which (on its way to the
    output) an op reads elements many times: XLA fuses no expensive producer
    into a fusion that reuses its elements (it would compute each again), so
    it would split the group there."""
    nodes, users = graph.nodes, graph.users
    reused = {}
    for name in reversed([n for n in nodes if n in members]):
        reused[name] = any(u in members and (nodes[u].opcode in REUSES_ELEMENTS or reused[u])
                           for u in users[name])
        if reused[name] and nodes[name].opcode in EXPENSIVE:
            return True
    return False


def group_module(graph: Graph, group: list[str]) -> str:
    """A standalone HloModule of a group: operands from outside are
    parameters (a small constant is copied in instead), the group's ops that
    no other group op uses are the root (a tuple of them when several).
    Layouts are left out, so XLA picks its own as for any new program."""
    from tpuperf_cli.hlo.split import _closure, _print_computation

    nodes = graph.nodes
    members = set(group)
    called = _closure(graph.module, [c for n in group for c in nodes[n].called])
    taken = set()
    for c in called:
        taken.update(graph.module.computations[c].by_name)
    taken.update(called)

    def fresh(base):
        while base in taken:
            base += "_"
        taken.add(base)
        return base

    names = {}
    params, consts = [], []
    for n in group:
        for o in nodes[n].operands:
            if o in members or o in names:
                continue
            src = nodes[o]
            if src.opcode == "constant" and len(src.literal or "") <= MAX_LITERAL:
                names[o] = fresh(f"c{len(consts)}")
                consts.append(f"  %{names[o]} = {_plain(src.shape.text)} constant({src.literal})")
            else:
                names[o] = fresh(f"p{len(params)}")
                params.append((names[o], _plain(src.shape.text)))
    for k, n in enumerate(group):
        names[n] = fresh(f"v{k}")
    used = {o for n in group for o in nodes[n].operands}
    outputs = [n for n in group if n not in used]
    lines = [f"  %{p} = {shape} parameter({k})" for k, (p, shape) in enumerate(params)]
    lines += consts
    for n in group:
        ins = nodes[n]
        opcode, shape = ins.opcode, _plain(ins.shape.text)
        if opcode == "bitcast":
            # a bitcast is a reshape (or transpose) under layouts; without
            # them, the reshape it stands for
            opcode = "reshape"
        head = "ROOT " if len(outputs) == 1 and n == outputs[0] else ""
        parts = [f"  {head}%{names[n]} = {shape} {opcode}("
                 + ", ".join("%" + names[o] for o in ins.operands) + ")"]
        parts += [f"{k}={v}" for k, v in ins.attrs.items() if k not in _DROP_ATTRS]
        lines.append(", ".join(parts))
    if len(outputs) == 1:
        root_shape = _plain(nodes[outputs[0]].shape.text)
    else:
        root_shape = "(" + ", ".join(_plain(nodes[n].shape.text) for n in outputs) + ")"
        lines.append(f"  ROOT %{fresh('out')} = {root_shape} tuple("
                     + ", ".join("%" + names[n] for n in outputs) + ")")
    signature = ", ".join(f"{p}: {shape}" for p, shape in params)
    out = ["HloModule fusion_group", ""]
    for c in called:
        out += [_print_computation(graph.module.computations[c], _same, False), ""]
    out.append(f"ENTRY %main ({signature}) -> {root_shape} {{")
    out += lines
    out.append("}")
    return "\n".join(out) + "\n"


def _same(name):
    return name


def _plain(shape_text):
    return _RE_LAYOUT.sub("", shape_text)


# ---------------------------------------------------------------- compiling

# LLVM's optimization level changes the machine code, not the optimized HLO
# (the same text for 250 groups of 26 example programs), and compiles 2.6x
# faster at 0: the source needs only the HLO.
FAST_COMPILE = {"xla_backend_optimization_level": 0}


def compile_cpu(text: str, name: str = "<fusion group>") -> str:
    """The optimized module XLA:CPU makes of a module's text (at LLVM level
    0: the same HLO, faster)."""
    from tpuperf_cli.hlo.compile import optimize

    return optimize(text, "cpu", name=name, mlir=False, debug_options=FAST_COMPILE)


def count_kernels(optimized: str) -> int:
    """How many kernels an optimized module holds (hlo-split's count)."""
    from tpuperf_cli.hlo.parser import parse_module
    from tpuperf_cli.hlo.split import find_kernels

    return len(find_kernels(parse_module(optimized, "<optimized group>")))
