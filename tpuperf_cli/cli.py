"""Entry points: the `tpuperf` group and the standalone tools.

Subcommands are imported only when run, so `hlo-split` or `score` never pay
for torch, DGL or jax at start-up.
"""

import importlib
import os
import signal
import sys

import click

from tpuperf_cli import __version__
from tpuperf_cli.errors import TpuperfError, one_line

# name -> module under tpuperf_cli.commands defining `cli`
COMMANDS = {
    "hlo-split": "hlo_split",
    "featurize": "featurize",
    "measure": "measure",
    "train": "train",
    "ensemble": "ensemble",
    "predict": "predict",
    "score": "score",
    "eval": "eval",
    "baseline": "baseline",
    "import": "import_",
    "select": "select",
    "split": "split",
    "machine": "machine",
    "compare": "compare",
    "generate": "generate",
    "calibrate": "calibrate",
}
# Tools installed as programs of their own (pyproject's [project.scripts]).
STANDALONE = ("hlo-split", "featurize", "measure", "predict", "score")


def load_command(name):
    module = importlib.import_module(f"tpuperf_cli.commands.{COMMANDS[name]}")
    command = module.cli
    if not any(p.name == "version" for p in command.params):
        # every tool answers --version, as a standalone program or a subcommand
        prog = name if name in STANDALONE else f"tpuperf {name}"
        click.version_option(__version__, "--version", prog_name=prog,
                             help="Print the version and exit.")(command)
    return command


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(n for n in COMMANDS if _available(n))

    def get_command(self, ctx, name):
        if name not in COMMANDS or not _available(name):
            return None
        return load_command(name)


def _available(name):
    here = os.path.join(os.path.dirname(__file__), "commands", COMMANDS[name] + ".py")
    return os.path.exists(here)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tpuperf")
def tpuperf():
    """Predict how fast a compiled XLA program runs, without running it.

    A kit of small tools joined by msgpack record streams on stdin/stdout,
    after Kaufman et al., "A Learned Performance Model for Tensor Processing
    Units" (MLSys 2021). Each tool is also installed on its own (hlo-split,
    featurize, measure, predict, score). Run `tpuperf COMMAND --help` for one
    tool's options, and see the man pages (man tpuperf, man hlo-split, ...;
    in a checkout, put its man/ on MANPATH: export MANPATH="$PWD/man:").

    Every tool spells its options alike: -o/--output FILE for a file it
    writes, -m/--model FILE (`default`: the bundled model), -q/--quiet for no
    progress, summary or notes on stderr, -f/--format where there is a
    choice of output formats. Binary records are never written to a terminal.

    \b
    Examples:
      hlo-split prog.hlo | featurize | predict | score
      hlo-split prog.hlo | featurize | predict | score --top 10
      hlo-split prog.hlo | featurize | measure --backend cpu -o shards/prog.zst
      tpuperf split programs shards/*.zst -o split.json
      tpuperf train --data 'shards/*.zst' --split split.json -o model.pt
      tpuperf compare base.hlo nofuse.hlo

    From Python: import tpuperf_cli as tp; tp.estimate(jax.jit(f), *args),
    tp.estimate_hlo(path), tp.compare({...}).
    """


def _run(command, prog_name):
    # Die quietly when the reader of our stdout goes away (`| head`).
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    debug = bool(os.environ.get("TPUPERF_DEBUG"))
    try:
        code = command.main(prog_name=prog_name, standalone_mode=False)
    except click.ClickException as e:
        e.show()
        code = e.exit_code
    except click.exceptions.Exit as e:
        code = e.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        print(f"{prog_name}: interrupted", file=sys.stderr)
        code = 130
    except TpuperfError as e:
        if debug:
            raise
        print(f"{prog_name}: error: {one_line(str(e))}", file=sys.stderr)
        code = e.exit_code
    except MemoryError:
        if debug:
            raise
        # records are bounded (TPUPERF_MAX_RECORD_MB); this is the machine's limit
        print(f"{prog_name}: error: out of memory (records or a model too large for this "
              f"machine; TPUPERF_DEBUG=1 shows where)", file=sys.stderr)
        code = 1
    sys.exit(code if isinstance(code, int) else 0)


def main():
    _run(tpuperf, "tpuperf")


def _standalone(name):
    def entry():
        _run(load_command(name), name)

    entry.__name__ = name.replace("-", "_") + "_main"
    return entry


hlo_split_main = _standalone("hlo-split")
featurize_main = _standalone("featurize")
measure_main = _standalone("measure")
predict_main = _standalone("predict")
score_main = _standalone("score")
