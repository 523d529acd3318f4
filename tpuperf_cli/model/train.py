"""The training loop: losses, validation, early stopping, checkpoints.

    result = train(["shards/*.zst"], "model.pt", net=NetConfig(), opts=TrainOptions())

Fusion task: MSE on the standardised log runtime. Tile task: a pairwise
rank loss between configurations of the same kernel (hinge or logistic),
batches made of whole kernels. Examples are drawn evenly across programs.

Every epoch ends with a validation pass (when there is validation data) and
a progress line on stderr; the best model so far is written atomically to
`out`, and the loop's state (weights, optimizer, epoch, random generators,
early-stopping counters) to `out + ".resume"`, so `resume=True` continues an
interrupted run exactly where its last finished epoch left it (model.resume).
The resume file is removed when training ends normally (keep_state=False).

Under torchrun the run is data-parallel (model.dist): each process trains
on its share of the examples and of every batch, gradients are averaged
across processes, and only rank 0 writes files and progress.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

import numpy as np

from tpuperf_cli import __version__
from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.model import check_device, set_threads
from tpuperf_cli.model.config import MINOR_FEATURE
from tpuperf_cli.model.data import Batch, Corpus, expand, make_batch
from tpuperf_cli.model.dist import Dist
from tpuperf_cli.model.examples import Scaler
from tpuperf_cli.model.options import HUBER_WITHIN, TrainOptions
from tpuperf_cli.records import TARGET_KEYS
from tpuperf_cli.split import load_split

if TYPE_CHECKING:
    import torch

    from tpuperf_cli.model.net import Net, NetConfig
    from tpuperf_cli.model.predict import Model


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- losses

def rank_loss(score: torch.Tensor, y: torch.Tensor, group: torch.Tensor, kind: str = "hinge",
              margin: float = 0.1) -> torch.Tensor:
    """Pairwise rank loss over pairs (i, j) of the same group where i ran
    faster than j: the score of j should exceed that of i.

    hinge: mean relu(margin - (s_j - s_i)); logistic: mean log(1 + exp(-(s_j - s_i))).
    Returns 0 (with a gradient) when the batch holds no such pair.
    """
    from torch.nn import functional

    same = group[:, None] == group[None, :]
    slower = y[None, :] > y[:, None]              # [i, j]: j slower than i
    pairs = same & slower
    if not bool(pairs.any()):
        return score.sum() * 0.0
    diff = (score[None, :] - score[:, None])[pairs]
    if kind == "hinge":
        return functional.relu(margin - diff).mean()
    return functional.softplus(-diff).mean()


def noise_weights(noise: np.ndarray, scale: float, device: str) -> torch.Tensor:
    """Loss weights from measure's noise: scale^2 / (scale^2 + noise^2), so a
    kernel whose samples spread by `scale` counts half, a steady one fully,
    and one without noise (an older corpus) fully; normalised to mean 1."""
    import torch

    nz = np.nan_to_num(np.asarray(noise, np.float64), nan=0.0)
    w = scale ** 2 / (scale ** 2 + nz ** 2)
    return torch.from_numpy((w / max(w.mean(), 1e-12)).astype(np.float32)).to(device)


def batch_loss(net: Net, b: Batch, opts: TrainOptions, device: str, log_std: float = 1.0) -> torch.Tensor:
    import torch

    from tpuperf_cli.model.net import to_device

    pred = net(to_device(b, device))
    y = torch.from_numpy(b.y).to(device)
    if opts.loss == "ape":
        return torch.mean(ape_of_log_error((pred - y) * log_std))
    if opts.loss == "huber":
        return torch.nn.functional.huber_loss(pred * log_std, y * log_std,
                                              delta=math.log(opts.huber_within))
    if opts.loss == "mse":
        if opts.noise_scale > 0:
            return torch.sum(noise_weights(b.noise, opts.noise_scale, device) * (pred - y) ** 2) / \
                max(len(b.noise), 1)
        return torch.mean((pred - y) ** 2)
    group = torch.from_numpy(b.group).to(device)
    return rank_loss(pred, y, group, opts.loss, opts.margin)


# --loss huber: squared within this natural-log error (1.25x either way, the
# default of --huber-within), linear beyond, so that a kernel 3x off (a label
# the machine got wrong, a form the features miss) pulls no harder than one
# 1.25x off
HUBER_DELTA = math.log(HUBER_WITHIN)


def huber_of_log_error(d, delta: float = HUBER_DELTA):
    """The Huber loss of natural-log errors d (numpy), as --loss huber trains."""
    a = np.abs(d)
    return np.where(a <= delta, 0.5 * d * d, delta * (a - 0.5 * delta))


def ape_of_log_error(d):
    """|p/t - 1| of a natural-log error d = log p - log t: the relative error
    MAPE averages. It punishes a 3x over-estimate (200%) more than a 3x
    under-estimate (67%), as MAPE does; past d = 2 (7.4x) it grows linearly,
    not exponentially, so that one wild kernel cannot blow up a step."""
    import torch

    big = d > 2.0
    safe = torch.where(big, torch.full_like(d, 2.0), d)
    return torch.where(big, math.exp(2.0) - 1 + math.exp(2.0) * (d - 2.0), torch.abs(torch.expm1(safe)))


# ---------------------------------------------------------------- evaluation

def evaluate(model: Model, corpus: Corpus, opts: TrainOptions, batch_size: int = 256,
             dist: Dist | None = None) -> dict:
    """Predictions on every example of a corpus and the figures of the task.
    With a data-parallel `dist`, each rank predicts its share and the
    predictions are gathered: every rank returns the same figures.

    Returns {"loss", "mape", "tau", "programs", "kernels"}: fusion: the
    training loss's (MSE of the standardised log runtime, mean APE, or the
    Huber loss of the natural-log error); median over programs of MAPE and Kendall's tau
    on kernels >= min_runtime_ns. Tile: mean per-kernel tau and Tile-Size APE
    (as "mape").
    """
    from tpuperf_cli import metrics

    preds, trues, keys = [], [], []
    chunk = []

    def flush():
        preds.append(model.predict_examples(chunk, batch_size))
        trues.extend(ex.runtime for ex in chunk)
        keys.extend(ex.group for ex in chunk)
        chunk.clear()

    for ex in corpus.iter_examples():      # streamed: only predictions are kept
        chunk.append(ex)
        if len(chunk) >= batch_size:
            flush()
    if chunk:
        flush()
    if dist is not None and dist.world > 1:
        shares = dist.gather((preds, trues, keys))
        preds = [p for share in shares for p in share[0]]
        trues = [t for share in shares for t in share[1]]
        keys = [k for share in shares for k in share[2]]
    if not keys:
        return {"loss": math.nan, "mape": math.nan, "tau": math.nan, "programs": 0, "kernels": 0}
    pred = np.concatenate(preds)
    true = np.asarray(trues)
    if opts.task == "fusion":
        y = model.scaler.target(true)
        yp = model.scaler.target(pred)
        rows = []
        for idx in metrics.group_indices([k[0] for k in keys]).values():
            rows.append(metrics.fusion_metrics(pred[idx], true[idx], opts.min_runtime_ns))
        # the validation loss is the training loss's: MSE of the standardised log, mean APE,
        # or the mean Huber loss of the log error
        if opts.loss == "ape":
            loss = float(np.mean(np.abs(pred / true - 1)))
        elif opts.loss == "huber":
            loss = float(np.mean(huber_of_log_error(np.log(pred / true), math.log(opts.huber_within))))
        else:
            loss = float(np.mean((yp - y) ** 2))
        return {"loss": loss,
                "mape": metrics.nanmedian([r["mape"] for r in rows]),
                "tau": metrics.nanmedian([r["tau"] for r in rows]),
                "programs": len(rows), "kernels": len(keys)}
    groups = metrics.group_indices(keys)
    pairs = [(pred[i], true[i]) for i in groups.values() if i.size > 1]
    return {"loss": math.nan, "mape": metrics.tile_size_ape(pairs), "tau": metrics.mean_kernel_tau(pairs),
            "programs": len({k[0] for k in keys}), "kernels": len(pairs)}


def _better(monitor, value, best):
    if value is None or math.isnan(value):
        return False
    if best is None:
        return True
    return value > best if monitor == "tau" else value < best


# ---------------------------------------------------------------- the data

def load_data(data: Sequence[str], valid: Sequence[str] | None, split: str | None, opts: TrainOptions,
              scaler: Scaler | None = None, progress: Callable[[str], None] = log,
              dist: Dist | None = None) -> tuple[Corpus, Corpus | None, Scaler]:
    """(training corpus, validation corpus or None, scaler) for a run.

    The training corpus holds the records of `data` (of the split's "train"
    programs when split is given); validation is all of `valid`, else the
    split's "valid" programs of `data`. A scaler given (a resumed run's)
    is kept and the data must fit it; otherwise one is learnt from the
    training corpus. With a data-parallel `dist`, both corpora keep only
    this rank's share of the examples (the scaling is learnt from all)."""
    dist = dist or Dist()
    shard = (dist.rank, dist.world)
    paths = expand(data, "--data")
    programs = valid_programs = held = None
    if split:
        s = load_split(split)
        programs = s["train"] + ([f"{TEACHER_SOURCE}:*"] if opts.teacher_data else [])
        valid_programs = s["valid"]
        held = s["valid"] + s["test"]
    train_set = Corpus(paths, programs, opts.task, opts.memory_mb, opts.configs, shard=shard,
                       held_out=held, listed=programs + held if split else None)
    if scaler is None:
        scaler = Scaler(opts.kernel_features or None, opts.label_floor_ns, opts.kernel_columns or None)
        train_set.scan(scaler)
        scaler.finish()
    else:
        train_set.scan(kernel_features=scaler.kernel_features, columns=scaler.columns)
    if train_set.examples == 0:
        raise TpuperfError("no training examples with runtime_ns in " + ", ".join(data)
                           + (f" (programs of {split} 'train')" if split else ""))
    if len(train_set.sizes) < 1:
        raise TpuperfError("no training programs")
    valid_set = None
    if valid:
        # --valid takes precedence over the split's "valid" programs: all its records validate
        valid_set = Corpus(expand(valid, "--valid"), None, opts.task, opts.memory_mb, opts.configs,
                           shard=shard).scan(kernel_features=scaler.kernel_features, columns=scaler.columns)
    elif valid_programs:
        valid_set = Corpus(paths, valid_programs, opts.task, opts.memory_mb, opts.configs,
                           shard=shard).scan(kernel_features=scaler.kernel_features, columns=scaler.columns)
    if train_set.unlisted:
        most = train_set.unlisted.most_common()
        named = ", ".join(f"{n} of {p}" for p, n in most[:4]) + (", ..." if len(most) > 4 else "")
        progress(f"train: warning: {sum(train_set.unlisted.values())} records of programs in no "
                 f"list of {split} left out ({named}); add them to its train list to learn "
                 f"from them")
    if valid_set is not None and valid_set.examples == 0:
        progress("train: warning: no validation examples; training all epochs without early stopping")
        valid_set = None
    skipped = sum(train_set.skipped.values())
    progress(f"train: {train_set.examples} examples from {len(train_set.sizes)} programs"
             f" in {len(paths)} shard(s)"
             + (f" ({skipped} records without runtime_ns skipped)" if skipped else "")
             + (f" ({train_set.drawn_from_held_out} generated from the split's valid or test"
                f" programs left out)" if train_set.drawn_from_held_out else "")
             + (f", {train_set.local} on each of {dist.world} processes" if dist.world > 1 else "")
             + (", streamed (larger than --memory-mb)" if train_set.streaming else ", in memory")
             + (f"; validation {valid_set.examples} examples, {len(valid_set.sizes)} programs"
                if valid_set else "; no validation data"))
    return train_set, valid_set, scaler


