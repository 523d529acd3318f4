"""Gradient-boosted trees: the second kind of model (`train --learner gbdt`).

The trees read one row per kernel, pooled from the same scaled batch the
network reads (data.make_batch, or parts.parts_batch in predict): the
kernel features; the sum, mean and max of each node feature over the
kernel's nodes; how many nodes have each opcode; the node and edge counts.
They predict the standardised log runtime, as the network does, so a tree
model is a Model like any other: the same scaling, file format (version
3), choice by target and prediction paths.

LightGBM fits them (an optional extra: pip install 'tpuperf[gbdt]'), and
the fitted trees are stored as flat arrays walked here, in numpy for the
first few million (row, tree) pairs of a model, then by a loop numba
compiles (eight rows down a tree at once), so that predict needs neither
LightGBM nor torch to run a tree model and a small input pays no compile.

A tree in the arrays: internal nodes hold a feature index, a threshold
(go left when the feature's value <= threshold) and two children; a child
>= 0 is an internal node (global index), a child < 0 the leaf ~child.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.records import NODE_FEATURES

LEARNER = "gbdt"
SIZE_FEATURES = 5           # kernel_feat's flops, transcendentals, bytes read and written, output bytes
TREE_ARRAYS = ("roots", "feature", "threshold", "left", "right", "leaf_value")


def _num_opcodes():
    from tpuperf_cli.features.opcodes import NUM_OPCODES

    return NUM_OPCODES


@dataclass
class TreeConfig:
    """What a tree model's file says of it (its `config`). The batch fields
    (num_opcodes, in_features, neighbors, reduction, max_nodes) are those
    predict.Model reads of any model's config."""

    learner: str = LEARNER
    num_opcodes: int = field(default_factory=_num_opcodes)
    in_features: int = 0          # scaled features per node, as the network's
    neighbors: int = 20           # edges kept per node and direction (the edge count reads them)
    reduction: str = "pooled"     # sum, mean and max of the nodes: no sequence
    max_nodes: int = 512
    trees: int = 0                # trees kept (the best validation round's)
    leaves: int = 31              # at most this many leaves a tree
    lr: float = 0.03              # shrinkage of each tree

    @classmethod
    def from_dict(cls, d: dict) -> TreeConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown tree setting(s): {', '.join(sorted(unknown))}")
        if d.get("learner") != LEARNER:
            raise ValueError(f"learner {d.get('learner')!r} is not {LEARNER!r}")
        return cls(**d)


def is_tree_config(config: object) -> bool:
    return isinstance(config, dict) and config.get("learner") == LEARNER


def row_width(in_features: int, num_opcodes: int) -> int:
    """Features of pooled_rows' rows for nodes of in_features scaled features."""
    return (in_features - NODE_FEATURES) + 3 * NODE_FEATURES + num_opcodes + 2


def pooled_rows(b, num_opcodes: int) -> np.ndarray:
    """One row per graph of a data.Batch (see the module docstring), float32
    (LightGBM bins them; training and prediction see the same values)."""
    n = b.n_nodes
    graphs = n.size
    starts = np.r_[0, np.cumsum(n)[:-1]]
    node = b.x[:, :NODE_FEATURES].astype(np.float64)
    total = np.add.reduceat(node, starts, axis=0) if graphs else np.zeros((0, NODE_FEATURES))
    top = np.maximum.reduceat(node, starts, axis=0) if graphs else np.zeros((0, NODE_FEATURES))
    graph_of = np.repeat(np.arange(graphs), n)
    counts = np.bincount(graph_of * num_opcodes + np.clip(b.opcode, 0, num_opcodes - 1),
                         minlength=graphs * num_opcodes).reshape(graphs, num_opcodes)
    edges = np.bincount(graph_of[b.in_dst], minlength=graphs) if b.in_dst.size else np.zeros(graphs)
    rows = np.concatenate([b.kernel_x.astype(np.float64), total, total / n[:, None], top, counts,
                           n[:, None], edges[:, None]], axis=1)
    return rows.astype(np.float32)


