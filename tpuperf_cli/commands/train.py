"""`tpuperf train`: fit a performance model on measured graph records."""

import click

from tpuperf_cli.commands.options import CONTEXT, AliasOption, output_option, quiet_option
from tpuperf_cli.errors import TpuperfError


def _kernel_features(ctx, param, value) -> tuple:
    from tpuperf_cli.model.examples import kernel_columns

    try:
        return kernel_columns(value)
    except TpuperfError as e:
        raise click.BadParameter(str(e).split(": ", 1)[-1], ctx, param) from None


def _source_weights(ctx, param, values) -> dict:
    from tpuperf_cli.model.options import parse_source_weights

    try:
        return parse_source_weights(values)
    except ValueError as e:
        raise click.BadParameter(str(e), ctx, param) from None


@click.command("train", context_settings={**CONTEXT, "max_content_width": 100})
@click.argument("files", nargs=-1)
@click.option("--data", "-d", multiple=True, metavar="SHARD",
              help="Training shard(s): files or quoted glob patterns (plain or .zst); repeatable.")
@output_option(required=True, hidden_aliases=["--out"],
               help="Model file to write (written atomically after every better epoch).")
@click.option("--valid", cls=AliasOption, hidden_aliases=["-v"], multiple=True, metavar="SHARD",
              help="Validation shard(s) for early stopping, all their records (with --split "
                   "too); repeatable, globs allowed.")
@click.option("--split", type=click.Path(dir_okay=False), metavar="FILE",
              help='JSON {"train": [...], "valid": [...], "test": [...]} of program names '
                   "(`tpuperf split programs`, examples/splits/*.json): train on the 'train' "
                   "programs of --data (less any kernel generated from its 'valid' or 'test' "
                   "programs: a record whose origin is one of them) and "
                   "validate on its 'valid' programs of --data (unless --valid is given). "
                   "Records of programs in none of its lists are left out, with a warning "
                   "that counts them by program or source (\"layers:*\": a source the "
                   "split's train list does not name).")
@click.option("--task", type=click.Choice(["fusion", "tile"]), default="fusion", show_default=True,
              help="fusion: predict each kernel's runtime; tile: rank the configurations of each "
                   "kernel (records sharing program and kernel).")
@click.option("--loss", type=click.Choice(["mse", "ape", "huber", "hinge", "logistic"]), default=None,
              help="--task fusion: mse on log runtime (default); ape: the absolute "
                   "percentage error |pred/runtime - 1| that MAPE averages (an over-estimate "
                   "costs more than an under-estimate; the validation loss is then the mean "
                   "APE); or huber: the Huber loss of the log error, squared within "
                   "--huber-within (1.25x) and linear beyond, so that a kernel far off pulls "
                   "no harder than one 1.25x off (the validation loss is then its mean). --task tile: a pairwise "
                   "rank loss within each kernel, hinge (default) or logistic.")
# default: model.options.HUBER_WITHIN, not imported here to keep the CLI's start-up light
@click.option("--huber-within", type=click.FloatRange(1, min_open=True), default=1.25, show_default=True,
              help="--loss huber: the ratio within which the log error is squared (1.25: a "
                   "kernel 1.25x off either way); beyond it the loss grows linearly.")
@click.option("--epochs", type=click.IntRange(1), default=100, show_default=True, help="At most this many epochs.")
@click.option("--batch-size", type=click.IntRange(1), default=64, show_default=True,
              help="Graphs per step (under torchrun: in all, split across the processes).")
@click.option("--lr", type=click.FloatRange(0, min_open=True), default=None,
              help="Adam learning rate (cosine decay to a tenth over --epochs); with --learner "
                   "gbdt, each tree's shrinkage. [default: 0.001; 0.03 with --learner gbdt]")
@click.option("--weight-decay", type=click.FloatRange(0), default=0.0, show_default=True, help="AdamW weight decay.")
@click.option("--margin", type=click.FloatRange(0), default=0.1, show_default=True,
              help="Hinge margin (standardised log-runtime units).")
@click.option("--noise-scale", type=click.FloatRange(0), default=0.0, show_default=True, metavar="S",
              help="Weigh each kernel's loss by S^2/(S^2+noise^2), noise being measure's "
                   "estimate of how far its label may be off: a kernel as noisy as S counts "
                   "half (0: all alike; --task fusion).")