TEACHER_SOURCE = "teacher"      # the pseudo-programs teacher:PROGRAM of --teacher-data


def _load_teacher(opts: TrainOptions):
    from tpuperf_cli.model.predict import load_model

    try:
        teacher = load_model(opts.teacher, engine="auto")
    except TpuperfError as e:
        raise TpuperfError(f"--teacher: {e}", exit_code=2) from None
    if teacher.task != "fusion":
        raise TpuperfError(f"--teacher {opts.teacher}: a {teacher.task} model ranks "
                           f"configurations; a teacher must predict runtimes (--task fusion)",
                           exit_code=2)
    return teacher


def _teacher_info(teacher) -> dict:
    members = getattr(teacher.net, "members", None)
    return {"name": teacher.name, "members": len(members) if members is not None else 1}


def label_with_teacher(opts: TrainOptions, out: str, held_out: Iterable[str] = (),
                       progress: Callable[[str], None] = log, teacher: Model | None = None) -> dict:
    """Labels for kernels nobody timed (--teacher-data): each graph record of
    the shards opts.teacher_data, measured or not, is written to `out`
    with the teacher's prediction as runtime_ns, its program renamed
    teacher:PROGRAM (a generated source of its own, drawn like the others:
    --generated-share, --source-weight teacher=W) and label_from naming the
    teacher; its measurement, if any, is dropped. The teacher's answers
    there, away from the measured kernels, are what a student of one
    network can learn from an ensemble that its labels alone do not teach.
    A record of a `held_out` program (the split's validation and test
    programs), or drawn from one (its origin), is left out: the programs a
    model is judged on stay unseen. `teacher`: opts.teacher loaded
    already. Returns what the model file records."""
    from tpuperf_cli.errors import StreamError
    from tpuperf_cli.model.predict import predict_records
    from tpuperf_cli.records import MEASURE_FIELDS, MODEL, ORIGIN, PRED_NS, PROGRAM, RUNTIME_NS, SOURCE
    from tpuperf_cli.split import ProgramSet
    from tpuperf_cli.stream import RecordWriter, read_many

    teacher = teacher or _load_teacher(opts)
    paths = expand(opts.teacher_data, "--teacher-data")
    held = ProgramSet(list(held_out))
    left_out = 0

    def kept(records):
        nonlocal left_out
        for r in records:
            if str(r.get(PROGRAM, "")) in held or str(r.get(ORIGIN, "")) in held:
                left_out += 1
            else:
                yield r

    t0 = time.time()
    n = 0
    try:
        with RecordWriter(out, compress=False) as w:
            for r in predict_records(kept(read_many(paths)), teacher, name=", ".join(paths)):
                pred = r.pop(PRED_NS)
                r.pop(MODEL, None)
                for f in MEASURE_FIELDS:
                    r.pop(f, None)
                r[RUNTIME_NS] = float(pred)
                r[PROGRAM] = f"{TEACHER_SOURCE}:{r.get(PROGRAM, '')}"
                r[SOURCE] = TEACHER_SOURCE
                r["label_from"] = teacher.name
                w.write(r)
                n += 1
    except StreamError as e:
        raise TpuperfError(f"--teacher-data: {e}") from None
    held_text = f"; {left_out} of validation or test programs left out" if left_out else ""
    if not n:
        raise TpuperfError(f"--teacher-data {' '.join(opts.teacher_data)}: no graph records"
                           + held_text)
    progress(f"train: {n} kernels of --teacher-data labelled by teacher {teacher.name} "
             f"(source {TEACHER_SOURCE}{held_text}; {time.time() - t0:.1f}s)")
    return {**_teacher_info(teacher), "data": list(opts.teacher_data), "examples": n,
            "left_out": left_out}


