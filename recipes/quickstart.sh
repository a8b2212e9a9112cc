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
# N (training commands per level, default 6000, the paper's), PRESET, EPOCHS / MAX_UPDATE
# (override the preset's schedule; MAX_UPDATE=200 makes a minutes-long smoke run), JOBS (levels
# trained at once; default on a CPU: one per core), BUILD_ARGS (extra `fairseq-entropy build
# exp1` arguments, e.g. "--component direction"), BINARIZE_ARGS (extra `fairseq-entropy
# binarize` arguments, e.g. "--spm-vocab 23 --spm-side source").
# SIGTERM, SIGINT (Ctrl-C) or SIGHUP stops the running step with every process it started
# (`make demo` passes its SIGTERM on), waits until they have exited and exits 128 + the signal.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  cat <<'EOF_HELP'
usage: [VARIABLE=value ...] bash recipes/quickstart.sh
Experiment 1 end to end: build, binarize, train, decode and score every level, then aggregate.
Settings, all optional, come from environment variables:
  OUT            output folder: data, data-bin, runs, results (default demo)
  SEED           data and training seed (default 1)
  LEVELS         comma-separated second-slot entropies in bits (default 0,0.5,1,1.5,2,2.5,3)
  N              training commands per level (default 6000, the paper's)
  PRESET         model preset (default: exp1_transformer_sinusoidal on a GPU,
                 exp1_cnn_authors on a CPU)
  EPOCHS         training epochs, overriding the preset's schedule
  MAX_UPDATE     training updates, overriding the preset's schedule (200: a smoke run)
  JOBS           levels trained at once (default: one per core on a CPU, 1 on a GPU)
  SCORE_BEST     1: validate every epoch and also decode the best checkpoint on validation
                 (default 0: the last checkpoint only, validating every 6 epochs)
  DECODE_SAMPLE  decode only about this many test sentences (a smoke test; default: all)
  BUILD_ARGS     extra 'fairseq-entropy build exp1' arguments, e.g. "--component direction"
  BINARIZE_ARGS  extra 'fairseq-entropy binarize' arguments, e.g. "--spm-vocab 23"
Re-running skips the levels already finished.  SIGTERM, SIGINT or SIGHUP stops every process
it started and exits 128 + the signal.
EOF_HELP
  exit 0
fi
if [ $# -gt 0 ]; then
  echo "usage: [OUT=demo] [SEED=1] [LEVELS=0,0.5,1,1.5,2,2.5,3] [N=6000] [PRESET=...] [EPOCHS=E]" \
       "[MAX_UPDATE=U] [JOBS=J] [BUILD_ARGS=...] [BINARIZE_ARGS=...] $0" >&2
  echo "  (no arguments: settings come from the environment variables above)" >&2
  exit 2
fi
# Each long step runs as a background job in a process group of its own (set -m), waited for
# with `wait`, which a signal interrupts (a foreground command would delay the trap until it
# ends): the trap stops the job's whole group, also the levels xargs would still launch.
set -m
job=
group_alive() {  # a live (not zombie) process in process group $1
  ps -eo pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ {found = 1} END {exit !found}'
}
stop() {
  trap - TERM INT HUP
  if [ -n "$job" ]; then
    kill -TERM -- "-$job" 2>/dev/null || true
    waited=0
    while group_alive "$job"; do
      sleep 0.2; waited=$((waited + 1))
      if [ "$waited" = 300 ]; then kill -KILL -- "-$job" 2>/dev/null || true; fi
    done
  fi
  echo "quickstart: stopped by signal $1; every process it started has exited." \
       "Fix: run the same command again to resume (finished levels are skipped)" >&2
  exit $((128 + $1))
}
trap 'stop 15' TERM
trap 'stop 2' INT
trap 'stop 1' HUP
step() {  # run "$@" as the current job and wait for it
  "$@" &
  job=$!
  wait "$job"
}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-demo}
seed=${SEED:-1}
case "${N:-6000}" in
  ''|*[!0-9]*|0) echo "N=${N:-}: expected a positive whole number of training commands." \
                      "Fix: e.g. N=6000 (the paper's)" >&2; exit 2 ;;
esac
case "${MAX_UPDATE:-1}" in
  *[!0-9]*|0) echo "MAX_UPDATE=${MAX_UPDATE:-}: expected a positive whole number of updates." \
                   "Fix: e.g. MAX_UPDATE=200, or leave it unset for the preset's schedule" >&2
              exit 2 ;;
esac
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
data_args="BUILD_ARGS=${BUILD_ARGS:-} BINARIZE_ARGS=${BINARIZE_ARGS:-}${N:+ N=$N}"
if [ -f "$out/.data-args" ] && [ "$(cat "$out/.data-args")" != "$data_args" ]; then
  echo "error: OUT=$out was made with $(cat "$out/.data-args"), not $data_args." \
       "Fix: choose another OUT, or the same arguments" >&2
  exit 2
fi
if [ ! -f "$out/data-bin/.done-$seed-$levels" ]; then
  step fairseq-entropy build exp1 --out "$out/data/seed$seed" --levels "$levels" --seed "$seed" \
    ${N:+--n "$N"} "${build_args[@]}"
  step fairseq-entropy binarize "$out/data/seed$seed" --out "$out/data-bin/seed$seed" \
    "${binarize_args[@]}"
  # recorded only once the data exist: a failed build leaves nothing that refuses its fix
  echo "$data_args" > "$out/.data-args"
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
schedule=(${EPOCHS:+EPOCHS=$EPOCHS} ${MAX_UPDATE:+MAX_UPDATE=$MAX_UPDATE})
step xargs -a <(printf '%s\n' $names) -P "$jobs" -I{} env ${threads:+OMP_NUM_THREADS=$threads} \
  SEED="$seed" SCORE_BEST="${SCORE_BEST:-0}" "${schedule[@]}" \
  "$here/train_level.sh" "$preset" "$out/data-bin/seed$seed/{}" "$out/runs/exp1/$preset/seed$seed/{}" "${valid[@]}"

# 3. table + plot
step fairseq-entropy aggregate "$out/runs" --out "$out/results"
echo "wall time: $(( $(date +%s) - start )) s"
echo "data: $out/data  binarized: $out/data-bin  runs (checkpoints, logs, generate output):" \
     "$out/runs  tensorboard: tensorboard --logdir $out/runs"
