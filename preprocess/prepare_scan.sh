#!/usr/bin/env bash
# The original SCAN splits (Lake & Baroni 2018) from their IN:/OUT: files -> data-bin/.
#
#   preprocess/prepare_scan.sh [OUT_ROOT] [SEED] [SCAN_DIR]
#       defaults: data/scan, 1, ../shared/reference/scan (relative to the repository root)
#
# SCAN_DIR holds tasks_{train,test}_<split>.txt as in github.com/brendenlake/SCAN.
# Environment: SPLITS (default "simple addprim_jump length").
# Writes OUT_ROOT/data-bin/seed$SEED/<split>/ with the SCAN grammar's fixed dictionary; the
# validation split is held out of the training file with SEED (the test file is never used
# for validation).
set -euo pipefail
case "${1:-}" in  # the header above is the help; an option is not an output root
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "$0: unknown option $1. Fix: see $0 --help" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-data/scan}
seed=${2:-1}
scan=${3:-$here/../../shared/reference/scan}
bin=$out/data-bin/seed$seed

for split in ${SPLITS:-simple addprim_jump length}; do
  for part in train test; do
    f=$scan/tasks_${part}_${split}.txt
    if [ ! -f "$f" ]; then
      echo "prepare_scan.sh: error: $f not found. Fix: pass the folder holding the SCAN files" \
           "(tasks_train_$split.txt, tasks_test_$split.txt; github.com/brendenlake/SCAN) as the" \
           "third argument, or choose SPLITS" >&2
      exit 2
    fi
  done
done

valid_args() {  # validation split for one SCAN split: held out of its training file
  if fairseq-entropy binarize --help | grep -q -- "--valid-fraction"; then
    echo "--seed $seed"  # binarize holds out a seeded fraction of --train itself
  else
    # this version of binarize takes validation only as a file: hold out 5% of the training
    # commands (seeded) into a temporary file
    local tmp=$1 split=$2
    python - "$scan/tasks_train_$split.txt" "$tmp/train.txt" "$tmp/valid.txt" "$seed" <<'PY'
import random, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines(keepends=True)
held = set(random.Random(int(sys.argv[4])).sample(range(len(lines)), max(1, len(lines) // 20)))
open(sys.argv[2], "w", encoding="utf-8").writelines(l for i, l in enumerate(lines) if i not in held)
open(sys.argv[3], "w", encoding="utf-8").writelines(l for i, l in enumerate(lines) if i in held)
PY
    echo "--valid $tmp/valid.txt"
  fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for split in ${SPLITS:-simple addprim_jump length}; do
  train=$scan/tasks_train_$split.txt
  extra=$(valid_args "$tmp" "$split")
  [ -f "$tmp/train.txt" ] && train=$tmp/train.txt
  # shellcheck disable=SC2086  # $extra is two words
  fairseq-entropy binarize --grammar scan --train "$train" --test "$scan/tasks_test_$split.txt" \
    $extra --out "$bin/$split"
  rm -f "$tmp/train.txt" "$tmp/valid.txt"
done
echo "data-bin: $bin (one directory per SCAN split: ${SPLITS:-simple addprim_jump length})"