class TreeNet:
    """The trees of a model file, walked in numpy, then compiled; called on a data.Batch
    like a network, it returns the standardised log runtime per graph."""

    engine = "numpy"

    def __init__(self, cfg: TreeConfig, arrays: dict):
        self.cfg = cfg
        self.beyond = 0         # graphs predicted so far that were larger than the training data's
        self.walked = 0         # (row, tree) walks so far in numpy (predict_rows)
        self._lanes = None      # lane_arrays, made on the first compiled walk
        try:
            self.roots = np.asarray(arrays["roots"], np.int64).reshape(-1)
            self.feature = np.asarray(arrays["feature"], np.int64).reshape(-1)
            self.threshold = np.asarray(arrays["threshold"], np.float64).reshape(-1)
            self.left = np.asarray(arrays["left"], np.int64).reshape(-1)
            self.right = np.asarray(arrays["right"], np.int64).reshape(-1)
            self.leaf_value = np.asarray(arrays["leaf_value"], np.float64).reshape(-1)
        except KeyError as e:
            raise ValueError(f"tree arrays lack {e.args[0]!r}") from None
        inner, leaves = self.feature.size, self.leaf_value.size
        if not (self.threshold.size == self.left.size == self.right.size == inner):
            raise ValueError("tree arrays of unequal lengths")
        children = np.concatenate([self.roots, self.left, self.right])
        if children.size and (children.max() >= inner or (~children[children < 0]).max(initial=-1) >= leaves):
            raise ValueError("a tree points past its nodes")
        # nodes are stored parent first (from_lightgbm), so a walk always ends
        down = np.arange(inner)
        if ((self.left >= 0) & (self.left <= down)).any() or ((self.right >= 0) & (self.right <= down)).any():
            raise ValueError("a tree points back up")
        if inner and (self.feature.min() < 0
                      or self.feature.max() >= row_width(cfg.in_features, cfg.num_opcodes)):
            raise ValueError("a split on a feature the rows do not have")

    def eval(self) -> TreeNet:
        return self

    def arrays(self) -> dict:
        """The trees as a model file stores them (TREE_ARRAYS)."""
        return {"roots": self.roots.astype(np.int32), "feature": self.feature.astype(np.int32),
                "threshold": self.threshold, "left": self.left.astype(np.int32),
                "right": self.right.astype(np.int32), "leaf_value": self.leaf_value}

    def __call__(self, b) -> np.ndarray:
        # kernels larger than any in training (a size feature past its
        # scaled maximum, 1): trees predict them as the largest they know
        sizes = b.kernel_x[:, :SIZE_FEATURES]
        self.beyond += int((sizes > 1.0 + 1e-6).any(axis=1).sum()) if sizes.size else 0
        return self.predict_rows(pooled_rows(b, self.cfg.num_opcodes))

    def predict_rows(self, rows: np.ndarray) -> np.ndarray:
        if rows.shape[1] <= (self.feature.max() if self.feature.size else -1):
            raise ValueError(f"rows of {rows.shape[1]} features; the trees read "
                             f"{self.feature.max() + 1}")
        rows = np.ascontiguousarray(rows, np.float32 if rows.dtype == np.float32 else np.float64)
        # numba's import and first call (0.25 to 0.74 s, even with its cache
        # on disk) would double the time of a program's few hundred kernels:
        # numpy walks until its walks would pass about that much time
        work = rows.shape[0] * self.roots.size
        arrays = (self.roots, self.feature, self.threshold, self.left, self.right, self.leaf_value)
        if self.walked + work <= COMPILE_AFTER:
            self.walked += work
            return _numpy_walk(rows, *arrays)
        walk = _compiled_walk()
        if walk is _numpy_walk:     # numba missing
            return walk(rows, *arrays)
        if self._lanes is None:
            self._lanes = lane_arrays(*arrays)
        roots, feature, threshold32, threshold64, child, value, leaves_from = self._lanes
        threshold = threshold32 if rows.dtype == np.float32 else threshold64
        return walk(rows, roots, feature, threshold, child, value, leaves_from)


COMPILE_AFTER = 3_000_000   # (row, tree) walks in numpy per TreeNet (about 0.5 s) before compiling


