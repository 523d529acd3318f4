"""`tpuperf calibrate`: a model for this machine from a few minutes of measurements."""

import os
import re
import sys

import click

from tpuperf_cli.commands.options import CONTEXT, AliasOption, model_option, quiet_option

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}


def parse_budget(ctx, param, text):
    """'10m', '90s', '1h', '1m30s'; a bare number is seconds."""
    parts = re.findall(r"([0-9]*\.?[0-9]+)\s*([smh]?)", str(text).strip().lower())
    joined = "".join(f"{a}{b}" for a, b in parts)
    if not parts or joined != re.sub(r"\s+", "", str(text).strip().lower()):
        raise click.BadParameter(f"{text!r} is not a duration (e.g. 10m, 90s, 1h, 2m30s)")
    seconds = sum(float(a) * _UNITS[b] for a, b in parts)
    if seconds <= 0:
        raise click.BadParameter("must be positive")
    return seconds


@click.command("calibrate", context_settings=CONTEXT)
@click.option("--backend", type=click.Choice(["cpu", "gpu", "tpu"]), default="cpu",
              show_default=True, help="XLA backend to time the kernels on.")
@click.option("--budget", default="10m", show_default=True, metavar="DURATION",
              callback=parse_budget,
              help="Wall clock for the whole run (10m, 90s, 1h; a bare number is seconds): "
                   "--measure-share of it for timing, the rest for adapting.")
@model_option(default_is_none=False,
              help="Base model to adapt, a file or a bundled model's name (as predict --model "
                   "takes them: cpu-amd-epyc-26-2...) [default: the bundled model of the "
                   "backend's platform: gpu-nvidia-h200 with --backend gpu; on a CPU the model "
                   "bundled for this machine's CPU where there is one (cpu-amd-epyc-26-2), else "
                   "default-seeds: the bundled CPU model and two more seeds of its recipe].")
@click.option("-o", "--output", "out", cls=AliasOption, hidden_aliases=["--out"], metavar="FILE",
              type=click.Path(dir_okay=False),
              help="Write the model here [default: $XDG_DATA_HOME/tpuperf/models/TARGET.pt, "
                   "where predict, eval and score find it].")
@click.option("--cache-dir", type=click.Path(file_okay=False),
              help="measure's cache directory [default: $XDG_CACHE_HOME/tpuperf or "
                   "~/.cache/tpuperf].")
@click.option("--corpus", type=click.Path(exists=True), multiple=True,
              help="Featurized graph shards to choose kernels from: a directory of *.zst, or a "
                   "shard (e.g. `tpuperf generate ... | featurize -o gen.zst`; kernel records "
                   "are featurized as they are read); repeat for several [default: the "
                   "checkout's examples/corpus/graphs; with --backend gpu the GPU corpus, "
                   "examples/corpus-gpu/kernels].")
@click.option("--generate", "generate", type=click.IntRange(0), default=0, metavar="N",
              help="Also choose among N kernels of `tpuperf generate --source ops` (single "
                   "operations of many kinds and sizes, made and featurized here). Generated "
                   "kernels, these or a --corpus of generate's shards, are timed after every "
                   "program kernel, fill the time left, and are always fitted: never held out, "
                   "never used to choose the method.")
@click.option("--samples", type=click.IntRange(1), default=30, show_default=True,
              help="Timed samples per kernel (as measure --samples).")
@click.option("--compile-jobs", type=click.IntRange(0), default=None, metavar="N",
              help="Compile each batch of kernels on N processes, each pinned to its own CPU, "
                   "while the timing process waits; 0 compiles where the kernels are timed "
                   "(as measure --compile-jobs). CPU only. [default: one per CPU this "
                   "process may use]")
@click.option("--measure-share", type=click.FloatRange(0.05, 0.95), default=None,
              help="Share of the budget for timing kernels [default: 0.6; 0.95 for a base of "
                   "trees, which adapts in seconds].")
@click.option("--holdout", type=click.FloatRange(0.0, 0.5), default=0.2, show_default=True,
              help="Share of the corpus's programs whose kernels are held out: scored before "
                   "and after, never fitted.")
@click.option("--more", is_flag=True,
              help="Time more kernels even when the cache already holds enough from an earlier "
                   "run (by default such a run adapts at once).")
