"""Called computations as nodes of the kernel graph.

A reduce-window whose reducer converts bf16 to f32 and back runs about ten
times longer on XLA:CPU than one whose reducer adds f32, yet the calling
node's 140 features are the same. So the computations a node calls
(reducers, scatter combiners, select-and-scatter's select and scatter, sort
comparators, map bodies, while bodies and conditions, conditional branches,
call and custom-call to_apply, nested fusions) join the graph, the way
TpuGraphs encodes a whole module (tpu_graphs/process_data/xla/hlo_encoder.cc):

  - every instruction of a called computation is a node, with its own
    operand edges;
  - the caller gets one edge to the called computation's root (the caller
    consumes it), one per distinct called computation;
  - is_root marks the root of each node's own computation (featurizers.h
    reads it from the parent computation), so a reducer's root has it too;
  - a computation called several times (one reducer for two reduces of a
    fusion) is one set of nodes with an edge from each caller.

Nodes stay in topological order: a called computation's instructions come
just before its first caller, after its own callees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from tpuperf_cli.hlo.ir import Computation, Instruction, Module

# Deeper nesting than this is no HLO XLA writes (a fusion in a fusion in a
# while body is three); it stops a malformed module's runaway recursion.
MAX_CALL_DEPTH = 32


def called_names(ins: Instruction) -> list[str]:
    """Names of the computations ins calls, each once, in printed order."""
    names = ins.called
    if not names:
        name = ins.attrs.get("calls") if ins.opcode == "fusion" else None
        return [name.strip().lstrip("%")] if name else []
    if len(names) == 1:
        return names
    return list(dict.fromkeys(names))


def graph_with_called(module: Module, comp: Computation, nodes: list[Instruction],
                      order: Callable[[Computation], list[Instruction]],
                      error: type[Exception]) -> tuple[list[Instruction], list[bool], list[int]]:
    """(instructions, is_root per instruction, edges) of the kernel graph:
    the kernel computation's `nodes` (topological) with every computation
    they call, transitively, inserted before its first caller.

    `order(computation)` gives a called computation's instructions in
    topological order; `error` is raised for a call to a computation the
    module lacks or a call cycle. edges is flat [u0, v0, u1, v1, ...] with
    node u consuming node v, ordered by u then v, operands and called roots
    alike, each pair once.
    """
    out: list[Instruction] = []
    roots: list[bool] = []
    edges: list[int] = []
    done: dict[str, int] = {}          # computation name -> its root's node index
    active: set[str] = set()           # computations being expanded (cycle check)

    def add(c: Computation, instrs: list[Instruction], depth: int) -> int:
        root = c.root
        index: dict[str, int] = {}
        root_at = -1
        for ins in instrs:
            names = called_names(ins)
            callee_roots = [visit(n, ins, c, depth + 1) for n in names] if names else ()
            u = len(out)
            index[ins.name] = u
            out.append(ins)
            roots.append(ins is root)
            if ins is root:
                root_at = u
            ops = ins.operands
            if len(ops) == 1 and not callee_roots:
                edges.append(u)
                edges.append(index[ops[0]])
            elif ops or callee_roots:
                for v in sorted({index[o] for o in ops}.union(callee_roots)):
                    edges.append(u)
                    edges.append(v)
        return root_at

    def visit(name: str, caller: Instruction, parent: Computation, depth: int) -> int:
        hit = done.get(name)
        if hit is not None:
            return hit
        callee = module.computations.get(name)
        if callee is None or not callee.instructions:
            raise error(f"'{caller.name}' ({caller.opcode}) in computation '{parent.name}' "
                        f"calls computation '{name}', which is not in the module")
        if name in active:
            raise error(f"computation '{name}' calls itself (through '{caller.name}')")
        if depth > MAX_CALL_DEPTH:
            raise error(f"'{caller.name}' calls computation '{name}' more than "
                        f"{MAX_CALL_DEPTH} calls deep")
        active.add(name)
        at = add(callee, order(callee), depth)
        active.discard(name)
        done[name] = at
        return at

    active.add(comp.name)
    add(comp, nodes, 0)
    return out, roots, edges
