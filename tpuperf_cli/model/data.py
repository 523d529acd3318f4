"""Data for the model: graph records -> examples -> scaled numpy batches.

Pure numpy (no torch, no DGL), so batching and scaling cost no start-up time
and tests can check them alone.

* `example(record)` checks one graph record and keeps only what the model
  needs (node opcodes, node features, edges, kernel and config features,
  runtime, program, kernel).
* `Scaler` holds the feature scaling learnt from the training data: every
  feature goes through a signed log, x -> sign(x) log(1 + |x|) (shapes,
  byte and flop counts span many orders of magnitude), then min-max to
  [0, 1] with the training minimum and maximum; the log runtime is
  standardised with the training mean and deviation. It also holds the
  opcode vocabulary: ids seen in training keep their embedding row, others
  map to row 0 ("unknown").
* `make_batch(examples, scaler, ...)` concatenates many small graphs into
  one numpy batch (node rows, offset edges, truncated neighbour lists,
  positions for the sequence reductions).
* `Corpus` reads shards (plain or zstd record streams, many files): one
  pass learns the scaling and counts each program's examples; each epoch
  then draws examples evenly across programs. When the decoded examples fit
  the memory budget they stay in memory; otherwise every epoch streams the
  shards again through a bounded shuffle buffer, so a corpus larger than
  memory trains in bounded memory.
"""

import glob
import math
import os
from collections import Counter

import numpy as np

from tpuperf_cli.errors import StreamError, TpuperfError
from tpuperf_cli.stream import decode_array, is_array, read_records

NODE_FEATURES = 140
CONFIG_FEATURES = 24
GRAPH_FIELDS = ("node_opcode", "node_feat", "edge_index")


# ---------------------------------------------------------------- examples

class Example:
    """One graph record, reduced to the arrays the model reads."""

    __slots__ = ("opcode", "node_feat", "edges", "kernel_feat", "config_feat",
                 "runtime", "program", "kernel", "order")

    def __init__(self, opcode, node_feat, edges, kernel_feat, config_feat,
                 runtime=math.nan, program="", kernel=""):
        self.opcode = opcode
        self.node_feat = node_feat
        self.edges = edges
        self.kernel_feat = kernel_feat
        self.config_feat = config_feat
        self.runtime = runtime
        self.program = program
        self.kernel = kernel
        self.order = None      # topological order, computed when a sequence reduction needs it

    @property
    def n(self):
        return self.opcode.shape[0]

    @property
    def group(self):
        return (self.program, self.kernel)

    def nbytes(self):
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


def where_of(record, number=None, name=None):
    at = f"{name or 'input'}: record {number}" if number is not None else "record"
    prog, kern = record.get("program"), record.get("kernel")
    return f"{at} ({prog}/{kern})" if prog or kern else at


class _Where:
    """The record's description, built only when an error needs it."""

    __slots__ = ("record", "number", "name")

    def __init__(self, record, number, name):
        self.record, self.number, self.name = record, number, name

    def __str__(self):
        return where_of(self.record, self.number, self.name)

    def __format__(self, spec):
        return format(str(self), spec)


