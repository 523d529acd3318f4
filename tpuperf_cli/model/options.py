"""The options of the training loop, and which of them a resumed run may change.

    opts = TrainOptions(task="tile", epochs=20).check()

The options are saved in the model file and in the state a run leaves for
--resume; `resume_options` merges those stored with the ones given anew.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.records import KERNEL_FEATURES

if TYPE_CHECKING:
    from tpuperf_cli.model.config import NetConfig

TASKS = ("fusion", "tile")
LOSSES = ("mse", "ape", "huber", "hinge", "logistic")
FUSION_LOSSES = ("mse", "ape", "huber")
# --huber-within's default: --loss huber squares log errors within 1.25x either way
HUBER_WITHIN = 1.25


@dataclass
class TrainOptions:
    """Options of the training loop (saved in the model file)."""

    task: str = "fusion"        # "fusion" (per-kernel runtime) or "tile" (rank a kernel's configs)
    loss: str = ""              # fusion: "mse" (default), "ape" or "huber"; tile: "hinge" (default) or "logistic"
    huber_within: float = HUBER_WITHIN  # --loss huber: squared within this ratio either way, linear beyond
    epochs: int = 100           # at most this many epochs
    batch_size: int = 64        # graphs per step (tile: whole kernels, about this many configs)
    lr: float = 1e-3            # Adam learning rate (cosine decay to lr/10 over `epochs`)
    weight_decay: float = 0.0   # AdamW weight decay
    margin: float = 0.1         # hinge margin, in standardised log-runtime units
    noise_scale: float = 0.0    # weigh kernels by measure's noise (0: all alike); see noise_weights
    patience: int = 10          # stop after this many epochs without a better validation figure
    monitor: str = ""           # "loss", "mape" or "tau"; default: loss (fusion), tau (tile)
    min_runtime_ns: float = 5000.0   # validation MAPE/tau only on kernels at least this long
    label_floor_ns: float = 0.0  # fit max(runtime, this): labels below it count as it (0: off)
    even: bool = True           # draw examples evenly across programs
    generated_share: float = -1.0   # share of an epoch's draws from generated kernels
                                    # (pseudo-programs "SOURCE:NAME"); -1: a program each
    generated_even: str = "program"     # that share evenly across pseudo-programs, or
                                        # "source": across sources, then their pseudo-programs
    source_weight: dict = field(default_factory=dict)   # with "source": {source: part against
                                                        # the others' (default 1)}
    time_weight: float = 0.0    # a program's kernels drawn by (count x runtime)^this (0: alike)
    kernel_features: int = 0    # read the first N kernel features of the records (0: all)
    kernel_columns: tuple = ()  # or these kernel_feat columns, N of them (examples.kernel_columns)
    configs: int = 16           # tile task: configurations drawn per kernel per epoch
    memory_mb: float = 2048     # decoded examples kept in memory; beyond that, stream shards
    seed: int = 0               # seeds numpy, torch and the sampling
    device: str = "cpu"         # "cpu" or "cuda"
    threads: int = 0            # torch threads (0: min(2, cores))
    max_time: float = 0.0       # stop after the epoch that passes this many seconds (0: no limit)
    grad_clip: float = 1.0      # clip the gradient norm (0: off)
    ema: float = 0.99           # validate and save an exponential moving average of the
                                # weights with this decay per step (0: the raw weights)
    teacher: str = ""           # a model file whose predictions blend into the training labels
    teacher_weight: float = 0.5   # the blend: runtime^(1-w) * teacher's^w (a geometric mean)
    teacher_data: tuple = ()    # shards of kernels the teacher labels (source "teacher")
    tail_average: str = ""      # also write, to this file, the saved weights averaged over
                                # the epochs from the best one to the last (see TrainingRun)

    def __post_init__(self):
        # a resumed run's options come back from the state file with lists
        self.teacher_data = tuple(self.teacher_data)
        self.kernel_columns = tuple(self.kernel_columns)

    def check(self) -> TrainOptions:
        if self.task not in TASKS:
            raise TpuperfError(f"--task must be one of {', '.join(TASKS)}")
        if not self.loss:
            self.loss = "mse" if self.task == "fusion" else "hinge"
        if self.loss not in LOSSES:
            raise TpuperfError(f"--loss must be one of {', '.join(LOSSES)}")
        if self.task == "fusion" and self.loss not in FUSION_LOSSES:
            raise TpuperfError(f"--loss {self.loss} is a pairwise rank loss between the tile "
                               f"configurations of a kernel, for --task tile; --task fusion "
                               f"fits runtimes with --loss mse, ape or huber", exit_code=2)
        if self.task == "tile" and self.loss in ("ape", "huber"):
            raise TpuperfError(f"--loss {self.loss} fits runtimes, for --task fusion; --task tile "
                               "ranks configurations with --loss hinge or logistic", exit_code=2)
        if not self.huber_within > 1:
            raise TpuperfError("--huber-within must be a ratio above 1 (1.25: within 1.25x)", exit_code=2)
        if self.huber_within != HUBER_WITHIN and self.loss != "huber":
            raise TpuperfError("--huber-within shapes --loss huber; give that too", exit_code=2)
        if not self.monitor:
            self.monitor = "loss" if self.task == "fusion" else "tau"
        if self.monitor not in ("loss", "mape", "tau"):
            raise TpuperfError("--monitor must be loss, mape or tau")
        if not 0 <= self.ema < 1:
            raise TpuperfError("--ema must be in [0, 1)")
        if self.epochs < 1 or self.batch_size < 1:
            raise TpuperfError("--epochs and --batch-size must be at least 1")
        if not (self.generated_share == -1.0 or 0 <= self.generated_share < 1):
            raise TpuperfError("--generated-share must be in [0, 1)", exit_code=2)
        if self.generated_even not in ("program", "source"):
            raise TpuperfError("--generated-even must be program or source", exit_code=2)
        if self.source_weight and self.generated_even != "source":
            raise TpuperfError("--source-weight weighs the sources of --generated-even source; "
                               "give that too", exit_code=2)
        if any(w < 0 for w in self.source_weight.values()):
            raise TpuperfError("--source-weight must be at least 0", exit_code=2)
        if not 0 <= self.time_weight <= 2:
            raise TpuperfError("--time-weight must be in [0, 2]", exit_code=2)
        if self.time_weight and self.task != "fusion":
            raise TpuperfError("--time-weight draws a program's kernels by their time in it, for "
                               "--task fusion", exit_code=2)
        if not 0 <= self.label_floor_ns < float("inf"):
            raise TpuperfError("--label-floor-us must be a number >= 0", exit_code=2)
        if self.kernel_features < 0:
            raise TpuperfError("--kernel-features must be at least 0", exit_code=2)
        if self.kernel_columns and (len(self.kernel_columns) != self.kernel_features
                                    or list(self.kernel_columns) != sorted(set(self.kernel_columns))
                                    or not 0 <= self.kernel_columns[0] <= self.kernel_columns[-1]
                                    < len(KERNEL_FEATURES)):
            raise TpuperfError(f"kernel_columns {list(self.kernel_columns)}: expected "
                               f"{self.kernel_features} distinct kernel_feat columns in order", exit_code=2)
        if not 0 <= self.teacher_weight <= 1:
            raise TpuperfError("--teacher-weight must be in [0, 1]", exit_code=2)
        if self.teacher_data and not self.teacher:
            raise TpuperfError("--teacher-data is labelled by a teacher: give --teacher MODEL too",
                               exit_code=2)
        if self.teacher and self.task != "fusion":
            raise TpuperfError("--teacher blends predicted runtimes into the labels, for --task "
                               "fusion", exit_code=2)
        if self.task == "tile" and self.configs < 2:
            raise TpuperfError("--configs must be at least 2 for the tile task")
        return self


def parse_source_weights(texts: Iterable[str]) -> dict:
    """--source-weight SOURCE=W (repeatable) as {source: W}; ValueError names
    the bad one."""
    weights = {}
    for text in texts:
        source, _, weight = text.partition("=")
        try:
            value = float(weight)
        except ValueError:
            value = -1.0
        if not source.strip() or not 0 <= value < float("inf"):
            raise ValueError(f"{text!r}: give SOURCE=W, W a number >= 0 (e.g. indexed=0.25)")
        weights[source.strip()] = value
    return weights


# Options a resumed run may change: how long it runs and what it runs on.
# The others (the loss, the sampling, the network, ...) define the run.
RESUME_CHANGEABLE = ("epochs", "patience", "max_time", "memory_mb", "threads", "device")


# Fields kept in ns whose options are given in us.
US_FIELDS = {"min_runtime_ns": "--min-us", "label_floor_ns": "--label-floor-us"}


def flag_name(field: str) -> str:
    """The command-line option of a TrainOptions or NetConfig field."""
    if field in US_FIELDS:
        return US_FIELDS[field]
    if field == "kernel_columns":          # the names after --kernel-features N
        return "--kernel-features"
    return "--" + field.replace("_", "-")


def shown_value(field: str, value: object) -> object:
    """A field's value as the command line gives it (--min-us in us)."""
    if field == "kernel_columns":
        return "+".join(KERNEL_FEATURES[c] for c in value) or "a first N"
    return value / 1000.0 if field in US_FIELDS else value


