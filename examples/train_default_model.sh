#!/bin/sh
# How the bundled model (tpuperf_cli/data/default.pt) is made.
#
# Trains on the "train" programs of the committed CPU corpus
# (examples/corpus/graphs/*.zst: kernels of the example JAX programs,
# measured with XLA:CPU by examples/build_corpus.py) and on its generated
# kernels of fusions, ops, sweeps, heavy, variants and indexed
# ($GENERATED below, drawn as 50% of each epoch, indexed a quarter of
# another source's part), validates on the split's "valid" programs for
# early stopping, and prints the accuracy on its "test" programs beside
# the roofline baseline.
#
# One network, seed 0, one torch thread (another thread count can change
# the last digits). The run stops on --patience (25 epochs without a
# better validation loss) or after 300 epochs, so any machine trains the
# same epochs (the learning rate decays over the 300); --max-time 7200
# cuts a run at 2 hours, and then the epochs differ (the taught folds 1
# and 3 of 2026-11-29 were cut so, four runs sharing 2 cores). On
# 2026-12-01 an Intel Xeon family 6 model 207 trained default.pt again
# with weights identical to those an Intel Xeon family 6 model 167 had
# trained on 2026-11-28 (README, "The bundled model"). The graphs hold
# the computations kernels call (reducers, comparators...) as nodes.
# SEEDS="0 1 2" trains three and joins them with `tpuperf
# ensemble` (the bundled model was such an ensemble of 150-epoch runs
# until 2026-11-24; see the comment by SEEDS below).
#
# The generated kernels' graphs are not committed: the script builds them
# first when they are missing (`python examples/build_corpus.py
# featurize`, under a minute). With the corpus measured in one sitting
# (2026-11-24), they help: seed 0 on the random split's validation
# programs, median MAPE 21.8% with them at 30% of each epoch against
# 27.8% without, tau 0.867 against 0.823 (program error 9.7% against
# 7.1%). On the previous corpus, whose generated kernels were measured
# hours after its programs (and that cloud machine ran the same kernels
# 1.3x to 1.5x slower from one hour to the next), they had made the same
# figures worse (41.5% against 34.8% at 10%).
#
#   sh examples/train_default_model.sh                 # writes tpuperf_cli/data/default.pt
#   # calibrate's CPU base, tpuperf_cli/data/default-seeds.pt: seeds 0 to 2
#   # joined (the bundled one holds default.pt's network as seed 0, which
#   # tests/test_calibrate.py checks: a new default.pt needs a new one)
#   SEEDS="0 1 2" OUT=tpuperf_cli/data/default-seeds.pt sh examples/train_default_model.sh
#   TREES=1 OUT=/tmp/joined.pt sh examples/train_default_model.sh   # the network joined with trees
#   OUT=/tmp/m.pt sh examples/train_default_model.sh   # somewhere else
#   SPLIT=examples/splits/manual.json OUT=/tmp/m.pt sh examples/train_default_model.sh
#   GENERATED='examples/corpus/graphs/generated/ops-*.zst' OUT=/tmp/m.pt sh examples/train_default_model.sh
#   # a model of another machine, from its labels of the corpus
#   # (examples/corpus/labels/: `build_corpus.py labels` wrote them there)
#   # (the bundled tpuperf_cli/data/cpu-amd-epyc-26-2.pt was made so, 2026-12-07)
#   LABELS=examples/corpus/labels/amd-epyc-26-2.zst NAME=cpu-amd-epyc-26-2 \
#       OUT=tpuperf_cli/data/cpu-amd-epyc-26-2.pt sh examples/train_default_model.sh
#   # NAME: the model's name stem (default: "default", or OUT's file name for a joined file)
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
# the generated kernels' graph shards, a pattern `tpuperf train --data`
# expands: fusions, ops, sweeps, heavy, variants and indexed (GENERATED=
# 'examples/corpus/graphs/generated/[fhosv]*.zst' leaves indexed out, and
# [fhos] variants too; then drop --source-weight, which names indexed).
# variants joined on 2026-11-26 with the corpus measured on an Intel Xeon
# family 6 model 207, chosen by the manual split's validation programs
# (the families they are for, held out), seeds 0 and 1: median MAPE
# 21.8% and 26.1% with them, against 28.3% and 27.1% without (tau 0.828
# and 0.841 against 0.829 and 0.811); the random split's seed 0, trained
# afterwards, agrees: 23.3% against 26.7%; README, "The bundled model".
# indexed (gathers and scatters of many small slices) joined on
# 2026-11-27, measured into the corpus on that machine model, at a
# quarter of another source's part (--source-weight indexed=0.25 below:
# 2.4% of each epoch), chosen the same way: 23.2% and 19.5% with them
# against 21.8% and 26.1% (21.4% against 24.0% over the seeds; tau 0.851
# and 0.872 against 0.828 and 0.841). At a full part on another corpus
# (2026-11-26) they mended the scalar scatters and cost the rest.
# The split files' train lists hold the 12 programs of the six families
# added on 2026-11-27 (make_programs.LATE_FAMILIES), taken on a tie: over
# seeds 0 to 3 of the manual split and 0 and 1 of the random split, the
# validation programs' median MAPE went 24.1% against 23.8% and 23.7%
# against 24.2% (README, "The bundled model";
# benchmarks/compare_seeds.py compares recipes seed for seed).
GENERATED=${GENERATED:-'examples/corpus/graphs/generated/*.zst'}
# The generated share is spread evenly across the sources first, then each
# source's pseudo-programs (--generated-even source): spread across the
# pseudo-programs alone, heavy's 2 of 269 drew 0.7% of it. Chosen on
# 2026-11-25 (one seed each, the kernel features with matmul_*, 12,000
# heavy kernels) by the mean of the random and manual splits' validation
# median MAPE: 22.9% (17.7% random, 28.1% manual) against 24.3% (22.2%,
# 26.4%) spread by pseudo-program, and 23.9% (17.5%, 30.2%) for the
# recipe bundled before (without heavy, five kernel features); within one
# seed's spread (README, "The bundled model"). Seed 1 of both, on the
# random split's validation programs: 17.7% by source, 17.4% by
# pseudo-program; over the two seeds 17.7% against 19.8%.

