#!/bin/sh
# How the bundled model (tpuperf_cli/data/default.pt) is made.
#
# Trains on the "train" programs of the committed CPU corpus
# (examples/corpus/graphs/*.zst: kernels of the example JAX programs,
# measured with XLA:CPU by examples/build_corpus.py), validates on the
# split's "valid" programs for early stopping, and prints the accuracy on
# its "test" programs beside the roofline baseline.
#
# Seed 0 and one torch thread (another thread count can change the last
# digits). The run stops on --patience (25 epochs without a better
# validation loss), not on time, so any machine trains the same epochs:
# the bundled model's run stopped after 115 of 150 epochs and kept epoch 90
# (2,810 s, on a machine shared with other work). Its graphs hold the
# computations kernels call (reducers, comparators...) as nodes: against
# the previous bundled model (the same settings stopped at 900 s, graphs
# without them), validation median MAPE 35.1% against 36.3%.
#
# Without the generated kernels: a run (previous graphs, 900 s) with
# --data 'examples/corpus/graphs/generated/*.zst' added (the 6,000 kernels
# of tpuperf generate, 17,104 training examples in all, 88 epochs in the
# same 900 s) did worse on the validation programs: median MAPE 47.2%
# against 36.3%, program error 16.5% against 10.0% (tau 0.837 against
# 0.835). So the bundled model is chosen without them.
#
#   sh examples/train_default_model.sh                 # writes tpuperf_cli/data/default.pt
#   OUT=/tmp/m.pt sh examples/train_default_model.sh   # somewhere else
#   SPLIT=examples/splits/manual.json OUT=/tmp/m.pt sh examples/train_default_model.sh
#
# Extra arguments go to `tpuperf train` (e.g. --hidden 128).
#
# For another target (a TPU, a GPU), measure your own corpus the same way
# (hlo-split | featurize | measure --backend tpu | zstd > shards/P.zst, one
# shard per program) and train on it:
#   tpuperf train --data 'shards/*.zst' --split my_split.json -o tpu.pt
#   hlo-split prog.hlo | featurize | predict --model tpu.pt | score
set -e
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SPLIT=${SPLIT:-examples/splits/random.json}
OUT=${OUT:-tpuperf_cli/data/default.pt}

# --noise-scale 0: kernels weigh alike. On the random split's validation
# programs 0.05 (a kernel whose samples spread by 5% counts half) did worse
# (MAPE 40.2% against 36.5%, tau 0.820 against 0.835; both runs 900 s, one
# thread each, side by side, on the corpus as measured two sessions ago).
TPUPERF_THREADS=1 $PY -m tpuperf_cli train \
    --data 'examples/corpus/graphs/*.zst' --split "$SPLIT" -o "$OUT" --name default \
    --seed 0 --threads 1 --epochs 150 --patience 25 --max-time 7200 --noise-scale 0 \
    --gnn sage --layers 3 --neighbors 20 --reduction column --hidden 64 --opcode-dim 32 \
    --batch-size 64 --lr 1e-3 "$@"

$PY benchmarks/bench_accuracy.py --model "$OUT" --split "$SPLIT"
