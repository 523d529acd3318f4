"""Graph records to batches for the numpy engine (model/infer.py), from
their raw bytes: the arrays are checked and joined per batch rather than
decoded record by record, the way model.data.make_batch does for training.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tpuperf_cli.model.config import minor_tokens
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
_NO_CONFIG_MAP = {}         # stands for a record without config_feat


def _array(v, dtype):
    """(shape, data) of an array map of the given dtype; an exception when
    it is not one."""
    shape, data = v["shape"], v["data"]
    if v["dtype"] != dtype or type(shape) is not list or type(data) is not bytes:
        raise TypeError
    return shape, data


def record_parts(record: Record, kernel_features: int, columns: tuple[int, ...] | None = None) -> tuple | None:
    """What the model reads of a graph record, as raw little-endian bytes:
    (n, m, opcode int32, node_feat f32 (n, 140), edge_index int32 (m, 2),
    kernel_feat f32 (its first kernel_features, or `columns`) ++ config_feat
    f32), or None when the record is not in featurize's exact layout (then
    examples.example reads and checks it). Node features and edges are
    checked per batch (check_parts)."""
    try:
        op_shape, op = _array(record[NODE_OPCODE], "<i4")
        nf_shape, nf = _array(record[NODE_FEAT], "<f4")
        ei_shape, ei = _array(record[EDGE_INDEX], "<i4")
        kf_shape, kf = _array(record[KERNEL_FEAT], "<f4")
        cf = record.get(CONFIG_FEAT, _NO_CONFIG_MAP)
        cf_shape, cf = _array(cf, "<f4") if cf is not _NO_CONFIG_MAP else ([CONFIG_FEATURES], _NO_CONFIG)
    except (KeyError, TypeError, IndexError, ValueError):     # not an array map (or a numpy array)
        return None
    n = len(op) >> 2
    m = len(ei) >> 3
    # a record featurized after the model carries more kernel features: the
    # model reads the first, or its columns (records.KERNEL_FEATURES only grows)
    if columns is not None:
        if len(kf_shape) != 1 or kf_shape[0] <= columns[-1] or len(kf) != 4 * kf_shape[0]:
            return None
        kf_shape, kf = [kernel_features], np.frombuffer(kf, "<f4")[list(columns)].tobytes()
    elif len(kf_shape) == 1 and kf_shape[0] > kernel_features and len(kf) == 4 * kf_shape[0]:
        kf_shape, kf = [kernel_features], kf[:4 * kernel_features]
    if n == 0 or op_shape != [n] or nf_shape != [n, NODE_FEATURES] or len(nf) != n * _ROW_BYTES \
            or kf_shape != [kernel_features] or len(kf) != 4 * kernel_features \
            or cf_shape != [CONFIG_FEATURES] or len(cf) != 4 * CONFIG_FEATURES:
        return None
    if ei_shape != [m, 2] or len(ei) != 8 * m:
        if ei or 0 not in ei_shape:
            return None
        m = 0
    return n, m, op, nf, ei, kf + cf


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
    b.minor = minor_tokens(parts.kc[:, :scaler.kernel_features], scaler.minor_column)
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