def example(record, number=None, name=None):
    """An Example from a graph record; StreamError naming the record if it is
    not one (a kernel record, with none of the graph fields, gets a hint to
    featurize; a record lacking only some of them is told which)."""
    where = _Where(record, number, name)
    if "node_feat" not in record or "node_opcode" not in record or "edge_index" not in record:
        missing = [f for f in GRAPH_FIELDS if f not in record]
        if len(missing) == len(GRAPH_FIELDS) and (record.get("type") == "kernel" or "hlo" in record):
            raise StreamError(f"{where}: no node features (a {record.get('type', '?')} record, "
                              f"not a graph record): run featurize first, e.g. "
                              f"`hlo-split prog.hlo | featurize | predict`")
        raise StreamError(f"{where}: {record.get('type', 'untyped')} record lacks field(s) "
                          f"{', '.join(missing)} (predict and train read graph records "
                          f"written by featurize: {', '.join(GRAPH_FIELDS)})")
    opcode = _array(record, "node_opcode", where, "int").ravel()
    feat = _array(record, "node_feat", where, "<f4")
    edges = _array(record, "edge_index", where, "int")
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
    kf = _array(record, "kernel_feat", where, "<f4")
    kf = np.zeros(0, np.float32) if kf is None else kf.ravel()
    cf = _array(record, "config_feat", where, "<f4")
    cf = _NO_CONFIG if cf is None else cf.ravel()
    if cf.size != CONFIG_FEATURES:
        raise StreamError(f"{where}: config_feat has {cf.size} values, expected {CONFIG_FEATURES}")
    rt = record.get("runtime_ns")
    runtime = float(rt) if isinstance(rt, (int, float)) and not isinstance(rt, bool) else math.nan
    return Example(opcode, feat, edges, kf, cf, runtime,
                   str(record.get("program", "")), str(record.get("kernel", "")))


_NO_CONFIG = np.zeros(CONFIG_FEATURES, np.float32)


def kernel_features_error(ex, expected, where, record=None, why=""):
    """The message for an example whose kernel_feat does not have the
    `expected` length (None when it has), e.g. "in.zst: record 4 (p/k):
    expected 5 kernel features in kernel_feat, got 3" + why."""
    got = ex.kernel_feat.size
    if got == expected:
        return None
    what = "none (no kernel_feat field)" if record is not None and record.get("kernel_feat") is None \
        else str(got)
    return f"{where}: expected {expected} kernel features in kernel_feat, got {what}{why}"


def topological_order(ex):
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

def slog(x):
    """sign(x) * log(1 + |x|), elementwise, as a new float32 array."""
    x = np.asarray(x, np.float32)
    y = np.abs(x)
    np.log1p(y, out=y)
    np.copysign(y, x, out=y)
    return y


class Scaler:
    """Min-max scaling of signed-log features, learnt from training data."""

    def __init__(self, kernel_features=None):
        self.kernel_features = kernel_features
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
    def width(self):
        return NODE_FEATURES + self.kernel_features + CONFIG_FEATURES

    def update(self, ex, where="record"):
        if self.kernel_features is None:
            self.kernel_features = ex.kernel_feat.size
        if ex.kernel_feat.size != self.kernel_features:
            raise StreamError(kernel_features_error(ex, self.kernel_features, where,
                                                    why=f"; the records before it have {self.kernel_features}"))
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
            v = math.log(ex.runtime)
            self.log_sum += v
            self.log_sq += v * v
            self.count += 1

    def finish(self):
        if self.lo is None:
            raise TpuperfError("no training examples: nothing to learn the feature scaling from")
        if self.count:
            self.mean = self.log_sum / self.count
            var = self.log_sq / self.count - self.mean ** 2
            self.std = math.sqrt(var) if var > 1e-12 else 1.0
        self._inv = None
        return self

    @property
    def inv(self):
        if self._inv is None:
            r = (self.hi - self.lo).astype(np.float64)
            self._inv = np.where(r > 1e-12, 1.0 / np.where(r > 1e-12, r, 1.0), 0.0).astype(np.float32)
        return self._inv

    def to_dict(self):
        return {"lo": [float(v) for v in self.lo], "hi": [float(v) for v in self.hi],
                "kernel_features": int(self.kernel_features),
                "opcodes": sorted(int(o) for o in self.opcodes),
                "log_runtime_mean": float(self.mean), "log_runtime_std": float(self.std),
                "examples": int(self.count), "transform": "signed-log, then min-max"}

    @classmethod
    def from_dict(cls, d):
        s = cls(int(d["kernel_features"]))
        s.lo = np.asarray(d["lo"], np.float32)
        s.hi = np.asarray(d["hi"], np.float32)
        if s.lo.shape != s.hi.shape or s.lo.size != s.width:
            raise ValueError(f"scaling has {s.lo.size} features, expected {s.width}")
        s.opcodes = set(int(o) for o in d["opcodes"])
        s.mean = float(d["log_runtime_mean"])
        s.std = float(d["log_runtime_std"])
        return s

    def opcode_table(self, num_opcodes):
        """id -> embedding row: ids seen in training map to themselves, others to 0."""
        lut = np.zeros(num_opcodes, np.int64)
        seen = [o for o in self.opcodes if 0 <= o < num_opcodes]
        lut[seen] = seen
        return lut

    def target(self, runtime_ns):
        return (np.log(runtime_ns) - self.mean) / self.std

    def runtime(self, y):
        return np.exp(np.asarray(y, np.float64) * self.std + self.mean)