@click.option("--teacher", type=click.Path(dir_okay=False), default=None, metavar="MODEL",
              help="Distillation: train on each kernel's measured runtime blended with MODEL's "
                   "prediction (a geometric mean weighted by --teacher-weight), e.g. an "
                   "ensemble of seeds (`tpuperf ensemble`) taught to one network that predicts "
                   "as fast as any. Validation keeps the measured runtimes. --task fusion, a "
                   "network (not --learner gbdt); "
                   "to blend (--teacher-weight above 0), the training data must fit --memory-mb.")
@click.option("--teacher-weight", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              metavar="W",
              help="The label is runtime^(1-W) * prediction^W (1: the teacher's prediction alone).")
@click.option("--teacher-data", multiple=True, metavar="SHARD",
              help="Graph records of kernels no one timed (e.g. `tpuperf generate ... | "
                   "featurize`), labelled with --teacher's predictions and trained on as a "
                   "generated source of their own, 'teacher' (programs teacher:PROGRAM; weigh "
                   "it with --source-weight teacher=W). Records of the --split's validation or "
                   "test programs, or drawn from them, are left out. Give --teacher-weight 0 "
                   "to keep the measured labels as they are; repeatable, globs allowed.")
@click.option("--patience", type=click.IntRange(1), default=10, show_default=True,
              help="Stop after this many epochs without a better validation figure (--learner "
                   "gbdt: trees without a better validation loss, 50 unless given).")
@click.option("--monitor", type=click.Choice(["loss", "mape", "tau"]), default=None,
              help="Validation figure for early stopping (default: loss for fusion, tau for tile).")
@click.option("--min-us", type=click.FloatRange(0), default=5.0, show_default=True,
              help="Validation MAPE and tau use kernels measured at >= this many microseconds.")
@click.option("--label-floor-us", type=click.FloatRange(0), default=0.0, show_default=True,
              metavar="US",
              help="Fit max(runtime, US) instead of the runtime: labels below US count as US "
                   "in the loss and the runtime scaling, so that kernels timed at a few ns "
                   "(far below a launch) do not dominate a loss on log runtime; predictions "
                   "then rarely go below about US. 0: off.")
@click.option("--even/--no-even", default=True, show_default=True,
              help="Draw examples evenly across programs (small programs repeated, large ones subsampled).")
@click.option("--generated-share", type=click.FloatRange(0, 1, max_open=True), default=None,
              metavar="F",
              help="Draw this share of each epoch from generated kernels (the pseudo-programs "
                   "SOURCE:NAME of `tpuperf generate`, evenly across them); the real programs "
                   "draw as many examples as they hold, so the epoch grows by F/(1-F). "
                   "[default: each pseudo-program counts as a program]")
@click.option("--generated-even", type=click.Choice(["program", "source"]), default="program",
              show_default=True,
              help="How --generated-share is spread: evenly across the pseudo-programs, or "
                   "evenly across the sources first (fusions, ops, sweeps, heavy...), then "
                   "across each source's pseudo-programs, so that a source of few "
                   "pseudo-programs weighs as much as one of many.")
@click.option("--source-weight", multiple=True, metavar="SOURCE=W", callback=_source_weights,
              help="With --generated-even source: give SOURCE W parts of --generated-share "
                   "where the other sources get 1 each (0.5: half as much; 0: none), e.g. "
                   "--source-weight indexed=0.25; repeatable.")
@click.option("--time-weight", type=click.FloatRange(0, 2), default=0.0, show_default=True, metavar="P",
              help="Share each program's draws among its kernels by (count x runtime)^P, their "
                   "time in one run of it, instead of alike: 1 in proportion to their part of "
                   "the program's runtime, 0.5 between, so the kernels that make up a program's "
                   "runtime are fitted more often (its total draws stay). Generated kernels are "
                   "drawn as before. --task fusion only; not with --learner gbdt.")
