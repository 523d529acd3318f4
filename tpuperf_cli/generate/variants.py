"""The `variants` source: fusion groups drawn from real programs as the
`fusions` source draws them, with their elementwise ops changed.

A corpus's fusions can only hold the ops of the programs it draws from, and
a model then meets other ops first in a program nobody measured: the example
corpus's training programs have no clamp fusion at all, so the held-out
sepconv family's relu6 epilogues (clamp between broadcast 0 and 6) were
predicted 5x off. Here each floating-point elementwise op of a group may
become another of the same arity (add, subtract, multiply, divide, maximum,
minimum; exponential, log, tanh, logistic, sqrt, rsqrt, negate, abs, ...),
and one op's result may be clamped between two broadcast constants as
relu6 is. The group keeps its shapes, layouts and structure (the
transposes, broadcasts and reductions of the real program), so what varies
is the arithmetic. Groups are then compiled and kept as `fusions` keeps
them: only when XLA:CPU makes them one kernel. Records are the pseudo-program
"variants:ORIGIN", ORIGIN the program drawn from.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator, Sequence

from tpuperf_cli.generate.fusions import Graph, draw_kernels
from tpuperf_cli.hlo.ir import Instruction
from tpuperf_cli.hlo.syntax import parse_shape
from tpuperf_cli.records import Record

SOURCE_NAME = "variants"

FLOAT_TYPES = frozenset({"f16", "bf16", "f32", "f64"})
BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum")
UNARY = ("negate", "abs", "exponential", "log", "tanh", "logistic", "sqrt", "rsqrt", "sine",
         "floor", "exponential-minus-one", "log-plus-one")
# Each op that can change does so this often; a group with none changed
# (and no clamp) is drawn again: it would be one of `fusions`' own.
SWAP = 0.5
# A group gets a clamp (relu6's: between broadcast 0 and 6) this often.
CLAMP = 0.5
CLAMP_BOUNDS = ("0", "6")


def generate(seed: int, programs: Sequence[str],
             log: Callable[[str], None]) -> Iterator[Record]:
    """Kernel records of varied fusion groups of the HLO files `programs`
    that XLA:CPU compiles to one kernel, deterministically for a seed."""
    return draw_kernels(seed, programs, log, SOURCE_NAME, vary=vary)


def is_float(ins: Instruction) -> bool:
    return ins.shape.is_array and ins.shape.element_type in FLOAT_TYPES


def vary(graph: Graph, group: list, rng: random.Random) -> tuple[Graph, list] | None:
    """(graph, group) with ops of the group changed: a graph whose nodes
    are the original's but for the changed ones and the clamp's new nodes,
    and the group in topological order with them. None when nothing could
    change (a group of shape ops only)."""
    nodes = dict(graph.nodes)
    group = list(group)
    changed = False
    for name in group:
        ins = nodes[name]
        if not is_float(ins) or not all(is_float(nodes[o]) for o in ins.operands):
            continue
        choices = BINARY if ins.opcode in BINARY else UNARY if ins.opcode in UNARY else ()
        if choices and rng.random() < SWAP:
            opcode = rng.choice([c for c in choices if c != ins.opcode])
            nodes[name] = dataclasses.replace(ins, opcode=opcode)
            changed = True
    floats = [n for n in group if is_float(nodes[n])]
    if floats and rng.random() < CLAMP:
        group = clamp_after(nodes, group, rng.choice(floats))
        changed = True
    if not changed:
        return None
    return dataclasses.replace(graph, nodes=nodes), group


def clamp_after(nodes: dict, group: list, target: str) -> list:
    """Put clamp(broadcast(lo), target, broadcast(hi)) after `target` in
    place: the group's users of target read the clamp instead. Changes
    `nodes` (adds the clamp, its bounds and their scalar constants, and
    copies of the rewired users); returns the new group order."""
    ins = nodes[target]
    scalar = parse_shape(f"{ins.shape.element_type}[]")
    added = []
    for side, literal in zip(("lo", "hi"), CLAMP_BOUNDS):
        const, bound = f"{target}~{side}", f"{target}~{side}.b"
        nodes[const] = Instruction(const, "constant", scalar, [], literal=literal)
        nodes[bound] = Instruction(bound, "broadcast", ins.shape, [const],
                                   {"dimensions": "{}"})
        added.append(bound)
    clamp = f"{target}~clamp"
    nodes[clamp] = Instruction(clamp, "clamp", ins.shape, [added[0], target, added[1]])
    for name in group:
        if target in nodes[name].operands:
            user = nodes[name]
            nodes[name] = dataclasses.replace(
                user, operands=[clamp if o == target else o for o in user.operands])
    k = group.index(target) + 1
    return group[:k] + added + [clamp] + group[k:]
