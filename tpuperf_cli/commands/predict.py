"""`predict`: add the model's runtime prediction to each graph record."""

import gc
import json
import sys

import click

from tpuperf_cli.commands.options import (
    CONTEXT,
    AliasOption,
    model_option,
    note_model,
    output_option,
    quiet_option,
    record_writer,
    refuse_terminal,
)


@click.command("predict", context_settings=CONTEXT)
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@model_option(help="Model file from `tpuperf train`, or a bundled model's name (`bundled`: the "
                   "CPU model; default-seeds: its recipe's three seeds joined, which adds "
                   "pred_spread; gpu-nvidia-h200: the NVIDIA H200's; cpu-amd-epyc-26-2: an AMD EPYC "
                   "family 26 model 2's). Default (or `default`): the "
                   "model `tpuperf calibrate` wrote for the records' target (this machine's, for "
                   "records not measured), else the model bundled for that target, else the "
                   "bundled CPU model.")
@click.option("--batch-size", cls=AliasOption, hidden_aliases=["-b"], type=click.IntRange(1),
              default=512, show_default=True, help="Graphs predicted together.")
@output_option(help="Write records here (.zst: compressed) instead of stdout.")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda.")
@click.option("--threads", type=click.IntRange(0), default=0,
              help="Threads for the math (default: min(2, cores) or $TPUPERF_THREADS).")
@click.option("--engine", type=click.Choice(["auto", "numpy", "dgl"]), default="auto",
              show_default=True,
              help="What runs the model: numpy (the trained weights in numpy; no torch or "
                   "DGL loaded, so predict starts fast), dgl (the network tpuperf train "
                   "built, in torch and DGL), or auto: numpy on the CPU for every model "
                   "tpuperf train makes, dgl otherwise (--device cuda, or a file numpy "
                   "cannot read). Both give the same predictions to float32 rounding.")
@click.option("--no-known", is_flag=True,
              help="Predict every kernel with the network, also those whose runtime the "
                   "model file knows (the kernels its training data measured, or that "
                   "calibrate timed), which predict otherwise gives at that measurement.")
@click.option("--show-model", is_flag=True,
              help="Print what the model file holds (name, task, target, the kernel "
                   "features it reads, hyperparameters, training data and figures) as JSON and exit.")
@quiet_option(help="No notes on stderr: neither the default model chosen nor the warnings "
                   "(records measured on another target than the model's; kernels larger "
                   "than a tree model was trained on).")