@click.option("--kernel-features", default="0", metavar="SPEC", callback=_kernel_features,
              help="Which kernel features of the records to read (featurize's kernel_feat "
                   "order): N, the first N (5: without the matmul ones, 9: without their "
                   "alignment and layout, 14: without relayout_bytes and the two output_minor ones, 15: "
                   "without those two, 16: without output_minor_align and indexed_slices, 17: "
                   "without indexed_slices, 18: without touched_bytes, 19: without the relayout_stride "
                   "and reduce_* ones, 24: without minor_loop_unrolled, 25: without matmul_rhs_row_align, "
                   "26: without needed_flops), "
                   "to compare with a model trained on records of fewer; N+NAME[+NAME...], the first N "
                   "and the features named (e.g. 16+matmul_rhs_row_align); NAME[+NAME...], only those. "
                   "The model file keeps the names, and predict reads the same columns of newer "
                   "records. [default: 0, all of them]")
@click.option("--configs", type=click.IntRange(2), default=16, show_default=True,
              help="Tile task: configurations drawn per kernel per epoch.")
@click.option("--memory-mb", type=click.FloatRange(1), default=2048, show_default=True,
              help="Decoded examples kept in memory; a larger corpus is streamed from its shards "
                   "every epoch through a bounded shuffle buffer.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of all randomness (repeatable runs).")
@click.option("--device", default="cpu", show_default=True,
              help="cpu or cuda (cuda:N); cuda needs a CUDA build of DGL (the PyPI wheel is CPU-only).")
@click.option("--threads", type=click.IntRange(0), default=0,
              help="Torch threads (default: min(2, cores) or $TPUPERF_THREADS).")
@click.option("--max-time", type=click.FloatRange(0), default=0, metavar="SECONDS",
              help="Stop after the epoch that passes this much time (0: no limit); a resumed "
                   "run counts the time of the run so far.")
@click.option("--ema", type=click.FloatRange(0, 1, max_open=True), default=0.99, show_default=True,
              help="Validate and save an exponential moving average of the weights with this "
                   "decay per step (steadier on small corpora); 0 keeps the raw weights.")
@click.option("--tail-average", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also write FILE: a model of the saved weights averaged over the epochs from "
                   "the best validation epoch to the last (those early stopping waits through; "
                   "stochastic weight averaging at no extra cost), validated like an epoch.")
@click.option("--learner", type=click.Choice(["gnn", "gbdt"]), default="gnn", show_default=True,
              help="gnn: the graph network (the paper's model; the options below). gbdt: "
                   "gradient-boosted trees (LightGBM: pip install 'tpuperf[gbdt]') on each "
                   "kernel's features and its nodes' features pooled (sum, mean, max), opcode "
                   "counts and sizes; --task fusion, one process; predict runs them without "
                   "LightGBM.")
@click.option("--trees", type=click.IntRange(1), default=2000, show_default=True,
              help="--learner gbdt: at most this many trees (fewer when validation stops them).")
@click.option("--leaves", type=click.IntRange(2), default=31, show_default=True,
              help="--learner gbdt: at most this many leaves a tree.")
@click.option("--gnn", type=click.Choice(["sage", "gat", "none"]), default="sage", show_default=True,
              help="Message passing: GraphSAGE (the paper's), GAT, or none.")
@click.option("--layers", type=click.IntRange(0), default=3, show_default=True, help="GNN layers (k).")
@click.option("--hidden", type=click.IntRange(1), default=64, show_default=True, help="Embedding width.")
@click.option("--opcode-dim", type=click.IntRange(1), default=32, show_default=True, help="Opcode embedding width.")
@click.option("--neighbors", type=click.IntRange(1), default=20, show_default=True,
              help="Neighbour lists truncated to this many per node and direction.")
@click.option("--aggregate", type=click.Choice(["mean", "sum"]), default="mean", show_default=True,
              help="GraphSAGE neighbour aggregation.")
@click.option("--directed/--undirected", default=True, show_default=True,
              help="Separate weights for operand and user edges.")
@click.option("--counts/--no-counts", default=False, show_default=True,
              help="Give the network the counts a mean cannot see: each node's number of "
                   "operands and of users (log-scaled) join its input, the kernel's number of "
                   "nodes the final layer's.")
@click.option("--minor-embedding", "minor_dim", type=click.IntRange(0), default=0, show_default=True,
              help="Give the kernel's output minor dim (kernel feature 16, output_minor_dim) an "
                   "embedding of this width, one per size from 0 to 128 and one for larger, "
                   "joining every node's input and the final layer's: XLA:CPU's elementwise "
                   "loops run 7 to 15 times slower an element at a minor dim of 9 to 34 than at "
                   "8 or 35 and above (two machines), a step the log-scaled feature hides. "
                   "0: none. Needs output_minor_dim among --kernel-features (16 or more, or named).")
