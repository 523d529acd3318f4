"""A worker of tests/test_train_dist.py: a few optimizer steps of
model.train.TrainingRun on fixed global batches of synthetic examples,
then the weights saved to argv[1]. Alone it steps on whole batches; with
RANK/WORLD_SIZE/MASTER_* in the environment (as torchrun sets them) it
joins the group and steps on its rank's share of every batch."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpuperf_cli.model import set_threads  # noqa: E402
from tpuperf_cli.model.dist import Dist  # noqa: E402
from tpuperf_cli.model.examples import Scaler, example  # noqa: E402

from synthetic import synthetic_records  # noqa: E402

STEPS, BATCH = 4, 7   # odd: the ranks get 4 and 3 examples, so an unweighted mean of their means is wrong


def main(out):
    set_threads(1)
    import torch

    from tpuperf_cli.model.config import NetConfig
    from tpuperf_cli.model.train import TrainingRun, TrainOptions

    examples = [example(r, i) for i, r in enumerate(synthetic_records(n_programs=2, kernels=16, seed=5), 1)]
    scaler = Scaler()
    for ex in examples:
        scaler.update(ex)
    scaler.finish()
    dist = Dist.from_env()
    opts = TrainOptions(batch_size=BATCH, lr=1e-2, seed=7, threads=1).check()
    run = TrainingRun(NetConfig(hidden=16, opcode_dim=8, layers=2), scaler, opts, dist)
    init = {k: w.clone() for k, w in run.net.state_dict().items()}
    losses = []
    for s in range(STEPS):
        batch = examples[s * BATCH:(s + 1) * BATCH]
        losses.append(run.train_step(batch[dist.rank::dist.world]))
    if dist.main:
        torch.save({"init": init, "net": run.net.state_dict(), "ema": run.ema_net.state_dict(), "losses": losses,
                    "world": dist.world}, out)
    dist.close()


if __name__ == "__main__":
    import faulthandler

    # a rank that hangs prints where, for the test's failure message
    faulthandler.dump_traceback_later(240, exit=True)
    main(sys.argv[1])
    # Past the group's close, the interpreter's teardown of torch's gloo and
    # store threads has hung a finished rank at exit (1 run in about 3 on
    # 2026-12-04, after its file was written); what this worker checks is done.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