def blend_teacher(train_set: Corpus, opts: TrainOptions, progress: Callable[[str], None] = log,
                  teacher: Model | None = None) -> dict:
    """Distillation: replace each training label by runtime^(1-w) *
    teacher^w, w = opts.teacher_weight, the teacher being the model file
    opts.teacher (typically an ensemble of seeds, whose predictions vary less
    from seed to seed than one network's). Validation keeps the measured
    labels; the examples of --teacher-data (label_with_teacher) hold its
    predictions already and are left as they are. The examples must be in
    memory (a cached corpus). `teacher`: opts.teacher loaded already. Returns what
    the model file records of the teacher (its name, members, how far its
    predictions were from the labels)."""
    from tpuperf_cli.errors import StreamError

    if train_set.streaming:
        raise TpuperfError(f"--teacher needs the training examples in memory, and they are larger "
                           f"than --memory-mb {opts.memory_mb:g}; give a larger --memory-mb",
                           exit_code=2)
    teacher = teacher or _load_teacher(opts)
    t0 = time.time()
    w = opts.teacher_weight
    ratios = []
    for examples in train_set.cache.values():
        examples = [ex for ex in examples if not ex.program.startswith(TEACHER_SOURCE + ":")]
        if not examples:
            continue
        try:
            pred = teacher.predict_examples(examples)
        except StreamError as e:
            raise TpuperfError(f"--teacher {opts.teacher}: {e}", exit_code=2) from None
        for ex, p in zip(examples, pred):
            if ex.runtime > 0 and p > 0:
                ratios.append(p / ex.runtime)
                ex.runtime = float(ex.runtime ** (1.0 - w) * p ** w)
    r = np.abs(np.asarray(ratios) - 1.0) if ratios else np.zeros(1)
    progress(f"train: labels blended with {w:g} of teacher {teacher.name}'s predictions "
             f"({len(ratios)} examples, its median error on them {100 * np.median(r):.1f}%, "
             f"p90 {100 * np.quantile(r, 0.9):.1f}%; {time.time() - t0:.1f}s)")
    return {**_teacher_info(teacher), "weight": w, "examples": len(ratios),
            "median_ape": round(float(np.median(r)), 4)}


