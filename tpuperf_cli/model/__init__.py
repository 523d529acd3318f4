"""The learned performance model (Kaufman et al. 2021): a graph neural network
in DGL that predicts a kernel's runtime from its graph record.

Modules (torch and DGL are imported only by net, train, resume, and by
predict for the DGL engine):
    config    NetConfig, the network's hyperparameters (no torch)
    examples  graph records -> checked examples; the feature scaling
    data      examples -> scaled numpy batches; shards, even sampling
              across programs, bounded-memory streaming
    net       the network (opcode embedding, f1, GraphSAGE/GAT, reductions)
    train     the training loop (losses, validation, early stopping,
              atomic checkpoints)
    resume    continuing an interrupted run (--resume)
    infer     the trained network in numpy, for predict (no torch or DGL)
    trees     gradient-boosted trees (train --learner gbdt): fitted with
              LightGBM, run in numpy from the same batches
    predict   model files, load_model, predict_records, predict_batch

Public functions others call:
    from tpuperf_cli.model.predict import load_model, predict_records, predict_batch
    model = load_model(path=None, device="cpu", threads=None)   # None: the bundled model
    model.predict_examples(examples, batch_size=512) -> np.ndarray (ns)
    model.name, model.task, model.target, model.meta["trained"]
    predict_records(records, model=None, batch_size=512) -> iterator of records
        with pred_ns and model added (model: a Model, a path, or None)
    predict_batch(model, records) -> np.ndarray (ns), records unchanged
    from tpuperf_cli.model.examples import example
    example(record, number=None, name=None) -> Example (StreamError if not a graph record)
    from tpuperf_cli.model.train import train, TrainOptions
    from tpuperf_cli.model.config import NetConfig
    train(data, out, net=NetConfig(...), opts=TrainOptions(task="tile", ...),
          valid=None, split=None, resume=False, keep_state=False, name=None,
          progress=print_to_stderr) -> summary dict (history, best epoch, seconds, model name)
"""

import os

MODEL_FORMAT = "tpuperf-model"
MODEL_VERSION = 4          # the newest file version read: 2 holds `members` (an ensemble), 1 not,
TREE_MODEL_VERSION = 3     # 3 gradient-boosted trees (model.trees), which older tpuperfs cannot run,
TREES_JOINED_VERSION = 4   # 4 networks joined with trees (`trees`: tpuperf ensemble)
DEFAULT_MODEL = "default.pt"
# the bundled model's recipe, seeds 0 (default.pt's network) to 2, joined:
# calibrate's base on a CPU, each fit starting from its own seed
DEFAULT_SEEDS_MODEL = "default-seeds.pt"


def default_model_path(name: str = DEFAULT_MODEL) -> str:
    """The bundled model (or another file `name`), shipped in tpuperf_cli/data/."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "data", name)


def thread_env(threads: int | None = None) -> int:
    """The number of threads to use (default: at most 2, or $TPUPERF_THREADS),
    set in the environment for OpenMP and OpenBLAS libraries loaded after
    this; imports no torch. Returns the number."""
    if threads is None:
        env = os.environ.get("TPUPERF_THREADS")
        threads = int(env) if env and env.isdigit() else min(2, os.cpu_count() or 1)
    threads = max(1, int(threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))
    # Idle OpenMP threads sleep instead of spinning: on a loaded machine
    # spinning threads slow torch and DGL down ten-fold.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("DGLBACKEND", "pytorch")
    return threads


def set_threads(threads: int | None = None) -> int:
    """Limit torch (and OpenMP) to `threads` threads; default: at most 2 or
    $TPUPERF_THREADS, so tools share a small machine politely."""
    threads = thread_env(threads)
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def check_device(device: str) -> str:
    """Raise TpuperfError unless torch and DGL can both run on `device`."""
    from tpuperf_cli.errors import TpuperfError

    if device == "cpu":
        return device
    if not device.startswith("cuda"):
        raise TpuperfError(f"--device {device}: expected cpu, cuda or cuda:N")
    import torch

    if not torch.cuda.is_available():
        raise TpuperfError(f"--device {device}: torch sees no CUDA device here")
    import dgl

    try:
        dgl.graph(([0], [0])).to(device)
    except Exception as e:  # DGL wheels from PyPI are CPU-only
        raise TpuperfError(f"--device {device}: this DGL cannot use CUDA ({str(e).splitlines()[0]}); "
                           f"install a CUDA build of DGL 2.1 (see https://www.dgl.ai/pages/start.html)"
                           ) from None
    return device