@click.option("--normalize/--no-normalize", default=True, show_default=True,
              help="L2-normalise node embeddings after each GNN layer.")
@click.option("--kernel-head/--no-kernel-head", default=True, show_default=True,
              help="Also feed the kernel and config features straight to the final layer (a "
                   "linear skip), so predictions extrapolate to kernels larger than any seen; "
                   "--no-kernel-head is the paper's model exactly.")
@click.option("--reduction", type=click.Choice(["per-node", "column", "lstm", "transformer"]),
              default="column", show_default=True,
              help="Nodes -> kernel: per-node MLP then sum, column-wise mean & max, LSTM over "
                   "topological order, or a Transformer encoder.")
@click.option("--heads", type=click.IntRange(1), default=4, show_default=True,
              help="Attention heads (GAT, Transformer).")
@click.option("--seq-layers", type=click.IntRange(1), default=1, show_default=True,
              help="LSTM / Transformer layers in the reduction.")
@click.option("--dropout", type=click.FloatRange(0, 1), default=0.0, show_default=True, help="Dropout rate.")
@click.option("--resume", is_flag=True,
              help="Continue a run from FILE.resume, with its options, hyperparameters and data "
                   "order. Of the options given with it, --epochs, --patience, --max-time, "
                   "--memory-mb, --threads and --device take their new value (a larger --epochs "
                   "trains on: the learning rate decays from where it was to a tenth of --lr "
                   "over the added epochs); any other that differs from the run's is refused.")
@click.option("--keep-state", is_flag=True,
              help="Keep FILE.resume after a normal end, to train more later with --resume "
                   "--epochs N.")
