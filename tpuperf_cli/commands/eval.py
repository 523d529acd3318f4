"""`tpuperf eval`: paper-style accuracy tables for one or more models."""

import math
import os

import click

from tpuperf_cli.commands.options import (
    CONTEXT,
    baseline_option,
    format_option,
    output_option,
    quiet_option,
    resolve_model,
    split_option,
    text_output,
)
from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.records import BASELINE_NS, MODEL, PRED_NS, TARGET, locate


def _split_model(spec):
    """"LABEL=PATH" or "PATH" -> (label, path); the label defaults to the
    file name without extension. PATH `default` is the default model (None
    here), `bundled` the bundled one."""
    if "=" in spec and not os.path.exists(spec):
        label, path = spec.split("=", 1)
        if label and path:
            return label, _resolve(path)
    base = os.path.basename(spec)
    return (base.split(".")[0] or base), _resolve(spec)


def _resolve(path):
    """None for `default` (the default model, chosen for the records'
    target when it is loaded), else resolve_model's path."""
    if path == "default" and not os.path.exists(path):
        return None
    return resolve_model(path)


def _finite(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _unique(labels):
    seen = {}
    out = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab}#{seen[lab]}")
    return out


@click.command("eval", context_settings=CONTEXT)
@click.option("--data", "data", multiple=True, type=click.Path(dir_okay=False),
              help="Measured graph shard (plain or .zst); repeat, or list several after one --data.")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--model", "-m", "models", multiple=True, metavar="[LABEL=]PATH",
              help="Model file from `tpuperf train`; repeat for a side-by-side table. The "
                   "column label is LABEL, else the file name. `default`: the model `tpuperf "
                   "calibrate` wrote for the records' target, else the model bundled for it, "
                   "else the bundled model (named on stderr); `bundled`: the bundled model.")
@click.option("--no-known", is_flag=True,
              help="Run each --model's network on every kernel, also those whose runtime the "
                   "model file knows (measured in its training data, or timed by calibrate), "
                   "which a model otherwise predicts at that measurement, as predict does.")
@click.option("--predicted", is_flag=True,
              help="Also evaluate the pred_ns the records already carry (from `predict`).")
@baseline_option(help="Roofline baseline JSON from `tpuperf baseline fit` (a 'baseline' column).")
@click.option("--no-baseline", is_flag=True,
              help="Leave out the baseline even where records carry baseline_ns.")
@click.option("--task", type=click.Choice(["auto", "fusion", "tile"]), default="auto",
              show_default=True, help="Which table; auto: tile when records carry a config "
                                      "and several share a (program, kernel).")
@click.option("--min-us", "min_us", type=click.FloatRange(0), default=5.0, show_default=True,
              help="Fusion task: threshold of the first table, in microseconds of measured runtime.")
@format_option(["table", "markdown", "json"], "table")
@click.option("--summary", "-s", is_flag=True,
              help="Print only the median/mean row of each predictor, one row per predictor.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Also write a figure (PNG): predicted vs measured and per-program error.")
@click.option("--batch-size", type=click.IntRange(1), default=256, show_default=True,
              help="Kernels per batch when running a model.")
@split_option(help='JSON {"train": [...], "valid": [...], "test": [...]} of program names '
                   "(`tpuperf split`): evaluate the records of its 'test' programs only.")