# ---------------------------------------------------------------- batches

class Batch:
    """Many graphs as one: node rows concatenated, edges offset."""

    __slots__ = ("opcode", "x", "kernel_x", "n_nodes", "in_src", "in_dst", "out_src", "out_dst",
                 "seq_keep", "seq_graph", "seq_pos", "seq_len", "seq_lengths", "y", "group")

    def __len__(self):
        return self.n_nodes.shape[0]


def _first_per_dst(dst, k):
    """Mask keeping, for each destination, its first k edges (in edge order)."""
    if dst.size == 0:
        return np.zeros(0, bool)
    order = np.argsort(dst, kind="stable")
    d = dst[order]
    start = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    sizes = np.diff(np.r_[start, d.size])
    rank = np.arange(d.size) - np.repeat(start, sizes)
    keep = np.zeros(d.size, bool)
    keep[order[rank < k]] = True
    return keep


def make_batch(examples, scaler, lut, neighbors=20, sequence=False, max_nodes=512, groups=None):
    """A Batch of examples: features scaled, opcode ids mapped through lut,
    neighbour lists truncated to `neighbors` per node and direction; with
    sequence=True also the positions of each graph's last `max_nodes` nodes
    in topological order (for the LSTM and Transformer reductions)."""
    b = Batch()
    n_nodes = np.fromiter((ex.n for ex in examples), np.int64, len(examples))
    offsets = np.r_[0, np.cumsum(n_nodes)[:-1]]
    b.n_nodes = n_nodes
    op = np.concatenate([ex.opcode for ex in examples])
    b.opcode = lut[np.clip(op, 0, lut.size - 1)] * ((op >= 0) & (op < lut.size))

    nf = NODE_FEATURES
    x = np.empty((int(n_nodes.sum()), scaler.width), np.float32)
    node = np.concatenate([ex.node_feat for ex in examples])
    node = slog(node)
    node -= scaler.lo[:nf]
    node *= scaler.inv[:nf]
    x[:, :nf] = node
    kc = np.stack([np.concatenate([ex.kernel_feat, ex.config_feat]) for ex in examples])
    kc = (slog(kc) - scaler.lo[nf:]) * scaler.inv[nf:]
    x[:, nf:] = np.repeat(kc, n_nodes, axis=0)
    b.x = x
    b.kernel_x = kc.astype(np.float32)                # (B, kernel + config features)

    m = np.fromiter((ex.edges.shape[0] for ex in examples), np.int64, len(examples))
    if m.sum():
        e = np.concatenate([ex.edges for ex in examples]) + np.repeat(offsets, m)[:, None]
    else:
        e = np.zeros((0, 2), np.int64)
    user, operand = e[:, 0], e[:, 1]
    keep = _first_per_dst(user, neighbors)            # operands -> user, data direction
    b.in_src, b.in_dst = operand[keep], user[keep]
    keep = _first_per_dst(operand, neighbors)         # users -> operand
    b.out_src, b.out_dst = user[keep], operand[keep]

    b.seq_keep = None
    if sequence:
        rows, graph, pos = [], [], []
        lengths = np.minimum(n_nodes, max_nodes)
        for i, ex in enumerate(examples):
            order = topological_order(ex)[-max_nodes:]
            rows.append(order + offsets[i])
        b.seq_keep = np.concatenate(rows)
        b.seq_graph = np.repeat(np.arange(len(examples)), lengths)
        starts = np.r_[0, np.cumsum(lengths)[:-1]]
        b.seq_pos = np.arange(b.seq_keep.size) - np.repeat(starts, lengths)
        b.seq_len = int(lengths.max())
        b.seq_lengths = lengths
    rt = np.fromiter((ex.runtime for ex in examples), np.float64, len(examples))
    with np.errstate(invalid="ignore", divide="ignore"):
        b.y = np.where(rt > 0, scaler.target(np.where(rt > 0, rt, 1.0)), np.nan).astype(np.float32)
    b.group = groups
    return b