@click.option("--name", help="Model name stem recorded in predictions (default: FILE's file name).")
@quiet_option(help="No progress lines or summary on stderr (warnings still go there).")
def cli(files, data, output, valid, split, task, loss, huber_within, epochs, batch_size, lr, weight_decay, margin,
        noise_scale, teacher, teacher_weight, teacher_data, patience, monitor, min_us, label_floor_us, even,
        generated_share, generated_even, source_weight, time_weight,
        kernel_features, configs,
        memory_mb, seed,
        device, threads, max_time, ema, tail_average, learner, trees, leaves, gnn, layers, hidden, opcode_dim,
        neighbors, aggregate, directed, counts, minor_dim,
        normalize, kernel_head, reduction, heads, seq_layers, dropout, resume, keep_state, name, quiet):
    """Train a performance model (a graph neural network, or trees) on measured kernels.

    Reads graph records with runtime_ns (featurize, then measure: node_opcode,
    node_feat, edge_index, kernel_feat, config_feat) from the shards given
    with --data or as arguments (plain or zstd msgpack streams; quoted glob
    patterns such as 'shards/*.zst' are expanded), and writes a model file
    for predict. Records without runtime_ns (failed measurements) are
    skipped.

    The model is that of Kaufman et al. (MLSys 2021): an opcode embedding
    and the node features (each node also gets its kernel's features and
    tile configuration appended) go through a feed-forward layer, then
    --layers GraphSAGE layers with separate weights for operand and user
    edges, neighbour lists truncated to --neighbors and L2-normalised
    embeddings, then a --reduction to one kernel embedding and a final
    layer. Features are scaled with statistics of the training data only:
    a signed log, then min-max to [0, 1]. Three additions over the paper,
    each with a switch: GNN layers are residual; the kernel and config
    features also reach the final layer directly (--kernel-head, so runtimes
    extrapolate to kernels larger than the training data's); the saved
    weights are an exponential moving average of the trained ones (--ema).

    --learner gbdt fits gradient-boosted trees instead (LightGBM, an
    optional extra: pip install 'tpuperf[gbdt]'), on one row per kernel: its
    kernel features, the sum, mean and max of each scaled node feature, its
    opcode counts, node and edge counts. The log runtime is fitted with L2
    (--lr is the shrinkage, default 0.03; --trees, --leaves); training stops
    after --patience trees (50 unless given) without a better validation
    loss, in one process. The trees are stored as arrays in the model file
    (version 3) and predict walks them without LightGBM or torch (in numpy, then
    in a loop numba compiles once a model has walked 3 million (row, tree) pairs).
    Options of the network (--gnn, --hidden, --epochs, ...) do not apply;
    --resume, --task tile and --loss other than mse are refused.

    --task fusion (default) fits the log runtime with MSE. --task tile
    learns to rank the tile configurations of each kernel (records sharing
    program and kernel, differing in config_feat) with a pairwise hinge or
    logistic loss; batches hold whole kernels.

    Examples are drawn evenly across programs (the data is imbalanced).
    A corpus that does not fit --memory-mb is streamed from its shards each
    epoch, so memory stays bounded.

    After every epoch a line on stderr gives the training loss and, with
    validation data (--valid or --split), the validation loss, the median
    per-program MAPE and Kendall's tau on kernels >= --min-us (tile:
    Tile-Size APE and mean per-kernel tau). The best model so far is
    written to FILE atomically (a crash never leaves half a file); training
    stops early after --patience epochs without improvement. When it
    ends, FILE is rewritten once to record the epochs run, the total time
    and why it stopped (its weights stay the best epoch's). FILE.resume
    holds the loop's state after each epoch; --resume continues from it
    with the same result as an uninterrupted run (unless --epochs or
    another option that may change is given anew: see --resume).

    \b
    The model file (torch.save of a plain dict, read with weights_only)
    holds: the weights; the hyperparameters; the feature scaling (minimum
    and maximum per feature, log-runtime mean and deviation); the opcode
    vocabulary; the task and loss; the hardware target of the training
    data (platform, device kind, chip); and how it was trained (data,
    split, epochs run, the best epoch (whose weights these are) and its
    validation figures, total time, why training stopped). `predict
    --model FILE --show-model` prints it.

    \b
    Examples:
      tpuperf train --data 'shards/*.zst' -o model.pt
      tpuperf train --data 'examples/corpus/graphs/*.zst' \\
          --split examples/splits/random.json -o cpu.pt
      tpuperf train --task tile --data tile/*.zst --valid tile-valid/*.zst -o tile.pt
      tpuperf train --data 'shards/*.zst' -o model.pt --resume
      tpuperf train --data 'shards/*.zst' -o model.pt --resume --keep-state --epochs 200
      tpuperf train --data 'tpu/*.zst' -o tpu.pt --device cuda --gnn gat

    Data-parallel across processes and hosts: start it with torchrun, e.g.
    `torchrun --nproc_per_node 4 -m tpuperf_cli train ...` on one host, or
    with --nnodes and --rdzv-endpoint on several (the shards and FILE on a
    file system all hosts share). Every process learns the same scaling
    from all shards, then decodes and trains on only its share of the
    examples; gradients are averaged across processes each step (gloo on
    CPU, NCCL with --device cuda: one GPU per process), and rank 0 writes
    FILE, FILE.resume and the progress.

    To model your own hardware (a TPU, a GPU, another CPU), measure a
    corpus on it and train on that, e.g. per program P:
    `hlo-split P.hlo | featurize | measure --backend tpu | zstd > tpu/P.zst`,
    then `tpuperf train --data 'tpu/*.zst' --split split.json -o tpu.pt`
    and `predict --model tpu.pt`. examples/train_default_model.sh shows how
    the bundled (XLA:CPU) model was made.

    Exit status: 0 on success, 1 on bad data (no examples, unreadable or
    corrupt shards, kernel records without node features), 2 on a bad option.
    """
    from tpuperf_cli.model import set_threads

    set_threads(threads or None)
    from tpuperf_cli.model.config import NetConfig
    from tpuperf_cli.model.train import TrainOptions, train

    shards = list(data) + list(files)
    if not shards:
        raise TpuperfError("no training data: give shards with --data (e.g. --data 'shards/*.zst')",
                           exit_code=2)
    try:
        net = NetConfig(opcode_dim=opcode_dim, hidden=hidden, gnn=gnn, layers=layers,
                        neighbors=neighbors, aggregate=aggregate, directed=directed,
                        normalize=normalize, kernel_head=kernel_head, heads=heads, reduction=reduction,
                        seq_layers=seq_layers, dropout=dropout, counts=counts,
                        minor_dim=minor_dim).check()
    except ValueError as e:
        raise TpuperfError(str(e), exit_code=2) from None
    if learner == "gbdt":
        if teacher:
            raise TpuperfError("--teacher trains a network on blended labels; --learner gbdt "
                               "fits the measured ones", exit_code=2)
        if time_weight:
            raise TpuperfError("--time-weight shares a network's draws by kernel time; --learner gbdt "
                               "weighs the kernels of a program alike", exit_code=2)
        if tail_average:
            raise TpuperfError("--tail-average averages a network's weights over epochs; "
                               "--learner gbdt fits trees in one go", exit_code=2)
        return _train_trees(shards, output, valid, split, task, loss, lr, patience, min_us,
                            label_floor_us, even,
                            generated_share, generated_even, source_weight, kernel_features,
                            memory_mb, seed, threads, max_time, trees, leaves, resume, name, quiet)
    opts = TrainOptions(task=task, loss=loss or "", huber_within=huber_within, epochs=epochs,
                        batch_size=batch_size, lr=lr or 1e-3,
                        weight_decay=weight_decay, margin=margin, noise_scale=noise_scale,
                        patience=patience,
                        monitor=monitor or "", min_runtime_ns=min_us * 1000.0,
                        label_floor_ns=label_floor_us * 1000.0, even=even,
                        generated_share=-1.0 if generated_share is None else generated_share,
                        generated_even=generated_even, source_weight=source_weight,
                        time_weight=time_weight,
                        kernel_features=kernel_features[0], kernel_columns=kernel_features[1] or (),
                        configs=configs, memory_mb=memory_mb, seed=seed, device=device,
                        threads=threads, max_time=max_time, ema=ema, tail_average=tail_average or "",
                        teacher=teacher or "",
                        teacher_weight=teacher_weight, teacher_data=tuple(teacher_data))
    quiet_progress = {"progress": _warnings_only} if quiet else {}
    train(shards, output, net=net, opts=opts, valid=list(valid), split=split, resume=resume,
          keep_state=keep_state, name=name, given=_given(), **quiet_progress)