# --kernel-features 16: the first 16 of featurize's 17 kernel features,
# the last two read relayout_bytes and output_minor_dim (the size of the
# result's minor-most physical dim: XLA:CPU's elementwise loops run
# several times slower an element when it is 9 to 34). Chosen on
# 2026-11-25 by the mean of the random and manual splits' validation
# median MAPE over seeds (0 and 1 random, 0 to 2 manual), with generated
# kernels half of each epoch: 18.0% (15.3% random, 20.7% manual) with
# 16, against 19.9% (16.1%, 23.7%) with 15 and 19.9% (16.1%, 23.8%) with
# 14, the recipe bundled before, so output_minor_dim is what moved it.
# Records featurized now carry a 17th, output_minor_align (the alignment
# of that size), which scored 18.5% (14.7%, 22.4%: two of its three
# manual seeds stopped by epoch 30), so it is featurized but not read;
# 16 and 17 are within the seed spread of each other. Earlier the same
# day, at 30% generated: 21.1% (17.3%, 24.9%) with 14, 21.4% (16.1%,
# 26.7%) with 15, and 24.9% (17.7%, 32.0%) with 9, the matmul shape
# alone (the five after it, lane fill and operand layout, took the
# manual split's validation tau from 0.71 to 0.86 over three seeds).
#
# --generated-share 0.5 (it was 0.3): with the 14 kernel features, half
# of each epoch from the generated kernels. Chosen on 2026-11-25 by the
# same score over the same seeds: 19.9% (16.1% random, 23.8% manual)
# against 21.1% (17.3%, 24.9%) at 0.3; the manual split's validation tau
# fell (0.838 against 0.858), the random split's rose (0.893 against
# 0.889).