# ---------------------------------------------------------------- shards

def expand(patterns, what="--data"):
    """Paths of shards from file names and glob patterns, in order, once each."""
    paths, seen = [], set()
    for pat in patterns:
        found = sorted(glob.glob(os.path.expanduser(pat))) if glob.has_magic(pat) else [pat]
        if not found:
            raise TpuperfError(f"{what} {pat}: no files match")
        for p in found:
            if os.path.isdir(p):
                raise TpuperfError(f"{what} {p}: is a directory (give files, e.g. {p}/*.zst)")
            if not os.path.exists(p):
                raise TpuperfError(f"{what} {p}: no such file")
            if p not in seen:
                seen.add(p)
                paths.append(p)
    return paths


def target_key(target):
    if not isinstance(target, dict):
        return None
    return (target.get("platform"), target.get("device_kind"), target.get("chip"))


class Corpus:
    """Graph records from shards, as examples for training or evaluation.

    programs: keep only records of these programs (a split), or None for all.
    task: "fusion" (items are examples) or "tile" (items are a kernel's
    configurations, up to `configs` of them drawn per epoch).
    memory_mb: budget for decoded examples kept in memory; a corpus larger
    than that is streamed from the shards every epoch instead.
    """

    def __init__(self, paths, programs=None, task="fusion", memory_mb=2048,
                 configs=16, interleave=4, shuffle_items=4096):
        self.paths = list(paths)
        self.programs = set(programs) if programs is not None else None
        self.task = task
        self.budget = int(memory_mb * (1 << 20))
        self.configs = configs
        self.interleave = interleave
        self.shuffle_items = shuffle_items
        self.cache = None          # path -> [Example] when everything fits
        self.sizes = Counter()     # program -> items (examples, or kernels for tile)
        self.examples = 0
        self.skipped = Counter()   # why records were left out
        self.targets = Counter()
        self.target_dicts = {}
        self.nbytes = 0

    # -------------------------------------------------------- one pass
    def _records(self, path):
        name = path
        for number, record in enumerate(read_records(path), 1):
            if self.programs is not None and str(record.get("program", "")) not in self.programs:
                continue
            rt = record.get("runtime_ns")
            if not isinstance(rt, (int, float)) or isinstance(rt, bool) or not rt > 0:
                yield None, record, number, name
                continue
            yield example(record, number, name), record, number, name

    def scan(self, scaler=None, kernel_features=None):
        """The first pass: fit scaler (if given), count programs, cache if it
        fits. kernel_features: the kernel_feat length every example must
        have (that of a scaling learnt before), StreamError otherwise."""
        cache = {}
        keep = True
        groups = {}
        for path in self.paths:
            kept = []
            for ex, record, number, name in self._records(path):
                if ex is None:
                    self.skipped["no runtime_ns (unmeasured or failed)"] += 1
                    continue
                if scaler is not None:
                    scaler.update(ex, where_of(record, number, name))
                elif kernel_features is not None and ex.kernel_feat.size != kernel_features:
                    raise StreamError(kernel_features_error(
                        ex, kernel_features, where_of(record, number, name), record,
                        f"; the training data has {kernel_features}"))
                self.examples += 1
                key = target_key(record.get("target"))
                if key is not None:
                    self.targets[key] += 1
                    self.target_dicts.setdefault(key, record["target"])
                if self.task == "tile":
                    groups.setdefault(ex.program, set()).add(ex.kernel)
                else:
                    self.sizes[ex.program] += 1
                if keep:
                    self.nbytes += ex.nbytes()
                    if self.nbytes > self.budget:
                        keep = False
                        cache = None
                    else:
                        kept.append(ex)
            if keep:
                cache[path] = kept
        if self.task == "tile":
            self.sizes = Counter({p: len(k) for p, k in groups.items()})
        self.cache = cache if keep else None
        return self

    @property
    def streaming(self):
        return self.cache is None

    def target(self):
        """The most common measurement target of the records, or None."""
        if not self.targets:
            return None
        return self.target_dicts[self.targets.most_common(1)[0][0]]

    # -------------------------------------------------------- reading
    def _examples(self, path):
        if self.cache is not None:
            yield from self.cache[path]
            return
        for ex, *_ in self._records(path):
            if ex is not None:
                yield ex

    def iter_examples(self):
        """Every example once, in shard order (for evaluation)."""
        for path in self.paths:
            yield from self._examples(path)

    def _items(self, paths, rng):
        """Fusion: examples; tile: lists of one kernel's configurations (at
        most `configs`, a random subset when there are more). Shards are
        read `interleave` at a time, round robin."""
        streams = [self._examples(p) for p in paths]
        active = list(range(min(self.interleave, len(streams))))
        pending = len(active)
        tile = self.task == "tile"
        open_groups = {}            # key -> [seen, reservoir]
        while active:
            nxt = []
            for s in active:
                ex = next(streams[s], None)
                if ex is None:
                    if pending < len(streams):
                        nxt.append(pending)
                        pending += 1
                    if tile:
                        # groups never span shards: close this shard's groups
                        for key in [k for k in open_groups if k[0] == s]:
                            yield open_groups.pop(key)[1]
                    continue
                nxt.append(s)
                if not tile:
                    yield ex
                    continue
                key = (s, ex.group)
                g = open_groups.get(key)
                if g is None:
                    g = open_groups[key] = [0, []]
                    if len(open_groups) > 256 and self.cache is None:
                        oldest = next(iter(open_groups))
                        yield open_groups.pop(oldest)[1]
                g[0] += 1
                if len(g[1]) < self.configs or self.cache is not None:
                    g[1].append(ex)
                else:   # reservoir sampling keeps memory bounded
                    j = rng.integers(g[0])
                    if j < self.configs:
                        g[1][j] = ex
            active = nxt
        for g in open_groups.values():
            yield g[1]

    def epoch(self, rng, even=True):
        """The items of one training epoch, shuffled. With even=True every
        program contributes the same expected number of items (small
        programs are repeated, large ones subsampled)."""
        sizes = self.sizes
        if not sizes:
            return
        quota = sum(sizes.values()) / len(sizes)
        paths = [self.paths[i] for i in rng.permutation(len(self.paths))]
        cap = None if self.cache is not None else max(64, self.shuffle_items)
        buffer = []
        for item in self._items(paths, rng):
            if self.task == "tile":
                if len(item) < 2:
                    continue
                if len(item) > self.configs:
                    item = [item[i] for i in rng.choice(len(item), self.configs, replace=False)]
                program = item[0].program
            else:
                program = item.program
            rate = quota / sizes[program] if even else 1.0
            copies = int(rate) + (rng.random() < rate - int(rate))
            for _ in range(copies):
                buffer.append(item)
                if cap is not None and len(buffer) >= cap:
                    j = rng.integers(len(buffer))
                    buffer[j], buffer[-1] = buffer[-1], buffer[j]
                    yield buffer.pop()
        for j in rng.permutation(len(buffer)):
            yield buffer[j]

    def batches(self, rng, batch_size, even=True):
        """Lists of examples for one epoch (tile: whole kernels per batch, and
        the group id of each example)."""
        batch, groups = [], []
        for item in self.epoch(rng, even):
            if self.task == "tile":
                groups.extend([groups[-1] + 1 if groups else 0] * len(item))
                batch.extend(item)
            else:
                batch.append(item)
            if len(batch) >= batch_size:
                yield batch, (np.asarray(groups) if groups else None)
                batch, groups = [], []
        if batch:
            yield batch, (np.asarray(groups) if groups else None)


