"""Model files and prediction.

A model file (torch.save of a plain dict, loaded with weights_only=True so a
model file cannot run code) holds:

    format, version   "tpuperf-model", 1 (2 for an ensemble: with members; 3
                      for gradient-boosted trees, model.trees: config
                      {"learner": "gbdt", ...}, the trees' arrays as
                      state_dict; 4 for networks joined with trees)
    name              model id written to each record's `model` field
                      (file stem + short hash of the weights)
    task, loss        "fusion" / "tile"; "mse", "ape", "hinge" or "logistic"
    config            the network's hyperparameters (config.NetConfig)
    state_dict        the weights
    members           (ensembles only) the weights of the other members,
                      networks of the same config and scaling whose outputs
                      (log runtimes) are averaged; see combine_models
    trees             (version 4 only: networks joined with trees) a tree
                      model of the same scaling, {"config", "state_dict"}
                      as a version 3 file's, counted as one more member
    scaling           feature scaling from the training data (data.Scaler):
                      per-feature min and max after a signed log, the log
                      runtime mean and deviation, the opcode ids seen
    opcodes           the opcode vocabulary: {id: name} of the ids seen
    target            the hardware the training data was measured on
                      (platform, device_kind, chip, jax versions), or None
    trained           how it was made: data files, split, examples,
                      programs, epochs (run), best_epoch (whose weights
                      these are, and valid_figures its figures), seconds
                      (in all), best_seconds (when the best epoch was
                      saved), stopped (why training ended; None while it
                      runs or if it was cut off), date. Files written
                      before tpuperf recorded the end of training lack
                      best_seconds and stopped, and their epochs and
                      seconds are those of the best epoch.
    known             (fusion models, optional) the measured runtimes of
                      kernels: {"fingerprints": uint8 n x 16, "runtime_ns":
                      float64 n} (model.known); predict gives a kernel of
                      one of these fingerprints that runtime. `train`
                      writes its training kernels', calibrate the kernels
                      it timed and fitted; older files have none, and
                      older tpuperfs ignore it.

Public API (tpuperf eval, tpuperf select and scripts use these):

    model = load_model(path=None, device="cpu", threads=None, engine="auto")   # None: bundled model
    model.predict_examples(examples) -> np.ndarray of ns
    model.known = None      # the network on every kernel (predict --no-known)
    predict_batch(model, records) -> np.ndarray of ns (one per graph record)
    predict_records(records, model=None, batch_size=512) -> generator of
        the records with pred_ns and model added (model: a Model or a path)
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tpuperf_cli.errors import StreamError, TpuperfError, read_file
from tpuperf_cli.model import (
    MODEL_FORMAT,
    MODEL_VERSION,
    TREES_JOINED_VERSION,
    check_device,
    default_model_path,
    set_threads,
    thread_env,
)
from tpuperf_cli.model import known as known_lib
from tpuperf_cli.model.data import Batch, make_batch
from tpuperf_cli.model.examples import Example, Scaler, example, use_kernel_features
from tpuperf_cli.model.trees import TreeConfig, TreeNet, is_tree_config
from tpuperf_cli.records import (
    FINGERPRINT,
    MODEL,
    NODE_FEATURES,
    PRED_NS,
    PRED_SPREAD,
    TARGET,
    TARGET_KEYS,
    Record,
    locate,
    target_identity,
)

if TYPE_CHECKING:
    from tpuperf_cli.model.infer import NumpyEnsemble, NumpyNet
    from tpuperf_cli.model.net import EnsembleNet, Net

REQUIRED = ("format", "version", "name", "task", "config", "state_dict", "scaling")
SCALING_FIELDS = ("lo", "hi", "kernel_features", "opcodes", "log_runtime_mean", "log_runtime_std")


class Model:
    """A loaded model: network, scaling, vocabulary and what it was trained on."""

    def __init__(self, net: Net | EnsembleNet | NumpyNet | NumpyEnsemble | TreeNet, scaler: Scaler, meta: dict,
                 path: str | None = None, device: str = "cpu"):
        self.net = net.eval()
        self.scaler = scaler
        self.meta = meta
        self.path = path
        self.device = device
        self.cfg = net.cfg
        self.name = meta.get("name", "model")
        self.task = meta.get("task", "fusion")
        self.target = meta.get("target")
        self.lut = scaler.opcode_table(net.cfg.num_opcodes)
        self.sequence = net.cfg.reduction in ("lstm", "transformer")
        self.engine = getattr(net, "engine", "dgl")     # "numpy": infer.NumpyNet, no torch
        self.chosen = None         # why load_model chose this file as the default, if it did
        self.trees: TreeNet | None = None   # trees joined with the network(s): set_trees
        self._memo = {}            # graph inputs (bytes) -> (predicted ns, spread), see predict_parts
        self._memo_bytes = 0
        # measured runtimes of kernels by fingerprint (model.known): the
        # file's arrays, checked now, made a table when first looked up; a
        # tile model's scores are not runtimes, so it has none
        entry = meta.pop("known", None) if self.task == "fusion" else None
        self._known_arrays = None if entry is None else known_lib.check(entry, path or self.name)
        self._known = None
        self.known_hits = 0        # kernels predicted at their known runtime so far

    @property
    def known(self) -> dict[str, float] | None:
        """{fingerprint: measured ns} of the kernels this model's data
        measured (model.known), None for none; set None to predict every
        kernel with the network (predict --no-known)."""
        if self._known_arrays is not None:
            self._known = known_lib.table_of(*self._known_arrays)
            self._known_arrays = None
        return self._known

    @known.setter
    def known(self, table: dict[str, float] | None) -> None:
        self._known, self._known_arrays = table or None, None

    def batch(self, examples: Sequence[Example], groups: np.ndarray | None = None) -> Batch:
        # examples of records featurized after the model are read to its
        # kernel features here too: calibrate trains on them through batch
        return make_batch(self.check_examples(examples), self.scaler, self.lut, self.cfg.neighbors,
                          self.sequence, self.cfg.max_nodes, groups)

    def set_trees(self, trees: TreeNet) -> None:
        """Join trees to the network(s): they count as one more member of
        the average of standardised log runtimes (the geometric mean of
        the predictions), run in numpy on the same batch."""
        if self.is_trees:
            raise TpuperfError(f"model {self.name}: trees join a network, not other trees")
        if trees.cfg.in_features != self.scaler.width:
            raise TpuperfError(f"model {self.name}: the trees read {trees.cfg.in_features} scaled "
                               f"features, the network {self.scaler.width}")
        if trees.cfg.neighbors != self.cfg.neighbors:
            # the trees' edge count reads the batch's edges, kept per node as the network keeps them
            raise TpuperfError(f"model {self.name}: the trees count edges of {trees.cfg.neighbors} "
                               f"neighbors, the network keeps {self.cfg.neighbors}")
        self.trees = trees
        self._memo.clear()

    @property
    def networks(self) -> int:
        """How many networks predict (an ensemble's members; 0 for trees alone)."""
        return 0 if self.is_trees else len(getattr(self.net, "members", ())) or 1

    @property
    def has_spread(self) -> bool:
        """Whether predictions come with a spread: a runtime model of two
        members or more (networks, and trees joined with them)."""
        return self.task == "fusion" and self.networks + (self.trees is not None) >= 2

    def forward(self, batch: Batch) -> np.ndarray:
        """Predicted ns per graph of a data.Batch."""
        return self.forward_spread(batch)[0]

    def forward_spread(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        """(predicted ns, spread) per graph of a data.Batch. The spread is
        the members' standard deviation of natural-log runtime (how far
        apart seeds, or a network and its trees, put the kernel: a sign of
        how far the estimate may be off), None for a model of one member."""
        spread = self.has_spread
        if self.engine == "numpy":
            outs = self.net.outputs(batch) if spread and self.networks > 1 else None
            y = outs.mean(0) if outs is not None else self.net(batch)
        else:
            import torch

            from tpuperf_cli.model.net import to_device

            with torch.no_grad():
                b = to_device(batch, self.device)
                if spread and self.networks > 1:
                    members = self.net.outputs(b)
                    outs, y = members.cpu().numpy(), members.mean(0).cpu().numpy()
                else:
                    outs, y = None, self.net(b).cpu().numpy()
        if outs is None and spread:
            outs = np.asarray(y)[None]
        if self.trees is not None:
            n = self.networks
            t = self.trees(batch)
            y = (np.asarray(y, np.float64) * n + t) / (n + 1)
            if spread:
                outs = np.concatenate([np.asarray(outs, np.float64), np.asarray(t, np.float64)[None]])
        if not spread:
            return self.scaler.runtime(y), None
        return self.scaler.runtime(y), np.asarray(outs, np.float64).std(0, ddof=1) * self.scaler.std

    def predict_parts(self, parts: Sequence[tuple]) -> tuple[np.ndarray, np.ndarray | None, int | None]:
        """(predicted ns, spreads, bad) for graphs given as
        parts.record_parts, in order; spreads is None for a model of one
        member (forward_spread); bad is the index of the first graph whose
        edges point outside it or whose node features are not finite
        (predictions stop before it), else None. A graph seen before (the
        same bytes: kernels repeat within a program) is computed once."""
        from tpuperf_cli.model.parts import Parts, parts_batch

        memo = self._memo
        preds = np.empty(len(parts), np.float64)
        spreads = np.empty(len(parts), np.float64) if self.has_spread else None
        todo = {}                  # inputs -> indices of parts, in order of first occurrence
        for i, p in enumerate(parts):
            key = p[2:]
            v = memo.get(key)
            if v is None:
                todo.setdefault(key, []).append(i)
            else:
                preds[i] = v[0]
                if spreads is not None:
                    spreads[i] = v[1]
        if not todo:
            return preds, spreads, None
        first = [idx[0] for idx in todo.values()]
        joined = Parts([parts[i] for i in first], self.scaler.width - NODE_FEATURES)
        bad = joined.first_bad()
        if bad is not None:        # predict the graphs before it alone
            stop = first[bad]
            before = self.predict_parts(parts[:stop])
            return before[0], before[1], stop
        y, spread = self.forward_spread(parts_batch(joined, self.scaler, self.lut, self.cfg.neighbors,
                                                    self.sequence, self.cfg.max_nodes,
                                                    full_x=self.engine != "numpy"))
        if self._memo_bytes > 64 << 20:
            memo.clear()
            self._memo_bytes = 0
        for j, ((key, idx), v) in enumerate(zip(todo.items(), y)):
            preds[idx] = v
            s = None if spread is None else spread[j]
            if s is not None:
                spreads[idx] = s
            memo[key] = (v, s)
            self._memo_bytes += len(key[1]) + 200
        return preds, spreads, None

    def predict_examples(self, examples: Sequence[Example], batch_size: int = 512, with_spread: bool = False
                         ) -> np.ndarray | tuple[np.ndarray, np.ndarray | None]:
        """Predicted runtime in ns per example (tile models: a score that
        orders configurations, lower = faster, on the same scale); with
        with_spread, (ns, spreads) where spreads is forward_spread's (None
        for a model of one member)."""
        examples = self.check_examples(examples)
        out = np.empty(len(examples), np.float64)
        spreads = np.empty(len(examples), np.float64) if with_spread and self.has_spread else None
        for start in range(0, len(examples), batch_size):
            chunk = examples[start:start + batch_size]
            y, s = self.forward_spread(self.batch(chunk))
            out[start:start + len(chunk)] = y
            if spreads is not None:
                spreads[start:start + len(chunk)] = s
        self.known_hits += known_lib.lookup(self.known, (ex.fingerprint for ex in examples), out, spreads)
        return (out, spreads) if with_spread else out

    def fits(self, ex: Example, where: object, record: Record | None = None) -> str | None:
        """None if the example has the kernel features this model reads, else
        the message saying what is wrong."""
        return use_kernel_features(ex, self.scaler.kernel_features, where, record,
                                   f"; model {self.name} was trained with {self.scaler.kernel_features}",
                                   self.scaler.columns)

    def check_examples(self, examples: Sequence[Example]) -> Sequence[Example]:
        """The examples as this model reads them: one with more kernel
        features than it was trained with (featurized after it) becomes a
        copy of its first ones, the caller's left alone (another model may
        read all of them); StreamError naming the first it cannot read."""
        kf, columns = self.scaler.kernel_features, self.scaler.columns
        fitted = None
        for i, ex in enumerate(examples, 1):
            if ex.columns == columns and ex.kernel_feat.size == kf:
                continue
            cut = ex.cut(kf, columns)
            if cut is not None:
                if fitted is None:
                    fitted = list(examples)
                fitted[i - 1] = cut
                continue
            what = f"{ex.program}/{ex.kernel}" if ex.program or ex.kernel else "?"
            raise StreamError(self.fits(ex, f"example {i} ({what})"))
        return examples if fitted is None else fitted

    @property
    def is_trees(self) -> bool:
        """Gradient-boosted trees (model.trees), not a network."""
        return isinstance(self.net, TreeNet)

    @property
    def kind(self) -> str:
        """What predicts, in a few words: "sage/column", "gbdt, 812 trees"."""
        if self.is_trees:
            return f"gbdt, {self.cfg.trees} trees"
        if self.trees is not None:
            return f"{self.cfg.gnn}/{self.cfg.reduction} + gbdt, {self.trees.cfg.trees} trees"
        return f"{self.cfg.gnn}/{self.cfg.reduction}"

    def describe(self) -> dict:
        t = self.meta.get("trained") or {}
        tgt = self.target or {}
        return {"name": self.name, "task": self.task, "loss": self.meta.get("loss"),
                "members": (self.networks or 1) + (self.trees is not None),
                "trees": self.trees.cfg.trees if self.trees is not None else None,
                "target": {k: tgt.get(k) for k in TARGET_KEYS},
                "kernel_features": self.scaler.names(),
                "config": self.meta.get("config"), "trained": t}


# ---------------------------------------------------------------- files

def weights_digest(state_dict: dict) -> str:
    h = hashlib.sha256()
    for key in sorted(state_dict):
        h.update(key.encode())
        h.update(state_dict[key].detach().cpu().numpy().tobytes())
    return h.hexdigest()[:8]


def _state(net) -> dict:
    return {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}


def model_dict(net: Net | EnsembleNet, scaler: Scaler, name: str, task: str, loss: str,
               target: dict | None = None, trained: dict | None = None) -> dict:
    """The dict a model file holds (see the module docstring)."""
    from dataclasses import asdict

    states = [_state(m) for m in getattr(net, "members", [net])]
    extra = {"members": states[1:]} if len(states) > 1 else {}
    return {
        "format": MODEL_FORMAT, "version": 2 if extra else 1,
        "name": f"{name}-{ensemble_digest(states)}",
        "task": task, "loss": loss,
        "config": asdict(net.cfg),
        "state_dict": states[0],
        **extra,
        "scaling": scaler.to_dict(),
        "opcodes": opcode_names(scaler),
        "target": _plain(target),
        "trained": _plain(trained or {}),
    }


def opcode_names(scaler: Scaler) -> dict:
    """A model file's opcode vocabulary: {id: name} of the ids seen in training."""
    try:
        from tpuperf_cli.features.opcodes import OPCODE_NAMES
    except ImportError:
        OPCODE_NAMES = {}
    return {int(i): OPCODE_NAMES.get(int(i), "?") for i in sorted(scaler.opcodes)}


def ensemble_digest(states: list[dict]) -> str:
    """weights_digest of one network; of the members' digests for several."""
    if len(states) == 1:
        return weights_digest(states[0])
    return hashlib.sha256(" ".join(weights_digest(s) for s in states).encode()).hexdigest()[:8]


def member_states(d: dict, path: str = "model") -> list[dict]:
    """The weights of each network of a model dict: one, or an ensemble's."""
    members = d.get("members") or []
    if not isinstance(members, list) or not all(isinstance(m, dict) for m in members):
        raise TpuperfError(f"model {path}: bad model file (members is not a list of weight maps)")
    return [d["state_dict"]] + members


def combine_models(paths: Sequence[str], name: str | None = None) -> dict:
    """The model dict of an ensemble of the model files at `paths`: every
    network of each (an ensemble's members count one by one) and at most
    one tree model (`train --learner gbdt`, counted as one member more),
    predicting the geometric mean of their predictions. They must share
    the task, feature scaling (the same training data: seeds, say) and
    target, the networks their config; TpuperfError naming the first file
    that differs."""
    if len(paths) < 2:
        raise TpuperfError("an ensemble needs at least two model files")
    # (path, dict) of network files; (path, tree part) of trees: a tree
    # file's dict, or a joined file's `trees` (its scaling is its networks')
    nets, trees = [], []
    for path in paths:
        d = read_model_file(path)
        _check_fields(d, path)
        if is_tree_config(d["config"]):
            trees.append((path, d))
        else:
            nets.append((path, d))
            if d.get("trees") is not None:
                trees.append((path, d["trees"]))
    if not nets:
        raise TpuperfError(f"model {paths[0]}: gradient-boosted trees; an ensemble joins networks "
                           f"(tpuperf train's default learner), and at most one tree model with them")
    if len(trees) > 1:
        raise TpuperfError(f"model {trees[1][0]}: a second tree model ({trees[0][0]} holds trees); "
                           f"an ensemble joins networks and at most one tree model")
    first_path, first = nets[0]
    differs = {"config": "network configs", "scaling": "feature scalings (trained on other data?)",
               "target": "targets (measured on other machines)"}
    for path, d in nets[1:] + [(p, t) for p, t in trees if "scaling" in t]:
        fields = ("task", "scaling", "target") if is_tree_config(d["config"]) else \
            ("task", "config", "scaling", "target")
        for field in fields:
            same = _same_numbers if field == "scaling" else (lambda a, b: a == b)
            if not same(d.get(field), first.get(field)):
                raise TpuperfError(f"model {path}: cannot join {first_path} in an ensemble: their "
                                   f"{differs.get(field, field + 's')} differ")
    per_file = [member_states(d, path) for path, d in nets]
    states = [s for file_states in per_file for s in file_states]
    stem = name or str(first["name"]).rsplit("-", 1)[0]
    members_info = [{"file": path, "name": d["name"], "members": len(file_states),
                     "trained": d.get("trained")} for (path, d), file_states in zip(nets, per_file)]
    out = {k: v for k, v in first.items() if k not in ("state_dict", "members", "trees")}
    digest = ensemble_digest(states)
    if trees:
        tree_path, tree = trees[0]
        if tree["config"].get("neighbors") != first["config"].get("neighbors"):
            raise TpuperfError(f"model {tree_path}: cannot join {first_path} in an ensemble: the "
                               f"trees count edges of {tree['config'].get('neighbors')} neighbors, "
                               f"the network keeps {first['config'].get('neighbors')}")
        tree_part = {"config": tree["config"], "state_dict": tree["state_dict"]}
        out["trees"] = tree_part
        digest = hashlib.sha256(f"{digest} {tree_digest(tree_part)}".encode()).hexdigest()[:8]
        if "scaling" in tree:     # a tree file (a joined file's trees are in its entry)
            members_info.append({"file": tree_path, "name": tree.get("name"), "members": 1,
                                 "trees": tree["config"].get("trees"), "trained": tree.get("trained")})
    out.update(version=TREES_JOINED_VERSION if trees else 2, name=f"{stem}-{digest}",
               state_dict=states[0], members=states[1:],
               trained={**(first.get("trained") or {}), "ensemble": _plain(members_info)})
    return out


def tree_digest(part: dict) -> str:
    """trees.digest of a tree model's {"config", "state_dict"}."""
    from tpuperf_cli.model.trees import digest

    return digest(_tree_arrays(part["state_dict"]))


def _tree_arrays(state_dict: dict) -> dict:
    """A tree model's state_dict as numpy arrays (torch.load gives tensors,
    weights.read_model_dict arrays already)."""
    return {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for k, v in state_dict.items()}


def _same_numbers(a, b, rel=1e-5) -> bool:
    """Equal, numbers to a relative `rel`: the same training data scaled on
    another CPU differs in the last float32 digits (a summation order), and
    such models still join; other data differs by far more."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_numbers(a[k], b[k], rel) for k in a)
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return a == b
    try:
        x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    except (TypeError, ValueError):
        return a == b
    return x.shape == y.shape and bool(np.allclose(x, y, rtol=rel, atol=1e-9))


def _plain(value):
    """Only types torch's weights_only loader accepts (dict, list, str, numbers)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def save_atomic(obj: object, path: str | os.PathLike) -> None:
    """torch.save to a temporary file beside path, then rename: a crash never
    leaves a half-written file at path."""
    import torch

    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    base = os.path.basename(path)
    _remove_stale_temporaries(d, base)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.{os.getpid()}.tmp-", suffix=".pt", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)       # mkstemp's 0600 would hide the model from others
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _remove_stale_temporaries(directory: str, base: str) -> None:
    """Delete what a save_atomic of the same file left when its process was
    killed mid-save (SIGKILL skips the cleanup): temporaries named after a
    process that no longer runs."""
    import glob

    for tmp in glob.glob(os.path.join(glob.escape(directory), f".{glob.escape(base)}.*.tmp-*.pt")):
        pid = os.path.basename(tmp)[len(base) + 2:].split(".", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its process still runs: maybe saving now
        except ProcessLookupError:
            pass
        except OSError:
            continue  # another user's process: not ours to judge
        try:
            os.unlink(tmp)
        except OSError:
            pass


def read_model_file(path: str) -> dict:
    """The dict of a model file, checked; TpuperfError naming what is wrong."""
    import torch

    raw = read_file(path, what="model")
    if not raw:
        raise TpuperfError(f"model {path}: not a tpuperf model file (the file is empty)")
    try:
        d = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds on foreign or corrupt files
        raise TpuperfError(f"model {path}: not a tpuperf model file ({load_error(e)}); "
                           f"make one with `tpuperf train`") from None
    return check_model_dict(d, path)


def check_model_dict(d: object, path: str) -> dict:
    """d if it is a tpuperf model dict of a version this tpuperf reads, else
    TpuperfError naming what is wrong."""
    if not isinstance(d, dict) or d.get("format") != MODEL_FORMAT:
        raise TpuperfError(f"model {path}: not a tpuperf model file (no format {MODEL_FORMAT!r}; "
                           f"make one with `tpuperf train`)")
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise TpuperfError(f"model {path}: model file lacks field(s) {', '.join(missing)}")
    version = d["version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TpuperfError(f"model {path}: bad model file (version {version!r} is not a positive "
                           f"integer)")
    if version > MODEL_VERSION:
        raise TpuperfError(f"model {path}: model file version {version} is newer than this "
                           f"tpuperf reads ({MODEL_VERSION}); upgrade tpuperf")
    return d


def load_error(e: BaseException) -> str:
    """What torch.load's exception says, in a few words, without torch's
    advice to load the file unsafely (weights_only=False could run code)."""
    text = " ".join(str(e).split())
    if "Weights only load failed" in text:
        detail = text.split("WeightsUnpickler error:", 1)[-1].strip() if "WeightsUnpickler error:" \
            in text else ""
        return "torch cannot load it as plain data and weights" + (f": {detail}" if detail else "")
    if isinstance(e, EOFError):
        return "the file is cut short"
    return f"torch cannot read it: {text[:200] or type(e).__name__}"


def _check_fields(d, path):
    for field in ("config", "state_dict", "scaling"):
        if not isinstance(d[field], dict):
            raise TpuperfError(f"model {path}: bad model file ({field} is a "
                               f"{type(d[field]).__name__}, not a map)")
    missing = [k for k in SCALING_FIELDS if k not in d["scaling"]]
    if missing:
        raise TpuperfError(f"model {path}: model file lacks scaling field{'s' if len(missing) > 1 else ''} "
                           f"{', '.join(repr(k) for k in missing)}")


def build(d: dict, path: str = "model", device: str = "cpu") -> Model:
    """A Model from a model dict (the DGL network; trees run in numpy)."""
    _check_fields(d, path)
    if is_tree_config(d["config"]):
        return tree_model(d, path)
    from tpuperf_cli.model.net import EnsembleNet, Net, NetConfig

    try:
        cfg = NetConfig.from_dict(d["config"])
        nets = []
        for i, state in enumerate(member_states(d, path)):
            net = Net(cfg)
            wrong = _weights_mismatch(net.state_dict(), state)
            if wrong:
                which = f" of member {i}" if i else ""
                raise TpuperfError(f"model {path}: bad model file (weights{which} do not fit its "
                                   f"config: {wrong})")
            net.load_state_dict(state)
            nets.append(net)
        net = nets[0] if len(nets) == 1 else EnsembleNet(nets)
        scaler = Scaler.from_dict(d["scaling"])
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        raise _bad_file(path, e) from None
    if scaler.width != cfg.in_features:
        raise TpuperfError(f"model {path}: bad model file (scaling has {scaler.width} features, "
                           f"network expects {cfg.in_features})")
    net.to(device)
    return _with_trees(Model(net, scaler, _meta(d), path, device), d, path)


def tree_model(d: dict, path: str = "model") -> Model:
    """A Model of gradient-boosted trees (model.trees) from a model dict."""
    return Model(tree_net(d, path), _scaler(d, path), _meta(d), path, "cpu")


def tree_net(d: dict, path: str = "model", where: str = "") -> TreeNet:
    """The TreeNet of a tree model's dict ({"config", "state_dict"} of the
    trees, a version 3 file or a version 4 file's `trees`)."""
    try:
        cfg = TreeConfig.from_dict(d["config"])
        net = TreeNet(cfg, _tree_arrays(d["state_dict"]))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise _bad_file(path, e, where) from None
    return net


def _scaler(d: dict, path: str) -> Scaler:
    """The feature scaling of a tree model's dict, checked against its trees' width."""
    try:
        scaler = Scaler.from_dict(d["scaling"])
    except (ValueError, KeyError, TypeError) as e:
        raise _bad_file(path, e) from None
    if scaler.width != d["config"].get("in_features"):
        raise TpuperfError(f"model {path}: bad model file (scaling has {scaler.width} features, "
                           f"the trees' config says {d['config'].get('in_features')})")
    return scaler


def _bad_file(path: str, e: BaseException, where: str = "") -> TpuperfError:
    """The error for a model file whose contents do not build: the first
    line of what went wrong."""
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return TpuperfError(f"model {path}: bad model file ({where}{first})")


def _with_trees(model: Model, d: dict, path: str) -> Model:
    """model with the trees of a version 4 file joined (model.set_trees)."""
    trees = d.get("trees")
    if trees is None:
        return model
    if not isinstance(trees, dict) or not is_tree_config(trees.get("config")):
        raise TpuperfError(f"model {path}: bad model file (trees is not a tree model's config and "
                           f"state_dict)")
    model.set_trees(tree_net(trees, path, "its trees: "))
    return model


def _meta(d: dict) -> dict:
    """A model dict without its weights: what Model.meta keeps."""
    return {k: v for k, v in d.items() if k not in ("state_dict", "members", "trees")}


def _weights_mismatch(expected, got, most=3):
    """A short account of how the weights `got` differ from the network's
    `expected` ones (missing and unexpected keys, other shapes), "" if they fit."""

    def some(what, items):
        items = sorted(items)
        more = f" and {len(items) - most} more" if len(items) > most else ""
        return f"{what} {', '.join(items[:most])}{more}"

    parts = []
    missing = set(expected) - set(got)
    if missing:
        parts.append(some("missing key(s)", missing))
    unexpected = set(got) - set(expected)
    if unexpected:
        parts.append(some("unexpected key(s)", unexpected))
    shapes = []
    for k in sorted(set(expected) & set(got)):
        a, b = list(expected[k].shape), list(getattr(got[k], "shape", []))
        if a != b:
            shapes.append(f"{k} {b} (expected {a})")
    if shapes:
        parts.append(some("other shape(s):", shapes))
    return "; ".join(parts)


ENGINES = ("auto", "numpy", "dgl")


def load_model(path: str | None = None, device: str = "cpu", threads: int | None = None,
               engine: str = "auto", target: dict | None = None) -> Model:
    """Load a model file (None: the default model, calibrated.default_choice:
    this machine's calibrated model for `target`, the records' target, or for
    this machine when None; else the bundled one). model.chosen says why a
    default model was chosen (None for a path given).

    engine: "numpy" runs the weights in numpy (infer.NumpyNet: no torch or
    DGL imported), "dgl" the DGL network, "auto" numpy on the CPU wherever it
    can run the model, else DGL. The two give the same predictions to float32
    rounding (tests/test_infer.py).
    """
    if engine not in ENGINES:
        raise TpuperfError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    chosen = None
    if path is None:
        from tpuperf_cli.model.calibrated import default_choice

        path, chosen = default_choice(target)
        if path == default_model_path() and not os.path.exists(path):
            raise TpuperfError(f"the bundled model {path} is missing (a broken install?); "
                               f"name one with --model")
    if engine == "numpy" and device != "cpu":
        raise TpuperfError(f"--device {device}: the numpy engine runs on the CPU only; "
                           f"use --engine dgl")
    if engine != "dgl" and device == "cpu":
        threads = thread_env(threads)
        model = _load_numpy(path, required=engine == "numpy")
        if model is not None:
            model.chosen = chosen
            return model
    set_threads(threads)
    check_device(device)
    model = build(read_model_file(path), path, device)
    model.chosen = chosen
    return model


def _load_numpy(path: str, required: bool) -> Model | None:
    """A Model on infer.NumpyNet, or None when that cannot run the file
    (TpuperfError instead when required)."""
    from tpuperf_cli.model.infer import numpy_net
    from tpuperf_cli.model.weights import Unsupported, read_model_dict

    try:
        d = read_model_dict(path)
    except Unsupported:
        if required:   # torch says best what the file is
            return _numpy_refuses(path, read_model_file(path))
        return None
    check_model_dict(d, path)
    _check_fields(d, path)
    if is_tree_config(d["config"]):
        return tree_model(d, path)
    try:
        net = numpy_net(d)
        scaler = Scaler.from_dict(d["scaling"])
        if scaler.width != net.cfg.in_features:
            raise Unsupported("scaling width")
    except (Unsupported, ValueError, KeyError, TypeError) as e:
        if required:
            return _numpy_refuses(path, read_model_file(path), e)
        return None
    return _with_trees(Model(net, scaler, _meta(d), path, "cpu"), d, path)


def _numpy_refuses(path, d, why=None):
    build(d, path)        # a bad file: the DGL path names what is wrong
    raise TpuperfError(f"model {path}: the numpy engine cannot run this model"
                       f"{f' ({why})' if why else ''}; use --engine dgl")


# ---------------------------------------------------------------- records

def predict_batch(model: Model | str | None, records: Sequence[Record]) -> np.ndarray:
    """Predicted ns for a list of graph records (no record is changed)."""
    if not isinstance(model, Model):
        model = load_model(model)
    return model.predict_examples([example(r, i) for i, r in enumerate(records, 1)])


def _target_differs(model_target, record_target):
    a, b = target_identity(model_target), target_identity(record_target)
    if a is None or b is None:
        return False
    return a != b


def predict_records(records: Iterable[Record], model: Model | str | None = None, batch_size: int = 512,
                    name: str = "input", warn: Callable[[str], None] | None = None) -> Iterator[Record]:
    """Yield each record with pred_ns (float, ns) and model (the model's
    name), and pred_spread (records.PRED_SPREAD) where the model has
    several members.

    model: a Model, a path, or None for the bundled model. Records are
    predicted batch_size at a time and come out in input order. When a
    record cannot be read (not a graph record, or features of another width
    than the model's), the records before it are still yielded, then
    StreamError is raised. Warns once (through warn, by
    default a line on stderr) when the records were measured on another
    target than the model's training data.
    """
    if not isinstance(model, Model):
        model = load_model(model)
    for records_, _, preds, spreads in _predicted(((r, None) for r in records), model, batch_size, name, warn):
        spread_list = spreads.tolist() if spreads is not None else [None] * len(records_)
        for record, p, spread in zip(records_, preds.tolist(), spread_list):
            _add_prediction(record, p, model.name, spread)
        yield from records_


def _add_prediction(record: Record, pred: float, model_name: str, spread: float | None) -> None:
    """Set a record's predict fields in place: pred_ns, model and, from a
    model of several members, pred_spread (a spread an earlier model wrote
    goes when this one has none)."""
    record[PRED_NS] = pred
    record[MODEL] = model_name
    if spread is None:
        record.pop(PRED_SPREAD, None)
    else:
        record[PRED_SPREAD] = spread


def predict_packed(items: Iterable[tuple[Record, bytes]], model: Model, batch_size: int = 512,
                   name: str = "input", warn: Callable[[str], None] | None = None
                   ) -> Iterator[tuple[bytes, int]]:
    """predict_records for (record, its msgpack bytes) pairs, as
    stream.read_records(with_bytes=True) yields them: yields (the msgpack
    bytes of a batch of records with pred_ns and model added (and
    pred_spread, for a model of several members), how many records). The
    fields are appended to each record's bytes rather than the record
    packed again (the same bytes for a record packed as tools pack them); a
    record that has any of them already is packed again with the fields
    replaced in place."""
    import msgpack

    packer = msgpack.Packer(use_bin_type=True)
    pred_key = packer.pack(PRED_NS) + b"\xcb"                   # then a float64, big-endian
    model_field = packer.pack(MODEL) + packer.pack(model.name)
    spread_key = packer.pack(PRED_SPREAD) + b"\xcb"
    added = 3 if model.has_spread else 2
    heads = {}              # a record's map header -> (its length, the header with the fields added)
    for records, raws, preds, spreads in _predicted(items, model, batch_size, name, warn):
        out = []
        big_endian = preds.astype(">f8").tobytes()
        spread_bytes = spreads.astype(">f8").tobytes() if spreads is not None else b""
        for i, raw in enumerate(raws):
            record = records[i]
            head = heads.get(raw[:3])
            if head is None:
                head = _map_header(raw, added)
                if head is not None and head[0] <= 3 and len(heads) < 4096:
                    heads[raw[:3]] = head       # raw[:3] holds the whole header
            if head is None or PRED_NS in record or MODEL in record or PRED_SPREAD in record:
                _add_prediction(record, float(preds[i]), model.name,
                                None if spreads is None else float(spreads[i]))
                out.append(packer.pack(record))
                continue
            out.append(head[1])
            out.append(memoryview(raw)[head[0]:])
            out.append(pred_key + big_endian[8 * i:8 * i + 8] + model_field)
            if spreads is not None:
                out.append(spread_key + spread_bytes[8 * i:8 * i + 8])
        yield b"".join(out), len(records)


def _map_start(size: int) -> bytes:
    """The header of a msgpack map of `size` fields, as msgpack packs it."""
    if size < 16:
        return bytes((0x80 | size,))
    if size < 65536:
        return b"\xde" + size.to_bytes(2, "big")
    return b"\xdf" + size.to_bytes(4, "big")


def _map_header(raw: bytes, added: int = 2) -> tuple[int, bytes] | None:
    """(the header's length, the header of the same map with `added` more
    fields) for a msgpack map's bytes; None for anything else."""
    if not raw:
        return None
    b = raw[0]
    if 0x80 <= b <= 0x8f:
        return 1, _map_start((b & 0x0f) + added)
    if b == 0xde:
        return 3, _map_start(int.from_bytes(raw[1:3], "big") + added)
    if b == 0xdf:
        return 5, _map_start(int.from_bytes(raw[1:5], "big") + added)
    return None


def _predicted(items, model, batch_size, name, warn):
    """(records, their bytes, predicted ns, spreads or None) a batch at a time for (record,
    bytes or None) items, in order; after the records before one that cannot
    be read, raises its StreamError."""
    from tpuperf_cli.model.parts import example_parts, record_parts

    warn = warn or (lambda msg: print(msg, file=sys.stderr))
    warned = False
    checked = None              # the last target compared (records of a stream share one)
    trees = model.trees if model.trees is not None else (model.net if model.is_trees else None)
    beyond = trees.beyond if trees is not None else None    # trees count kernels past their data
    kf, columns = model.scaler.kernel_features, model.scaler.columns
    pending, raws, parts, numbers = [], [], [], []
    error = None

    def flush():
        """(predicted ns, spreads or None, StreamError or None) of the
        pending records; the predictions stop before a record that cannot be
        read."""
        preds, spreads, bad = model.predict_parts(parts)
        model.known_hits += known_lib.lookup(model.known, (r.get(FINGERPRINT) for r in pending[:len(preds)]),
                                             preds, spreads)
        problem = None
        if bad is not None:
            record, number = pending[bad], numbers[bad]
            try:
                example(record, number, name)          # raises the error that names it
                problem = StreamError(f"{locate(number, name, record)}: cannot read the graph")
            except StreamError as e:
                problem = e
        return preds, spreads, problem

    for number, (record, raw) in enumerate(items, 1):
        part = record_parts(record, kf, columns) if type(record) is dict else None
        if part is None:
            try:
                ex = example(record, number, name)
            except StreamError as e:
                error = e
                break
            wrong = model.fits(ex, locate(number, name, record), record)
            if wrong:
                error = StreamError(wrong)
                break
            part = example_parts(ex)
        target = record.get(TARGET)
        if target is not None and not warned and target != checked:
            if _target_differs(model.target, target):
                warned = True
                mt, rt = model.target, target
                warn(f"predict: warning: records were measured on {_target_text(rt)} but model "
                     f"{model.name} was trained on {_target_text(mt)}; its predictions are for that target")
            checked = target
        pending.append(record)
        raws.append(raw)
        parts.append(part)
        numbers.append(number)
        if len(pending) >= batch_size:
            preds, spreads, error = flush()
            k = len(preds)
            yield pending[:k], raws[:k], preds, spreads
            pending, raws, parts, numbers = [], [], [], []
            if error is not None:
                break
    if pending:
        preds, spreads, problem = flush()
        k = len(preds)
        yield pending[:k], raws[:k], preds, spreads
        error = problem or error
    if beyond is not None and trees.beyond > beyond:
        warn(f"predict: warning: {trees.beyond - beyond} distinct kernel(s) are larger (flops or "
             f"bytes) than any model {model.name} was trained on; its trees cannot extrapolate, so "
             f"they predict those as the largest they know (too fast, most likely)")
    if error is not None:
        raise error


def _target_text(t):
    if not isinstance(t, dict):
        return "an unknown target"
    parts = []
    for k in TARGET_KEYS:
        v = t.get(k)
        if isinstance(v, dict):
            v = ",".join(f"{a}={b}" for a, b in sorted(v.items()))
        if v:
            parts.append(f"{k}={v}" if k in ("cpu_count", "clock", "method") else str(v))
    return "/".join(parts) or "an unknown target"
