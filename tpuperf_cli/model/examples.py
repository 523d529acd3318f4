"""Graph records -> examples the model reads, and the feature scaling.

Pure numpy (no torch, no DGL), so checking and scaling cost no start-up time
and tests can check them alone.

* `example(record)` checks one graph record and keeps only what the model
  needs (node opcodes, node features, edges, kernel and config features,
  runtime, program, kernel); a record that is not a graph record, or whose
  arrays have the wrong shape, is a StreamError naming it.
* `Scaler` holds the feature scaling learnt from the training data: every
  feature goes through a signed log, x -> sign(x) log(1 + |x|) (shapes,
  byte and flop counts span many orders of magnitude), then min-max to
  [0, 1] with the training minimum and maximum; the log runtime is
  standardised with the training mean and deviation. It also holds the
  opcode vocabulary: ids seen in training keep their embedding row, others
  map to row 0 ("unknown").
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from tpuperf_cli.errors import StreamError, TpuperfError
from tpuperf_cli.model.config import MINOR_FEATURE
from tpuperf_cli.records import (
    CONFIG_FEAT,
    CONFIG_FEATURES,
    COUNT,
    EDGE_INDEX,
    FINGERPRINT,
    GRAPH_ARRAYS,
    HLO,
    KERNEL,
    KERNEL_FEAT,
    KERNEL_FEATURES,
    KERNEL_RECORD,
    NODE_FEAT,
    NODE_FEATURES,
    NODE_OPCODE,
    NOISE,
    PROGRAM,
    TYPE,
    Location,
    Record,
    measured_runtime,
)
from tpuperf_cli.stream import decode_array, is_array

# ---------------------------------------------------------------- examples

class Example:
    """One graph record, reduced to the arrays the model reads."""

    __slots__ = ("opcode", "node_feat", "edges", "kernel_feat", "config_feat",
                 "runtime", "program", "kernel", "order", "noise", "fingerprint", "columns", "count")

    def __init__(self, opcode: np.ndarray, node_feat: np.ndarray, edges: np.ndarray, kernel_feat: np.ndarray,
                 config_feat: np.ndarray, runtime: float = math.nan, program: str = "", kernel: str = ""):
        self.opcode = opcode
        self.node_feat = node_feat
        self.edges = edges
        self.kernel_feat = kernel_feat
        self.config_feat = config_feat
        self.runtime = runtime
        self.program = program
        self.kernel = kernel
        self.order = None      # topological order, computed when a sequence reduction needs it
        self.noise = math.nan  # measure's relative spread of the samples, where it wrote one
        self.fingerprint = None  # hlo-split's hash of the kernel (model.known looks it up)
        # the kernel_feat columns picked for a model reading a selection
        # (pick_kernel_features); None: the record's own, as featurize wrote them
        self.columns = None
        self.count = 1         # times the kernel runs per run of its program (hlo-split's count)

    def cut(self, kernel_features: int, columns: tuple[int, ...] | None = None) -> Example | None:
        """A shallow copy reading only the kernel features a model of
        kernel_features reads (its first ones, or `columns`); None when this
        example lacks them."""
        picked = pick_kernel_features(self, kernel_features, columns)
        if picked is None:
            return None
        out = Example.__new__(Example)
        for name in Example.__slots__:
            setattr(out, name, getattr(self, name))
        out.kernel_feat = picked
        out.columns = columns
        return out

    @property
    def n(self) -> int:
        return self.opcode.shape[0]

    @property
    def group(self) -> tuple[str, str]:
        return (self.program, self.kernel)

    def nbytes(self) -> int:
        return (self.opcode.nbytes + self.node_feat.nbytes + self.edges.nbytes
                + self.kernel_feat.nbytes + self.config_feat.nbytes + 400)


_INTS = frozenset("<i4 <i8 <i2 |i1 <u4 <u2 |u1".split())


def _array(record, field, where, dtype):
    """A record's array field as numpy (a view of the record's bytes when the
    dtype already fits), None when absent."""
    value = record.get(field)
    if value is None:
        return None
    try:
        if type(value) is dict and "data" in value:
            dt = value.get("dtype")
            if dt == dtype or (dtype == "int" and dt in _INTS):
                # fast path: the usual case, no copy
                return np.frombuffer(value["data"], dtype=np.dtype(dt)).reshape(value["shape"])
            a = decode_array(value, field)
        elif is_array(value):
            a = decode_array(value, field)
        else:
            a = np.asarray(value)
        return np.asarray(a, dtype=np.int64 if dtype == "int" else np.dtype(dtype))
    except KeyError as e:
        raise StreamError(f"{where}: field {field!r}: array map lacks {e}") from None
    except (StreamError, TypeError, ValueError) as e:
        raise StreamError(f"{where}: field {field!r}: {e}") from None


def example(record: Record, number: int | None = None, name: str | None = None) -> Example:
    """An Example from a graph record; StreamError naming the record if it is
    not one (a kernel record, with none of the graph fields, gets a hint to
    featurize; a record lacking only some of them is told which)."""
    where = Location(record, number, name)
    if NODE_FEAT not in record or NODE_OPCODE not in record or EDGE_INDEX not in record:
        missing = [f for f in GRAPH_ARRAYS if f not in record]
        if len(missing) == len(GRAPH_ARRAYS) and (record.get(TYPE) == KERNEL_RECORD or HLO in record):
            raise StreamError(f"{where}: no node features (a {record.get(TYPE, '?')} record, "
                              f"not a graph record): run featurize first, e.g. "
                              f"`hlo-split prog.hlo | featurize | predict`")
        raise StreamError(f"{where}: {record.get(TYPE, 'untyped')} record lacks field(s) "
                          f"{', '.join(missing)} (predict and train read graph records "
                          f"written by featurize: {', '.join(GRAPH_ARRAYS)})")
    # found by the fuzz suite: a graph field present but null
    null = [f for f in (NODE_OPCODE, NODE_FEAT, EDGE_INDEX) if record[f] is None]
    if null:
        raise StreamError(f"{where}: field(s) {', '.join(null)} are null, not arrays")
    opcode = _array(record, NODE_OPCODE, where, "int").ravel()
    feat = _array(record, NODE_FEAT, where, "<f4")
    edges = _array(record, EDGE_INDEX, where, "int")
    n = opcode.shape[0]
    if n == 0:
        raise StreamError(f"{where}: graph has no nodes")
    if feat.shape != (n, NODE_FEATURES):
        raise StreamError(f"{where}: node_feat has shape {list(feat.shape)}, expected "
                          f"[{n}, {NODE_FEATURES}] (one row of {NODE_FEATURES} per node)")
    if edges.size == 0:
        edges = np.zeros((0, 2), np.int32)
    elif edges.ndim != 2 or edges.shape[1] != 2:
        raise StreamError(f"{where}: edge_index has shape {list(edges.shape)}, expected [m, 2]")
    elif int(edges.max()) >= n or int(edges.min()) < 0:
        raise StreamError(f"{where}: edge_index refers to node {int(edges.max())} "
                          f"but the graph has {n} nodes")
    if not math.isfinite(float(feat.sum(dtype=np.float64))):
        raise StreamError(f"{where}: node_feat holds NaN or infinite values")
    kf = _array(record, KERNEL_FEAT, where, "<f4")
    kf = np.zeros(0, np.float32) if kf is None else kf.ravel()
    cf = _array(record, CONFIG_FEAT, where, "<f4")
    cf = _NO_CONFIG if cf is None else cf.ravel()
    if cf.size != CONFIG_FEATURES:
        raise StreamError(f"{where}: config_feat has {cf.size} values, expected {CONFIG_FEATURES}")
    rt = measured_runtime(record)
    runtime = math.nan if rt is None else rt
    ex = Example(opcode, feat, edges, kf, cf, runtime,
                 str(record.get(PROGRAM, "")), str(record.get(KERNEL, "")))
    nz = record.get(NOISE)
    if isinstance(nz, (int, float)) and not isinstance(nz, bool) and nz >= 0:
        ex.noise = float(nz)
    fp = record.get(FINGERPRINT)
    if type(fp) is str:
        ex.fingerprint = fp
    count = record.get(COUNT)
    if isinstance(count, int) and not isinstance(count, bool) and count >= 1:
        ex.count = count
    return ex


_NO_CONFIG = np.zeros(CONFIG_FEATURES, np.float32)


def kernel_features_error(ex: Example, expected: int, where: object, record: Record | None = None,
                          why: str = "") -> str | None:
    """The message for an example whose kernel_feat does not have the
    `expected` length (None when it has), e.g. "in.zst: record 4 (p/k):
    expected 5 kernel features in kernel_feat, got 3" + why."""
    got = ex.kernel_feat.size
    if got == expected:
        return None
    what = "none (no kernel_feat field)" if record is not None and record.get(KERNEL_FEAT) is None \
        else str(got)
    hint = ""
    if 0 < got < expected <= len(KERNEL_FEATURES):
        hint = (f" (records featurized before the {', '.join(KERNEL_FEATURES[got:expected])} "
                f"features: run featurize on them again)")
    return f"{where}: expected {expected} kernel features in kernel_feat, got {what}{why}{hint}"


