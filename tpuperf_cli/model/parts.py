"""Graph records to batches for the numpy engine (model/infer.py), from
their raw bytes: the arrays are checked and joined per batch rather than
decoded record by record, the way model.data.make_batch does for training.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tpuperf_cli.records import (
    CONFIG_FEAT,
    CONFIG_FEATURES,
    EDGE_INDEX,
    KERNEL_FEAT,
    NODE_FEAT,
    NODE_FEATURES,
    NODE_OPCODE,
    Record,
)

if TYPE_CHECKING:
    from tpuperf_cli.model.data import Batch
    from tpuperf_cli.model.examples import Example, Scaler


_ROW_BYTES = NODE_FEATURES * 4
_NO_CONFIG = bytes(CONFIG_FEATURES * 4)


def _field(record, key, dtype):
    """The (shape, data) of an array map of the given dtype, else None."""
    v = record.get(key)
    if type(v) is dict and v.get("dtype") == dtype:
        shape, data = v.get("shape"), v.get("data")
        if type(shape) is list and type(data) is bytes:
            return shape, data
    return None


def record_parts(record: Record, kernel_features: int) -> tuple | None:
    """What the model reads of a graph record, as raw little-endian bytes:
    (n, m, opcode int32, node_feat f32 (n, 140), edge_index int32 (m, 2),
    kernel_feat f32 ++ config_feat f32), or None when the record is not in
    featurize's exact layout (then examples.example reads and checks it).
    Node features and edges are checked per batch (check_parts)."""
    op = _field(record, NODE_OPCODE, "<i4")
    nf = _field(record, NODE_FEAT, "<f4")
    ei = _field(record, EDGE_INDEX, "<i4")
    kf = _field(record, KERNEL_FEAT, "<f4")
    if op is None or nf is None or ei is None or kf is None:
        return None
    n = len(op[1]) >> 2
    if n == 0 or op[0] != [n] or nf[0] != [n, NODE_FEATURES] or len(nf[1]) != n * _ROW_BYTES \
            or kf[0] != [kernel_features] or len(kf[1]) != 4 * kernel_features:
        return None
    m = len(ei[1]) >> 3
    if ei[0] != [m, 2] or len(ei[1]) != 8 * m:
        if len(ei[1]) or 0 not in ei[0]:
            return None
        m = 0
    if CONFIG_FEAT in record:
        cf = _field(record, CONFIG_FEAT, "<f4")
        if cf is None or len(cf[1]) != 4 * CONFIG_FEATURES or cf[0] != [CONFIG_FEATURES]:
            return None
        cf = cf[1]
    else:
        cf = _NO_CONFIG
    return n, m, op[1], nf[1], ei[1], kf[1] + cf


def example_parts(ex: Example) -> tuple:
    """record_parts of an examples.Example (a record read the slow way)."""
    edges = np.ascontiguousarray(ex.edges, dtype="<i4").reshape(-1, 2)
    return (ex.n, edges.shape[0], np.ascontiguousarray(ex.opcode, "<i4").tobytes(),
            np.ascontiguousarray(ex.node_feat, "<f4").tobytes(), edges.tobytes(),
            np.concatenate([ex.kernel_feat, ex.config_feat]).astype("<f4").tobytes())


class Parts:
    """A batch's records joined: node rows, edges, per-graph sizes."""

    def __init__(self, parts: list[tuple], kc_width: int):
        b = len(parts)
        self.n_nodes = np.fromiter((p[0] for p in parts), np.int64, b)
        self.m = np.fromiter((p[1] for p in parts), np.int64, b)
        self.opcode = np.frombuffer(b"".join([p[2] for p in parts]), "<i4")
        self.node = np.frombuffer(b"".join([p[3] for p in parts]), "<f4").reshape(-1, NODE_FEATURES)
        self.local_edges = np.frombuffer(b"".join([p[4] for p in parts]), "<i4").reshape(-1, 2)
        self.kc = np.frombuffer(b"".join([p[5] for p in parts]), "<f4").reshape(b, kc_width)

    def first_bad(self) -> int | None:
        """Index of the first graph whose edges point outside it or whose node
        features are not finite, None if all are good."""
        bad = None
        e = self.local_edges
        if e.size:
            limit = np.repeat(self.n_nodes, self.m)
            wrong = (e.min(axis=1) < 0) | (e.max(axis=1) >= limit)
            if wrong.any():
                bad = int(np.searchsorted(np.cumsum(self.m), np.argmax(wrong), side="right"))
        if not np.isfinite(self.node.sum(dtype=np.float64)):
            rows = ~np.isfinite(self.node.sum(axis=1, dtype=np.float64))
            g = int(np.searchsorted(np.cumsum(self.n_nodes), np.argmax(rows), side="right"))
            bad = g if bad is None else min(bad, g)
        return bad


