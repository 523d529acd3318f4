"""Continuing an interrupted training run (`tpuperf train --resume`).

After every epoch the loop writes its whole state to `OUT.resume`:
weights (and their moving average), optimizer, learning-rate schedule,
random generators, early-stopping counters, history, options and scaling.
`load_state` reads it back and settles the options of the resumed run;
`restore` puts the state into a freshly built network and optimizer, so the
run goes on exactly where its last finished epoch left it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.model.options import TrainOptions, flag_name, resume_options, shown_value

if TYPE_CHECKING:
    from tpuperf_cli.model.config import NetConfig
    from tpuperf_cli.model.train import TrainingRun


class CosineTail:
    """The learning rate of a run whose --epochs changed on resume: a half
    cosine from the rate it had (lr0, after `start` epochs) down to eta_min
    after epoch `end`, stepped once per epoch like CosineAnnealingLR."""

    def __init__(self, optimizer, start: int, lr0: float, end: int, eta_min: float, last: int | None = None):
        self.optimizer = optimizer
        self.start, self.lr0, self.end, self.eta_min = start, lr0, end, eta_min
        self.last = start if last is None else last

    def step(self) -> None:
        self.last += 1
        t = min(1.0, (self.last - self.start) / max(1, self.end - self.start))
        lr = self.eta_min + (self.lr0 - self.eta_min) * (1 + math.cos(math.pi * t)) / 2
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def state_dict(self) -> dict:
        return {"cosine_tail": [self.start, self.lr0, self.end, self.eta_min], "last": self.last}

    @classmethod
    def from_state(cls, optimizer, d: dict) -> "CosineTail":
        return cls(optimizer, *d["cosine_tail"], last=d["last"])


def state_path(out: str | os.PathLike) -> str:
    """Where a run writing the model `out` keeps its state."""
    return os.fspath(out) + ".resume"


def load_state(out: str | os.PathLike, opts: TrainOptions, net: NetConfig | None, given: Iterable[str] | None,
               progress: Callable[[str], None]) -> tuple[dict, TrainOptions, NetConfig]:
    """(state, opts, net config) of the interrupted run that writes `out`:
    its own options and hyperparameters, but for those named in `given` that
    a resumed run may change (options.resume_options). TpuperfError when
    there is no state to resume or its --epochs are all run."""
    import torch

    path = state_path(out)
    if not os.path.exists(path):
        raise TpuperfError(f"--resume: no {path} to resume from (a finished run leaves "
                           f"none; start again without --resume)")
    try:
        # plain data only: a planted file must not run code (weights_only=False would)
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or not {"epoch", "opts", "net", "weights"} <= set(state):
            raise ValueError("not a training state")
    except Exception as e:
        from tpuperf_cli.model.predict import load_error

        raise TpuperfError(f"--resume: {path} is not a training state tpuperf can read as plain "
                           f"data ({load_error(e)}); delete it and train again without --resume") from None
    opts, net_cfg, changed = resume_options(state["opts"], state["net"], opts, net, given)
    if state["epoch"] >= opts.epochs:
        raise TpuperfError(f"--resume: {out} has run {state['epoch']} epochs, all of its "
                           f"--epochs {opts.epochs}; give a larger --epochs to train more",
                           exit_code=2)
    progress(f"train: resuming {out} after epoch {state['epoch']} (options and hyperparameters "
             f"of the interrupted run" + "".join(f"; {flag_name(f)} {shown_value(f, new)} (was "
                                                 f"{shown_value(f, old)})" for f, old, new in changed)
             + ")")
    return state, opts, net_cfg


def restore(state: dict, run: TrainingRun) -> None:
    """Put a saved state into a freshly built run (train.TrainingRun): weights,
    optimizer, schedule (a CosineTail when --epochs changed), random
    generators and the loop's counters."""
    import torch

    opts = run.opts
    run.net.load_state_dict(state["weights"])
    if run.ema_net is not None:
        run.ema_net.load_state_dict(state["ema_weights"])
    run.optim.load_state_dict(state["optimizer"])
    if "cosine_tail" in state["scheduler"]:
        run.sched = CosineTail.from_state(run.optim, state["scheduler"])
    else:
        run.sched.load_state_dict(state["scheduler"])
    if opts.epochs != state["opts"]["epochs"]:
        # the schedule was for the old number of epochs: decay from the current rate instead
        run.sched = CosineTail(run.optim, state["epoch"], run.optim.param_groups[0]["lr"], opts.epochs,
                               opts.lr / 10)
    run.rng.bit_generator.state = state["rng"]
    torch.set_rng_state(state["torch_rng"])
    run.epoch, run.best, run.best_epoch, run.bad = (state["epoch"], state["best"], state["best_epoch"],
                                                    state["bad"])
    run.history = state["history"]
    run.step = state["step"]
    run.tail_sum, run.tail_n = state.get("tail_sum"), state.get("tail_n", 0)
    run.name_written = state.get("name")


def snapshot(run: TrainingRun, elapsed: float) -> dict:
    """The state of a run after its last finished epoch, as load_state reads it."""
    from dataclasses import asdict

    import torch

    return _plain_state({"epoch": run.epoch, "weights": run.net.state_dict(),
            "ema_weights": run.ema_net.state_dict() if run.ema_net is not None else None,
            "step": run.step, "optimizer": run.optim.state_dict(),
            "scheduler": run.sched.state_dict(), "rng": run.rng.bit_generator.state,
            "torch_rng": torch.get_rng_state(), "best": run.best, "best_epoch": run.best_epoch,
            "bad": run.bad, "history": run.history, "opts": asdict(run.opts), "net": asdict(run.net_cfg),
            "scaling": run.scaler.to_dict(), "seconds": elapsed, "name": run.name_written,
            "tail_sum": run.tail_sum, "tail_n": run.tail_n})


def _plain_state(value):
    """value with numpy scalars made Python numbers and tuples lists, tensors
    kept: what torch's weights_only loader reads back."""
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        return {k: _plain_state(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_state(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    return value