def resume_options(stored_opts: dict, stored_net: dict, opts: TrainOptions | None, net: NetConfig | None,
                   given: Iterable[str] | None) -> tuple[TrainOptions, NetConfig,
                   list[tuple[str, object, object]]]:
    """The options of a resumed run: the stored ones, except those named in
    `given` (chosen explicitly, e.g. on the command line) that may change
    (RESUME_CHANGEABLE), which take their value in opts. A given option of
    another kind whose value differs from the stored one is refused
    (TpuperfError, exit 2). Returns (opts, net, [(field, old, new)])."""
    from tpuperf_cli.model.config import NetConfig

    new_opts = TrainOptions(**stored_opts)
    new_net = NetConfig.from_dict(stored_net)
    opt_fields = {f.name for f in fields(TrainOptions)}
    net_fields = {f.name for f in fields(NetConfig)}
    changed, refused = [], []
    for name in sorted(given or ()):
        if name in opt_fields and opts is not None:
            old, new = getattr(new_opts, name), getattr(opts, name)
        elif name in net_fields and net is not None:
            old, new = getattr(new_net, name), getattr(net, name)
        else:
            continue
        if new == old:
            continue
        if name in RESUME_CHANGEABLE:
            setattr(new_opts, name, new)
            changed.append((name, old, new))
        else:
            refused.append(f"{flag_name(name)} (the run has {shown_value(name, old)}, "
                           f"not {shown_value(name, new)})")
    if refused:
        raise TpuperfError(f"--resume cannot change {', '.join(refused)}: a resumed run keeps its "
                           f"options and hyperparameters, but for "
                           f"{', '.join(flag_name(f) for f in RESUME_CHANGEABLE)}", exit_code=2)
    return new_opts.check(), new_net, changed
