#!/usr/bin/env bash
# Quickstart (what `make demo` runs): Experiment 1 with scan_transformer, one seed.
#
# On a GPU: the paper's full schedule (24 epochs) at all 7 entropy levels.
# On a CPU: levels 0, 1, 2, 3 bits with a CPU-sized schedule (CPU_EPOCHS epochs, default below).
# Re-running skips levels already finished.  Environment: OUT (default demo), SEED, LEVELS,
# CPU_EPOCHS, PRESET.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-demo}
seed=${SEED:-1}
preset=${PRESET:-exp1_transformer_sinusoidal}
if python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  levels=${LEVELS:-0,0.5,1,1.5,2,2.5,3}; unset EPOCHS
  echo "GPU found: paper schedule, levels $levels"
else
  levels=${LEVELS:-0,1,2,3}; export EPOCHS=${CPU_EPOCHS:-8}
  echo "no GPU: CPU schedule of $EPOCHS epochs (the paper: 24), levels $levels"
fi
start=$(date +%s)

# 1. data: entropy-controlled levels, then fairseq binarization with the fixed dictionary
if [ ! -f "$out/data-bin/.done-$seed-$levels" ]; then
  fairseq-entropy build exp1 --out "$out/data/seed$seed" --levels "$levels" --seed "$seed"
  fairseq-entropy binarize "$out/data/seed$seed" --out "$out/data-bin/seed$seed"
  touch "$out/data-bin/.done-$seed-$levels"
fi

# 2. train + decode + score each level
names=$(python -c "import sys
from fairseq_entropy.builders import level_name
print(' '.join(level_name('exp1', float(x)) for x in sys.argv[1].split(',')))" "$levels" 2>/dev/null)
for level in $names; do
  echo "== $level"
  SEED=$seed "$here/train_level.sh" "$preset" "$out/data-bin/seed$seed/$level" \
    "$out/runs/exp1/$preset/seed$seed/$level"
done

# 3. table + plot
fairseq-entropy aggregate "$out/runs" --out "$out/results"
echo "wall time: $(( $(date +%s) - start )) s"
echo "data: $out/data  binarized: $out/data-bin  runs (checkpoints, logs, generate output):" \
     "$out/runs  tensorboard: tensorboard --logdir $out/runs"
