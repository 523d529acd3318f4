"""`tpuperf split`: train/valid/test splits of programs (a split file) and of tile records."""

import json

import click

from tpuperf_cli.commands.options import CONTEXT, output_option, quiet_option, text_output
from tpuperf_cli.errors import TpuperfError

_FRACTION = click.FloatRange(0, 1, max_open=True)


@click.group("split", context_settings=CONTEXT)
def cli():
    """Split data into training, validation and test sets.

    `programs` writes a split file, JSON {"train": [...], "valid": [...],
    "test": [...]} of program names, from the programs found in measured
    shards; `tpuperf train --split`, `tpuperf baseline fit --split` and
    `tpuperf eval --split` read it. Programs are split whole, so no kernel
    record of a test program is trained on.

    `records` splits a stream of tile records (many configurations per
    kernel, from `tpuperf import`) into one file per set, by configuration
    or by kernel.

    `folds` turns one split file into K, for cross-validation over program
    families: each fold validates on some of its families and trains on
    the others.

    Splits are random but repeatable: the same input, fractions and --seed
    give the same split.

    \b
    Examples:
      tpuperf split programs shards/*.zst --test 0.1 --valid 0.1 -o split.json
      tpuperf split programs shards/*.zst --family '^[a-z]+' --test 0.2 -o split.json
      tpuperf split programs shards/*.zst --test 'gpt_*' --test 'gru_*' -o split.json
      tpuperf split records --by config --test 0.5 tile.msgpack -o 'tile-{}.msgpack'
      tpuperf split folds split.json --folds 4 -o 'fold{}.json'
    """


def _one_placeholder(output, what, example):
    """-o TEMPLATE of a command that writes several files: one {} for `what`."""
    if output.count("{}") != 1:
        raise click.BadParameter(f"needs one {{}} where {what} goes, e.g. '{example}'",
                                 param_hint="-o/--output")


def _fraction_or_names(value, what):
    """--test/--valid values: one fraction, or program name patterns."""
    try:
        if len(value) == 1:
            f = float(value[0])
            if not 0 <= f < 1:
                raise click.BadParameter(f"a fraction must be at least 0 and under 1, not {f:g}",
                                         param_hint=what)
            return f, ()
    except ValueError:
        pass
    return 0.0, tuple(value)


@cli.command("programs")
@click.argument("shards", nargs=-1, required=True, metavar="SHARD...")
@click.option("--test", multiple=True, default=["0.1"], show_default=True,
              metavar="FRACTION|PATTERN",
              help="The share of programs (or families) drawn for testing, or instead the "
                   "programs to test on: name patterns (shell globs such as 'gpt_*'; "
                   "repeatable).")
@click.option("--valid", multiple=True, default=["0.1"], show_default=True,
              metavar="FRACTION|PATTERN",
              help="Likewise for validation (early stopping).")
@click.option("--family", metavar="REGEX",
              help="Draw whole families, not programs: a program's family is what this "
                   "regular expression matches in its name (its first group if it has "
                   "one), e.g. '^[a-z]+' makes gpt_s_train and gpt_m_train one family, gpt.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random draw.")
@output_option(help="Where to write the split file (JSON); - for stdout.")
@quiet_option(help="No summary on stderr.")
def programs_cmd(shards, test, valid, family, seed, output, quiet):
    """Write a split file of the programs in measured shards.

    Reads the records of the SHARDs (plain or zstd files, or quoted glob
    patterns) for their program names and writes
    {"train": [...], "valid": [...], "test": [...]} (each list sorted).

    \b
    Three ways to split, which combine:
      random      --test and --valid fractions of the programs, drawn with
                  --seed (the default: 0.1 and 0.1)
      by family   with --family REGEX the draw is of whole families, so a
                  model is tested on kinds of program it never saw
      by name     --test PATTERN (and --valid PATTERN) name the programs
                  of that set; the rest train (or are drawn for the other
                  set where it is given as a fraction)

    A summary (programs per set) goes to stderr.

    \b
    Examples:
      tpuperf split programs shards/*.zst -o split.json
      tpuperf split programs 'examples/corpus/graphs/*.zst' --family '^[a-z]+' \\
          --test 0.2 --valid 0.1 --seed 1 -o by-family.json
      tpuperf split programs shards/*.zst --test 'vit_*' --valid 0 -o split.json
      tpuperf train --data 'shards/*.zst' --split split.json -o model.pt
    """
    from tpuperf_cli.split import expand, programs_in, split_units

    test_f, test_names = _fraction_or_names(test, "--test")
    valid_f, valid_names = _fraction_or_names(valid, "--valid")
    names = programs_in(expand(shards, "shard"))
    if not names:
        raise TpuperfError(f"{', '.join(shards)}: no records")
    result = split_units(names, valid_f, test_f, seed, family, test_names, valid_names)
    with text_output(output) as out:
        out.write(json.dumps(result, indent=1) + "\n")
    if not quiet:
        click.echo("split: " + ", ".join(f"{len(result[k])} {k}" for k in result)
                   + f" programs of {len(names)}"
                   + (f" (families by {family!r})" if family else ""), err=True)
        if not result["train"]:
            click.echo("split: warning: no training programs", err=True)


