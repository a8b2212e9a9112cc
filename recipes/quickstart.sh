#!/usr/bin/env bash
# Quickstart (what `make demo` runs): Experiment 1 at all 7 entropy levels, one seed, at the
# paper's own schedule.
#
# On a GPU: the paper's Transformer (exp1_transformer_sinusoidal, 24 epochs).
# On a CPU: the paper's CNN (exp1_cnn_authors: the authors' CNN, their optimiser, 24 epochs,
# uniformly random batches), one level per core with one thread each, validating every 6
# epochs (the demo reports the last checkpoint); the Transformer at the paper's schedule takes
# about 4x as long per level on a CPU.
# Re-running skips levels already finished.  Environment: OUT (default demo), SEED, LEVELS,
# PRESET, EPOCHS (override the preset's), JOBS (levels trained at once; default on a CPU: one per core),
# BUILD_ARGS (extra `fairseq-entropy build exp1` arguments, e.g. "--component direction"),
# BINARIZE_ARGS (extra `fairseq-entropy binarize` arguments, e.g. "--spm-vocab 23 --spm-side source").
set -euo pipefail
if [ $# -gt 0 ]; then
  echo "usage: [OUT=demo] [SEED=1] [LEVELS=0,0.5,1,1.5,2,2.5,3] [PRESET=...] [EPOCHS=E] [JOBS=J]" \
       "[BUILD_ARGS=...] [BINARIZE_ARGS=...] $0" >&2
  echo "  (no arguments: settings come from the environment variables above)" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-demo}
seed=${SEED:-1}
if python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  device=gpu; preset=${PRESET:-exp1_transformer_sinusoidal}; levels=${LEVELS:-0,0.5,1,1.5,2,2.5,3}
  echo "GPU found: the paper's schedule ($preset), levels $levels"
else
  device=cpu; preset=${PRESET:-exp1_cnn_authors}; levels=${LEVELS:-0,0.5,1,1.5,2,2.5,3}
  echo "no GPU: the paper's CNN at the paper's schedule ($preset), levels $levels"
fi
start=$(date +%s)

# 1. data: entropy-controlled levels, then fairseq binarization with the fixed dictionary
read -ra build_args <<< "${BUILD_ARGS:-}"
read -ra binarize_args <<< "${BINARIZE_ARGS:-}"
# levels and runs are named by seed, level and preset only: an OUT made with other build or
# binarize arguments would be reused silently, so it is refused
data_args="BUILD_ARGS=${BUILD_ARGS:-} BINARIZE_ARGS=${BINARIZE_ARGS:-}"
if [ -f "$out/.data-args" ] && [ "$(cat "$out/.data-args")" != "$data_args" ]; then
  echo "$out was made with $(cat "$out/.data-args"), not $data_args." \
       "Fix: choose another OUT, or the same arguments" >&2
  exit 2
fi
mkdir -p "$out" && echo "$data_args" > "$out/.data-args"
if [ ! -f "$out/data-bin/.done-$seed-$levels" ]; then
  fairseq-entropy build exp1 --out "$out/data/seed$seed" --levels "$levels" --seed "$seed" \
    "${build_args[@]}"
  fairseq-entropy binarize "$out/data/seed$seed" --out "$out/data-bin/seed$seed" "${binarize_args[@]}"
  touch "$out/data-bin/.done-$seed-$levels"
fi

# 2. train + decode + score each level
names=$(python -c "import sys
from fairseq_entropy.scan.levels import level_name
print(' '.join(level_name('exp1', float(x)) for x in sys.argv[1].split(',')))" "$levels" 2>/dev/null)
# CPU: one level per core, one thread each.  The CNN is bound by per-operation overhead, so a
# second thread adds nothing; more runs than cores (all 7 levels at once on 2 cores) lost 16%
# of the throughput to cache contention, about what the last, single-level round wastes.
if [ "$device" = cpu ]; then jobs=${JOBS:-$(nproc)}; threads=1; else jobs=${JOBS:-1}; threads=${OMP_NUM_THREADS:-}; fi
# the demo reports the last checkpoint, validating every 6 epochs only to show progress;
# SCORE_BEST=1 validates every epoch and also decodes the best on validation
valid=(); [ "${SCORE_BEST:-0}" = 0 ] && valid=(--validate-interval 6)
printf '%s\n' $names | xargs -P "$jobs" -I{} env ${threads:+OMP_NUM_THREADS=$threads} SEED="$seed" \
  SCORE_BEST="${SCORE_BEST:-0}" \
  "$here/train_level.sh" "$preset" "$out/data-bin/seed$seed/{}" "$out/runs/exp1/$preset/seed$seed/{}" "${valid[@]}"

# 3. table + plot
fairseq-entropy aggregate "$out/runs" --out "$out/results"
echo "wall time: $(( $(date +%s) - start )) s"
echo "data: $out/data  binarized: $out/data-bin  runs (checkpoints, logs, generate output):" \
     "$out/runs  tensorboard: tensorboard --logdir $out/runs"
