"""Kernel records -> graph records: the TpuGraphs node/edge/config layout plus
static performance features from our own cost analysis.

Public API (numpy only; no torch, jax or click):

    featurize_kernel(record) -> dict      graph fields for a kernel record
    featurize_module(module, config=None) -> dict
                                          the same for a parsed ir.Module
    kernel_nodes(module) -> (instructions, computation)
                                          the instructions that become nodes
    node_features(instruction) -> list    140 floats (features.nodes)
    config_features(config) -> list       24 floats (features.config)
    opcode_id(name) / opcode_name(id)     TpuGraphs opcode numbering
    KERNEL_FEATURES, NODE_FEATURES (140), CONFIG_FEATURES (24),
    NODE_FEATURE_NAMES, CONFIG_FEATURE_NAMES, NUM_OPCODES

Graph fields (tpuperf_cli.records.GRAPH_FIELDS):

    node_opcode  int32 (n,)       TpuGraphs opcode ids (features.opcodes)
    node_feat    float32 (n, 140) TpuGraphs "Node Features" (features.nodes)
    edge_index   int32 (m, 2)     row [u, v]: node u consumes node v's output
                                  (or v is the root of a computation u calls)
                                  (TpuGraphs convention); one row per
                                  distinct operand, rows ordered by u then v
    kernel_feat  float32 (27,)    KERNEL_FEATURES, from tpuperf_cli.hlo.cost
    config_feat  float32 (24,)    the tile configuration (zeros without one)

Nodes are the instructions of the kernel's computation in topological order:
for a fusion, its fused computation; for an unfused op, the ENTRY
computation of the standalone module (the op's parameters and the op).
Computations a node calls (reducers, scatter combiners, sort comparators,
map and while bodies, nested fusions, ...) are nodes too, as TpuGraphs
encodes a module (features.called): each called computation's instructions
once, just before its first caller, and an edge from each caller to the
called computation's root; is_root marks each computation's root. Their
work also counts in kernel_feat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.features.called import graph_with_called
from tpuperf_cli.features.config import CONFIG_FEATURE_NAMES, config_features
from tpuperf_cli.features.nodes import NODE_FEATURE_NAMES, node_features, node_row_bytes
from tpuperf_cli.features.opcodes import NUM_OPCODES, opcode_id, opcode_name
from tpuperf_cli.records import (
    CONFIG,
    CONFIG_FEAT,
    CONFIG_FEATURES,
    EDGE_INDEX,
    GRAPH_FIELDS,
    HLO,
    KERNEL_FEAT,
    KERNEL_FEATURES,
    NODE_FEAT,
    NODE_FEATURES,
    NODE_OPCODE,
    Record,
)

if TYPE_CHECKING:
    import numpy as np

    from tpuperf_cli.hlo.ir import Computation, Instruction, Module

__all__ = [
    "KERNEL_FEATURES", "NODE_FEATURES", "CONFIG_FEATURES", "NODE_FEATURE_NAMES",
    "CONFIG_FEATURE_NAMES", "NUM_OPCODES", "GRAPH_FIELDS", "FeaturizeError",
    "featurize_kernel", "featurize_module", "kernel_nodes", "node_features",
    "config_features", "opcode_id", "opcode_name",
]


class FeaturizeError(TpuperfError):
    """A kernel that cannot be featurized (bad HLO, unknown shape, ...)."""


def kernel_nodes(module: Module) -> tuple[list[Instruction], Computation]:
    """(instructions, computation): the nodes of a standalone kernel module,
    in topological order (operands before users)."""
    entry = module.entry
    if entry is None or not entry.instructions:
        raise FeaturizeError("the module has no ENTRY computation")
    root = entry.root
    comp = entry
    if root.opcode == "fusion":
        name = root.attrs.get("calls")
        name = name.strip().lstrip("%") if name else (root.called[0] if root.called else None)
        comp = module.computations.get(name) if name else None
        if comp is None:
            raise FeaturizeError(f"fusion '{root.name}' calls computation "
                                 f"'{name}', which is not in the module")
    return _topological(comp), comp


def _topological(comp):
    instrs = comp.instructions
    pos = {}
    ordered = True
    for k, ins in enumerate(instrs):
        for o in ins.operands:
            p = pos.get(o)
            if p is None:
                if o in comp.by_name:
                    ordered = False      # used before it is defined: sort below
                    break
                raise FeaturizeError(f"instruction '{ins.name}' uses '{o}', which is not "
                                     f"defined in computation '{comp.name}'")
        pos[ins.name] = k
        if not ordered:
            break
    if ordered:
        return instrs
    # depth-first post order, keeping the printed order where it is valid
    out = []
    state = {}
    by_name = comp.by_name
    for start in instrs:
        if start.name in state:
            continue
        stack = [(start, 0)]
        state[start.name] = 1
        while stack:
            ins, k = stack.pop()
            if k < len(ins.operands):
                stack.append((ins, k + 1))
                o = ins.operands[k]
                s = state.get(o)
                if s is None:
                    dep = by_name.get(o)
                    if dep is None:
                        raise FeaturizeError(f"instruction '{ins.name}' uses '{o}', which is "
                                             f"not defined in computation '{comp.name}'")
                    state[o] = 1
                    stack.append((dep, 0))
                elif s == 1:
                    raise FeaturizeError(f"computation '{comp.name}' has a cycle through "
                                         f"'{o}'")
            else:
                state[ins.name] = 2
                out.append(ins)
    return out


def featurize_module(module: Module, config: dict | None = None) -> dict[str, np.ndarray]:
    """Graph fields (numpy arrays, see the module docstring) of a parsed
    standalone kernel module. Raises FeaturizeError."""
    import numpy as np

    from tpuperf_cli.hlo.cost import kernel_cost

    kernel, comp = kernel_nodes(module)
    nodes, roots, edges = graph_with_called(module, comp, kernel, _topological, FeaturizeError)
    opcodes = []
    rows = []
    for ins, is_root in zip(nodes, roots):
        opcodes.append(opcode_id(ins.opcode))
        try:
            rows.append(node_row_bytes(ins, is_root))
        except (ValueError, KeyError, IndexError) as e:
            raise FeaturizeError(f"instruction '{ins.name}' ({ins.opcode}): {e}") from None
    try:
        cost = kernel_cost(module)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise FeaturizeError(f"cost analysis: {e}") from None
    try:
        cfg = config_features(config)
    except ValueError as e:
        raise FeaturizeError(str(e)) from None
    return {
        NODE_OPCODE: np.array(opcodes, dtype=np.int32),
        NODE_FEAT: np.frombuffer(bytearray(b"".join(rows)), dtype="<f4").reshape(len(rows), NODE_FEATURES),
        EDGE_INDEX: np.array(edges, dtype=np.int32).reshape(len(edges) // 2, 2),
        KERNEL_FEAT: np.array([cost[k] for k in KERNEL_FEATURES], dtype=np.float32),
        CONFIG_FEAT: np.array(cfg, dtype=np.float32),
    }


_graph_cache = {}      # hlo text -> graph fields but config_feat (tile data repeats a kernel)


def featurize_kernel(record: Record) -> dict[str, np.ndarray]:
    """Graph fields (numpy arrays) for a kernel record: its "hlo" (a
    standalone HloModule) and optional "config". Raises FeaturizeError or
    ParseError (bad HLO).

    Records that repeat the same HLO (one per tile configuration) are
    parsed once (the arrays returned are the caller's own copies).
    """
    from tpuperf_cli.hlo.parser import parse_module

    hlo = record.get(HLO)
    if not isinstance(hlo, str) or not hlo or hlo.isspace():
        raise FeaturizeError("field 'hlo' is missing or not HLO text")
    config = record.get(CONFIG)
    hit = _graph_cache.get(hlo)
    if hit is not None:
        try:
            cfg = config_features(config)
        except ValueError as e:
            raise FeaturizeError(str(e)) from None
        import numpy as np

        fields = {k: v.copy() for k, v in hit.items()}
        fields[CONFIG_FEAT] = np.array(cfg, dtype=np.float32)
        return fields
    try:
        module = parse_module(hlo, "hlo")
        fields = featurize_module(module, config)
    except TpuperfError:
        raise
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, ZeroDivisionError,
            RecursionError) as e:
        # HLO the parser accepted but that is not a well-formed kernel
        raise FeaturizeError(f"cannot featurize: {type(e).__name__}: {e}") from None
    if len(_graph_cache) >= 16:
        _graph_cache.pop(next(iter(_graph_cache)))
    _graph_cache[hlo] = {k: v.copy() for k, v in fields.items() if k != CONFIG_FEAT}
    return fields
