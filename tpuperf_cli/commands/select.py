"""tpuperf select: per kernel, the K tile configurations the model ranks fastest."""

import click

from tpuperf_cli.commands.options import (
    CONTEXT,
    model_option,
    output_option,
    quiet_option,
    record_writer,
    refuse_terminal,
)
from tpuperf_cli.stream import read_many


@click.command("select", context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("-k", "--top", "k", type=click.IntRange(min=1), default=5, show_default=True,
              help="How many configurations to keep per kernel.")
@model_option(help="Predict with this model file first (as `predict --model`; `default` is "
                   "the bundled model); without it every record must already carry pred_ns.",
              default_is_none=False)
@click.option("--by", "field", default="pred_ns", show_default=True, metavar="FIELD",
              help="The numeric field to rank by, smaller = faster (e.g. runtime_ns to list "
                   "the measured best).")
@click.option("--slim", is_flag=True,
              help="Drop the graph arrays (node_feat, node_opcode, edge_index) from the "
                   "records written.")
@output_option(help="Where to write the short lists: a file (zstd if it ends in .zst) or - "
                    "for stdout.")
@quiet_option(help="No warning on stderr when the records' measurement target differs from "
                   "the --model's.")
def cli(inputs, k, model, field, slim, output, quiet):
    """Keep, per kernel, the K tile configurations the model ranks fastest.

    The autotuner's short list: instead of timing every tile configuration of
    a kernel on hardware, time only the K the model likes best. Reads graph
    (or kernel) records of many configurations per kernel, from files
    (plain or .zst) or stdin; records of one kernel share program and kernel
    (tpuperf import writes them so). Each record needs pred_ns from
    `predict`, or give --model to predict here.

    Writes, per kernel in the order kernels first appear, its K records with
    the smallest prediction, fastest first, each with two fields added: rank
    (1 = predicted fastest) and candidates (how many configurations of that
    kernel were read). Ties keep input order. A kernel with fewer than K
    configurations keeps them all. Other fields pass through; only K records
    per kernel are held in memory, and output starts when input ends.

    \b
    Examples:
      tpuperf import tuning-json tile.json | featurize | predict --model tile.pt \\
          | tpuperf select --top 5 --slim > shortlist.msgpack
      tpuperf select --top 10 --model tile.pt candidates.zst -o shortlist.zst

    Exit status: 0 on success; 1 when a record lacks the ranking field or a
    kernel name (the message names the input and record number), or the
    input stream is corrupt.
    """
    from tpuperf_cli.tile import select as sel

    refuse_terminal(output, "tpuperf eval --predicted")
    records = read_many(inputs)
    name = inputs[0] if len(inputs) == 1 else ("input" if inputs else "<stdin>")
    if model:
        from tpuperf_cli.model.predict import predict_records

        records = predict_records(records, model, name=name, warn=(lambda msg: None) if quiet else None)
    with record_writer(output, "tpuperf eval --predicted") as out:
        for record in sel.top_k(records, k, field=field, name=name):
            out.write(sel.slim(record) if slim else record)