def _numpy_walk(rows, roots, feature, threshold, left, right, leaf_value):
    """The sum over trees of the leaf each row reaches, in numpy: every
    (row, tree) walks down a level at a time, and those that reach a leaf
    leave the arrays, so each level costs only the walks still going."""
    n, width = rows.shape
    flat = rows.astype(np.float64).ravel()
    children = np.stack([left, right], axis=1).ravel()      # node i's at 2i and 2i + 1
    out = np.zeros(n, np.float64)
    for start in range(0, roots.size, 256):      # bounded memory: rows x 256 trees
        some = roots[start:start + 256]
        node = np.tile(some, n)
        base = np.repeat(np.arange(n, dtype=np.int64) * width, some.size)
        slot = np.arange(node.size)
        leaf = np.empty(node.size, np.int64)
        while True:
            done = node < 0
            if done.any():
                leaf[slot[done]] = ~node[done]
                going = ~done
                node, base, slot = node[going], base[going], slot[going]
            if not node.size:
                break
            go_right = flat[base + feature[node]] > threshold[node]
            node = children[2 * node + go_right]
        out += leaf_value[leaf].reshape(n, some.size).sum(axis=1)
    return out


def lane_arrays(roots, feature, threshold, left, right, leaf_value):
    """The trees as _lane_walk reads them: each leaf a node of its own past
    the internal ones (node >= leaves_from), whose two children are itself
    and whose threshold lets every value through, so a finished walk can go
    on stepping in place; node i's children at 2i (value <= threshold) and
    2i + 1; each node's value (0 but at leaves). The thresholds twice: as
    stored, for float64 rows, and rounded down to float32, for float32 rows
    (x <= t and x <= the largest float32 not above t agree for every float32
    x, so the walk and LightGBM still agree bit for bit)."""
    inner, nodes = feature.size, feature.size + leaf_value.size
    leaves = np.arange(inner, nodes, dtype=np.int32)

    def node_index(c):
        return np.where(c >= 0, c, inner + ~c).astype(np.int32)

    child = np.empty(2 * nodes, np.int32)
    child[0:2 * inner:2], child[1:2 * inner:2] = node_index(left), node_index(right)
    child[2 * inner::2] = child[2 * inner + 1::2] = leaves
    threshold64 = np.concatenate([threshold, np.full(leaves.size, np.inf)])
    with np.errstate(over="ignore"):       # beyond float32's range: to +-inf, then down
        threshold32 = threshold64.astype(np.float32)
    above = threshold32.astype(np.float64) > threshold64
    threshold32[above] = np.nextafter(threshold32[above], np.float32(-np.inf))
    value = np.concatenate([np.zeros(inner), leaf_value])
    return (node_index(roots), np.concatenate([feature, np.zeros(leaves.size, feature.dtype)]).astype(np.int32),
            threshold32, threshold64, child, value, inner)


LANE_BLOCK = 64     # rows walked by every tree in turn (64 rows of ~600 float32 stay in L2)