# ---------------------------------------------------------------- the loop

class TrainingRun:
    """One training run: the network, its moving average, the optimizer and
    schedule, the sampling generator and the loop's counters."""

    def __init__(self, net_cfg: NetConfig, scaler: Scaler, opts: TrainOptions, dist: Dist | None = None):
        import copy

        import torch

        from tpuperf_cli.model.net import Net

        self.net_cfg, self.scaler, self.opts = net_cfg, scaler, opts
        self.dist = dist or Dist()
        self.known = None          # the model file's `known` entry (known_entry), written with it
        self.local_batch = self.dist.local_batch(opts.batch_size)
        net_cfg.in_features = scaler.width
        net_cfg.num_opcodes = max(net_cfg.num_opcodes, max(scaler.opcodes, default=0) + 1)
        if net_cfg.minor_dim and scaler.minor_column is None:
            raise TpuperfError(f"--minor-embedding reads kernel feature {MINOR_FEATURE + 1} (output_minor_dim): "
                               + (f"give --kernel-features {MINOR_FEATURE + 1} or more" if scaler.columns is None
                                  else "name output_minor_dim in --kernel-features"), exit_code=2)
        try:
            net_cfg.check()
        except ValueError as e:
            raise TpuperfError(str(e), exit_code=2) from None
        torch.manual_seed(opts.seed)
        self.net = Net(net_cfg).to(opts.device)
        # foreach: a few calls over all the tensors a step, not a dozen per
        # tensor from Python (torch's default on CUDA alone; on CPU it makes
        # the same per-tensor calls in C++: the weights come out the same)
        self.optim = torch.optim.AdamW(self.net.parameters(), lr=opts.lr, weight_decay=opts.weight_decay,
                                       foreach=True)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.optim, T_max=opts.epochs,
                                                                eta_min=opts.lr / 10)
        self.ema_net = None
        if opts.ema:
            self.ema_net = copy.deepcopy(self.net)
            for p in self.ema_net.parameters():
                p.requires_grad_(False)
        # every rank seeds torch alike (the same initial weights); the sampling
        # generator is the rank's own, as its examples are
        self.rng = np.random.default_rng(opts.seed if self.dist.world == 1 else [opts.seed, self.dist.rank])
        self.epoch, self.best, self.best_epoch, self.bad, self.history, self.step = 0, None, 0, 0, [], 0
        self.name_written = None        # the name of the model last written to `out`
        # --tail-average: the running sum (float64) of the saved weights at the end of
        # each epoch from the best one on, and how many epochs it holds
        self.tail_sum, self.tail_n = None, 0
        self.lut = scaler.opcode_table(net_cfg.num_opcodes)
        self.sequence = net_cfg.reduction in ("lstm", "transformer")
        self.parameters = sum(p.numel() for p in self.net.parameters())

    @property
    def saved_net(self):
        """What is validated and written to `out`: the moving average, if kept."""
        return self.ema_net if self.ema_net is not None else self.net

    def add_to_tail(self, improved: bool) -> None:
        """Add this epoch's saved weights to the --tail-average sum; a better
        epoch starts the sum again from its own weights."""
        if not self.opts.tail_average:
            return
        weights = {k: v.detach().double().clone() for k, v in self.saved_net.state_dict().items()
                   if v.is_floating_point()}
        if improved or self.tail_sum is None:
            self.tail_sum, self.tail_n = weights, 1
        else:
            for k, v in weights.items():
                self.tail_sum[k] += v
            self.tail_n += 1

    def tail_net(self):
        """A copy of the saved network holding the --tail-average weights."""
        import copy

        net = copy.deepcopy(self.saved_net)
        state = net.state_dict()
        state.update({k: (v / self.tail_n).to(state[k].dtype) for k, v in self.tail_sum.items()})
        net.load_state_dict(state)
        return net

    def train_step(self, examples: Sequence | None, groups: np.ndarray | None = None) -> tuple[int, float]:
        """One optimizer step on this rank's share of a batch (None: this
        rank has no more batches this epoch, while others may); (graphs in
        the whole batch, their loss sum), (0, 0.0) when no rank had any."""
        import torch

        opts, cfg = self.opts, self.net_cfg
        self.optim.zero_grad(set_to_none=True)
        n, loss_sum = 0, 0.0
        if examples:
            b = make_batch(examples, self.scaler, self.lut, cfg.neighbors, self.sequence,
                           cfg.max_nodes, groups)
            loss = batch_loss(self.net, b, opts, opts.device, self.scaler.std)
            loss.backward()
            n, loss_sum = len(examples), float(loss) * len(examples)
        n, loss_sum = self.dist.reduce_gradients(self.net.parameters(), n, loss_sum)
        if n:
            if opts.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.net.parameters(), opts.grad_clip)
            self.optim.step()
            self.step += 1
            if self.ema_net is not None:
                decay = min(opts.ema, (1 + self.step) / (10 + self.step))   # warm-up: early steps count fully
                with torch.no_grad():
                    ema = list(self.ema_net.parameters())
                    torch._foreach_mul_(ema, decay)
                    torch._foreach_add_(ema, list(self.net.parameters()), alpha=1 - decay)
        return n, loss_sum

    def train_epoch(self, train_set: Corpus) -> tuple[float, int]:
        """One pass over an epoch's batches; (mean loss, graphs seen), of
        all ranks. A rank whose batches run out steps on with none until
        every rank's have (the all-reduce needs them all)."""
        opts = self.opts
        self.net.train()
        total, steps, seen = 0.0, 0, 0
        batches = train_set.batches(self.rng, self.local_batch, opts.even, opts.generated_share,
                                    opts.generated_even, opts.source_weight, opts.time_weight)
        while True:
            examples, groups = next(batches, (None, None))
            n, loss_sum = self.train_step(examples, groups)
            if not n:
                break
            total += loss_sum / n
            steps += 1
            seen += n
        self.sched.step()
        if not steps:
            raise TpuperfError("an epoch drew no batches (tile task: every kernel needs at least "
                               "two configurations with runtime_ns)")
        return total / steps, seen

    def validate(self, model: Model, valid_set: Corpus, figures: dict) -> tuple[bool, str]:
        """Validation figures into `figures`; (improved, progress text)."""
        opts = self.opts
        self.saved_net.eval()
        v = evaluate(model, valid_set, opts, dist=self.dist)
        figures.update(_valid_figures(v))
        metric = v[opts.monitor]
        improved = _better(opts.monitor, metric, self.best)
        if improved:
            self.best, self.best_epoch, self.bad = metric, self.epoch, 0
        else:
            self.bad += 1
        return improved, "  " + _valid_text(v, opts.task) + ("  *" if improved else "")


