#!/usr/bin/env bash
# Train and test the permutation-equivariant seq2seq (Gordon et al., ICLR 2020; issue 4) on one
# binarized level, with the hyper-parameters of a preset of recipes/presets.json.
#
# usage: recipes/equivariant.sh PRESET DATABIN_LEVEL OUT_DIR [SEED]
#   e.g. recipes/equivariant.sh exp1_equivariant databin/exp1/entropy_0.0 runs/eq/exp1_0.0 1
# Writes OUT_DIR/{checkpoints,train.log,generate-test.txt} and the score files of
# `fairseq-entropy score`.  CPU runs: keep OMP_NUM_THREADS=1.
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 PRESET DATABIN_LEVEL OUT_DIR [SEED]" >&2
    exit 2
fi
PRESET=$1; DATA=$2; OUT=$3; SEED=${4:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
mkdir -p "$OUT"

eval "TRAIN_ARGS=($(fairseq-entropy train-args "$PRESET" --data "$DATA"))"
fairseq-train "$DATA" --user-dir "$ROOT/fairseq_entropy" "${TRAIN_ARGS[@]}" \
    --seed "$SEED" --num-workers 0 --required-batch-size-multiple 1 \
    --eval-seq-acc --best-checkpoint-metric seq_acc --maximize-best-checkpoint-metric \
    --save-dir "$OUT/checkpoints" --no-epoch-checkpoints --log-format simple \
    2>&1 | tee "$OUT/train.log"

# --required-batch-size-multiple 1: with fairseq's default of 8, batch_by_size drops the last
# (N mod 8) sentences of a split.
fairseq-generate "$DATA" --user-dir "$ROOT/fairseq_entropy" \
    --path "$OUT/checkpoints/checkpoint_best.pt" --gen-subset test --beam 1 \
    --max-len-a 0 --max-len-b 60 --batch-size 512 --required-batch-size-multiple 1 \
    --source-lang in --target-lang out --num-workers 0 > "$OUT/generate-test.txt"
fairseq-entropy score "$OUT/generate-test.txt" --out "$OUT" --data "$DATA" \
    --model "$(fairseq-entropy train-args "$PRESET" --data "$DATA" --field model)" \
    --seed "$SEED" --checkpoint best
