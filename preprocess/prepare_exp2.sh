#!/usr/bin/env bash
# Experiment 2 (support) of Wold et al. (2025): first-slot support sizes k -> data-bin/.
#
#   preprocess/prepare_exp2.sh [OUT_ROOT] [SEED]        (defaults: prepared/exp2, 1)
#
# Environment: SUPPORT (support sizes k, default 1..8), RESTRICTED_VERB (default lunge).
# Writes OUT_ROOT/raw/seed$SEED/<level>/{train,valid,test}.{in,out} + manifest.json and
# OUT_ROOT/data-bin/seed$SEED/<level>/ (fairseq binary data, one fixed dictionary).
set -euo pipefail
case "${1:-}" in  # the header above is the help; an option is not an output root
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "$0: unknown option $1. Fix: see $0 --help" >&2; exit 2 ;;
esac
out=${1:-prepared/exp2}
seed=${2:-1}
raw=$out/raw/seed$seed
bin=$out/data-bin/seed$seed

fairseq-entropy build exp2 --out "$raw" --seed "$seed" --support "${SUPPORT:-1..8}" \
  --restricted-verb "${RESTRICTED_VERB:-lunge}"
fairseq-entropy binarize "$raw" --out "$bin"
echo "data-bin: $bin (one directory per support size)"