def _valid_figures(v: dict) -> dict:
    """evaluate's figures as a model file and the history record them."""
    return {f"valid_{k}": v[k] for k in ("loss", "mape", "tau")}


def _valid_text(v: dict, task: str) -> str:
    """evaluate's figures as the progress lines print them."""
    what = "Tile-Size APE" if task == "tile" else "MAPE"
    return ((f"valid loss {v['loss']:.4f}  " if task == "fusion" else "valid  ")
            + f"{what} {v['mape']:.1f}%  tau {v['tau']:.3f}")


def _write_model(d: dict, path, dist: Dist, known: dict | None = None) -> None:
    """Write a model file (rank 0 only); a data-parallel run's records its
    processes. known: the file's `known` entry (model.known), if any."""
    from tpuperf_cli.model.predict import save_atomic

    if known is not None:
        d["known"] = known
    if dist.world > 1:
        d["trained"]["processes"] = dist.world
    if dist.main:
        save_atomic(d, path)


def known_entry(train_set: Corpus, opts, teacher_shard: str | None = None) -> dict | None:
    """The model file's `known` entry: the measured runtimes of the training
    kernels (model.known), none from a teacher's labels; None for a tile
    model, whose scores are not runtimes."""
    from tpuperf_cli.model import known

    if opts.task != "fusion":
        return None
    return known.encode(train_set.known_table(exclude=[teacher_shard] if teacher_shard else ()))