def _train_trees(shards, output, valid, split, task, loss, lr, patience, min_us, label_floor_us, even,
                 generated_share,
                 generated_even, source_weight, kernel_features, memory_mb, seed, threads, max_time, trees, leaves,
                 resume, name, quiet):
    import os

    from tpuperf_cli.model import thread_env
    from tpuperf_cli.model.train import TrainOptions
    from tpuperf_cli.model.trees import TreeOptions, train_trees

    if resume:
        raise TpuperfError("--resume continues a network's run; --learner gbdt trains in one go",
                           exit_code=2)
    if loss not in (None, "mse"):
        raise TpuperfError(f"--loss {loss}: --learner gbdt fits log runtime with mse", exit_code=2)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise TpuperfError("--learner gbdt trains in one process (not under torchrun)", exit_code=2)
    opts = TrainOptions(task=task, min_runtime_ns=min_us * 1000.0, label_floor_ns=label_floor_us * 1000.0,
                        even=even,
                        generated_share=-1.0 if generated_share is None else generated_share,
                        generated_even=generated_even, source_weight=source_weight,
                        kernel_features=kernel_features[0], kernel_columns=kernel_features[1] or (),
                        memory_mb=memory_mb, seed=seed, threads=threads,
                        max_time=max_time)
    tree = TreeOptions(trees=trees, leaves=leaves, lr=lr or 0.03,
                       patience=patience if "patience" in _given() else 50,
                       threads=thread_env(threads or None), seed=seed)
    quiet_progress = {"progress": _warnings_only} if quiet else {}
    train_trees(shards, output, opts, tree, valid=list(valid), split=split, name=name, **quiet_progress)


def _warnings_only(line):
    if "warning" in line:
        click.echo(line, err=True)


def _given():
    """Names of the TrainOptions and NetConfig fields set on the command line
    (--resume lets some of them change, refuses a change of the others)."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    explicit = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    from tpuperf_cli.model.options import US_FIELDS

    renamed = {flag[2:].replace("-", "_"): name for name, flag in US_FIELDS.items()}
    given = {renamed.get(p, p) for p in ctx.params if ctx.get_parameter_source(p) in explicit}
    return given | {"kernel_columns"} if "kernel_features" in given else given