def _lane_walk(rows, roots, feature, threshold, child, value, leaves_from):
    """The sum over trees of the leaf each row reaches, compiled by numba.
    A walk is a chain of dependent loads (node, feature, value, child), so
    walking one (row, tree) at a time leaves the core waiting on each; here
    eight rows walk one tree together, each in a variable of its own (a
    numba loop over an array of eight kept them in memory, 1.7x slower), so
    their chains overlap. Every lane steps until all eight stand on a leaf
    (leaves step in place: lane_arrays). 2.2x to 2.7x the one-at-a-time
    loop on the bundled GPU model's trees, 1.8x on the random split's
    1,993 (benchmarks/bench_trees.py, README "Speed"), though the eight
    take as many steps as the deepest of them (11.1 a walk there, against
    7.8 alone). A value above the threshold
    goes right, the rest left, NaN too, as in _numpy_walk (LightGBM sends
    NaN by the split's missing type; pooled rows hold none)."""
    n = rows.shape[0]
    out = np.zeros(n, np.float64)
    for start in range(0, n, LANE_BLOCK):
        stop = min(n, start + LANE_BLOCK)
        for t in range(roots.shape[0]):
            root = np.int64(roots[t])
            r = start
            while r + 8 <= stop:
                a = b = c = d = e = f = g = h = root
                while (a < leaves_from or b < leaves_from or c < leaves_from or d < leaves_from
                       or e < leaves_from or f < leaves_from or g < leaves_from or h < leaves_from):
                    a = np.int64(child[2 * a + np.int64(rows[r, feature[a]] > threshold[a])])
                    b = np.int64(child[2 * b + np.int64(rows[r + 1, feature[b]] > threshold[b])])
                    c = np.int64(child[2 * c + np.int64(rows[r + 2, feature[c]] > threshold[c])])
                    d = np.int64(child[2 * d + np.int64(rows[r + 3, feature[d]] > threshold[d])])
                    e = np.int64(child[2 * e + np.int64(rows[r + 4, feature[e]] > threshold[e])])
                    f = np.int64(child[2 * f + np.int64(rows[r + 5, feature[f]] > threshold[f])])
                    g = np.int64(child[2 * g + np.int64(rows[r + 6, feature[g]] > threshold[g])])
                    h = np.int64(child[2 * h + np.int64(rows[r + 7, feature[h]] > threshold[h])])
                out[r] += value[a]
                out[r + 1] += value[b]
                out[r + 2] += value[c]
                out[r + 3] += value[d]
                out[r + 4] += value[e]
                out[r + 5] += value[f]
                out[r + 6] += value[g]
                out[r + 7] += value[h]
                r += 8
            for last in range(r, stop):    # the block's last rows, one at a time
                a = root
                while a < leaves_from:
                    a = np.int64(child[2 * a + np.int64(rows[last, feature[a]] > threshold[a])])
                out[last] += value[a]
    return out


_compiled = []


def _compiled_walk():
    """_lane_walk compiled by numba, once per process (cached on disk beside
    this module, or in numba's user cache where that is not writable);
    _numpy_walk where numba is missing."""
    if not _compiled:
        try:
            import numba
        except ImportError:         # a dependency; without it, slower but the same
            _compiled.append(_numpy_walk)
        else:
            try:
                walk = numba.njit(cache=True, nogil=True)(_lane_walk)
            except RuntimeError:    # nowhere writable to cache: compile each process
                walk = numba.njit(nogil=True)(_lane_walk)
            _compiled.append(walk)
    return _compiled[0]


# ---------------------------------------------------------------- fitting

def from_lightgbm(booster, num_iteration: int | None = None) -> dict:
    """The flat arrays (TREE_ARRAYS) of a LightGBM booster's first
    num_iteration trees. Refuses splits these arrays cannot say
    (categorical ones, or missing values other than NaN)."""
    dump = booster.dump_model(num_iteration=num_iteration)
    roots, feature, threshold, left, right, leaf_value = [], [], [], [], [], []

    def walk(node):
        if "leaf_value" in node and "split_feature" not in node:
            leaf_value.append(float(node["leaf_value"]))
            return ~(len(leaf_value) - 1)
        if node.get("decision_type") != "<=":
            raise TpuperfError(f"gbdt: a {node.get('decision_type')!r} split (only numeric <= "
                               f"splits are stored)")
        if node.get("missing_type") not in ("None", "NaN"):
            raise TpuperfError(f"gbdt: a split with missing type {node.get('missing_type')!r}")
        i = len(feature)
        feature.append(int(node["split_feature"]))
        threshold.append(float(node["threshold"]))
        left.append(0)
        right.append(0)
        left[i] = walk(node["left_child"])
        right[i] = walk(node["right_child"])
        return i

    for tree in dump["tree_info"]:
        roots.append(walk(tree["tree_structure"]))
    return {"roots": np.asarray(roots, np.int32), "feature": np.asarray(feature, np.int32),
            "threshold": np.asarray(threshold, np.float64), "left": np.asarray(left, np.int32),
            "right": np.asarray(right, np.int32), "leaf_value": np.asarray(leaf_value, np.float64)}


