"""`score`: per-program runtime estimates from per-kernel predictions."""

import json
import sys

import click


@click.command("score", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json", "msgpack"]), default=None,
              help="Output format (default: table on a terminal, msgpack in a pipe).")
def cli(files, fmt):
    """Sum kernel predictions into program estimates.

    Reads kernel or graph records carrying pred_ns (from predict) from the
    files given (plain or zstd; stdin when none or `-`) and writes one
    program record per program (the records' program field), in the order
    programs first appear:

    \b
      program      the program's name
      kernels      how many kernel records it had
      pred_ns      sum of pred_ns x count over its kernels (count: times
                   a kernel runs per program run, e.g. in a while loop)
      count_known  false when some kernel's trip count was unknown (it
                   counts once, so pred_ns is then a lower bound)
      model        the model(s) that made the predictions
      runtime_ns   sum of runtime_ns x count, when every kernel of the
                   program was measured (measure)
      ape          100 |pred_ns - runtime_ns| / runtime_ns, likewise
      measured     how many kernels were measured, when only some were

    \b
    Formats (--format):
      table    aligned text: program, kernels, predicted, measured, error
               (the default when stdout is a terminal)
      json     one JSON object per line, one line per program (JSON Lines)
      msgpack  program records, a stream other tools read (the default
               when stdout is a pipe or a file)

    score never imports torch: it starts in a fraction of a second.

    \b
    Examples:
      hlo-split prog.hlo | featurize | predict | score
      predict measured.zst | score --format json | jq .ape
      hlo-split a.hlo b.hlo | featurize | predict | score -f table

    Exit status: 0 on success, 1 on bad input (records without pred_ns, a
    corrupt stream), 2 on a bad option.
    """
    from tpuperf_cli.score import render_table, score_records
    from tpuperf_cli.stream import RecordWriter, read_many

    if fmt is None:
        fmt = "table" if sys.stdout.isatty() else "msgpack"
    name = files[0] if len(files) == 1 else ("<stdin>" if not files else "input")
    programs = score_records(read_many(list(files)), name=name)
    if fmt == "msgpack":
        with RecordWriter("-") as out:
            for p in programs:
                out.write(p)
    elif fmt == "json":
        for p in programs:
            sys.stdout.write(json.dumps(p) + "\n")
        sys.stdout.flush()
    else:
        sys.stdout.write(render_table(list(programs)))
        sys.stdout.flush()
