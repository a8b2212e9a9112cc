#!/usr/bin/env bash
# Experiment 1 (mixing) of Wold et al. (2025): entropy-controlled training sets -> data-bin/.
#
#   preprocess/prepare_exp1.sh [OUT_ROOT] [SEED]        (defaults: prepared/exp1, 1)
#
# Environment: LEVELS (second-slot entropies in bits, default 0,0.5,1,1.5,2,2.5,3),
# N (training commands per level, default 6000), RESTRICTED_VERB (default jump).
# Writes OUT_ROOT/raw/seed$SEED/<level>/{train,valid,test}.{in,out} + manifest.json and
# OUT_ROOT/data-bin/seed$SEED/<level>/ (fairseq binary data, one fixed dictionary).  The same
# seed gives byte-identical data; re-running with the same settings rewrites nothing else.
set -euo pipefail
case "${1:-}" in  # the header above is the help; an option is not an output root
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "$0: unknown option $1. Fix: see $0 --help" >&2; exit 2 ;;
esac
out=${1:-prepared/exp1}
seed=${2:-1}
raw=$out/raw/seed$seed
bin=$out/data-bin/seed$seed

fairseq-entropy build exp1 --out "$raw" --seed "$seed" \
  --levels "${LEVELS:-0,0.5,1,1.5,2,2.5,3}" --n "${N:-6000}" \
  --restricted-verb "${RESTRICTED_VERB:-jump}"
fairseq-entropy binarize "$raw" --out "$bin"
echo "data-bin: $bin (one directory per level)"
