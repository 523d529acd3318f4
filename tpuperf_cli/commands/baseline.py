"""`tpuperf baseline`: the analytical roofline baseline (fit, apply, show)."""

import json
import sys

import click

from tpuperf_cli.errors import TpuperfError


def _inputs(data, files):
    """--data values plus positional files (so `--data test/*.zst` works)."""
    return list(data) + list(files)


@click.group("baseline", context_settings={"help_option_names": ["-h", "--help"]})
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
      tpuperf baseline fit --data train/*.zst --out baseline.json
      tpuperf baseline fit --data train/*.zst --peak-flops 61.5e12 --bandwidth 450e9 --out v3.json
      featurize < kernels | tpuperf baseline apply --baseline baseline.json | score
      tpuperf eval --model model.pt --baseline baseline.json --data test/*.zst
    """


@cli.command("fit")
@click.option("--data", "data", multiple=True, type=click.Path(dir_okay=False),
              help="Measured graph shard (plain or .zst); repeat, or list several after one --data.")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--out", "-o", type=click.Path(dir_okay=False), default="-", show_default=True,
              help="Where to write the baseline JSON ('-' for stdout).")
@click.option("--peak-flops", type=float, default=None,
              help="Peak operations/s of the target; with --bandwidth, fixes the roofline.")
@click.option("--bandwidth", type=float, default=None,
              help="Memory bandwidth in bytes/s of the target; with --peak-flops.")
@click.option("--overhead/--no-overhead", default=True, show_default=True,
              help="Fit the fixed cost per kernel t0 (else t0 = 0: a pure roofline).")
@click.option("--min-kernels", type=click.IntRange(1), default=3, show_default=True,
              help="Kinds with fewer training kernels share the coefficient 'other'.")
def fit_cmd(data, files, out, peak_flops, bandwidth, overhead, min_kernels):
    """Fit the roofline baseline on measured graph records.

    Reads graph records carrying kernel_feat (featurize) and runtime_ns
    (measure) from the files given (plain or zstd; stdin when none) and
    writes a JSON file: format, formula, peak_flops, bandwidth,
    overhead_ns, ridge_flops_per_byte, coef (one per kind), kernels, kernels_per_kind,
    log_rmse and train_mape of the fit, target (from the records). Records
    without runtime_ns (failed measurements) are skipped. A summary goes to
    stderr.

    \b
    Example:
      tpuperf baseline fit --data train/*.zst --out baseline.json
    """
    from tpuperf_cli.eval import baseline as bl
    from tpuperf_cli.stream import read_many

    stats = {}
    b = bl.fit_records(read_many(_inputs(data, files)), peak_flops, bandwidth, min_kernels, stats,
                       overhead)
    text = json.dumps(b.to_json(), indent=2) + "\n"
    if out == "-":
        sys.stdout.write(text)
    else:
        try:
            with open(out, "w") as f:
                f.write(text)
        except OSError as e:
            raise TpuperfError(f"{out}: {e.strerror}") from None
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
@click.option("--baseline", "-b", "path", required=True, type=click.Path(dir_okay=False),
              help="Baseline JSON written by `tpuperf baseline fit`.")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
def apply_cmd(path, files):
    """Add the baseline's prediction to every graph record.

    Reads graph records (files or stdin), writes them to stdout with two
    fields added: baseline_ns (float, the roofline prediction in ns) and
    baseline_kind (the kernel kind whose coefficient was used). Other
    fields pass through. A record without kernel_feat is an error.

    \b
    Example:
      featurize < kernels.msgpack | tpuperf baseline apply -b baseline.json > out.msgpack
    """
    from tpuperf_cli.eval import baseline as bl
    from tpuperf_cli.stream import RecordWriter, read_many

    b = bl.Baseline.load(path)
    with RecordWriter() as w:
        for number, record in enumerate(read_many(list(files)), 1):
            record["baseline_kind"] = bl.kernel_kind(record)
            record["baseline_ns"] = b.predict_record(record, f"record {number}")
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
