#!/bin/sh
# How the bundled model (tpuperf_cli/data/default.pt) is made.
#
# Trains on the "train" programs of the committed CPU corpus
# (examples/corpus/graphs/*.zst: kernels of the example JAX programs,
# measured with XLA:CPU by examples/build_corpus.py), validates on the
# split's "valid" programs for early stopping, and prints the accuracy on
# its "test" programs beside the roofline baseline.
#
# Seeds 0, 1 and 2, one torch thread each (another thread count can change
# the last digits), joined by `tpuperf ensemble`. Each run stops on
# --patience (25 epochs without a better validation loss), not on time, so
# any machine trains the same epochs: the bundled model's seeds stopped
# after 120, 123 and 147 epochs and kept epochs 95, 98 and 122 (330 to
# 446 s each on the Intel Xeon 2-core machine of 2026-11-23, two at a
# time). The graphs hold the computations kernels call (reducers,
# comparators...) as nodes.
#
# Without the generated kernels (examples/corpus/graphs/generated, 72,000
# of them; rebuild with `python examples/build_corpus.py featurize`): with
# `--data 'examples/corpus/graphs/generated/*.zst' --generated-share F`
# added, seed 0 did worse on the validation programs: median MAPE 41.5%
# (F = 0.1) and 42.5% (F = 0.3) against 34.8%,
# validation loss 0.021 against 0.017. So the bundled model is trained
# without them.
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
# --loss ape (3 seeds) did worse too: median MAPE 33.9% against 32.5%, tau
# 0.818 against 0.853, program error 15.9% against 8.5% (it learns to
# under-estimate, which MAPE punishes less).
#
# Three seeds, joined by `tpuperf ensemble` (the geometric mean of their
# predictions): on the validation programs the three gave median MAPE
# 34.8%, 34.9% and 37.4% alone and 32.5% together, program error 9.7%,
# 16.3% and 10.4% alone and 8.5% together. Each seed trains on one core,
# so two run side by side; SEEDS="0" makes a single model.
SEEDS=${SEEDS:-"0 1 2"}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for seed in $SEEDS; do
    TPUPERF_THREADS=1 $PY -m tpuperf_cli train \
        --data 'examples/corpus/graphs/*.zst' --split "$SPLIT" -o "$TMP/seed$seed.pt" --name default \
        --seed "$seed" --threads 1 --epochs 150 --patience 25 --max-time 7200 --noise-scale 0 \
        --gnn sage --layers 3 --neighbors 20 --reduction column --hidden 64 --opcode-dim 32 \
        --batch-size 64 --lr 1e-3 "$@" &
    # two at a time: one per core of the 2-core machine
    RUNNING=$((${RUNNING:-0} + 1))
    if [ "$RUNNING" -ge 2 ]; then wait; RUNNING=0; fi
done
wait
set -- "$TMP"/seed*.pt
if [ $# -gt 1 ]; then
    $PY -m tpuperf_cli ensemble "$@" -o "$OUT"
else
    cp "$1" "$OUT"
fi

$PY benchmarks/bench_accuracy.py --model "$OUT" --split "$SPLIT"
