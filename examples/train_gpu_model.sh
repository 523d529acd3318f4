#!/bin/sh
# How the bundled GPU model (tpuperf_cli/data/gpu-nvidia-h200.pt) is made.
#
# Trains on the "train" programs of the GPU corpus (examples/corpus-gpu:
# kernels of the example JAX programs compiled by XLA:GPU and timed by
# CUPTI on one NVIDIA H200, examples/gpu_corpus.py), validates on the
# split's "valid" programs for early stopping, and prints the accuracy on
# its "test" programs beside the roofline baseline fitted to the same GPU.
# The split files are the CPU corpus's (examples/splits): the same program
# names, so the same programs are held out on both targets.
#
# The model is gradient-boosted trees (`train --learner gbdt`: 16 kernel
# features and the nodes' pooled ones, at most 63 leaves a tree, every
# kernel weighing alike (--no-even), seed 0, one thread; about 30 s),
# which beat the graph network on the validation programs of both splits
# (README, "The GPU corpus and model"). LEARNER=gnn trains the network
# instead, with the bundled CPU model's recipe (examples/
# train_default_model.sh: GraphSAGE x3, hidden 64, 16 kernel features,
# seed 0, one thread, up to 300 epochs, patience 25; about 11 minutes),
# the GPU model bundled before. The corpus's generated kernels are the
# sweeps (`sweeps:P` pseudo-programs, always training data), which the
# trees weigh as any other kernel. The graphs are featurized first when
# missing (30 s; they are not committed).
#
#   sh examples/train_gpu_model.sh                     # writes tpuperf_cli/data/gpu-nvidia-h200.pt
#   OUT=/tmp/g.pt sh examples/train_gpu_model.sh       # somewhere else
#   SPLIT=examples/splits/manual.json OUT=/tmp/g.pt sh examples/train_gpu_model.sh
#   LEARNER=gnn OUT=/tmp/gnn.pt sh examples/train_gpu_model.sh
#
# Extra arguments go to `tpuperf train`.
set -e
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SPLIT=${SPLIT:-examples/splits/random.json}
OUT=${OUT:-tpuperf_cli/data/gpu-nvidia-h200.pt}
CORPUS=examples/corpus-gpu
mkdir -p $CORPUS/graphs
for shard in $CORPUS/kernels/*.zst; do
    graph=$CORPUS/graphs/$(basename "$shard")
    [ -e "$graph" ] || $PY -m tpuperf_cli featurize -q "$shard" -o "$graph"
done
if [ "${LEARNER:-gbdt}" = gnn ]; then
    TPUPERF_THREADS=1 $PY -m tpuperf_cli train \
        --data "$CORPUS/graphs/*.zst" --split "$SPLIT" -o "$OUT" --name gpu-nvidia-h200 \
        --seed 0 --threads 1 --epochs 300 --patience 25 --max-time 7200 --noise-scale 0 \
        --gnn sage --layers 3 --neighbors 20 --reduction column --hidden 64 --opcode-dim 32 \
        --batch-size 64 --lr 1e-3 --kernel-features 16 "$@"
else
    TPUPERF_THREADS=1 $PY -m tpuperf_cli train --learner gbdt \
        --data "$CORPUS/graphs/*.zst" --split "$SPLIT" -o "$OUT" --name gpu-nvidia-h200 \
        --seed 0 --threads 1 --no-even --leaves 63 --trees 2000 --lr 0.03 \
        --kernel-features 16 "$@"
fi
# the model's target, beside it: predict chooses it for records measured there
$PY - "$OUT" "$CORPUS/manifest.json" <<'PYEOF'
import json, sys
from tpuperf_cli.model.calibrated import write_sidecar
write_sidecar(sys.argv[1], json.load(open(sys.argv[2]))["target"], "gpu-nvidia-h200")
PYEOF
for min_us in 1 5; do
    $PY benchmarks/bench_accuracy.py --model "$OUT" --split "$SPLIT" --corpus $CORPUS/graphs --min-us $min_us
done