def kernel_columns(spec: str) -> tuple[int, tuple[int, ...] | None]:
    """(how many kernel features, which) a model reads by train's
    --kernel-features SPEC: "N" the first N (0: all of a record's); "N+NAME
    [+NAME...]" the first N and the named ones; "NAME[+NAME...]" only the
    named ones (records.KERNEL_FEATURES' names). The columns are indices in
    kernel_feat order, None where the selection is a first N (a model file
    then says only N, as before selections existed). TpuperfError naming a
    part that is neither a count nor a feature."""
    parts = [p.strip() for p in str(spec).split("+")]
    first = 0
    if parts and parts[0].isdigit():
        first = int(parts.pop(0))
        if first > len(KERNEL_FEATURES):
            raise TpuperfError(f"--kernel-features {spec}: records hold at most {len(KERNEL_FEATURES)} "
                               f"kernel features", exit_code=2)
        if not parts:
            return first, None
    chosen = set(range(first))
    for name in parts:
        if name not in KERNEL_FEATURES:
            raise TpuperfError(f"--kernel-features {spec}: {name!r} is not a kernel feature (a count "
                               f"first, then names joined by '+': {', '.join(KERNEL_FEATURES)})",
                               exit_code=2)
        chosen.add(KERNEL_FEATURES.index(name))
    columns = tuple(sorted(chosen))
    if columns == tuple(range(len(columns))):
        return len(columns), None
    return len(columns), columns