def trained_info(train_set, data, valid, split, opts, figures, seconds, epochs, best_epoch,
                 stopped=None, **more) -> dict:
    """The model file's record of how it was made (a network's or trees'):
    the data, what training ran and its best round's validation figures;
    `more` adds fields of the learner (a network's parameters, the trees'
    options). A network writes it with every better epoch (then epochs run
    = best epoch); _finish completes epochs, seconds and stopped when
    training ends."""
    return {"data": list(data), "valid": list(valid or []), "split": split,
            "examples": train_set.examples, "programs": sorted(train_set.sizes),
            "epochs": epochs, "best_epoch": best_epoch, "valid_figures": figures,
            "seconds": seconds, "best_seconds": seconds, "stopped": stopped,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "tpuperf": __version__, "options": asdict(opts), **more,
            "targets": [{k: v for k, v in train_set.target_dicts[key].items() if k in TARGET_KEYS}
                        for key in train_set.targets]}


def _finish(out, run, seconds, stopped):
    """Rewrite OUT's record of training with the epochs run, the total
    time and why it stopped; the weights stay the best epoch's."""
    import torch

    from tpuperf_cli.model.predict import save_atomic

    if run.name_written is None or not os.path.exists(out):
        return
    d = torch.load(out, map_location="cpu", weights_only=True)
    if not isinstance(d, dict) or d.get("name") != run.name_written:
        return          # not the file this run wrote: leave it alone
    t = d.setdefault("trained", {})
    t.setdefault("best_seconds", t.get("seconds"))
    t.update(epochs=run.epoch, best_epoch=run.best_epoch, seconds=round(seconds, 3), stopped=stopped)
    save_atomic(d, out)


