"""`tpuperf baseline`: the analytical roofline baseline (fit, apply, show)."""

import json

import click

from tpuperf_cli.commands.options import (
    CONTEXT,
    baseline_option,
    output_option,
    quiet_option,
    record_writer,
    split_option,
    text_output,
)


def _inputs(data, files):
    """--data values plus positional files (so `--data test/*.zst` works)."""
    return list(data) + list(files)


@click.group("baseline", context_settings=CONTEXT)
def cli():
    """The analytical baseline: a roofline with one coefficient per kernel kind.

    The learned model is judged against this baseline in `tpuperf eval`, as
    the paper judges its model against XLA's analytical model. For a kernel
    with the static cost features that featurize computes (kernel_feat):

    \b
      t_ns = t0 + 1e9 * c[kind] * max((flops + transcendentals) / P,
                                      (bytes_read + bytes_written) / B)

    P is the peak rate (operations/s), B the memory bandwidth (bytes/s), t0
    a fixed cost per kernel (ns; the launch or dispatch overhead: a few us
    per kernel on XLA:CPU, which a pure roofline cannot express) and kind
    the kernel's kind: "fusion:kLoop", "fusion:kInput", "fusion:kOutput",
    "fusion:kCustom" for fusions, else an opcode family ("dot",
    "convolution", "reduce", "elementwise", "data-movement", "collective",
    "custom-call" or the opcode itself). c[kind] says how far from the
    roofline that kind of kernel runs; kinds with fewer than --min-kernels
    training kernels, and kinds never seen, share the coefficient "other".

    `fit` fits c, t0 (unless --no-overhead) and P, B (unless given) on
    measured graph records by least squares on log(runtime). Because each
    kind has its own coefficient, the common scale of P and B is absorbed by
    c and only the ridge point P/B (operations per byte) changes the shape;
    it is found by a search over 0.01 to 10 000 op/byte, and t0 by a search
    over 0 to 98 % of the fastest kernel's runtime. P and B are then stated
    so that the kernels' coefficients have a geometric mean of 1: the
    roofline of all measured kernels together. Give --peak-flops and --bandwidth to
    use a target's data-sheet constants instead (for example a TPU v3 core:
    61.5e12 bf16 flop/s, 450e9 bytes/s); only c is fitted then. Fitting them
    is the default because a CPU's effective peaks depend on the machine, its
    threads and XLA's code generation, and are not known in advance.

    `apply` adds baseline_ns (and baseline_kind) to every record, so a
    stream can carry both the model's and the baseline's predictions.
    `show` prints a fitted baseline file.

    \b
    Examples:
      tpuperf baseline fit --data train/*.zst -o baseline.json
      tpuperf baseline fit --data train/*.zst --peak-flops 61.5e12 --bandwidth 450e9 -o v3.json
      tpuperf baseline apply --baseline baseline.json test/*.zst | tpuperf eval
      tpuperf eval --model model.pt --baseline baseline.json --data test/*.zst
    """


@cli.command("fit")
@click.option("--data", "data", multiple=True, type=click.Path(dir_okay=False),
              help="Measured graph shard (plain or .zst); repeat, or list several after one --data.")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@split_option(help='JSON {"train": [...], ...} of program names (`tpuperf split`): fit on '
                   "the records of its 'train' programs only (less any generated from its "
                   "'valid' or 'test' programs).")
@output_option(help="Where to write the baseline JSON ('-' for stdout).",
               hidden_aliases=["--out"])
@click.option("--peak-flops", type=float, default=None,
              help="Peak operations/s of the target; with --bandwidth, fixes the roofline.")
@click.option("--bandwidth", type=float, default=None,
              help="Memory bandwidth in bytes/s of the target; with --peak-flops.")
@click.option("--overhead/--no-overhead", default=True, show_default=True,
              help="Fit the fixed cost per kernel t0 (else t0 = 0: a pure roofline).")
@click.option("--min-kernels", type=click.IntRange(1), default=3, show_default=True,
              help="Kinds with fewer training kernels share the coefficient 'other'.")
