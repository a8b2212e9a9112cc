#!/usr/bin/env bash
# COGS (Kim & Linzen 2020) from its TSV files -> data-bin/.
#
#   preprocess/prepare_cogs.sh DIR OUT
#
# DIR holds train.tsv, dev.tsv, test.tsv and gen.tsv (sentence<TAB>logical form<TAB>case):
# the data/ folder of github.com/najoungkim/COGS (original logical forms) or the
# variable_free/ folder of github.com/frankaging/ReCOGS (variable-free ones).
# Writes OUT/ with the splits train, valid (from dev.tsv), test and gen, dictionaries built
# from train.tsv, <split>.case (the case of every sentence) and manifest.json.  Train with
# the systematicity task (or stock translation, --source-lang in --target-lang out); decode
# the generalization set with fairseq-generate --gen-subset gen, then score it with
# fairseq-entropy score OUTPUT --data OUT --split gen (accuracy per case and case type).
set -euo pipefail
case "${1:-}" in  # the header above is the help; an option is not an input
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "$0: unknown option $1. Fix: see $0 --help" >&2; exit 2 ;;
esac
if [ $# -ne 2 ]; then
  echo "prepare_cogs.sh: error: expected DIR OUT, got $# arguments. Fix: $0 path/to/COGS/data" \
       "data/cogs/data-bin" >&2
  exit 2
fi
for f in train dev; do
  if [ ! -f "$1/$f.tsv" ]; then
    echo "prepare_cogs.sh: error: $1/$f.tsv not found. Fix: pass the folder holding the COGS" \
         "files (train.tsv, dev.tsv, test.tsv, gen.tsv; github.com/najoungkim/COGS data/)" >&2
    exit 2
  fi
done
fairseq-entropy binarize --format cogs "$1" --out "$2"
echo "data-bin: $2 (splits train, valid, test, gen; cases in <split>.case)"
