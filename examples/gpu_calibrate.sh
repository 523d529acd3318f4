#!/bin/sh
# `tpuperf calibrate --backend gpu` on a GPU that is not the GPU corpus's
# (the corpus is an NVIDIA H200's): the command that ran on a lent NVIDIA
# H100 on 2026-11-26 (README, "A model for your machine", on another GPU), as one script.
#
# Runs from a copy of the checkout with that machine's own python3 (jax
# with CUDA, numpy, msgpack, click, torch; no DGL, no install). LightGBM and
# zstandard, missing there, travel as wheels in .whl, installed when the
# python lacks them:
#
#   OUT=/path/for/results BASE=gpu_manual.pt sh examples/gpu_calibrate.sh
#
# BASE: the base model, trees trained on the GPU corpus's manual-split
# training programs, so that the test families (gpt, gru, sepconv, wavenet)
# are unseen:  SPLIT=examples/splits/manual.json OUT=gpu_manual.pt sh
# examples/train_gpu_model.sh
#
# 1. benchmarks/bench_calibrate.py --backend gpu: the manual split's test
#    kernels timed here twice (the noise floor between), calibrate with
#    BUDGET on the rest of the GPU corpus, the base and calibrated models'
#    MAPE on the test kernels ($OUT/bench.txt, $OUT/calibrate.json).
# 2. the command itself, `tpuperf calibrate --backend gpu` with the bundled
#    H200 model as its base, on the kernels the benchmark left in measure's
#    cache ($OUT/cache): it adapts at once ($OUT/calibrate.txt).
# measure's cache comes back in $OUT/cache, so every timing can be read again.
#
# BACKEND=cpu runs the benchmark on a CPU (a check of the script, nothing more).
set -u
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:?set OUT to a folder for the results}
BASE=${BASE:?set BASE to the base model (trees trained on the manual split)}
BUDGET=${BUDGET:-3m}
TEST_SECONDS=${TEST_SECONDS:-75}
TEST_KERNELS=${TEST_KERNELS:-0}   # 0: as many as TEST_SECONDS allows
MORE=${MORE:-}          # --more: a second run times further kernels
CLI=${CLI:-1}           # 0: the benchmark alone
BACKEND=${BACKEND:-gpu}
mkdir -p "$OUT/cache"
if [ -d .whl ] && ! $PY -c "import lightgbm, zstandard" 2>/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit $?
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
date -u
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
fi
$PY benchmarks/bench_calibrate.py --backend "$BACKEND" --corpus examples/corpus-gpu/kernels \
    --model "$BASE" --budget "$BUDGET" \
    --test-seconds "$TEST_SECONDS" --test-kernels "$TEST_KERNELS" --min-us 1 --cache-dir "$OUT/cache" \
    --json "$OUT/calibrate.json" $MORE >"$OUT/bench.txt" 2>&1
rc=$?
cat "$OUT/bench.txt"
date -u
[ $rc = 0 ] || exit $rc
[ "$CLI" = 1 ] || exit 0
$PY -m tpuperf_cli calibrate --backend "$BACKEND" --budget 90s --cache-dir "$OUT/cache" \
    -o "$OUT/calibrated-h100.pt" >"$OUT/calibrate.txt" 2>&1
rc=$?
cat "$OUT/calibrate.txt"
date -u
exit $rc
