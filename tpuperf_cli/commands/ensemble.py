"""`tpuperf ensemble`: join trained models into one that averages them."""

import click

from tpuperf_cli.commands.options import CONTEXT, output_option, quiet_option


@click.command("ensemble", context_settings=CONTEXT)
@click.argument("models", nargs=-1, required=True, type=click.Path(dir_okay=False))
@output_option(help="The ensemble's model file to write.", required=True)
@click.option("--name", help="Model name stem recorded in predictions (default: the first "
                             "model's stem).")
@quiet_option()
def cli(models, output, name, quiet):
    """Join trained models into one model file that predicts the geometric
    mean of their predictions.

    The networks must come from the same training data and options but for
    the seed (or another option that leaves the network's shape alone):
    the same task, network config, feature scaling (to float32 rounding:
    the same data scaled on another CPU joins) and target. Members of
    an ensemble given count one by one. At most one tree model (`tpuperf
    train --learner gbdt` on the same data and split, so the same scaling)
    may join them, as one member more: networks and trees err in different
    places (on 79 programs of families held out of training, the bundled
    recipe's network joined with such trees: median MAPE 26.1% against
    27.7% alone; README, "The bundled model"). predict, eval, score and compare take
    the file like any model; each prediction costs the members' forward
    passes (the trees' walk: numpy's, then numba's compiled loop). calibrate adapts a file that joins both
    in two parts (the networks by its network methods, the trees by
    boost) and joins them again. Averaging a few
    seeds smooths the error one seed's training leaves: on the manual
    split's validation programs, three seeds of the bundled recipe joined
    gave a lower median MAPE than any one of them. predict gives each
    kernel the members' spread too (pred_spread: the standard deviation of
    their log runtimes), which says which estimates to trust: on families
    held out of training, kernels the members put within 0.05 of each
    other were 6% off at the median, those 0.4 or more apart 54% (README,
    "Which estimates to trust").

    \b
    Examples:
      for s in 0 1 2; do tpuperf train --data 'shards/*.zst' --split split.json \\
          --seed $s -o m$s.pt; done
      tpuperf ensemble m0.pt m1.pt m2.pt -o ensemble.pt
      tpuperf train --learner gbdt --data 'shards/*.zst' --split split.json -o trees.pt
      tpuperf ensemble m0.pt trees.pt -o joined.pt
      hlo-split prog.hlo | featurize | predict -m ensemble.pt | score

    Exit status: 0 on success, 1 when a file is not a model or the models
    differ in what they must share.
    """
    import sys

    from tpuperf_cli.errors import TpuperfError
    from tpuperf_cli.model.predict import combine_models, member_states, save_atomic

    if output == "-":
        raise TpuperfError("--output -: a model file cannot go to stdout; name a file")
    d = combine_models(models, name)
    save_atomic(d, output)
    if not quiet:
        trees = " and trees" if d.get("trees") is not None else ""
        print(f"ensemble: wrote {output} (model {d['name']}, {len(member_states(d))} network(s)"
              f"{trees} from {len(models)} files)", file=sys.stderr)