# ---------------------------------------------------------------- synthetic data

def synthetic_records(n_programs=4, kernels=30, seed=0, configs=0, nodes=(3, 12),
                      kernel_features=5, target=None):
    """Random graph records in the exact record format, with a runtime that
    depends on their features (for tests and benchmarks, not for training a
    real model).

    Each kernel is a random DAG of node ops; node_feat column 0 plays the
    part of an output size. runtime = 2 us + sum over nodes of a per-opcode
    cost x size. With configs > 0 every kernel appears `configs` times with a
    different tile config_feat (column 0 = tile size) and a runtime that
    depends on it (best tile grows with the kernel's node count), for the
    tile task.
    """
    from tpuperf_cli.stream import new_record

    rng = np.random.default_rng(seed)
    cost = {2: 1.0, 34: 6.0, 41: 3.0, 63: 0.1, 70: 2.0, 13: 0.5}
    ops = np.array(sorted(cost))
    out = []
    for p in range(n_programs):
        program = f"synth{p}"
        for k in range(kernels):
            n = int(rng.integers(nodes[0], nodes[1] + 1))
            opcode = rng.choice(ops, n).astype(np.int32)
            feat = np.zeros((n, NODE_FEATURES), np.float32)
            size = rng.uniform(1, 64, n).round().astype(np.float32) ** 2
            feat[:, 0] = size
            feat[:, 1:8] = rng.uniform(0, 4, (n, 7)).round()
            edges = [(i, int(rng.integers(0, i))) for i in range(1, n)]
            edges += [(i, int(rng.integers(0, i))) for i in range(2, n) if rng.random() < 0.3]
            edge_index = np.asarray(edges, np.int32).reshape(-1, 2)
            work = float(sum(cost[int(o)] * s for o, s in zip(opcode, size)))
            kfeat = np.asarray([work * 10, 0, size.sum() * 4, size[-1] * 4, size[-1] * 4][:kernel_features],
                               np.float32)
            base = dict(program=program, kernel=f"fusion.{k}", index=k, count=int(rng.integers(1, 3)),
                        count_known=True, opcode="fusion", fusion_kind="kLoop",
                        fingerprint=f"{p:04x}{k:04x}", computation="main",
                        node_opcode=opcode, node_feat=feat, edge_index=edge_index,
                        kernel_feat=kfeat)
            if target is not None:
                base["target"] = target
            noise = float(np.exp(rng.normal(0, 0.02)))
            if configs:
                best = float(2 ** min(4, 1 + n // 3))    # larger kernels like larger tiles
                for c in range(configs):
                    tile = float(2 ** (c % 6))
                    cf = np.zeros(CONFIG_FEATURES, np.float32)
                    cf[0] = tile
                    cf[6] = tile
                    penalty = 1 + abs(math.log2(tile) - math.log2(best))
                    out.append(new_record("graph", **base, config={"kernel_bounds": [tile]},
                                          config_feat=cf, config_index=c,
                                          runtime_ns=(2000 + work) * penalty * noise))
            else:
                out.append(new_record("graph", **base, config_feat=np.zeros(CONFIG_FEATURES, np.float32),
                                      runtime_ns=(2000 + work) * noise))
    return out
