"""`score`: per-program runtime estimates from per-kernel predictions."""

import json
import sys

import click

from tpuperf_cli.commands.options import CONTEXT, format_option, output_option, text_output


@click.command("score", context_settings=CONTEXT)
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@format_option(["table", "json", "msgpack"], None,
               help="Output format (default: table on a terminal, msgpack in a pipe or file).")
@click.option("--top", "-k", "top", type=click.IntRange(0), default=0, metavar="N",
              help="Also list each program's N kernels with the largest share of its "
                   "predicted time (a table below the programs; a 'top' field in json "
                   "and msgpack).")
@output_option(help="Where to write: a file, or - for stdout.")
def cli(files, fmt, top, output):
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
      top          with --top N: the program's N kernels with the largest
                   pred_ns x count, largest first, each {kernel, index,
                   count, opcode, fusion_kind, pred_ns and runtime_ns (one
                   run; runtime_ns null when not measured), share (percent
                   of the program's pred_ns)}

    \b
    Formats (--format):
      table    aligned text: program, kernels, predicted, measured, error
               (the default when stdout is a terminal); with --top, a
               table per program below: share, count, opcode (fusion
               kind), predicted and measured time per program run
               (time x count), kernel
      json     one JSON object per line, one line per program (JSON Lines)
      msgpack  program records, a stream other tools read (the default
               when stdout is a pipe or -o names a file; never written
               to a terminal)

    score never imports torch: it starts in a fraction of a second.

    \b
    Examples:
      hlo-split prog.hlo | featurize | predict | score
      predict measured.zst | score --format json | jq .ape
      hlo-split a.hlo b.hlo | featurize | predict | score -f table
      hlo-split prog.hlo | featurize | predict | score --top 10
      predict measured.zst | score --top 5 -f json | jq '.top[0]'

    Exit status: 0 on success, 1 on bad input (records without pred_ns, a
    corrupt stream), 2 on a bad option.
    """
    from tpuperf_cli.commands.options import record_writer, refuse_terminal
    from tpuperf_cli.score import render_table, score_records
    from tpuperf_cli.stream import read_many

    if fmt is None:
        fmt = "table" if output == "-" and sys.stdout.isatty() else "msgpack"
    if fmt == "msgpack":
        refuse_terminal(output, None, "use --format table or json")
    name = files[0] if len(files) == 1 else ("<stdin>" if not files else "input")
    programs = list(score_records(read_many(list(files)), name=name, top=top))
    if fmt == "msgpack":
        with record_writer(output) as out:
            for p in programs:
                out.write(p)
        return
    with text_output(output) as out:
        if fmt == "json":
            for p in programs:
                out.write(json.dumps(p) + "\n")
        else:
            out.write(render_table(programs))