def _write_tail(run, valid_set, opts, scaler, target, train_set, data, valid, split, taught,
                seconds, stopped, dist, progress):
    """Write --tail-average's model: the saved weights averaged over the
    epochs from the best one to the last (stochastic weight averaging over
    the epochs early stopping waits through), validated like an epoch."""
    from tpuperf_cli.model.predict import Model, model_dict

    path = opts.tail_average
    net = run.tail_net()
    net.eval()
    v = evaluate(Model(net, scaler, {"name": "tail", "task": opts.task}, device=opts.device),
                 valid_set, opts, dist=dist)
    figures = _valid_figures(v)
    first = run.epoch - run.tail_n + 1
    info = trained_info(train_set, data, valid, split, opts, figures, round(seconds, 3), run.epoch,
                        run.best_epoch, stopped, parameters=run.parameters,
                        tail_average={"epochs": [first, run.epoch], "snapshots": run.tail_n}, **taught)
    d = model_dict(net, scaler, os.path.splitext(os.path.basename(path))[0], opts.task, opts.loss,
                   target, info)
    _write_model(d, path, dist, run.known)
    progress(f"train: wrote {path} (model {d['name']}: the weights of epochs {first} to "
             f"{run.epoch} averaged; {_valid_text(v, opts.task)})")


def train(data: Sequence[str], out: str | os.PathLike, net: NetConfig | None = None,
          opts: TrainOptions | None = None, valid: Sequence[str] | None = None, split: str | None = None,
          resume: bool = False, keep_state: bool = False, name: str | None = None,
          progress: Callable[[str], None] = log, given: Iterable[str] | None = None) -> dict:
    """Train a model on the graph records in `data` (paths or glob patterns)
    and write it to `out`. Returns a summary dict (epochs, best epoch,
    validation figures, seconds, model name).

    valid: shards for validation, all their records (default: none, or the
    split's "valid" programs of `data` when split is given). split: a JSON
    file of program lists; training then keeps only its "train" programs.

    resume: continue the run saved in `out + ".resume"` with its own options
    and hyperparameters; net and opts are ignored but for the fields named
    in `given` (those the user chose, e.g. on the command line): epochs,
    patience, max_time, memory_mb, threads and device take their new value
    (more epochs: the learning rate decays from where it was to lr/10 over
    the new last epoch), any other that differs is refused (exit 2).

    Started by torchrun (WORLD_SIZE > 1 in the environment), every process
    calls train alike and the run is data-parallel (model.dist): batch_size
    is then the global batch, split across the processes.
    """
    dist = Dist.from_env((opts or TrainOptions()).device)
    finished = False
    try:
        # for the shard --teacher-data is labelled into (a resumed run's
        # options, known only later, may have it): removed when training ends
        with tempfile.TemporaryDirectory(prefix="tpuperf-train-") as work:
            summary = _train(data, out, net, opts, valid, split, resume, keep_state, name,
                             progress if dist.main else _silent, given, dist, work)
        finished = True
        return summary
    finally:
        dist.close(finished)


def _silent(_line: str) -> None:
    """Progress of the ranks other than 0: rank 0 speaks for the run."""


