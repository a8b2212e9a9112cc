#!/bin/bash
# Exp1 CNN at 2.5 bits: the authors' checkpoint selection (lowest test loss) beside the last
# checkpoint, on the same runs (seeds 1, 231, 830; each seed builds its data and trains)
set -e
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)  # the repository
export PATH="$ROOT"/.venv/bin:$PATH OMP_NUM_THREADS=1 DEVICE=cpu
cd /work/runs/sel25
for seed in 1 231 830; do
  [ -d bin/seed$seed ] || { fairseq-entropy build exp1 --out data/seed$seed --levels 2.5 --seed $seed > /dev/null
    fairseq-entropy binarize data/seed$seed --out bin/seed$seed --jobs 1 > /dev/null; }
  s=$(date +%s)
  SEED=$seed SELECT=test-loss bash "$ROOT"/recipes/train_level.sh exp1_cnn_authors bin/seed$seed/entropy_2.5 runs/seed$seed > seed$seed.log 2>&1
  echo "seed $seed: $(( $(date +%s) - s )) s" >> times.txt
done
