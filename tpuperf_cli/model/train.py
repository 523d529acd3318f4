"""The training loop: losses, validation, early stopping, checkpoints, resume.

    result = train(["shards/*.zst"], "model.pt", net=NetConfig(), opts=TrainOptions())

Fusion task: MSE on the standardised log runtime. Tile task: a pairwise
rank loss between configurations of the same kernel (hinge or logistic),
batches made of whole kernels. Examples are drawn evenly across programs.

Every epoch ends with a validation pass (when there is validation data) and
a progress line on stderr; the best model so far is written atomically to
`out`, and the loop's state (weights, optimizer, epoch, random generators,
early-stopping counters) to `out + ".resume"`, so `resume=True` continues an
interrupted run exactly where its last finished epoch left it. The resume
file is removed when training ends normally (keep_state=False).
"""

import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, fields

import numpy as np

from tpuperf_cli import __version__
from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.model import check_device, set_threads
from tpuperf_cli.model.data import Corpus, Scaler, expand

TASKS = ("fusion", "tile")
LOSSES = ("mse", "hinge", "logistic")


@dataclass
class TrainOptions:
    """Options of the training loop (saved in the model file)."""

    task: str = "fusion"        # "fusion" (per-kernel runtime) or "tile" (rank a kernel's configs)
    loss: str = ""              # "mse" (fusion default), "hinge" (tile default) or "logistic"
    epochs: int = 100           # at most this many epochs
    batch_size: int = 64        # graphs per step (tile: whole kernels, about this many configs)
    lr: float = 1e-3            # Adam learning rate (cosine decay to lr/10 over `epochs`)
    weight_decay: float = 0.0   # AdamW weight decay
    margin: float = 0.1         # hinge margin, in standardised log-runtime units
    patience: int = 10          # stop after this many epochs without a better validation figure
    monitor: str = ""           # "loss", "mape" or "tau"; default: loss (fusion), tau (tile)
    min_runtime_ns: float = 5000.0   # validation MAPE/tau only on kernels at least this long
    even: bool = True           # draw examples evenly across programs
    configs: int = 16           # tile task: configurations drawn per kernel per epoch
    memory_mb: float = 2048     # decoded examples kept in memory; beyond that, stream shards
    seed: int = 0               # seeds numpy, torch and the sampling
    device: str = "cpu"         # "cpu" or "cuda"
    threads: int = 0            # torch threads (0: min(2, cores))
    max_time: float = 0.0       # stop after the epoch that passes this many seconds (0: no limit)
    grad_clip: float = 1.0      # clip the gradient norm (0: off)
    ema: float = 0.99           # validate and save an exponential moving average of the
                                # weights with this decay per step (0: the raw weights)

    def check(self):
        if self.task not in TASKS:
            raise TpuperfError(f"--task must be one of {', '.join(TASKS)}")
        if not self.loss:
            self.loss = "mse" if self.task == "fusion" else "hinge"
        if self.loss not in LOSSES:
            raise TpuperfError(f"--loss must be one of {', '.join(LOSSES)}")
        if self.task == "fusion" and self.loss != "mse":
            raise TpuperfError(f"--loss {self.loss} is a pairwise rank loss between the tile "
                               f"configurations of a kernel, for --task tile; --task fusion "
                               f"fits runtimes with --loss mse", exit_code=2)
        if not self.monitor:
            self.monitor = "loss" if self.task == "fusion" else "tau"
        if self.monitor not in ("loss", "mape", "tau"):
            raise TpuperfError("--monitor must be loss, mape or tau")
        if not 0 <= self.ema < 1:
            raise TpuperfError("--ema must be in [0, 1)")
        if self.epochs < 1 or self.batch_size < 1:
            raise TpuperfError("--epochs and --batch-size must be at least 1")
        if self.task == "tile" and self.configs < 2:
            raise TpuperfError("--configs must be at least 2 for the tile task")
        return self


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- losses