@dataclass
class TreeOptions:
    trees: int = 2000        # at most this many boosting rounds
    leaves: int = 31
    lr: float = 0.03
    patience: int = 50       # rounds without a better validation loss before stopping
    min_leaf: int = 10       # min_data_in_leaf
    threads: int = 1
    seed: int = 0


def lightgbm_module():
    try:
        import lightgbm
    except ImportError:
        raise TpuperfError("--learner gbdt needs LightGBM: pip install 'tpuperf[gbdt]' "
                           "(in a checkout: .venv/bin/pip install -e '.[gbdt]')", exit_code=2) from None
    return lightgbm


def rows_and_targets(examples: Sequence, scaler, lut: np.ndarray, neighbors: int,
                     num_opcodes: int, chunk: int = 1024):
    """(rows, standardised log runtimes, programs) of examples, a chunk of
    batches at a time."""
    from tpuperf_cli.model.data import make_batch

    rows, ys, programs = [], [], []
    batch = []

    def flush():
        b = make_batch(batch, scaler, lut, neighbors)
        rows.append(pooled_rows(b, num_opcodes))
        ys.append(b.y.astype(np.float64))
        programs.extend(ex.program for ex in batch)
        batch.clear()

    for ex in examples:
        batch.append(ex)
        if len(batch) >= chunk:
            flush()
    if batch:
        flush()
    if not rows:
        return np.zeros((0, 0), np.float32), np.zeros(0), []
    return np.concatenate(rows), np.concatenate(ys), programs


def fit(train_rows, train_y, weights, valid_rows, valid_y, opts: TreeOptions,
        progress: Callable[[str], None], max_time: float = 0.0):
    """A LightGBM booster on log runtime (L2), stopped after opts.patience
    rounds without a better validation loss (or at max_time seconds), and
    the number of rounds to keep (the best one's)."""
    import time

    lightgbm = lightgbm_module()
    params = {"objective": "regression", "learning_rate": opts.lr, "num_leaves": opts.leaves,
              "min_data_in_leaf": opts.min_leaf, "bagging_fraction": 0.8, "bagging_freq": 1,
              "feature_fraction": 0.5, "num_threads": opts.threads, "seed": opts.seed,
              "deterministic": True, "force_row_wise": True, "verbose": -1}
    data = lightgbm.Dataset(train_rows, train_y, weight=weights, free_raw_data=True)
    sets, names = [], []
    if valid_rows is not None and len(valid_rows):
        sets, names = [lightgbm.Dataset(valid_rows, valid_y, reference=data)], ["valid"]
    best = {"round": 0, "loss": float("inf")}
    t0 = time.time()

    def watch(env):
        rnd = env.iteration + 1
        loss = env.evaluation_result_list[0][2] if env.evaluation_result_list else None
        if loss is not None and loss < best["loss"]:
            best.update(round=rnd, loss=loss)
        if rnd % 100 == 0 or rnd == 1:
            progress(f"trees {rnd:5d}/{opts.trees}" + (f"  valid loss {loss:.4f} (best {best['loss']:.4f} "
                                                       f"at {best['round']})" if loss is not None else "")
                     + f"  {time.time() - t0:.0f}s")
        stop = loss is not None and rnd - best["round"] >= opts.patience
        if stop or (max_time and time.time() - t0 >= max_time):
            best["stopped"] = (f"no better validation loss for {opts.patience} trees" if stop
                               else f"time limit of {max_time:.0f}s")
            raise lightgbm.callback.EarlyStopException(best["round"] or rnd, env.evaluation_result_list)

    booster = lightgbm.train(params, data, num_boost_round=opts.trees, valid_sets=sets,
                             valid_names=names, callbacks=[watch])
    keep = best["round"] if sets else booster.current_iteration()
    return booster, keep, best.get("stopped", "trees")