@cli.command("folds")
@click.argument("split_file", metavar="SPLIT")
@click.option("--folds", "k", type=click.IntRange(2), default=4, show_default=True,
              help="How many folds (split files) to write.")
@click.option("--family", metavar="REGEX", default="^[a-z]+", show_default=True,
              help="A program's family is what this regular expression matches in its name "
                   "(its first group if it has one); whole families go to one fold.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the order families are dealt in.")
@output_option(required=True, metavar="TEMPLATE",
               help="Output file name with {} where the fold's number goes, e.g. "
                    "'fold{}.json' writes fold0.json, fold1.json...")
@quiet_option(help="No summary on stderr.")
def folds_cmd(split_file, k, family, seed, output, quiet):
    """Write K split files for cross-validation over program families.

    A split's few validation programs make a coarse chooser of training
    recipes: two recipes can rank one way on three validation families and
    the other way on four others. `folds` keeps SPLIT's test programs as
    every fold's test list and deals the families of its train and valid
    programs to K folds (whole families, in a seeded random order, each to
    the fold with the fewest programs so far). Fold i validates on its
    families and trains on all the others; SPLIT's patterns ("ops:*", the
    generated kernels) train in every fold, but `train` leaves out of a
    fold's training the kernels generated from its validation programs
    (fusions, variants and sweeps record the program they were drawn from),
    so no fold learns a family it is judged on. Train one model per fold and
    every one of those families is validated on once, by a model that
    never saw it (benchmarks/compare_folds.py gives the figures).

    A summary (families and programs per fold) goes to stderr.

    \b
    Examples:
      tpuperf split folds examples/splits/manual.json --folds 4 \\
          -o 'examples/splits/folds/manual-fold{}.json'
      tpuperf train --data 'shards/*.zst' --split examples/splits/folds/manual-fold0.json \\
          -o fold0.pt
    """
    from tpuperf_cli.split import family_folds, family_of, family_pattern, load_split

    _one_placeholder(output, "the fold's number", "fold{}.json")
    folds = family_folds(load_split(split_file), k, seed, family)
    for i, fold in enumerate(folds):
        with text_output(output.replace("{}", str(i))) as out:
            out.write(json.dumps(fold, indent=1) + "\n")
    if not quiet:
        pattern = family_pattern(family)
        for i, fold in enumerate(folds):
            fams = sorted({family_of(n, pattern) for n in fold["valid"]})
            click.echo(f"split: {output.replace('{}', str(i))}: valid {len(fold['valid'])} "
                       f"programs of {len(fams)} families ({', '.join(fams)}), "
                       f"train {len(fold['train'])}, test {len(fold['test'])}", err=True)


@cli.command("records")
@click.argument("inputs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--by", type=click.Choice(["config", "kernel"]), default="config",
              show_default=True,
              help="config: every kernel in every set, its configurations divided; kernel: "
                   "whole kernels to one set.")
@click.option("--test", type=_FRACTION, default=0.5, show_default=True,
              help="Share of each kernel's configurations (--by config) or of the kernels "
                   "(--by kernel) for testing.")
@click.option("--valid", type=_FRACTION, default=0.0, show_default=True,
              help="Likewise for validation; 0 writes no validation file.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random draw.")
@output_option(required=True, metavar="TEMPLATE",
               help="Output file name with {} where the set's name goes, e.g. "
                    "'tile-{}.msgpack' writes tile-train.msgpack and tile-test.msgpack "
                    "(zstd where it ends in .zst).")
@quiet_option(help="No summary on stderr.")
def records_cmd(inputs, by, test, valid, seed, output, quiet):
    """Split tile records into training, validation and test files.

    Reads records of many tile configurations per kernel (records sharing
    program and kernel, from `tpuperf import`, plain or zstd; stdin when no
    INPUTS) and writes each to the file of its set, in input order.

    \b
    --by config   per kernel, --test and --valid fractions of its
                  configurations are drawn; a configuration marked
                  is_default (XLA's own choice) always goes to test, so
                  `tpuperf eval` can compare the model with XLA there
    --by kernel   whole kernels (all their configurations) are drawn

    Files are read twice (once for the kernel names), so memory stays small;
    stdin is held in memory. A summary (records and kernels per set) goes to
    stderr.

    \b
    Examples:
      tpuperf split records --by config --test 0.5 tile.msgpack -o 'tile-{}.msgpack'
      tpuperf split records --by kernel --test 0.2 --valid 0.1 all.zst -o 'tile-{}.zst'
    """
    from tpuperf_cli.commands.options import record_writer
    from tpuperf_cli.split import split_records
    from tpuperf_cli.tile import group_key

    _one_placeholder(output, "the set's name", "tile-{}.msgpack")
    sets = ["train"] + (["valid"] if valid > 0 else []) + (["test"] if test > 0 else [])
    writers = {}
    kernels = {k: set() for k in sets}
    try:
        for k in sets:
            writers[k] = record_writer(output.replace("{}", k))
        for which, record in split_records(inputs, by, valid, test, seed):
            writers[which].write(record)
            kernels[which].add(group_key(record))
    finally:
        for w in writers.values():
            w.close()
    if not quiet:
        click.echo("split: " + ", ".join(
            f"{output.replace('{}', k)}: {writers[k].count} records of {len(kernels[k])} kernels"
            for k in sets), err=True)