def _train(data, out, net, opts, valid, split, resume, keep_state, name, progress, given, dist, work):
    from dataclasses import replace

    from tpuperf_cli.model import resume as resuming
    from tpuperf_cli.model.config import NetConfig
    from tpuperf_cli.model.predict import Model, model_dict, save_atomic

    opts = (opts or TrainOptions()).check()
    net_cfg = net or NetConfig()
    t0 = time.time()
    state = None
    if resume:
        state, opts, net_cfg = resuming.load_state(out, opts, net, given, progress)
    earlier = (state or {}).get("seconds", 0.0)      # seconds of the run before it was resumed
    set_threads(opts.threads or None)
    opts = replace(opts, device=dist.device(opts.device))
    check_device(opts.device)
    dist.local_batch(opts.batch_size)       # refuse a batch smaller than the processes before reading
    taught = {}
    shards = list(data)
    blend = opts.teacher and opts.teacher_weight > 0
    teacher = _load_teacher(opts) if opts.teacher_data or blend else None
    if opts.teacher_data:
        # labelled anew by a resumed run too, alike
        shards.append(os.path.join(work, "teacher.msgpack"))
        held = []
        if split:
            s = load_split(split)
            held = s["valid"] + s["test"]
        taught["teacher_data"] = label_with_teacher(opts, shards[-1], held, progress, teacher)
    train_set, valid_set, scaler = load_data(
        shards, valid, split, opts, Scaler.from_dict(state["scaling"]) if state else None, progress, dist)
    if blend:
        taught["teacher"] = blend_teacher(train_set, opts, progress, teacher)

    if opts.tail_average and valid_set is None:
        raise TpuperfError("--tail-average averages the epochs from the best validation epoch "
                           "on: give validation programs (--split or --valid)", exit_code=2)
    run = TrainingRun(net_cfg, scaler, opts, dist)
    run.known = known_entry(train_set, opts, shards[-1] if opts.teacher_data else None)
    if state is not None:
        resuming.restore(state, run)
        ranks = state.get("rank_rngs")
        if dist.world > 1:
            # each rank's own sampling generator; a run resumed with another number of
            # processes draws afresh (seeded by rank and epoch)
            run.rng = np.random.default_rng([opts.seed, dist.rank, run.epoch])
            if ranks and len(ranks) == dist.world:
                run.rng.bit_generator.state = ranks[dist.rank]
    model = Model(run.saved_net, scaler, {"name": "training", "task": opts.task}, device=opts.device)
    stem = name or os.path.splitext(os.path.basename(os.fspath(out)))[0]
    target = train_set.target()
    if state is None:
        progress(f"train: {net_cfg.gnn} x{net_cfg.layers if net_cfg.gnn != 'none' else 0}, "
                 f"{net_cfg.reduction} reduction, hidden {net_cfg.hidden}, {run.parameters} parameters; "
                 f"task {opts.task}, loss {opts.loss}, device {opts.device}"
                 + (f"; {dist.world} processes ({dist.backend}), {run.local_batch} graphs per "
                    f"process per step" if dist.world > 1 else ""))

    stopped = "epochs"
    for epoch in range(run.epoch + 1, opts.epochs + 1):
        run.epoch = epoch
        te = time.time()
        train_loss, seen = run.train_epoch(train_set)
        figures = {"train_loss": train_loss}
        line = f"epoch {epoch:3d}/{opts.epochs}  loss {train_loss:.4f}"
        if valid_set is not None:
            improved, text = run.validate(model, valid_set, figures)
            line += text
        else:
            improved = True
            run.best_epoch = epoch
        line += f"  {seen} graphs, {time.time() - te:.1f}s"
        progress(line)
        run.history.append(figures)
        run.add_to_tail(improved)
        if improved:
            seconds = round(time.time() - t0 + earlier, 3)  # ms: a best first epoch may take under 0.05 s
            d = model_dict(run.saved_net, scaler, stem, opts.task, opts.loss, target,
                           trained_info(train_set, data, valid, split, run.opts, figures, seconds,
                                        run.epoch, run.best_epoch, parameters=run.parameters, **taught))
            _write_model(d, out, dist, run.known)
            run.name_written = d["name"]
        elapsed = dist.max(time.time() - t0 + earlier)     # the slowest rank's: all stop together
        rank_rngs = dist.gather(run.rng.bit_generator.state) if dist.world > 1 else None
        if dist.main:
            snap = resuming.snapshot(run, elapsed)
            if rank_rngs:
                snap["rank_rngs"] = rank_rngs
            save_atomic(snap, resuming.state_path(out))
        if valid_set is not None and run.bad >= opts.patience:
            stopped = f"no better validation {opts.monitor} for {opts.patience} epochs"
            break
        if opts.max_time and elapsed >= opts.max_time:
            stopped = f"time limit of {opts.max_time:.0f}s"
            break
    seconds = time.time() - t0 + earlier
    if opts.tail_average and run.tail_n:
        _write_tail(run, valid_set, opts, scaler, target, train_set, data, valid, split, taught,
                    seconds, stopped, dist, progress)
    if dist.main:
        _finish(out, run, seconds, stopped)
        if not keep_state and os.path.exists(resuming.state_path(out)):
            os.unlink(resuming.state_path(out))
    summary = {"model": run.name_written, "out": os.fspath(out), "epochs": run.epoch,
               "best_epoch": run.best_epoch, "stopped": stopped, "seconds": round(seconds, 3),
               "parameters": run.parameters, "history": run.history}
    if run.history:
        best = run.best_epoch
        summary["best"] = run.history[best - 1] if 0 < best <= len(run.history) else run.history[-1]
    progress(f"train: wrote {out} (model {run.name_written}, epoch {run.best_epoch} of {run.epoch}; "
             f"stopped: {stopped}; {seconds:.0f}s)")
    return summary