# --loss huber (it was MSE on log runtime until 2026-11-28): the Huber loss
# of the natural-log error, squared within 1.25x, linear beyond, so a
# kernel far off pulls no harder than one 1.25x off. Chosen on 2026-11-28
# by a rule set down before any result, on the manual split's validation
# programs over seeds 0 to 2 (the corpus's labels, trained on an Intel
# Xeon family 6 model 167): median MAPE 21.2% against 26.2% (3 of 3
# seeds), tau 0.866 against 0.840, program error 13.3% against 17.0%; the
# random split's seeds 0 and 1 agree: 20.4% and 20.3% against 25.2% for
# the MSE recipe's seed 0 trained on that machine model (README, "The
# bundled model"). --huber-within 1.1 (linear from 1.1x) tied with the
# default 1.25 over the same three seeds (21.2% both, tau 0.881 against
# 0.866), and 1.5 over seeds 0 and 1 (20.8% both), so the default stays.
#
# --noise-scale 0: kernels weigh alike. On the random split's validation
# programs 0.05 (a kernel whose samples spread by 5% counts half) did worse
# (MAPE 40.2% against 36.5%, tau 0.820 against 0.835; both runs 900 s, one
# thread each, side by side, on the corpus as measured two sessions ago).
# --loss ape (3 seeds) did worse too: median MAPE 33.9% against 32.5%, tau
# 0.818 against 0.853, program error 15.9% against 8.5% (it learns to
# under-estimate, which MAPE punishes less).
# --weight-decay 0.01 (AdamW) did worse too: manual split, seed 0, on an
# AMD EPYC family 25 model 1 (2026-11-25), validation loss 0.0405 (MAPE
# 26.4%) at epoch 118, still falling slowly when stopped, against 0.0308
# (19.3%) at the best epoch, 82, without it.
#
# One seed: on the random split's validation programs, seed 0 with the
# 300-epoch schedule (best epoch 177 of 202) matched the ensemble of three
# 150-epoch seeds that was bundled before, median MAPE 21.3% both, tau
# 0.894 against 0.870, program error 11.3% against 9.3%, and predict runs
# it 1.8x as fast (README, "The bundled model" and "Speed"). SEEDS="0 1 2"
# trains several, two side by side (one per core), and joins them with
# `tpuperf ensemble` (the geometric mean of their predictions).
SEEDS=${SEEDS:-"0"}
# TREES=1: also gradient-boosted trees (`train --learner gbdt --lr 0.1`)
# on the same data and draw, joined with the network(s) by `tpuperf
# ensemble` as one member more of the geometric mean. Not the bundled
# recipe (TREES=0, the default). On 2026-11-29 cross-validation over
# families (benchmarks/compare_folds.py) favoured it: pooled median MAPE
# over 79 held-out programs 25.9% against 27.7%, 3 of 4 folds, tau 0.853
# against 0.844, program error 12.0% against 10.4% (--lr 0.03, 2,000
# trees: 26.1%, 13.2%; --lr 0.1 stops at 422 to 1,089 trees, so it was
# preferred). The check set down before any result for adopting it, the
# random split's validation programs, did not agree: median MAPE 22.6%
# against 20.4% (the mean 21.1% against 21.2%, tau 0.872 against 0.861).
# The better-powered check that followed, the random split's train and
# valid programs in four folds (examples/splits/folds/random-fold*.json),
# did: 18.5% against 20.2% pooled over 81 programs, 4 of 4 folds, tau
# 0.900 against 0.889 (2026-11-29). It stays off for speed: predict runs
# the network joined with the random split's 1,993 trees at 0.40x the
# network's rate on 2026-11-29, 0.62x with the compiled walk (12-03) and
# 0.67x with eight rows down a tree at once (12-07), under the 0.7x in
# each of two pairs of runs its check asks, and below predict's 20,000
# kernels/s goal (README, "The bundled model" and "Speed").
TREES=${TREES:-0}
# Distillation (train --teacher), off unless TEACHER_SEEDS names seeds:
# those are trained first with the same options and joined with `tpuperf
# ensemble`; each of SEEDS then learns from that ensemble (below: by
# default the labels it gives kernels no one timed). Blending its
# predictions half and half into the measured labels (TEACHER_WEIGHT=0.5
# TEACHER_DATA=) was tried on 2026-11-27 with TEACHER_SEEDS="0 1 2 3", not
# chosen (README, "The bundled model"): the manual split's validation
# MAPE over four seeds 22.6% against 24.1% and tau 0.866 against 0.833,
# but program error 15.4% against 14.6%, the random split's seeds no
# better, and five runs instead of one.
TEACHER_SEEDS=${TEACHER_SEEDS:-}
# TEACHER_TREES=1: the teacher also holds gradient-boosted trees (TREES=1's,
# fitted on the same data), joined with the TEACHER_SEEDS networks, so
# that one network may learn what the join knows at one network's rate.
# Tried on 2026-11-29 on the random-split folds with TEACHER_SEEDS=0 and
# the TEACHER_DATA below, not chosen (README, "The bundled model"): the
# taught network's pooled median MAPE 19.4% against the recipe's 20.2%
# (the join itself 18.5%), but lower on only 2 of the 4 folds; folds 1
# and 3, cut by --max-time then, trained again to patience on 2026-12-01:
# fold 3 won (21.0% against 21.7%), fold 1 lost (19.1% against 18.1%),
# still 2 of 4.
TEACHER_TREES=${TEACHER_TREES:-0}
if [ "$TEACHER_TREES" = 1 ] && [ -z "$TEACHER_SEEDS" ]; then
    echo "train_default_model.sh: TEACHER_TREES=1 joins trees with the TEACHER_SEEDS networks; set TEACHER_SEEDS too (e.g. TEACHER_SEEDS=0)" >&2
    exit 2