def pick_kernel_features(ex: Example, count: int, columns: tuple[int, ...] | None) -> np.ndarray | None:
    """ex's kernel features as a model of `count` reads them (the first
    `count`, or `columns`), None when ex lacks them. An example already
    picked for these columns is kept as it is; a record's own kernel_feat
    may hold more (KERNEL_FEATURES only grows by appending)."""
    kf = ex.kernel_feat
    if columns is None:
        if ex.columns is None and kf.size >= count:
            return kf if kf.size == count else kf[:count]
        return None
    if ex.columns == columns:
        return kf
    if ex.columns is None and kf.size > columns[-1]:
        return kf[list(columns)]
    return None


def use_kernel_features(ex: Example, expected: int, where: object, record: Record | None = None,
                        why: str = "", columns: tuple[int, ...] | None = None) -> str | None:
    """Fit ex to a model trained with `expected` kernel features (its first
    `expected`, or `columns`); None when it can be, else kernel_features_error's
    message. A record featurized after the model was trained carries more
    (KERNEL_FEATURES only grows by appending): the model reads its own."""
    picked = pick_kernel_features(ex, expected, columns)
    if picked is not None:
        ex.kernel_feat, ex.columns = picked, columns
        return None
    if columns is not None:
        return kernel_features_error(ex, columns[-1] + 1, where, record,
                                     f" (the model reads {KERNEL_FEATURES[columns[-1]]}){why}")
    return kernel_features_error(ex, expected, where, record, why)