def _slog(x):
    """examples.slog, sign(x) log(1 + |x|), as log of 1 + |x|: numpy's float32
    log is vectorised and log1p is not (3x slower here); the two differ by
    at most one unit in the last place for the integers featurize writes,
    and by under 2e-7 absolute for any value."""
    y = np.abs(x)
    y += 1
    np.log(y, out=y)
    return np.copysign(y, x, out=y)


def parts_batch(parts: Parts, scaler: Scaler, lut: np.ndarray, neighbors: int, sequence: bool = False,
                max_nodes: int = 512, full_x: bool = True) -> Batch:
    """A data.Batch, as data.make_batch builds it from the same graphs (y,
    noise and group left empty); full_x=False keeps only the node columns of x (the
    kernel and config columns are kernel_x repeated), for NumpyNet."""
    from tpuperf_cli.model.data import Batch, _first_per_dst, set_sequences
    from tpuperf_cli.model.examples import Example, topological_order

    b = Batch()
    n_nodes = parts.n_nodes
    b.n_nodes = n_nodes
    offsets = np.r_[0, np.cumsum(n_nodes)[:-1]]
    op = parts.opcode
    b.opcode = lut[np.clip(op, 0, lut.size - 1)] * ((op >= 0) & (op < lut.size))
    nf = NODE_FEATURES
    node = _slog(parts.node)
    node -= scaler.lo[:nf]
    node *= scaler.inv[:nf]
    kc = (_slog(parts.kc) - scaler.lo[nf:]) * scaler.inv[nf:]
    b.kernel_x = kc.astype(np.float32)
    if full_x:
        x = np.empty((node.shape[0], scaler.width), np.float32)
        x[:, :nf] = node
        x[:, nf:] = np.repeat(kc, n_nodes, axis=0)
        b.x = x
    else:
        b.x = node
    e = parts.local_edges.astype(np.int64) + np.repeat(offsets, parts.m)[:, None]
    user, operand = e[:, 0], e[:, 1]
    keep = _first_per_dst(user, neighbors)
    b.in_src, b.in_dst = operand[keep], user[keep]
    keep = _first_per_dst(operand, neighbors)
    b.out_src, b.out_dst = user[keep], operand[keep]
    b.seq_keep = None
    if sequence:
        lengths = np.minimum(n_nodes, max_nodes)
        # featurize writes operands before users (index order is topological);
        # other graphs are sorted as examples.topological_order does
        le = parts.local_edges
        backward = np.repeat(np.arange(len(n_nodes)), parts.m)[le[:, 0] <= le[:, 1]] if le.size \
            else np.zeros(0, np.int64)
        rows = []
        edge_start = np.r_[0, np.cumsum(parts.m)]
        unordered = set(backward.tolist())
        for i in range(len(n_nodes)):
            n = int(n_nodes[i])
            if i in unordered:
                ex = Example(np.zeros(n, np.int64), None, le[edge_start[i]:edge_start[i + 1]], None, None)
                order = topological_order(ex)
            else:
                order = np.arange(n)
            rows.append(order[-max_nodes:] + offsets[i])
        set_sequences(b, rows, lengths)
    b.y = None
    b.noise = None          # measure's noise weighs training losses only
    b.group = None
    return b