@output_option(help="Where to write the tables or JSON: a file, or - for stdout.")
@quiet_option(help="No notes on stderr (models loaded, records skipped, figure written).")
def cli(data, files, models, no_known, predicted, baseline_path, no_baseline, task, min_us, fmt,
        summary, plot_path, batch_size, split_path, output, quiet):
    """Accuracy of performance models on measured kernels, as in the paper.

    Reads measured graph records (featurize + measure: kernel_feat,
    node features and runtime_ns) from the files given (plain or zstd;
    stdin when none), runs every --model on them, and prints one table row
    per program (the record's program field), then the median and mean over
    programs. Records without runtime_ns (failed measurements) are skipped.

    Fusion task (each kernel once; the paper's Table 2): for every
    predictor, MAPE (mean of 100 |pred - measured| / measured) and Kendall's
    tau-b between predicted and measured runtimes of the program's kernels,
    in two tables: kernels measured at >= --min-us (5 us, as in the paper),
    and all kernels. The first table also gives each predictor's
    whole-program error (prog%): 100 |sum of predicted x count - sum of
    measured x count| / sum of measured x count over all the program's
    measured kernels, the error of the estimate `score` prints. Where the
    records carry measure's `noise`, a noise% column gives the median of it
    over the program's kernels >= --min-us: how far their labels may be
    off (measure(1)), a floor under which no MAPE can be judged.

    Tile task (records with a config, several per (program, kernel)):
    Tile-Size APE (the paper's eq. 2: 100 * sum over kernels of
    |t(config the predictor ranks first) - t(best config)| / sum of best
    runtimes), mean per-kernel Kendall's tau-b, and the TpuGraphs top-K
    slowdown for K = 1, 5, 10 (per kernel, best measured runtime among the
    predictor's K first-ranked configs over the best runtime, minus one;
    mean over kernels, in percent). Ties in a prediction count against the
    predictor (the slowest of the tied configs is taken). A row "all
    kernels" pools the kernels of all programs.

    Predictors, as columns side by side: each --model (run here through the
    model library, on CPU), the pred_ns already in the records with
    --predicted (labelled by the records' model field), the roofline
    baseline (`tpuperf baseline --help`) from --baseline, or from the
    records' baseline_ns when they carry it (`tpuperf baseline apply`),
    and for tile data XLA's own choice ("xla-default", the config marked
    is_default; Tile-Size APE and top-1 only; with no other predictor,
    eval shows just that; a kernel with no config marked is_default is left
    out of its figures, with a warning).

    On XLA:CPU every kernel pays a few microseconds of dispatch (the fastest
    kernels of the example corpus take 3 to 4 us; a quarter of them are
    under 5 us), so most kernels pass the 5 us threshold there; --min-us 20
    keeps those whose runtime is not mostly overhead.

    --format json writes one object: task, predictors, records,
    skipped_unmeasured, and for the fusion task threshold_ns, programs
    (a list of {program, kernels, kernels_ge, runtime_ns (measured x count,
    summed), ge: {LABEL: {mape, tau}}, all: {LABEL: {mape, tau}},
    program_error: {LABEL: percent}}) and summary ({ge|all: {LABEL:
    {median|mean: {mape, tau}}}, program_error: {LABEL: {median, mean}}});
    for the tile task programs ({program, kernels, configs, metrics:
    {LABEL: {tile_ape, tau, top1, top5, top10, ...}}}) and summary
    ({LABEL: {median|mean|pooled: {...}}}). Undefined figures (a constant
    prediction's tau, a program without kernels above the threshold) are
    null in JSON and "-" in tables.

    --summary prints one row per predictor instead (median and mean over
    programs; for tile data the mean and the pooled values), the compact
    form for ablations.

    --plot FILE.png writes a figure: for each of the first four predictors
    that predict runtimes, a log-log scatter of predicted vs measured
    runtime (all with the same axes, the identity line, a factor-of-two
    band; the kernels the bars count in one colour per program, those
    below --min-us as grey dots), the program legend beside them, and
    per-program bars for all predictors (greys and hatching; the tick
    labels in the programs' colours): MAPE on kernels >= --min-us with
    +-1 standard error, a diamond at the whole-program error (tile task:
    Tile-Size APE).

    \b
    Examples:
      tpuperf baseline fit --data train/*.zst -o baseline.json
      tpuperf eval --model model.pt --baseline baseline.json --data test/*.zst
      tpuperf eval -m sage=sage.pt -m gat=gat.pt -b baseline.json -f markdown test/*.zst
      featurize < k.msgpack | predict -m model.pt | tpuperf eval --predicted --format json
      tpuperf eval -m model.pt --data test/*.zst --plot eval.png
      tpuperf eval -s -m a.pt -m b.pt -m c.pt -b baseline.json test/*.zst

    Exit status: 0 on success, 1 on bad input (missing file, corrupt
    stream, records without the fields a predictor needs, no measured
    records), 2 on a bad option.
    """
    import numpy as np

    from tpuperf_cli.eval import report
    from tpuperf_cli.stream import read_many

    def note(msg):
        if not quiet:
            click.echo(msg, err=True)

    records = read_many(list(data) + list(files))
    if split_path:
        from tpuperf_cli.split import records_of, split_programs

        records = records_of(records, split_programs(split_path, "test"))
    d = report.EvalData(records)
    if len(d) == 0:
        raise TpuperfError("no measured records (records need runtime_ns; "
                           f"{d.skipped} records without it were skipped)"
                           + (f"; none of the 'test' programs of {split_path}" if split_path
                              and not d.skipped else ""))
    if d.skipped:
        note(f"eval: skipped {d.skipped} records without runtime_ns")
    chosen_task = d.task() if task == "auto" else task

    predictions = {}
    specs = [_split_model(s) for s in models]
    labels = _unique([lab for lab, _ in specs])
    for label, (_, path) in zip(labels, specs):
        predictions[label] = _run_model(path, d.records, batch_size, note,
                                        d.records[0].get(TARGET) if d.records else None,
                                        known=not no_known)
    if predicted:
        missing = [i + 1 for i, r in enumerate(d.records) if PRED_NS not in r]
        if missing:
            raise TpuperfError(f"--predicted: {len(missing)} measured records lack pred_ns "
                               f"(first: measured record {missing[0]}); run `predict` first")
        bad = next((i + 1 for i, r in enumerate(d.records) if not _finite(r[PRED_NS])), None)
        if bad is not None:
            raise TpuperfError(f"--predicted: measured record {bad}: pred_ns is not a finite "
                               f"number ({d.records[bad - 1][PRED_NS]!r:.40})")
        names = sorted({str(r.get(MODEL, "predicted")) for r in d.records})
        label = names[0] if len(names) == 1 else "predicted"
        label = _unique(list(predictions) + [label])[-1]
        predictions[label] = np.asarray([float(r[PRED_NS]) for r in d.records])
    if not no_baseline:
        base = _baseline(baseline_path, d.records)
        if base is not None:
            predictions[_unique(list(predictions) + ["baseline"])[-1]] = base
    choice_only = []
    if chosen_task == "tile" and d.is_default.any():
        predictions["xla-default"], missing = report.default_choice(d)
        choice_only.append("xla-default")
        if missing:
            click.echo(f"eval: warning: {missing} kernel(s) have no config marked is_default; "
                       "they are left out of the xla-default figures", err=True)

    if not predictions:
        raise click.UsageError("nothing to evaluate: give --model, --predicted or --baseline"
                               + ("" if chosen_task == "tile" else
                                  " (or tile data with is_default configs)"))
    try:
        result = report.evaluate(d, predictions, chosen_task, min_us * 1000.0, choice_only)
    except ValueError as e:
        raise TpuperfError(str(e)) from None
    with text_output(output) as out:
        out.write(report.render(result, fmt, summary))
    if plot_path:
        from tpuperf_cli.eval import plot

        try:
            plot.plot(plot_path, d, predictions, result)
        except OSError as e:
            raise TpuperfError(f"{plot_path}: {e.strerror or e}") from None
        note(f"eval: wrote {plot_path}")


def _baseline(path, records):
    """Baseline predictions: from a file, else from records' baseline_ns."""
    import numpy as np

    if path:
        from tpuperf_cli.eval.baseline import Baseline

        b = Baseline.load(path)
        return np.asarray([b.predict_record(r, locate(i, "measured records", r))
                           for i, r in enumerate(records, 1)])
    if records and all(BASELINE_NS in r for r in records):
        return np.asarray([float(r[BASELINE_NS]) for r in records])
    return None


def _run_model(path, records, batch_size, note, target=None, known=True):
    """Predicted ns for each record from a model file (None: the default
    model for the records' target), via the model library; known=False:
    the network on every kernel (model.known off)."""
    from tpuperf_cli.eval.predictors import model_predictions

    pred, model = model_predictions(path, records, batch_size, target, known)
    note(f"eval: {model.path}: model {model.name} ({model.task} task, "
         f"{model.kind})" + (f"; {model.chosen}" if model.chosen else ""))
    if model.known_hits:
        note(f"eval: {model.known_hits} of {len(records)} kernel(s) at the runtime model "
             f"{model.name} knows (measured in its data; --no-known: the network's estimate)")
    return pred