@quiet_option(help="No summary of the fit on stderr.")
def fit_cmd(data, files, split_path, output, peak_flops, bandwidth, overhead, min_kernels, quiet):
    """Fit the roofline baseline on measured graph records.

    Reads graph records carrying kernel_feat (featurize) and runtime_ns
    (measure) from the files given (plain or zstd; stdin when none), only
    those of the split's training programs with --split (less kernels
    generated from its valid or test programs), and writes a JSON
    file: format, formula, peak_flops, bandwidth,
    overhead_ns, ridge_flops_per_byte, coef (one per kind), kernels, kernels_per_kind,
    log_rmse and train_mape of the fit, target (from the records). Records
    without runtime_ns (failed measurements) are skipped. A summary goes to
    stderr.

    \b
    Example:
      tpuperf baseline fit --data train/*.zst -o baseline.json
      tpuperf baseline fit --split split.json -o baseline.json shards/*.zst
    """
    from tpuperf_cli.eval import baseline as bl
    from tpuperf_cli.split import training_records
    from tpuperf_cli.stream import read_many

    records = read_many(_inputs(data, files))
    if split_path:
        records = training_records(records, split_path)
    stats = {}
    b = bl.fit_records(records, peak_flops, bandwidth, min_kernels, stats, overhead)
    with text_output(output) as f:
        f.write(json.dumps(b.to_json(), indent=2) + "\n")
    if not quiet:
        _summary(b, stats.get("skipped", 0))


def _summary(b, skipped=0, err=True):
    info = b.info
    lines = [f"baseline: {info.get('kernels', '?')} kernels of {info.get('programs', '?')} programs"
             + (f" ({skipped} unmeasured records skipped)" if skipped else ""),
             f"  peak {b.peak_flops:.4g} op/s, bandwidth {b.bandwidth:.4g} B/s, "
             f"ridge {b.peak_flops / b.bandwidth:.3g} op/B"
             + (" (fitted)" if info.get("fitted_peaks") else " (given)"),
             f"  overhead {b.overhead_ns / 1000:.3g} us per kernel"]
    if "train_mape" in info:
        lines.append(f"  fit: log-RMSE {info['log_rmse']:.3f}, training MAPE {info['train_mape']:.1f}%")
    per = info.get("kernels_per_kind", {})
    for kind, c in sorted(b.coef.items()):
        lines.append(f"  c[{kind}] = {c:.4g}" + (f"  ({per[kind]} kernels)" if kind in per else ""))
    click.echo("\n".join(lines), err=err)


@cli.command("apply")
@baseline_option(required=True, help="Baseline JSON written by `tpuperf baseline fit`.")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@output_option(help="Where to write the records: a file (zstd if it ends in .zst) or - for "
                    "stdout.")
def apply_cmd(baseline_path, files, output):
    """Add the baseline's prediction to every graph record.

    Reads graph records (files or stdin), writes them to stdout or -o FILE
    (never to a terminal) with two fields added: baseline_ns (float, the roofline prediction in ns) and
    baseline_kind (the kernel kind whose coefficient was used). Other
    fields pass through. A record without kernel_feat is an error.

    \b
    Example:
      featurize < kernels.msgpack | tpuperf baseline apply -b baseline.json > out.msgpack
    """
    from tpuperf_cli.eval import baseline as bl
    from tpuperf_cli.records import BASELINE_KIND, BASELINE_NS, locate
    from tpuperf_cli.stream import read_many

    b = bl.Baseline.load(baseline_path)
    with record_writer(output, "tpuperf eval") as w:
        for number, record in enumerate(read_many(list(files)), 1):
            record[BASELINE_KIND] = bl.kernel_kind(record)
            record[BASELINE_NS] = b.predict_record(record, locate(number, record=record))
            w.write(record)


@cli.command("show")
@click.argument("path", type=click.Path(dir_okay=False))
def show_cmd(path):
    """Print a fitted baseline file's roofline and coefficients, readably.

    \b
    Example:
      tpuperf baseline show baseline.json
    """
    from tpuperf_cli.eval import baseline as bl

    _summary(bl.Baseline.load(path), err=False)