fi
# What the teacher teaches: TEACHER_WEIGHT of its prediction in each
# measured label (the geometric-mean blend above at 0.5; 0 keeps the
# measured labels), and labels for TEACHER_DATA, kernels no one timed
# (examples/corpus/unlabelled/, `build_corpus.py unlabelled`), trained on
# as a source of their own with TEACHER_PART parts of the generated share
# (train --teacher-data, --source-weight teacher=W). Tried so on
# 2026-11-27, not chosen (README, "The bundled model"): validation MAPE
# 22.3% against 24.6% over the random split's seeds 0 to 2, but 25.3%
# against 24.1% over the manual split's 0 to 3 (the held-out families).
TEACHER_WEIGHT=${TEACHER_WEIGHT:-0}
TEACHER_DATA=${TEACHER_DATA-'examples/corpus/graphs/unlabelled/*.zst'}
TEACHER_PART=${TEACHER_PART:-2}
if [ -z "$(ls examples/corpus/graphs/generated/*.zst 2>/dev/null)" ] \
        || { [ -n "$TEACHER_SEEDS" ] && [ -z "$(ls examples/corpus/graphs/unlabelled/*.zst 2>/dev/null)" ]; }; then
    $PY examples/build_corpus.py featurize
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# LABELS=FILE: train on the committed graphs given another machine's labels
# (`build_corpus.py relabel` copies them in seconds to
# examples/corpus/relabelled/NAME, NAME the labels file's, kept out of git:
# the path the model's trained.data names, which the same command makes
# again), and score the model on those labels; the model then describes
# that machine
GRAPHS=examples/corpus/graphs
if [ -n "$LABELS" ]; then
    GRAPHS=examples/corpus/relabelled/$(basename "$LABELS" .zst)
    $PY examples/build_corpus.py relabel --labels "$LABELS" --graphs-dir "$GRAPHS"
    GENERATED=$(echo "$GENERATED" | sed "s|^examples/corpus/graphs/|$GRAPHS/|")
fi
# NAME: the networks' name stem (default "default"), and the name of a
# joined file (default OUT's file name)
NETS=${NAME:-default}
NAME=${NAME:-$(basename "$OUT" .pt)}
# train_seeds PREFIX "SEEDS" [more train options]: two at a time, one per
# core of the 2-core machine; fails when any run fails
train_seeds() {
    prefix=$1 seeds=$2
    shift 2
    pids=""
    for seed in $seeds; do
        TPUPERF_THREADS=1 $PY -m tpuperf_cli train \
            --data "$GRAPHS/*.zst" --split "$SPLIT" -o "$TMP/$prefix$seed.pt" --name "$NETS" \
            --data "$GENERATED" --generated-share 0.5 --generated-even source --source-weight indexed=0.25 \
            --seed "$seed" --threads 1 --epochs 300 --patience 25 --max-time 7200 --noise-scale 0 \
            --gnn sage --layers 3 --neighbors 20 --reduction column --hidden 64 --opcode-dim 32 \
            --batch-size 64 --lr 1e-3 --kernel-features 16 --loss huber "$@" &
        pids="$pids $!"
        if [ "$(echo $pids | wc -w)" -ge 2 ]; then
            for pid in $pids; do wait "$pid"; done
            pids=""
        fi
    done
    for pid in $pids; do wait "$pid"; done
}
# train_trees OUT: gradient-boosted trees on the same data, split and draw
# as the networks (the same feature scaling, so that they join)
train_trees() {
    TPUPERF_THREADS=1 $PY -m tpuperf_cli train --learner gbdt \
        --data "$GRAPHS/*.zst" --split "$SPLIT" -o "$1" --name trees \
        --data "$GENERATED" --generated-share 0.5 --generated-even source --source-weight indexed=0.25 \
        --seed 0 --threads 1 --noise-scale 0 --kernel-features 16 --lr 0.1
}
if [ -n "$TEACHER_SEEDS" ]; then
    train_seeds teacher "$TEACHER_SEEDS" "$@"
    if [ "$TEACHER_TREES" = 1 ]; then
        train_trees "$TMP/teacher-trees.pt"      # one of teacher*.pt below
    fi
    $PY -m tpuperf_cli ensemble "$TMP"/teacher*.pt -o "$TMP/teacher.pt"
    set -- "$@" --teacher "$TMP/teacher.pt" --teacher-weight "$TEACHER_WEIGHT"
    if [ -n "$TEACHER_DATA" ]; then
        set -- "$@" --teacher-data "$TEACHER_DATA" --source-weight teacher="$TEACHER_PART"
    fi
fi
train_seeds seed "$SEEDS" "$@"
if [ "$TREES" = 1 ]; then
    train_trees "$TMP/trees.pt"
fi
set -- "$TMP"/seed*.pt
if [ "$TREES" = 1 ]; then set -- "$@" "$TMP/trees.pt"; fi
if [ $# -gt 1 ]; then
    $PY -m tpuperf_cli ensemble "$@" --name "$NAME" -o "$OUT"
else
    cp "$1" "$OUT"
fi

$PY benchmarks/bench_accuracy.py --model "$OUT" --split "$SPLIT" --corpus "$GRAPHS"
