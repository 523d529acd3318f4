"""`tpuperf compare`: rank HLO programs by predicted runtime."""

import json
import sys

import click

from tpuperf_cli.commands.options import (
    CONTEXT,
    format_option,
    model_option,
    note_model,
    output_option,
    quiet_option,
    text_output,
)


@click.command("compare", context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--module", "module_re", metavar="REGEX",
              help="In dump directories, only the modules whose name (module_NNNN.NAME) "
                   "matches REGEX (Python re.search).")
@click.option("--compile", "-c", "backend", type=click.Choice(["cpu", "gpu", "tpu"]),
              help="Compile inputs that are not optimized yet (StableHLO/MHLO, HLO before "
                   "optimization) with XLA for this backend, as hlo-split --compile does.")
@model_option(help="Model file from `tpuperf train`; `bundled` is the bundled model. Default "
                   "(or `default`): the model `tpuperf calibrate` wrote for this machine, else "
                   "the bundled model.")
@click.option("--top", "-k", type=click.IntRange(0), default=5, show_default=True,
              help="Kernels listed per program: those whose predicted time differs most "
                   "from the fastest program's.")
@format_option(["table", "json"], "table", help="table: aligned text; json: one JSON object.")
@output_option(help="Where to write: a file, or - for stdout.")
@quiet_option(help="No warnings or dump-directory summaries on stderr (errors always go there).")
def cli(inputs, module_re, backend, model, top, fmt, output, quiet):
    """Rank programs by predicted runtime, with the kernels that differ.

    For the same computation under other settings (XLA flags, shapes,
    dtypes, sharding): reads each INPUT as hlo-split does (optimized HLO
    text, zstd, an HLO proto, or an XLA dump directory, whose modules
    each count), predicts every program in this one process (hlo-split,
    featurize, predict and score, as
    `hlo-split A B | featurize | predict | score` would), and prints the
    programs fastest first with their ratio to the fastest. Under each
    slower program come the kernels whose predicted time (x count)
    differs most from the fastest program's. Kernels are matched by
    fingerprint (the same work on the same shapes); a kernel found in one
    program only counts zero in the other.

    Programs are named as hlo-split names them: the file name without
    .hlo/.txt and .zst, or module_NNNN.NAME for XLA's dump files.

    The same in Python: tpuperf_cli.compare({"a": "a.hlo", "b": compiled}).

    \b
    Examples:
      tpuperf compare base.hlo nofuse.hlo
      tpuperf compare --module train_step dump-a dump-b
      tpuperf compare -f json *.hlo | jq '.programs[0].program'
      tpuperf compare -m tpu.pt a.hlo b.hlo -o ranking.txt

    \b
    Exit status:
      0  success
      1  a file cannot be read, or a bad model file
      2  an input is not valid HLO, or not optimized (without --compile)
    """
    from tpuperf_cli.api import compare, estimate_hlo, load_model
    from tpuperf_cli.commands.hlo_split import _compile_regex, _inputs

    # dump directories expand into their modules, as in hlo-split
    sources = _inputs(list(inputs), _compile_regex(module_re), quiet, backend,
                      "tpuperf compare")
    loaded = load_model(model)
    estimates = []
    for source, name, _ in sources:
        estimates.append(estimate_hlo(source, model=loaded, name=name, compile=backend))
        for w in estimates[-1].warnings if not quiet else []:
            print(f"tpuperf compare: warning: {w}", file=sys.stderr)
    result = compare(estimates, model=loaded)
    if not quiet:         # once the inputs were good: an error stays one line
        note_model("tpuperf compare", loaded)
    with text_output(output) as out:
        if fmt == "json":
            json.dump(result.to_dict(top), out)
            out.write("\n")
        else:
            out.write(result.table(top))