def topological_order(ex: Example) -> np.ndarray:
    """Node order with every operand before its users (node index order when
    featurize already wrote them so, as it does for HLO)."""
    if ex.order is not None:
        return ex.order
    n, e = ex.n, ex.edges
    if e.shape[0] == 0 or np.all(e[:, 1] < e[:, 0]):
        ex.order = np.arange(n)
        return ex.order
    users = [[] for _ in range(n)]
    indeg = np.zeros(n, np.int64)
    for u, v in e:
        users[v].append(u)
        indeg[u] += 1
    ready = [i for i in range(n) if indeg[i] == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(order) < n:   # a cycle (not a DAG): keep index order for the rest
        seen = set(order)
        order += [i for i in range(n) if i not in seen]
    ex.order = np.asarray(order, np.int64)
    return ex.order


# ---------------------------------------------------------------- scaling

def slog(x: ArrayLike) -> np.ndarray:
    """sign(x) * log(1 + |x|), elementwise, as a new float32 array."""
    x = np.asarray(x, np.float32)
    y = np.abs(x)
    np.log1p(y, out=y)
    np.copysign(y, x, out=y)
    return y


class Scaler:
    """Min-max scaling of signed-log features, learnt from training data."""

    def __init__(self, kernel_features: int | None = None, floor_ns: float = 0.0,
                 columns: tuple[int, ...] | None = None):
        self.kernel_features = len(columns) if columns else kernel_features
        # the kernel_feat columns read where they are not a first N (kernel_columns)
        self.columns = tuple(columns) if columns else None
        self.floor_ns = floor_ns            # train --label-floor-us: fit max(runtime, floor)
        self.asked = self.kernel_features   # train --kernel-features
        self.lo = None
        self.hi = None
        self.opcodes = set()
        self.log_sum = 0.0
        self.log_sq = 0.0
        self.count = 0
        self.mean = 0.0
        self.std = 1.0
        self._inv = None

    # the feature vector of a node: node_feat ++ kernel_feat ++ config_feat
    @property
    def width(self) -> int:
        return NODE_FEATURES + self.kernel_features + CONFIG_FEATURES

    def update(self, ex: Example, where: object = "record") -> None:
        if self.kernel_features is None:
            self.kernel_features = ex.kernel_feat.size
        if ex.kernel_feat.size != self.kernel_features or ex.columns != self.columns:
            why = (f"; --kernel-features asks for {self.asked}" if self.asked else
                   f"; the records before it have {self.kernel_features}")
            raise StreamError(kernel_features_error(ex, self.kernel_features, where, why=why))
        node = slog(ex.node_feat)
        kc = slog(np.concatenate([ex.kernel_feat, ex.config_feat]))
        lo = np.concatenate([node.min(0), kc])
        hi = np.concatenate([node.max(0), kc])
        if self.lo is None:
            self.lo, self.hi = lo, hi
        else:
            np.minimum(self.lo, lo, out=self.lo)
            np.maximum(self.hi, hi, out=self.hi)
        self.opcodes.update(np.unique(ex.opcode).tolist())
        if ex.runtime > 0:
            v = math.log(max(ex.runtime, self.floor_ns))
            self.log_sum += v
            self.log_sq += v * v
            self.count += 1

    def finish(self) -> Scaler:
        if self.lo is None:
            raise TpuperfError("no training examples: nothing to learn the feature scaling from")
        if self.count:
            self.mean = self.log_sum / self.count
            var = self.log_sq / self.count - self.mean ** 2
            self.std = math.sqrt(var) if var > 1e-12 else 1.0
        self._inv = None
        return self

    @property
    def inv(self) -> np.ndarray:
        if self._inv is None:
            r = (self.hi - self.lo).astype(np.float64)
            self._inv = np.where(r > 1e-12, 1.0 / np.where(r > 1e-12, r, 1.0), 0.0).astype(np.float32)
        return self._inv

    def to_dict(self) -> dict:
        return {"lo": [float(v) for v in self.lo], "hi": [float(v) for v in self.hi],
                "kernel_features": int(self.kernel_features),
                **({"kernel_columns": [KERNEL_FEATURES[i] for i in self.columns]} if self.columns else {}),
                "opcodes": sorted(int(o) for o in self.opcodes),
                "log_runtime_mean": float(self.mean), "log_runtime_std": float(self.std),
                "examples": int(self.count), "transform": "signed-log, then min-max",
                **({"label_floor_ns": self.floor_ns} if self.floor_ns else {})}

    @classmethod
    def from_dict(cls, d: dict) -> Scaler:
        names = d.get("kernel_columns")
        if names is not None:
            unknown = [n for n in names if n not in KERNEL_FEATURES]
            if unknown or len(names) != int(d["kernel_features"]):
                raise ValueError(f"scaling reads kernel features {names}, of which this tpuperf does "
                                 f"not know {unknown}" if unknown else
                                 f"scaling names {len(names)} kernel columns for {d['kernel_features']}")
            s = cls(columns=tuple(sorted(KERNEL_FEATURES.index(n) for n in names)))
        else:
            s = cls(int(d["kernel_features"]))
        s.asked = None
        s.lo = np.asarray(d["lo"], np.float32)
        s.hi = np.asarray(d["hi"], np.float32)
        if s.lo.shape != s.hi.shape or s.lo.size != s.width:
            raise ValueError(f"scaling has {s.lo.size} features, expected {s.width}")
        s.opcodes = set(int(o) for o in d["opcodes"])
        s.mean = float(d["log_runtime_mean"])
        s.std = float(d["log_runtime_std"])
        s.count = int(d.get("examples", 0))   # a resumed run's model file says it as the first did
        s.floor_ns = float(d.get("label_floor_ns", 0.0))
        return s

    def names(self) -> list[str]:
        """The kernel features this scaling reads, by name (KERNEL_FEATURES)."""
        columns = self.columns if self.columns is not None else range(self.kernel_features or 0)
        return [KERNEL_FEATURES[i] if i < len(KERNEL_FEATURES) else f"kernel_feat[{i}]" for i in columns]

    @property
    def minor_column(self) -> int | None:
        """Where output_minor_dim (--minor-embedding's token) lies among the
        kernel features this scaling reads, None where it reads none."""
        if self.columns is None:
            return MINOR_FEATURE if (self.kernel_features or 0) > MINOR_FEATURE else None
        return self.columns.index(MINOR_FEATURE) if MINOR_FEATURE in self.columns else None

    def opcode_table(self, num_opcodes: int) -> np.ndarray:
        """id -> embedding row: ids seen in training map to themselves, others to 0."""
        lut = np.zeros(num_opcodes, np.int64)
        seen = [o for o in self.opcodes if 0 <= o < num_opcodes]
        lut[seen] = seen
        return lut

    def target(self, runtime_ns: ArrayLike) -> np.ndarray:
        return (np.log(np.maximum(runtime_ns, self.floor_ns)) - self.mean) / self.std

    def runtime(self, y: ArrayLike) -> np.ndarray:
        return np.exp(np.asarray(y, np.float64) * self.std + self.mean)