def cli(files, model, batch_size, output, device, threads, engine, no_known, show_model, quiet):
    """Predict each kernel's runtime with a trained model.

    Reads graph records (from featurize) from the files given (plain or
    zstd; stdin when none or `-`) and writes each one back unchanged but
    for two added fields, three for a model of several members:

    \b
      pred_ns      predicted runtime of one run of the kernel, in
                   nanoseconds (a tile-task model gives a score on the
                   same scale that orders a kernel's configurations:
                   lower = faster)
      model        the model's name (file stem and a hash of its weights)
      pred_spread  only from a model of several members (seeds joined by
                   `tpuperf ensemble`, such as --model default-seeds, or
                   networks joined with trees): the standard deviation of
                   the members' natural-log runtimes, how far apart they
                   put the kernel (0.1: about 10%); 0 for a kernel given
                   its known runtime. The further apart, the further off
                   the estimate tends to be: on families held out of
                   training, kernels under 0.05 were 6% off at the median,
                   those over 0.4 54% (README, "Which estimates to trust")

    Without --model, predict uses the model `tpuperf calibrate` wrote for
    the records' target (the target of the first record; for records not
    measured, this machine's CPU as `measure` describes it by default) in
    $XDG_DATA_HOME/tpuperf/models/, and says so on stderr; when there is
    none, a model bundled with tpuperf for the records' target: today two.
    gpu-nvidia-h200 was trained on kernels of the example JAX programs that
    XLA:GPU compiled and CUPTI timed on an NVIDIA H200 (records measured
    there choose it, and so do records of another GPU, whose nearest
    bundled model it is; for records not measured, name it: --model
    gpu-nvidia-h200); cpu-amd-epyc-26-2 on the same CPU corpus as the
    bundled CPU model, timed with XLA:CPU on an AMD EPYC family 26 model 2
    (records measured on that CPU choose it, and so do records not
    measured when this machine is that CPU). Else
    the bundled CPU model: trained on kernels of example JAX programs
    measured with XLA:CPU on an Intel Xeon (see `predict --show-model`).
    Its figures are for that machine: calibrate one for yours (`tpuperf
    calibrate --help`) or train your own (`tpuperf train --help`). When the
    records carry a measurement target (from measure) other than the
    model's, predict warns once on stderr.

    A kernel the model file knows (the same fingerprint as a kernel its
    training data measured, or that calibrate timed: identical kernels,
    whatever their names) gets that measured runtime, the best estimate
    of it on the model's machine; predict says on stderr how many did.
    --no-known predicts them with the network too.

    Records are predicted --batch-size at a time, in input order, so
    predict works in a pipe and on large shards alike. A record that is
    not a graph record (e.g. a kernel record from hlo-split: no node
    features) stops predict with an error suggesting featurize, and one
    the model cannot read (a field missing, or node_feat, kernel_feat or
    config_feat of the wrong size) with an error naming
    the record and what is wrong; the records before it are written. A
    record with more kernel features than the model was trained with
    (featurized by a later tpuperf: kernel features are only appended) is
    read by its first ones, or by the ones the model names where it was
    trained on a selection (train --kernel-features 16+NAME).

    \b
    Examples:
      hlo-split prog.hlo | featurize | predict | score
      predict --model tpu.pt shards/test.zst > predicted.msgpack
      featurize < kernels.msgpack | predict -m model.pt -o predicted.zst
      predict --show-model

    Exit status: 0 on success, 1 on bad input or a bad model file.
    """
    # Nothing predict makes holds a reference cycle (imported modules,
    # records, batches): the cyclic collector would only walk them, a fifth
    # of the imports' time and a tenth of a long stream's.
    collecting = gc.isenabled()
    gc.disable()
    try:
        _predict(files, model, batch_size, output, device, threads, engine, no_known, show_model,
                 quiet)
    finally:
        if collecting:
            gc.enable()


def _predict(files, model, batch_size, output, device, threads, engine, no_known, show_model,
             quiet):
    from tpuperf_cli.model import thread_env

    thread_env(threads or None)         # before numpy loads its BLAS
    from tpuperf_cli.model.predict import load_model, predict_packed
    from tpuperf_cli.stream import read_many

    if not show_model:
        refuse_terminal(output, "score")
    if engine != "dgl" and device == "cpu":
        # what the numpy engine runs, imported while the records upstream
        # are still on their way
        import tpuperf_cli.model.infer  # noqa: F401
        import tpuperf_cli.model.parts  # noqa: F401
    items = None
    target = None
    if model is None and not show_model:
        # the default model follows the records' target: peek at the first one
        items, target = _peek_target(read_many(list(files), with_bytes=True))
    model = load_model(model, device=device, threads=threads or None, engine=engine,
                       target=target)
    if show_model:
        json.dump(model.describe(), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return
    if no_known:
        model.known = None
    if not quiet:
        note_model("predict", model)
    if items is None:
        items = read_many(list(files), with_bytes=True)
    warn = (lambda msg: None) if quiet else None
    records = 0
    with record_writer(output, "score") as out:
        for packed, count in predict_packed(items, model, batch_size, name=_name(files), warn=warn):
            out.write_packed(packed, count)
            records += count
    if model.known_hits and not quiet:
        print(f"predict: {model.known_hits} of {records} kernel(s) at the runtime model "
              f"{model.name} knows (measured in its data; --no-known: the network's estimate)",
              file=sys.stderr)


def _peek_target(items):
    """(the same (record, bytes) items, the first record's target or None).
    An error reading the first record is raised here: no good record comes
    before it."""
    import itertools

    try:
        first = next(items)
    except StopIteration:
        return iter(()), None
    record = first[0]
    target = record.get("target") if isinstance(record, dict) else None
    return itertools.chain([first], items), target


def _name(files):
    if not files:
        return "<stdin>"
    return files[0] if len(files) == 1 else "input"
