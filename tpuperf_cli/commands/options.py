"""The options every tool spells the same way, as shared click decorators.

One vocabulary (README, "Options"): `-o/--output FILE` for every file a tool
writes, `-m/--model` for a model file (`default` names the bundled one),
`-q/--quiet` for no progress, summary or notes on stderr, `-f/--format` where the
output has a choice of formats, `-b/--baseline` for a baseline file.
Spellings older versions used stay accepted as hidden aliases, so scripts
keep working while --help and the man pages show one name.
"""

import os
import re
import sys

import click

from tpuperf_cli.errors import TpuperfError

CONTEXT = {"help_option_names": ["-h", "--help"]}


class AliasOption(click.Option):
    """An option with extra spellings that parse but are not shown in
    --help or the man pages (the old names of a renamed option)."""

    def __init__(self, param_decls, hidden_aliases=(), **kwargs):
        super().__init__(list(param_decls) + list(hidden_aliases), **kwargs)
        self.hidden_aliases = set(hidden_aliases)

    def get_help_record(self, ctx):
        shown, self.opts = self.opts, [o for o in self.opts if o not in self.hidden_aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def output_option(help="Where to write: a file, or - for stdout.", default="-",
                  required=False, hidden_aliases=(), metavar="FILE"):
    """-o/--output FILE, the option of every file a tool writes."""
    extra = {} if required else {"default": default, "show_default": default != "-"}
    return click.option("-o", "--output", "output", cls=AliasOption,
                        hidden_aliases=hidden_aliases, required=required, metavar=metavar,
                        type=click.Path(dir_okay=False, allow_dash=True), help=help, **extra)


def quiet_option(help="No progress or summary on stderr (errors always go there)."):
    return click.option("-q", "--quiet", is_flag=True, help=help)


def format_option(choices, default, help="Output format."):
    return click.option("-f", "--format", "fmt", type=click.Choice(choices), default=default,
                        show_default=default is not None, help=help)


def resolve_model(path):
    """A --model value as a path (model.calibrated.resolve_model: `default`,
    `bundled` and the other bundled models' names)."""
    from tpuperf_cli.model.calibrated import resolve_model as resolve

    return resolve(path)


def model_option(help="Model file from `tpuperf train`; `default` is the bundled model.",
                 required=False, default_is_none=True, **kwargs):
    """-m/--model FILE. default_is_none: `default` gives None, as no
    --model does: the tool loads the default model (calibrated for the
    records' target, else the one bundled for it, else the bundled one;
    model.calibrated.default_choice); else `default` is the bundled
    model's path (a tool for which no --model means something else)."""
    def resolve(ctx, param, value):
        if default_is_none and value == "default" and not os.path.exists(value):
            return None           # the default model: model.calibrated.default_choice
        return resolve_model(value) if value is not None else None

    return click.option("-m", "--model", "model", required=required, metavar="FILE",
                        callback=resolve, help=help, **kwargs)


def note_model(prog, model):
    """Say on stderr which model a tool chose by default (model.chosen), and
    the machine its labels come from, so a user can tell whether it is
    theirs."""
    if getattr(model, "chosen", None):
        origin = trained_on(getattr(model, "target", None))
        print(f"{prog}: model {model.name} ({model.path}): {model.chosen}"
              + (f"; its labels are from {origin}" if origin else ""), file=sys.stderr)


def trained_on(target) -> str:
    """A model's training target in a few words: the chip, and on a CPU its
    family and model ("AMD EPYC, family 25 model 1"); "" when unknown."""
    if not isinstance(target, dict) or not target.get("chip"):
        return ""
    # /proc/cpuinfo's "Intel(R) Xeon(R) Processor" reads as "Intel Xeon"
    chip = re.sub(r"\((R|TM)\)| Processor$", "", str(target["chip"])).strip()
    cpu = target.get("cpu") if isinstance(target.get("cpu"), dict) else {}
    if cpu.get("family") and cpu.get("model"):
        return f"{chip}, family {cpu['family']} model {cpu['model']}"
    return chip


def baseline_option(help="Roofline baseline JSON from `tpuperf baseline fit`.", **kwargs):
    return click.option("-b", "--baseline", "baseline_path", metavar="FILE",
                        type=click.Path(dir_okay=False), help=help, **kwargs)


def split_option(help):
    return click.option("--split", "split_path", metavar="FILE", type=click.Path(dir_okay=False),
                        help=help)


# ---------------------------------------------------------------- binary output

def refuse_terminal(output, pipe="score", hint=""):
    """Raise a usage error when binary records would go to a terminal, as
    zstd does: they would only garble it. pipe: the tool that reads them
    next; hint: another way out (a text format)."""
    if output in (None, "-") and sys.stdout.isatty():
        ways = ([f"pipe them on (`... | {pipe}`)"] if pipe else []) + ["write a file with -o FILE"]
        ways += [hint] if hint else []
        raise TpuperfError("not writing binary msgpack records to a terminal: "
                           + ", or ".join(ways), exit_code=2)


def record_writer(output="-", pipe="score", hint=""):
    """A RecordWriter for -o (stdout for `-`), refusing a terminal."""
    from tpuperf_cli.stream import RecordWriter

    refuse_terminal(output, pipe, hint)
    try:
        return RecordWriter(None if output == "-" else output)
    except OSError as e:
        raise TpuperfError(f"{output}: {e.strerror}") from None


def text_output(output):
    """An open text file for -o FILE (stdout for `-`), for tables and JSON."""
    if output in (None, "-"):
        return _Stdout()
    try:
        return open(output, "w")
    except OSError as e:
        raise TpuperfError(f"{output}: {e.strerror}") from None


class _Stdout:
    """sys.stdout as a context manager that flushes but does not close it."""

    def __enter__(self):
        return sys.stdout

    def __exit__(self, *exc):
        sys.stdout.flush()