def joined_arrays(first: dict, then: dict) -> dict:
    """The trees of `first` followed by those of `then`, as one model's
    arrays: their predictions add up."""
    inner, leaves = first["feature"].size, first["leaf_value"].size

    def moved(child):
        child = np.asarray(child, np.int64)
        return np.where(child >= 0, child + inner, child - leaves).astype(np.int32)

    return {"roots": np.concatenate([first["roots"], moved(then["roots"])]).astype(np.int32),
            "feature": np.concatenate([first["feature"], then["feature"]]).astype(np.int32),
            "threshold": np.concatenate([first["threshold"], then["threshold"]]),
            "left": np.concatenate([first["left"], moved(then["left"])]).astype(np.int32),
            "right": np.concatenate([first["right"], moved(then["right"])]).astype(np.int32),
            "leaf_value": np.concatenate([first["leaf_value"], then["leaf_value"]])}


BOOST = TreeOptions(trees=1000, leaves=15, lr=0.05, patience=30, min_leaf=20)


def boost(model, fit_examples: Sequence, valid_examples: Sequence, progress: Callable[[str], None],
          seconds: float = 0.0, threads: int = 1, seed: int = 0):
    """calibrate's method for a tree model: more trees, fitted to what the
    model gets wrong on fit_examples (the log runtime it predicts, in its
    own scaling, against the one measured), stopped on valid_examples,
    appended to its trees. Returns (the model, changed in place; the
    number of trees added)."""
    from dataclasses import replace

    net = model.net
    cfg = net.cfg
    # records featurized after the model carry more kernel features than it
    # reads (the bundled GPU trees read fewer than featurize writes today):
    # cut as predict cuts them, since rows_and_targets does not go through
    # model.batch
    fit_examples = model.check_examples(fit_examples)
    valid_examples = model.check_examples(valid_examples) if valid_examples else valid_examples
    x, y, _ = rows_and_targets(fit_examples, model.scaler, model.lut, cfg.neighbors, cfg.num_opcodes)
    xv = yv = None
    if valid_examples:
        xv, yv, _ = rows_and_targets(valid_examples, model.scaler, model.lut, cfg.neighbors,
                                     cfg.num_opcodes)
        yv = yv - net.predict_rows(xv)
    opts = replace(BOOST, threads=threads, seed=seed, trees=BOOST.trees if xv is not None else 100)
    booster, keep, _ = fit(x, y - net.predict_rows(x), None, xv, yv, opts, progress, seconds)
    arrays = joined_arrays(net.arrays(), from_lightgbm(booster, keep))
    model.net = TreeNet(replace(cfg, trees=int(arrays["roots"].size)), arrays)
    model.cfg = model.net.cfg
    model._memo.clear()
    return model, keep


def digest(arrays: dict) -> str:
    import hashlib

    h = hashlib.sha256()
    for key in TREE_ARRAYS:
        h.update(key.encode())
        h.update(np.ascontiguousarray(arrays[key]).tobytes())
    return h.hexdigest()[:8]


def tree_model_dict(cfg: TreeConfig, arrays: dict, scaler, name: str, target: dict | None,
                    trained: dict) -> dict:
    """The dict a tree model's file holds: a network's fields (predict's
    module docstring), version 3, the tree arrays as its state_dict."""
    import torch

    from tpuperf_cli.model import TREE_MODEL_VERSION
    from tpuperf_cli.model.predict import _plain, opcode_names

    return {"format": "tpuperf-model", "version": TREE_MODEL_VERSION, "name": f"{name}-{digest(arrays)}",
            "task": "fusion", "loss": "mse", "config": asdict(cfg),
            "state_dict": {k: torch.from_numpy(np.ascontiguousarray(arrays[k])) for k in TREE_ARRAYS},
            "scaling": scaler.to_dict(), "opcodes": opcode_names(scaler),
            "target": _plain(target), "trained": _plain(trained)}


