#!/usr/bin/env bash
# Train one preset on one binarized level, decode the test set with the last and the
# best-on-validation checkpoints, and score both.
#
#   recipes/train_level.sh PRESET LEVEL_DATABIN RUN_DIR [extra fairseq-train args...]
#
# Environment: SEED (default 1), EPOCHS / MAX_UPDATE (override the preset's schedule, e.g. for
# a CPU-sized run), DEVICE (cpu|gpu, default: gpu when torch sees one), GEN_BATCH (default 512),
# VALID_BATCH (sentences per validation batch, default 512: the greedy seq_acc decoding runs
# the decoder once per output position and batch, so the whole validation set at once is
# several times faster than the training batch size; the models' outputs do not depend on
# the batch), SCORE_BEST (default 1; 0 decodes and scores only the last checkpoint),
# SELECT (valid: the best checkpoint is the one with the highest seq_acc on the validation
# split, scored as "best"; test-loss: the paper authors' selection, the lowest loss on the
# test split, which fairseq-train then also validates on every epoch, scored as "test-loss";
# a diagnostic of the paper's numbers, since it picks the checkpoint by its test loss.
# Training itself is the same: fairseq seeds every update, and validation draws nothing).
# A run whose RUN_DIR/last/score.json exists is skipped; a cut-off run resumes from its
# checkpoint_last.pt.  The run holds RUN_DIR/.lock (host and PID) while it works: a second
# launch on the same RUN_DIR exits with status 75 without touching it, a lock left by a dead
# process is taken over.  --required-batch-size-multiple 1:
# fairseq's default of 8 silently drops the last sentences of a split whose size is not a
# multiple of 8 (e.g. 6 of the 174 validation commands at 0 bits).
set -euo pipefail
if [ $# -lt 3 ] || [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  echo "usage: $0 PRESET LEVEL_DATABIN RUN_DIR [extra fairseq-train args...]" >&2
  echo "  e.g. $0 exp1_transformer_sinusoidal data-bin/exp1/entropy_3.0 runs/exp1/seed1/entropy_3.0" >&2
  echo "  PRESET: a preset name of recipes/presets.json (the README lists them)" >&2
  echo "  environment: SEED EPOCHS MAX_UPDATE DEVICE GEN_BATCH VALID_BATCH SCORE_BEST SELECT" >&2
  exit 2
fi
preset=$1 data=$2 run=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
# the plugin: the package this folder is installed in (fairseq_entropy/recipes/), or the
# checkout's fairseq_entropy/ beside recipes/
if [ -f "$here/../__init__.py" ]; then user_dir=$(cd "$here/.." && pwd)
else user_dir=$(cd "$here/../fairseq_entropy" && pwd); fi
seed=${SEED:-1}
select=${SELECT:-valid}
case "$select" in
  valid) best_label=best
         selection=(--best-checkpoint-metric seq_acc --maximize-best-checkpoint-metric) ;;
  test-loss) best_label=test-loss
         selection=(--valid-subset test,valid --best-checkpoint-metric loss) ;;
  *) echo "SELECT=$select: expected valid or test-loss" >&2; exit 2 ;;
esac
if [ -f "$run/last/score.json" ]; then echo "skip $run (already scored)"; exit 0; fi
if [ "${FAIRSEQ_ENTROPY_LOCK:-}" != "$(mkdir -p "$run" && cd "$run" && pwd -P)" ]; then
  exec fairseq-entropy lock "$run" -- bash "$0" "$preset" "$data" "$run" "$@"
fi
if [ -f "$run/last/score.json" ]; then echo "skip $run (scored meanwhile)"; exit 0; fi

if [ -z "${DEVICE:-}" ]; then
  DEVICE=$(python -c "import torch; print('gpu' if torch.cuda.is_available() else 'cpu')")
fi
device_args=(); [ "$DEVICE" = cpu ] && device_args=(--cpu)

schedule=(); [ -n "${EPOCHS:-}" ] && schedule+=(--epochs "$EPOCHS")
[ -n "${MAX_UPDATE:-}" ] && schedule+=(--max-update "$MAX_UPDATE")
line=$(fairseq-entropy train-args "$preset" --data "$data" "${schedule[@]}")
read -ra train_args <<< "$line"
model=$(fairseq-entropy train-args "$preset" --data "$data" --field model)

# subword actions (binarize --spm-vocab, --spm-side both: the target dictionary holds pieces,
# which start with U+2581): outputs are longer in pieces, and are detokenized
subword=(); max_len=60
if [ -f "$data/spm.model" ] && LC_ALL=C grep -q $'\xe2\x96\x81' "$data/dict.out.txt"; then
  subword=(--post-process sentencepiece); max_len=400
fi

mkdir -p "$run"
# fairseq-train started again on a finished checkpoint_last.pt makes one more update and
# saves it, so a run cut off while decoding or scoring goes straight back to decoding
if [ -f "$run/checkpoints/trained" ]; then
  echo "skip training $run (finished before); decoding"
else
  set +e
  fairseq-train "$data" --user-dir "$user_dir" "${train_args[@]}" "${device_args[@]}" \
    --seed "$seed" --save-dir "$run/checkpoints" --tensorboard-logdir "$run/tensorboard" \
    --no-epoch-checkpoints --num-workers 0 --log-format simple --log-interval 100 \
    --required-batch-size-multiple 1 --batch-size-valid "${VALID_BATCH:-512}" \
    --eval-seq-acc --eval-seq-acc-max-len-b "$max_len" "${selection[@]}" \
    "$@" 2>&1 | tee -a "$run/train.log" | grep --line-buffered -E "valid on|progress: |done training|Error" \
    | sed -u "s|^.*\(progress: .*\)|\1|; s|^.*| [$(basename "$run")] &|; s|\(valid on 'valid' subset\).*\(seq_acc [0-9.]*\).*\(num_updates [0-9]*\).*|\1 \2 \3|"
  status=${PIPESTATUS[0]}
  set -e
  [ "$status" -eq 0 ] || { echo "fairseq-train failed (exit $status): see $run/train.log" >&2; exit 1; }
  touch "$run/checkpoints/trained"
fi

generate() {  # generate CHECKPOINT_NAME LABEL
  fairseq-generate "$data" --user-dir "$user_dir" --task systematicity \
    --source-lang in --target-lang out --path "$run/checkpoints/$1" "${device_args[@]}" \
    --gen-subset test --beam 1 --max-len-a 0 --max-len-b "$max_len" "${subword[@]}" \
    --batch-size "${GEN_BATCH:-512}" --required-batch-size-multiple 1 > "$run/generate-$2.txt" 2> "$run/generate-$2.log"
}
score() {  # score LABEL CHECKPOINT_NAME
  fairseq-entropy score "$run/generate-$1.txt" --out "$run/$1" --data "$data" \
    --preset "$preset" --model "$model" --seed "$seed" --checkpoint "$1" \
    --path "$run/checkpoints/$2" --force
}
generate checkpoint_last.pt last
if [ "${SCORE_BEST:-1}" != 0 ]; then
  if cmp -s "$run/checkpoints/checkpoint_best.pt" "$run/checkpoints/checkpoint_last.pt"; then
    cp "$run/generate-last.txt" "$run/generate-$best_label.txt"   # the best is the last one
  else
    generate checkpoint_best.pt "$best_label"
  fi
  score "$best_label" checkpoint_best.pt
fi
score last checkpoint_last.pt   # last/score.json marks the run as finished
