#!/bin/sh
# How the bundled model (tpuperf_cli/data/default.pt) is made.
#
# Trains on the "train" programs of the committed CPU corpus
# (examples/corpus/graphs/*.zst: kernels of the example JAX programs,
# measured with XLA:CPU by examples/build_corpus.py), validates on the
# split's "valid" programs for early stopping, and prints the accuracy on
# its "test" programs beside the roofline baseline.
#
# Repeatable: seed 0, 2 torch threads (a different thread count can change
# the last digits). --max-time is only a guard for slow machines; on the
# 2-core machine the model was made on, early stopping ends it first.
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

TPUPERF_THREADS=2 $PY -m tpuperf_cli train \
    --data 'examples/corpus/graphs/*.zst' --split "$SPLIT" -o "$OUT" --name default \
    --seed 0 --threads 2 --epochs 150 --patience 25 --max-time 1080 \
    --gnn sage --layers 3 --neighbors 20 --reduction column --hidden 64 --opcode-dim 32 \
    --batch-size 64 --lr 1e-3 "$@"

$PY benchmarks/bench_accuracy.py --model "$OUT" --split "$SPLIT"