def train_trees(data: Sequence[str], out: str, opts, tree: TreeOptions, valid: Sequence[str] | None = None,
                split: str | None = None, name: str | None = None,
                progress: Callable[[str], None] | None = None) -> dict:
    """`train --learner gbdt`: fit trees on the graph records of `data` (the
    split's "train" programs), stop on the validation programs, write the
    model file to `out`. opts: the TrainOptions the data options come from
    (split, --even, --generated-share, --kernel-features, --min-us, --max-time,
    --memory-mb). Returns a summary dict as train.train's."""
    import os
    import time

    from tpuperf_cli.model.data import draw_rates
    from tpuperf_cli.model.predict import Model, save_atomic
    from tpuperf_cli.model.train import evaluate, known_entry, load_data, log, trained_info

    progress = progress or log
    opts = opts.check()
    if opts.task != "fusion":
        raise TpuperfError("--learner gbdt fits runtimes (--task fusion); tile rankings need the "
                           "network", exit_code=2)
    if opts.kernel_columns and tuple(opts.kernel_columns[:SIZE_FEATURES]) != tuple(range(SIZE_FEATURES)):
        # TreeNet counts kernels past the training data by these five
        raise TpuperfError(f"--learner gbdt reads the first {SIZE_FEATURES} kernel features (flops, "
                           f"transcendentals, bytes read and written, output bytes): give --kernel-features "
                           f"{SIZE_FEATURES} or more before any names", exit_code=2)
    lightgbm_module()           # before reading the data: say at once what is missing
    t0 = time.time()
    train_set, valid_set, scaler = load_data(data, valid, split, opts, None, progress)
    cfg = TreeConfig(in_features=scaler.width, leaves=tree.leaves, lr=tree.lr)
    lut = scaler.opcode_table(cfg.num_opcodes)
    rows, y, programs = rows_and_targets(train_set.iter_examples(), scaler, lut, cfg.neighbors,
                                         cfg.num_opcodes)
    rates = draw_rates(train_set.sizes, opts.even, opts.generated_share, opts.generated_even,
                       opts.source_weight)
    weights = np.array([rates[p] for p in programs], np.float64)
    weights /= weights.mean()
    valid_rows = valid_y = None
    if valid_set is not None:
        valid_rows, valid_y, _ = rows_and_targets(valid_set.iter_examples(), scaler, lut,
                                                  cfg.neighbors, cfg.num_opcodes)
    progress(f"train: gradient-boosted trees on {rows.shape[1]} pooled features per kernel, "
             f"at most {tree.trees} trees of {tree.leaves} leaves, lr {tree.lr}, "
             f"{tree.threads} thread(s) ({time.time() - t0:.0f}s to read the data)")
    booster, keep, stopped = fit(rows, y, weights, valid_rows, valid_y, tree, progress,
                                 max(0.0, opts.max_time - (time.time() - t0)) if opts.max_time else 0.0)
    arrays = from_lightgbm(booster, keep)
    cfg.trees = int(arrays["roots"].size)
    net = TreeNet(cfg, arrays)
    check = valid_rows if valid_rows is not None and len(valid_rows) else rows
    check = check[:2000]
    theirs = booster.predict(check, num_iteration=keep)
    if not np.allclose(net.predict_rows(check), theirs, rtol=1e-9, atol=1e-9):
        raise TpuperfError("gbdt: the stored trees do not reproduce LightGBM's predictions "
                           "(a LightGBM version whose dump this tpuperf misreads?)")
    stem = name or os.path.splitext(os.path.basename(os.fspath(out)))[0]
    model = Model(net, scaler, {"name": stem, "task": "fusion"})
    figures = {}
    if valid_set is not None:
        v = evaluate(model, valid_set, opts)
        figures = {"valid_loss": v["loss"], "valid_mape": v["mape"], "valid_tau": v["tau"]}
    seconds = round(time.time() - t0, 3)
    trained = trained_info(train_set, data, valid, split, opts, figures, seconds, cfg.trees, cfg.trees,
                           stopped, trees=asdict(tree))
    d = tree_model_dict(cfg, arrays, scaler, stem, train_set.target(), trained)
    known = known_entry(train_set, opts)
    if known is not None:
        d["known"] = known
    save_atomic(d, out)
    shown = (f"; valid MAPE {figures['valid_mape']:.1f}%  tau {figures['valid_tau']:.3f}"
             if figures else "")
    progress(f"train: wrote {out} (model {d['name']}, {cfg.trees} trees; stopped: {stopped}{shown}; "
             f"{seconds:.0f}s)")
    return {"model": d["name"], "out": os.fspath(out), "epochs": cfg.trees, "best_epoch": cfg.trees,
            "stopped": stopped, "seconds": seconds, "best": figures, "history": []}
