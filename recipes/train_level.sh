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
# Training itself is the same: fairseq seeds every update, and validation draws nothing),
# PRESETS (your presets file, added to the packaged ones; PRESET may name one of its presets),
# USER_DIR (your --user-dir package, which imports fairseq_entropy; given to fairseq-train
# and fairseq-generate instead of the plugin).
# DECODE_SAMPLE (a smoke test: decode about this many test sentences with the last
# checkpoint into RUN_DIR/sample/score.json, marked test_sample; the run stays unfinished).
# A run whose RUN_DIR/last/score.json (the last checkpoint on the whole test split, at the
# schedule asked now) exists is skipped; a cut-off run resumes from its checkpoint_last.pt.  The run holds RUN_DIR/.lock (host and PID) while it works: a second
# launch on the same RUN_DIR exits with status 75 without touching it, a lock left by a dead
# process is taken over.  The work is done by `fairseq-entropy run` (each variable is one of
# its options, see `fairseq-entropy run --help`); this script maps the variables to options.
set -euo pipefail
usage() {
  echo "usage: $0 PRESET LEVEL_DATABIN RUN_DIR [extra fairseq-train args...]"
  echo "  e.g. $0 exp1_transformer_sinusoidal data-bin/exp1/entropy_3.0 runs/exp1/seed1/entropy_3.0"
  echo "  PRESET: a packaged preset (fairseq-entropy train-args --list lists them) or one of PRESETS"
  echo "  environment: SEED EPOCHS MAX_UPDATE DEVICE GEN_BATCH VALID_BATCH SCORE_BEST SELECT DECODE_SAMPLE"
  echo "    PRESETS=FILE (your presets, added to the packaged ones) USER_DIR=DIR (your --user-dir)"
}
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  usage
  exit 0
fi
if [ $# -lt 3 ]; then
  usage >&2
  echo "train_level.sh: error: $# argument(s) given, 3 needed. Fix: pass PRESET LEVEL_DATABIN RUN_DIR" >&2
  exit 2
fi
case "${SELECT:-valid}" in
  valid|test-loss) ;;
  *) echo "train_level.sh: error: SELECT=$SELECT: expected valid or test-loss. Fix: set SELECT to one of them" >&2; exit 2 ;;
esac
# each variable is checked here, so that an error names the variable (not the option)
fail() { echo "train_level.sh: error: $1=${!1}: $2. Fix: $3" >&2; exit 2; }
int_var() {  # NAME [min]: unset/empty, or a whole number >= min (default 1)
  local v=${!1:-}
  if [ -n "$v" ] && { ! [[ $v =~ ^[0-9]+$ ]] || [ "$((10#$v))" -lt "${2:-1}" ]; }; then
    fail "$1" "expected a whole number >= ${2:-1}" "set $1 to one, or unset it for the default"
  fi
}
int_var SEED 0; int_var MAX_UPDATE; int_var GEN_BATCH; int_var VALID_BATCH; int_var DECODE_SAMPLE
if [ -n "${EPOCHS:-}" ] && ! [[ $EPOCHS =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ && $EPOCHS =~ [1-9] ]]; then
  fail EPOCHS "expected a positive number of epochs" "set EPOCHS to one (e.g. 0.5 or 3), or unset it"
fi
case "${DEVICE:-}" in
  ''|cpu|gpu) ;;
  *) fail DEVICE "expected cpu or gpu" "set DEVICE to one of them, or unset it (gpu when torch sees one)" ;;
esac
case "${SCORE_BEST:-1}" in
  0|1) ;;
  *) fail SCORE_BEST "expected 0 or 1" "set SCORE_BEST=0 to score only the last checkpoint, 1 (default) for both" ;;
esac
preset=$1 data=$2 run=$3; shift 3
opts=(--seed "${SEED:-1}" --select "${SELECT:-valid}" --gen-batch "${GEN_BATCH:-512}"
      --valid-batch "${VALID_BATCH:-512}")
if [ -n "${EPOCHS:-}" ]; then opts+=(--epochs "$EPOCHS"); fi
if [ -n "${MAX_UPDATE:-}" ]; then opts+=(--max-update "$MAX_UPDATE"); fi
if [ -n "${DEVICE:-}" ]; then opts+=(--device "$DEVICE"); fi
if [ -n "${DECODE_SAMPLE:-}" ]; then opts+=(--decode-sample "$DECODE_SAMPLE"); fi
if [ "${SCORE_BEST:-1}" = 0 ]; then opts+=(--no-score-best); fi
if [ -n "${PRESETS:-}" ]; then opts+=(--presets "$PRESETS"); fi
if [ -n "${USER_DIR:-}" ]; then opts+=(--user-dir "$USER_DIR"); fi
exec fairseq-entropy run "$preset" "$data" "$run" "${opts[@]}" -- "$@"
