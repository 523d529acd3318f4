#!/bin/sh
# One sitting on a lent GPU machine: the command that ran on the
# NVIDIA H200 on 2026-11-26 (examples/corpus-gpu), as one script. The
# corpus of 16:26 UTC was two calls on one machine: JOBS=14 BUDGET=350
# STOP=415 NOISE=8 sh examples/gpu_session.sh, then examples/gpu_corpus.py
# --work /tmp/gpu --jobs 14 --budget 170 --stop 235 --sweeps --archive
# $OUT/corpus-gpu, which went on where the first stopped.
#
# Runs from a copy of the checkout with that machine's own python3 (jax
# with CUDA, numpy, msgpack, click; no DGL, no zstandard, no install):
#
#   OUT=/path/for/results sh examples/gpu_session.sh
#
# 1. examples/gpu_corpus.py: the example programs compiled for the GPU,
#    split and measured, JOBS at a time, none started after BUDGET seconds,
#    stopped at STOP (the kernels measured so far kept), then the sweep
#    grid's points while time is left; archives in $OUT (a few files of at
#    most 16 MiB). A second run on the same machine goes on where the first
#    stopped (WORK is kept).
#    With GROW=examples/corpus-gpu: a few of the corpus's programs again
#    (gpu_corpus.py --check), then only the sweeps the corpus lacks.
# 2. benchmarks/bench_measure_noise.py on the measured kernels: two more
#    runs of NOISE kernels of each kind, the noise figures ($OUT/noise.json;
#    NOISE=0: none).
# 3. featurize on one program's kernels: the featurizing path runs there.
#
# BACKEND=cpu runs the same on a CPU (a check of the script, nothing more).
#
# Back home: tar xJf each archive into one folder W, then
#   .venv/bin/python examples/gpu_corpus.py --install W --noise noise.json
# (after a GROW run: --install W --merge, which adds the new programs and
# records the check programs' ratios to the corpus's labels)
#   sh examples/train_gpu_model.sh
set -u
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:?set OUT to a folder for the results}
WORK=${WORK:-/tmp/gpu}
JOBS=${JOBS:-10}
BUDGET=${BUDGET:-280}
STOP=${STOP:-340}
NOISE=${NOISE:-12}
BACKEND=${BACKEND:-gpu}
GROW=${GROW:-}       # a corpus folder (examples/corpus-gpu): add the sweeps it lacks
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
date -u
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
fi
$PY examples/gpu_corpus.py --work "$WORK" --jobs "$JOBS" --budget "$BUDGET" --stop "$STOP" --backend "$BACKEND" \
    --sweeps ${GROW:+--grow "$GROW"} --archive "$OUT/corpus-gpu" || exit $?
date -u
if [ "$NOISE" -gt 0 ]; then
    timeout 130 $PY benchmarks/bench_measure_noise.py --kernels "$WORK/kernels" --backend "$BACKEND" \
        --per-kind "$NOISE" --json "$OUT/noise.json" -- --cpus all
fi
first=$(ls "$WORK"/kernels/*.msgpack | head -n 1)
$PY -m tpuperf_cli featurize -q "$first" -o "$WORK/featurized.msgpack" &&
    echo "featurize ran on $(basename "$first")"
date -u
