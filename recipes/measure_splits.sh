#!/usr/bin/env bash
# Entropy of every (component class, slot) and atom / compound divergence (Keysers et al. 2020)
# of the original SCAN splits and of Experiment 1 / 2 levels, one TSV row per training and test
# file.  Usage: recipes/measure_splits.sh SCAN_DIR [OUT_TSV] [WORK_DIR] (--help says more)
set -euo pipefail
usage="usage: $0 SCAN_DIR [OUT_TSV] [WORK_DIR]: SCAN_DIR holds the original SCAN splits
tasks_{train,test}_{simple,addprim_jump,length}.txt; OUT_TSV defaults to
the packaged fairseq_entropy/analysis/split_measures.tsv (what predict --split reads); WORK_DIR (default: a temporary folder, removed at the end) gets the
Experiment 1 and 2 levels measured."
case "${1:-}" in
  -h|--help) echo "$usage"; exit 0 ;;
  "") echo "$usage" >&2; echo "error: no SCAN_DIR. Fix: pass the folder holding the SCAN splits" >&2
      exit 2 ;;
esac
scan=$1
out=${2:-$here/../fairseq_entropy/analysis/split_measures.tsv}
if [ ! -f "$scan/tasks_train_simple.txt" ]; then
  echo "error: no SCAN splits in $scan." \
       "Fix: pass the folder holding tasks_{train,test}_{simple,addprim_jump,length}.txt" >&2
  exit 2
fi
if [ -n "${3:-}" ]; then
  work=$3
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$(dirname "$out")"
fairseq-entropy build exp1 --out "$work/exp1" --levels 0,1.5,3 --n 6000 --seed 1 >/dev/null
fairseq-entropy build exp2 --out "$work/exp2" --support 1,4,8 --seed 1 >/dev/null
{
  for split in simple addprim_jump length; do
    fairseq-entropy measure "$scan/tasks_train_$split.txt" "$scan/tasks_test_$split.txt" \
      --train "$scan/tasks_train_$split.txt" --tsv
  done
  for level in exp1/entropy_0.0 exp1/entropy_1.5 exp1/entropy_3.0 \
               exp2/support_1 exp2/support_4 exp2/support_8; do
    fairseq-entropy measure "$work/$level/train.in" "$work/$level/test.in" \
      --train "$work/$level/train.in" --tsv
  done
} | awk 'NR == 1 || $1 != "file"' | sed "s|$scan/||; s|$work/||" > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out"
