#!/usr/bin/env bash
# The original SCAN splits (Lake & Baroni 2018) from their IN:/OUT: files -> data-bin/.
#
#   preprocess/prepare_scan.sh [OUT_ROOT] [SEED] [SCAN_DIR]
#       defaults: prepared/scan, 1, SCAN (a clone of github.com/brendenlake/SCAN in the current
#       directory: git clone https://github.com/brendenlake/SCAN)
#
# SCAN_DIR holds tasks_{train,test}_<split>.txt as in github.com/brendenlake/SCAN (the
# simple_split, add_prim_split and length_split folders of a clone are searched too).
# Environment: SPLITS (default "simple addprim_jump length").
# Writes OUT_ROOT/data-bin/seed$SEED/<split>/ with the SCAN grammar's fixed dictionary; the
# validation split is held out of the training file with SEED (the test file is never used
# for validation).
set -euo pipefail
case "${1:-}" in  # the header above is the help; an option is not an output root
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "$0: unknown option $1. Fix: see $0 --help" >&2; exit 2 ;;
esac
out=${1:-prepared/scan}
seed=${2:-1}
scan=${3:-SCAN}
bin=$out/data-bin/seed$seed

# the folder of each split in a clone of the SCAN repository
declare -A folder=([simple]=simple_split [addprim_jump]=add_prim_split
                   [addprim_turn_left]=add_prim_split [length]=length_split)
scan_file() {  # scan_file PART SPLIT: the file, in SCAN_DIR or in the split's folder of a clone
  local name=tasks_${1}_$2.txt sub=${folder[$2]:-}
  if [ ! -f "$scan/$name" ] && [ -n "$sub" ] && [ -f "$scan/$sub/$name" ]; then
    echo "$scan/$sub/$name"
  else
    echo "$scan/$name"
  fi
}

for split in ${SPLITS:-simple addprim_jump length}; do
  for part in train test; do
    f=$(scan_file "$part" "$split")
    if [ ! -f "$f" ]; then
      echo "prepare_scan.sh: error: $f not found. Fix: pass the folder holding the SCAN files" \
           "(tasks_train_$split.txt, tasks_test_$split.txt; github.com/brendenlake/SCAN) as the" \
           "third argument, or choose SPLITS" >&2
      exit 2
    fi
  done
done

for split in ${SPLITS:-simple addprim_jump length}; do
  # binarize holds the validation split out of the training file, drawn with --seed
  fairseq-entropy binarize --grammar scan --train "$(scan_file train "$split")" \
    --test "$(scan_file test "$split")" --seed "$seed" --out "$bin/$split"
done
echo "data-bin: $bin (one directory per SCAN split: ${SPLITS:-simple addprim_jump length})"
