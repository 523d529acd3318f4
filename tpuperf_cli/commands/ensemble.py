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

    The models must come from the same training data and options but for
    the seed (or another option that leaves the network's shape alone):
    the same task, network config, feature scaling (to float32 rounding:
    the same data scaled on another CPU joins) and target. Members of
    an ensemble given count one by one. predict, eval, score, compare and
    calibrate take the file like any model; each prediction costs the
    members' forward passes. Averaging a few seeds smooths the error one
    seed's training leaves: on the random split's validation programs,
    three seeds of the bundled model's settings gave a lower median MAPE
    than any one of them (README, "The bundled model").

    \b
    Examples:
      for s in 0 1 2; do tpuperf train --data 'shards/*.zst' --split split.json \\
          --seed $s -o m$s.pt; done
      tpuperf ensemble m0.pt m1.pt m2.pt -o ensemble.pt
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
        print(f"ensemble: wrote {output} (model {d['name']}, {len(member_states(d))} members "
              f"from {len(models)} files)", file=sys.stderr)