def rank_loss(score, y, group, kind="hinge", margin=0.1):
    """Pairwise rank loss over pairs (i, j) of the same group where i ran
    faster than j: the score of j should exceed that of i.

    hinge: mean relu(margin - (s_j - s_i)); logistic: mean log(1 + exp(-(s_j - s_i))).
    Returns 0 (with a gradient) when the batch holds no such pair.
    """
    import torch
    from torch.nn import functional as F

    same = group[:, None] == group[None, :]
    slower = y[None, :] > y[:, None]              # [i, j]: j slower than i
    pairs = same & slower
    if not bool(pairs.any()):
        return score.sum() * 0.0
    diff = (score[None, :] - score[:, None])[pairs]
    if kind == "hinge":
        return F.relu(margin - diff).mean()
    return F.softplus(-diff).mean()


def batch_loss(net, b, opts, device):
    import torch

    from tpuperf_cli.model.net import to_device

    pred = net(to_device(b, device))
    y = torch.from_numpy(b.y).to(device)
    if opts.loss == "mse":
        return torch.mean((pred - y) ** 2)
    group = torch.from_numpy(b.group).to(device)
    return rank_loss(pred, y, group, opts.loss, opts.margin)


# ---------------------------------------------------------------- evaluation

def evaluate(model, corpus, opts, batch_size=256):
    """Predictions on every example of a corpus and the figures of the task.

    Returns {"loss", "mape", "tau", "programs", "kernels"}: fusion: MSE of the
    standardised log runtime; median over programs of MAPE and Kendall's tau
    on kernels >= min_runtime_ns. Tile: mean per-kernel tau and Tile-Size APE
    (as "mape").
    """
    from tpuperf_cli.eval import metrics

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
        return {"loss": float(np.mean((yp - y) ** 2)),
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


# ---------------------------------------------------------------- splits

def read_split(path):
    """{"train": [...], "valid": [...], "test": [...]} program lists."""
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as e:
        raise TpuperfError(f"--split {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise TpuperfError(f"--split {path}: not JSON ({e})") from None
    if not isinstance(d, dict) or not isinstance(d.get("train"), list):
        raise TpuperfError(f'--split {path}: expected {{"train": [programs], "valid": [...], '
                           f'"test": [...]}}')
    return {k: [str(p) for p in d.get(k) or []] for k in ("train", "valid", "test")}


# ---------------------------------------------------------------- resuming

# Options a resumed run may change: how long it runs and what it runs on.
# The others (the loss, the sampling, the network, ...) define the run.
RESUME_CHANGEABLE = ("epochs", "patience", "max_time", "memory_mb", "threads", "device")


def _flag(field):
    return "--min-us" if field == "min_runtime_ns" else "--" + field.replace("_", "-")


def _shown(field, value):
    return value / 1000.0 if field == "min_runtime_ns" else value


def resume_options(stored_opts, stored_net, opts, net, given):
    """The options of a resumed run: the stored ones, except those named in
    `given` (chosen explicitly, e.g. on the command line) that may change
    (RESUME_CHANGEABLE), which take their value in opts. A given option of
    another kind whose value differs from the stored one is refused
    (TpuperfError, exit 2). Returns (opts, net, [(field, old, new)])."""
    from tpuperf_cli.model.net import NetConfig

    new_opts = TrainOptions(**stored_opts)
    new_net = NetConfig.from_dict(stored_net)
    opt_fields = {f.name for f in fields(TrainOptions)}
    net_fields = {f.name for f in fields(NetConfig)}
    changed, refused = [], []
    for field in sorted(given or ()):
        if field in opt_fields and opts is not None:
            old, new = getattr(new_opts, field), getattr(opts, field)
        elif field in net_fields and net is not None:
            old, new = getattr(new_net, field), getattr(net, field)
        else:
            continue
        if new == old:
            continue
        if field in RESUME_CHANGEABLE:
            setattr(new_opts, field, new)
            changed.append((field, old, new))
        else:
            refused.append(f"{_flag(field)} (the run has {_shown(field, old)}, "
                           f"not {_shown(field, new)})")
    if refused:
        raise TpuperfError(f"--resume cannot change {', '.join(refused)}: a resumed run keeps its "
                           f"options and hyperparameters, but for "
                           f"{', '.join(_flag(f) for f in RESUME_CHANGEABLE)}", exit_code=2)
    return new_opts.check(), new_net, changed


class CosineTail:
    """The learning rate of a run whose --epochs changed on resume: a half
    cosine from the rate it had (lr0, after `start` epochs) down to eta_min
    after epoch `end`, stepped once per epoch like CosineAnnealingLR."""

    def __init__(self, optimizer, start, lr0, end, eta_min, last=None):
        self.optimizer = optimizer
        self.start, self.lr0, self.end, self.eta_min = start, lr0, end, eta_min
        self.last = start if last is None else last

    def step(self):
        self.last += 1
        t = min(1.0, (self.last - self.start) / max(1, self.end - self.start))
        lr = self.eta_min + (self.lr0 - self.eta_min) * (1 + math.cos(math.pi * t)) / 2
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def state_dict(self):
        return {"cosine_tail": [self.start, self.lr0, self.end, self.eta_min], "last": self.last}

    @classmethod
    def from_state(cls, optimizer, d):
        return cls(optimizer, *d["cosine_tail"], last=d["last"])


# ---------------------------------------------------------------- the loop

def train(data, out, net=None, opts=None, valid=None, split=None, resume=False,
          keep_state=False, name=None, progress=log, given=None):
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
    """
    import torch

    from tpuperf_cli.model.net import Net, NetConfig
    from tpuperf_cli.model.predict import Model, model_dict, save_atomic

    opts = (opts or TrainOptions()).check()
    net_cfg = net or NetConfig()
    t0 = time.time()
    state_path = os.fspath(out) + ".resume"
    state = None
    if resume:
        if not os.path.exists(state_path):
            raise TpuperfError(f"--resume: no {state_path} to resume from (a finished run leaves "
                               f"none; start again without --resume)")
        state = torch.load(state_path, map_location="cpu", weights_only=False)
        opts, net_cfg, changed = resume_options(state["opts"], state["net"], opts, net, given)
        if state["epoch"] >= opts.epochs:
            raise TpuperfError(f"--resume: {out} has run {state['epoch']} epochs, all of its "
                               f"--epochs {opts.epochs}; give a larger --epochs to train more",
                               exit_code=2)
        progress(f"train: resuming {out} after epoch {state['epoch']} (options and hyperparameters "
                 f"of the interrupted run" + "".join(f"; {_flag(f)} {_shown(f, new)} (was "
                                                     f"{_shown(f, old)})" for f, old, new in changed)
                 + ")")
    set_threads(opts.threads or None)
    check_device(opts.device)

    # ---- data
    paths = expand(data, "--data")
    programs = valid_programs = None
    if split:
        s = read_split(split)
        programs = s["train"]
        valid_programs = s["valid"]
    train_set = Corpus(paths, programs, opts.task, opts.memory_mb, opts.configs)
    if state is None:
        scaler = Scaler()
        train_set.scan(scaler)
        scaler.finish()
    else:
        scaler = Scaler.from_dict(state["scaling"])
        train_set.scan(kernel_features=scaler.kernel_features)
    if train_set.examples == 0:
        raise TpuperfError("no training examples with runtime_ns in " + ", ".join(data)
                           + (f" (programs of {split} 'train')" if split else ""))
    if len(train_set.sizes) < 1:
        raise TpuperfError("no training programs")
    valid_set = None
    if valid:
        # --valid takes precedence over the split's "valid" programs: all its records validate
        valid_set = Corpus(expand(valid, "--valid"), None, opts.task,
                           opts.memory_mb, opts.configs).scan(kernel_features=scaler.kernel_features)
    elif valid_programs:
        valid_set = Corpus(paths, valid_programs, opts.task, opts.memory_mb,
                           opts.configs).scan(kernel_features=scaler.kernel_features)
    if valid_set is not None and valid_set.examples == 0:
        progress("train: warning: no validation examples; training all epochs without early stopping")
        valid_set = None
    skipped = sum(train_set.skipped.values())
    progress(f"train: {train_set.examples} examples from {len(train_set.sizes)} programs"
             f" in {len(paths)} shard(s)"
             + (f" ({skipped} records without runtime_ns skipped)" if skipped else "")
             + (", streamed (larger than --memory-mb)" if train_set.streaming else ", in memory")
             + (f"; validation {valid_set.examples} examples, {len(valid_set.sizes)} programs"
                if valid_set else "; no validation data"))

    # ---- model
    from tpuperf_cli.model import data as data_mod

    net_cfg.in_features = scaler.width
    net_cfg.num_opcodes = max(net_cfg.num_opcodes, max(scaler.opcodes, default=0) + 1)
    torch.manual_seed(opts.seed)
    model_net = Net(net_cfg).to(opts.device)
    optim = torch.optim.AdamW(model_net.parameters(), lr=opts.lr, weight_decay=opts.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optim, T_max=opts.epochs, eta_min=opts.lr / 10)
    ema_net = None
    if opts.ema:
        import copy

        ema_net = copy.deepcopy(model_net)
        for p in ema_net.parameters():
            p.requires_grad_(False)
    saved_net = ema_net if ema_net is not None else model_net          # what is validated and written to `out`
    rng = np.random.default_rng(opts.seed)
    start_epoch, best, best_epoch, bad, history, step = 0, None, 0, 0, [], 0
    if state is not None:
        model_net.load_state_dict(state["weights"])
        if ema_net is not None:
            ema_net.load_state_dict(state["ema_weights"])
        optim.load_state_dict(state["optimizer"])
        if "cosine_tail" in state["scheduler"]:
            sched = CosineTail.from_state(optim, state["scheduler"])
        else:
            sched.load_state_dict(state["scheduler"])
        if opts.epochs != state["opts"]["epochs"]:
            # the schedule was for the old number of epochs: decay from the current rate instead
            sched = CosineTail(optim, state["epoch"], optim.param_groups[0]["lr"], opts.epochs,
                               opts.lr / 10)
        rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        start_epoch, best, best_epoch, bad = state["epoch"], state["best"], state["best_epoch"], state["bad"]
        history = state["history"]
        step = state["step"]
    model = Model(saved_net, scaler, {"name": "training", "task": opts.task}, device=opts.device)
    stem = name or os.path.splitext(os.path.basename(os.fspath(out)))[0]
    target = train_set.target()
    n_params = sum(p.numel() for p in model_net.parameters())
    if state is None:
        progress(f"train: {net_cfg.gnn} x{net_cfg.layers if net_cfg.gnn != 'none' else 0}, "
                 f"{net_cfg.reduction} reduction, hidden {net_cfg.hidden}, {n_params} parameters; "
                 f"task {opts.task}, loss {opts.loss}, device {opts.device}")

    def trained_info(epoch, figures):
        # written with every better epoch (then epochs run = best epoch); finish() completes
        # epochs, seconds and stopped when training ends
        seconds = round(time.time() - t0 + (state or {}).get("seconds", 0.0), 1)
        return {"data": list(data), "valid": list(valid or []), "split": split,
                "examples": train_set.examples, "programs": sorted(train_set.sizes),
                "epochs": epoch, "best_epoch": best_epoch, "valid_figures": figures,
                "seconds": seconds, "best_seconds": seconds, "stopped": None,
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "tpuperf": __version__, "options": asdict(opts), "parameters": n_params,
                "targets": [dict(zip(("platform", "device_kind", "chip"), k))
                            for k in train_set.targets]}

    def save_model(epoch, figures):
        d = model_dict(saved_net, scaler, stem, opts.task, opts.loss, target,
                       trained_info(epoch, figures))
        save_atomic(d, out)
        return d["name"]

    def finish(epochs, seconds, stopped):
        """Rewrite OUT's record of training with the epochs run, the total
        time and why it stopped; the weights stay the best epoch's."""
        if name_written is None or not os.path.exists(out):
            return
        d = torch.load(out, map_location="cpu", weights_only=True)
        if not isinstance(d, dict) or d.get("name") != name_written:
            return          # not the file this run wrote: leave it alone
        t = d.setdefault("trained", {})
        t.setdefault("best_seconds", t.get("seconds"))
        t.update(epochs=epochs, best_epoch=best_epoch, seconds=round(seconds, 1), stopped=stopped)
        save_atomic(d, out)

    # ---- epochs
    sequence = net_cfg.reduction in ("lstm", "transformer")
    lut = scaler.opcode_table(net_cfg.num_opcodes)
    name_written = (state or {}).get("name")
    epoch = start_epoch
    stopped = "epochs"
    for epoch in range(start_epoch + 1, opts.epochs + 1):
        te = time.time()
        model_net.train()
        total, steps, seen = 0.0, 0, 0
        for examples, groups in train_set.batches(rng, opts.batch_size, opts.even):
            b = data_mod.make_batch(examples, scaler, lut, net_cfg.neighbors, sequence,
                                    net_cfg.max_nodes, groups)
            loss = batch_loss(model_net, b, opts, opts.device)
            optim.zero_grad()
            loss.backward()
            if opts.grad_clip:
                torch.nn.utils.clip_grad_norm_(model_net.parameters(), opts.grad_clip)
            optim.step()
            step += 1
            if ema_net is not None:
                decay = min(opts.ema, (1 + step) / (10 + step))   # warm-up: early steps count fully
                with torch.no_grad():
                    for pe, p in zip(ema_net.parameters(), model_net.parameters()):
                        pe.mul_(decay).add_(p, alpha=1 - decay)
            total += float(loss)
            steps += 1
            seen += len(examples)
        sched.step()
        if not steps:
            raise TpuperfError("an epoch drew no batches (tile task: every kernel needs at least "
                               "two configurations with runtime_ns)")
        train_loss = total / steps
        figures = {"train_loss": train_loss}
        line = f"epoch {epoch:3d}/{opts.epochs}  loss {train_loss:.4f}"
        if valid_set is not None:
            saved_net.eval()
            v = evaluate(model, valid_set, opts)
            figures.update({f"valid_{k}": v[k] for k in ("loss", "mape", "tau")})
            metric = v[opts.monitor]
            improved = _better(opts.monitor, metric, best)
            if improved:
                best, best_epoch, bad = metric, epoch, 0
            else:
                bad += 1
            what = "Tile-Size APE" if opts.task == "tile" else "MAPE"
            line += ((f"  valid loss {v['loss']:.4f}" if opts.task == "fusion" else "  valid")
                     + f"  {what} {v['mape']:.1f}%  tau {v['tau']:.3f}"
                     + ("  *" if improved else ""))
        else:
            improved = True
            best_epoch = epoch
        line += f"  {seen} graphs, {time.time() - te:.1f}s"
        progress(line)
        history.append(figures)
        if improved:
            name_written = save_model(epoch, figures)
        elapsed = time.time() - t0 + (state or {}).get("seconds", 0.0)
        save_atomic({"epoch": epoch, "weights": model_net.state_dict(),
                     "ema_weights": ema_net.state_dict() if ema_net is not None else None, "step": step,
                     "optimizer": optim.state_dict(),
                     "scheduler": sched.state_dict(), "rng": rng.bit_generator.state,
                     "torch_rng": torch.get_rng_state(), "best": best, "best_epoch": best_epoch,
                     "bad": bad, "history": history, "opts": asdict(opts), "net": asdict(net_cfg),
                     "scaling": scaler.to_dict(), "seconds": elapsed, "name": name_written},
                    state_path)
        if valid_set is not None and bad >= opts.patience:
            stopped = f"no better validation {opts.monitor} for {opts.patience} epochs"
            break
        if opts.max_time and elapsed >= opts.max_time:
            stopped = f"time limit of {opts.max_time:.0f}s"
            break
    seconds = time.time() - t0 + (state or {}).get("seconds", 0.0)
    finish(epoch, seconds, stopped)
    if not keep_state and os.path.exists(state_path):
        os.unlink(state_path)
    summary = {"model": name_written, "out": os.fspath(out), "epochs": epoch, "best_epoch": best_epoch,
               "stopped": stopped, "seconds": round(seconds, 1), "parameters": n_params,
               "history": history}
    if history:
        summary["best"] = history[best_epoch - 1] if 0 < best_epoch <= len(history) else history[-1]
    progress(f"train: wrote {out} (model {name_written}, epoch {best_epoch} of {epoch}; "
             f"stopped: {stopped}; {seconds:.0f}s)")
    return summary


def options_from(values, cls):
    """A dataclass of cls from a dict, keeping only its fields."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names and v is not None})