@click.option("--max-kernels", type=click.IntRange(2), metavar="N",
              help="Use at most N kernels (a quick run).")
@click.option("--methods", default="scale,head,finetune", show_default=True,
              help="Adaptation methods to try, comma-separated: scale, head, finetune, "
                   "relabel (finetune with corpus kernels not timed here too, their corpus "
                   "runtimes relabelled for this machine) for a network; scale, boost for "
                   "gradient-boosted trees (the default for a tree base: both).")
@click.option("--join", type=click.Choice(["ensemble", "average"]), default="ensemble",
              show_default=True,
              help="How the winning method's fits on several splits become one model: an "
                   "ensemble (the geometric mean of their predictions; the more accurate on "
                   "calibrate's held-out programs so far; predict runs three at about 0.55x one "
                   "network's rate) or one network of their averaged weights (a single "
                   "network's speed).")
@click.option("--threads", type=click.IntRange(0), default=0,
              help="Fits to run side by side while adapting, each in its own process on one "
                   "thread (one thread trains these small networks faster than two) [default: "
                   "$TPUPERF_THREADS, else min(2, CPUs)]; 1 fits one after another in this "
                   "process.")
@quiet_option(help="No progress on stderr (the held-out figures are still printed).")
def cli(backend, budget, model, out, cache_dir, corpus, generate, samples, compile_jobs,
        measure_share, holdout, more, max_kernels, methods, join, threads, quiet):
    """Adapt a model to this machine within a time budget.

    Chooses kernels of the corpus (the checkout's examples/corpus/graphs,
    or with --backend gpu the GPU corpus's kernels, or --corpus: any
    featurized graph shards, such as the kernels of
    `tpuperf generate` piped through featurize; --generate N makes N
    kernels of `tpuperf generate --source ops` itself), times them here
    with measure's steady settings (one pinned CPU, the process clock on
    CPU, --samples samples, each batch compiled on a pool of the other
    CPUs meanwhile, every result in measure's cache at once), adapts the base model to them and writes a
    model whose target is this machine. Everything, loading included, fits
    in --budget of wall clock; progress and the time left go to stderr.

    Which kernels: the distinct kernels fall into strata by kind (opcode,
    fusion kind) and size (decade of runtime); the timing order takes a
    kernel of each stratum in turn, alternating within a stratum between a
    random kernel and the one the base model is least sure of (its largest
    error against the corpus's own measurement), so whatever prefix the
    budget allows is diverse, representative and aimed at the model's weak
    spots.

    About a fifth (--holdout) of the corpus's programs are held out: their
    kernels are timed too but never fitted, and calibrate prints the
    model's MAPE and Kendall tau on them before and after, on stdout.
    When holding them out would leave under 2 kernels to fit (a budget of
    seconds, or a run cut off early), every kernel is fitted and no figures
    are printed. The model written keeps every kernel timed here, held out
    or fitted, at its time here: predict gives a kernel it knows that time
    (predict --no-known: the network's estimate).

    Adapting: `scale` refits the output scale (log runtime, affine),
    `head` trains the output head with the rest frozen, `finetune` trains
    all weights, each until its share of the time is spent or 20 epochs
    bring no better validation error; the training kernels' programs are
    split again to pick the method (or the base model) with the lowest
    median per-program MAPE. With the fits side by side (--threads 2 or
    more, the default on 2 CPUs) and --join ensemble (the default), each
    trained method is fitted on each of 3 splits and chosen by its mean
    over them, and the winner's fits are joined into one ensemble model;
    when the budget still holds most of a second round of fits (0.6 of the
    first's time; they stop on their patience), each member is fitted
    again from the same network on another split and becomes the mean of
    its two fits' weights.
    Otherwise the methods are fitted on one split and the winner again on
    other splits while time allows (at most 3 fits; --join average: one
    network of their averaged weights, faster to predict with, a little
    less accurate so far). The fits run side by
    side, each in its own process on one thread (--threads of them).
    A base that is an ensemble of seeds (`tpuperf ensemble`, such as the
    default CPU base) gives each fit its own seed's network to start from.
    benchmarks/bench_calibrate.py compares them.

    A base of gradient-boosted trees (`tpuperf train --learner gbdt`, the
    bundled GPU model) is adapted by `scale` and `boost`: more trees,
    fitted to what the base gets wrong on the kernels timed here, stopped
    on the validation programs and appended to the base's trees (one
    fit); the calibrated model is trees too. A base of networks joined with
    trees (`tpuperf ensemble NET TREES`) is adapted in two parts: the
    networks by the methods above, then the trees by boost (in the adapted
    networks' output scale, on the same kernels), joined again; calibrate
    prints the held-out figures of the networks alone beside the join's.

    Without --output the model goes to $XDG_DATA_HOME/tpuperf/models/ (default
    ~/.local/share/tpuperf/models/), named by target; from then on
    `predict`, `eval -m default` and so `score` pipelines use it by default
    when its target is the records' (this machine's, for records not
    measured), and say so on stderr; --model still overrides. Where
    tpuperf bundles a model of this machine (cpu-amd-epyc-26-2, trained on
    that CPU's timings of the whole corpus), the calibrated model takes its
    place by default, and calibrate says so.

    Ctrl-C (or a killed process) keeps every kernel timed in the cache; a
    second run finds them there and, with at least 40 of them, adapts at
    once (--more times further kernels first).

    \b
    Examples:
      tpuperf calibrate                       # 10 minutes, from the bundled seeds (or this CPU's model)
      tpuperf calibrate --budget 3m -o mine.pt   # (--out also works)
      tpuperf calibrate --backend gpu --budget 20m
      featurize < k.msgpack | predict | score    # now uses this machine's model

    Exit status: 0 on success, 1 on an error (no corpus, nothing measured,
    a bad model), 130 when interrupted.
    """
    from tpuperf_cli.calibrate import ALL_METHODS, TREE_METHODS, Options, calibrate, figures_text, joined_text

    known = ALL_METHODS + tuple(m for m in TREE_METHODS if m not in ALL_METHODS)
    chosen = tuple(m.strip() for m in methods.split(",") if m.strip())
    wrong = [m for m in chosen if m not in known]
    if wrong or not chosen:
        raise click.BadParameter(f"{','.join(wrong) or methods!r}: expected some of "
                                 f"{', '.join(known)}", param_hint="--methods")

    def log(msg):
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    opts = Options(backend=backend, budget_s=budget, model=model, out=out, cache_dir=cache_dir,
                   corpus=corpus, generate=generate, samples=samples, compile_jobs=compile_jobs,
                   measure_share=measure_share, holdout=holdout,
                   more=more, max_kernels=max_kernels, methods=chosen, join=join,
                   threads=threads or None)
    result = calibrate(opts, log)
    before, after = result["before"], result["after"]
    if before["n"]:
        print(f"held out: {before['n']} kernel(s) of {before['programs']} program(s) timed here")
        print(f"  before ({result['base']}): {figures_text(before)}")
        print(f"  after  ({result['name']}, {result['method']}"
              f"{joined_text(result['members'], result['join'], result['averaged'])}): {figures_text(after)}")
        if result.get("after_networks"):
            print(f"  after, its networks alone: {figures_text(result['after_networks'])}")
    elif result["all_fitted"]:
        print(f"held out: none (only {result['train']} kernel(s) measured, all fitted; a larger "
              "--budget holds some out)")
    elif not holdout:
        print("held out: none (--holdout 0)")
    else:
        print("held out: no kernel of the held-out programs was timed (a larger --budget "
              "times some)")
    print(f"wrote {result['out']} ({result['train']} kernel(s) fitted, "
          f"{result['seconds']:.0f}s of {budget:.0f}s)")
    if result["out"] and not out:
        log("calibrate: predict, eval -m default and score pipelines use it by default for "
            "records of this target")
        from tpuperf_cli.model.calibrated import bundled_for

        bundled = bundled_for(result["target"])
        if bundled:     # trained on this machine's timings of the whole corpus
            bundled = os.path.basename(bundled)[:-3]
            log(f"calibrate: tpuperf bundles a model of this machine, {bundled}, which the "
                f"calibrated one now replaces by default; `--model {bundled}` names it, and "
                f"`tpuperf eval` on kernels measured here compares the two")
