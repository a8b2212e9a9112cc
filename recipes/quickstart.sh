#!/usr/bin/env bash
# Quickstart (what `make demo` runs): Experiment 1 at all 7 entropy levels, one seed, at the
# paper's own schedule, as a sweep (`fairseq-entropy sweep`) of a grid it writes to
# OUT/quickstart.json: the same cells, run directories, status file and resume as any sweep.
#
# The levels train as packed runs (K runs in one fairseq-train, --task packed_systematicity),
# then each level is decoded and scored on its own.  On a GPU: the paper's Transformer
# (exp1_transformer_sinusoidal, 24 epochs), the levels as one pack.  On a CPU: the paper's CNN
# (exp1_cnn_authors: the authors' CNN, their optimiser, 24 epochs, uniformly random batches),
# one pack per core with one thread each, the levels spread evenly.  PACK=0 trains each level
# in a fairseq-train of its own (on a 2-core CPU 7% faster: docs/results/demo-cpu.md).
# Re-running skips levels already finished.  Environment: see --help.
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
  JOBS           worker slots (default: one per core on a CPU, 1 on a GPU)
  PACK           1 (default): train the levels as packs, one per worker slot (JOBS), each
                 one fairseq-train; 0: each level in a fairseq-train of its own
  SCORE_BEST     1: also decode the best checkpoint on validation (default 0: the last only)
  DECODE_SAMPLE  decode only about this many test sentences (a smoke test; default: all)
  BUILD_ARGS     extra 'fairseq-entropy build exp1' arguments, e.g. "--component direction"
  BINARIZE_ARGS  extra 'fairseq-entropy binarize' arguments, e.g. "--spm-vocab 23"
  RECIPE         your own train recipe per level, called as RECIPE PRESET DATABIN RUN_DIR
                 (fairseq-entropy sweep --recipe; default: fairseq-entropy run)
Re-running skips the levels already finished.  SIGTERM, SIGINT or SIGHUP stops every process
it started and exits 128 + the signal.
EOF_HELP
  exit 0
fi
if [ $# -gt 0 ]; then
  echo "usage: [OUT=demo] [SEED=1] [LEVELS=0,0.5,1,1.5,2,2.5,3] [N=6000] [PRESET=...] [EPOCHS=E]" \
       "[MAX_UPDATE=U] [JOBS=J] [PACK=1|0] [BUILD_ARGS=...] [BINARIZE_ARGS=...] $0" >&2
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
case "${PACK:-1}" in
  0|1) ;;
  *) echo "PACK=${PACK}: expected 1 or 0. Fix: PACK=1 (the default) trains the levels as" \
          "packs, PACK=0 each level in a fairseq-train of its own" >&2
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

# 1. the grid of the demo's cells (one preset, one seed, the levels), and where its data go
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
mkdir -p "$out"
grid=$out/quickstart.json
# the grid, and the data-bin folder its cells read (the sweep's layout under OUT)
databin=$(python - "$grid" "$out" "$preset" "$seed" "$levels" "${N:-6000}" \
          "${EPOCHS:-}" "${MAX_UPDATE:-}" "${build_args[@]}" <<'EOF_GRID'
import json, sys
from pathlib import Path
from fairseq_entropy.errors import UserError
from fairseq_entropy.experiments.grids import load_grid
grid, out, preset, seed, levels, n, epochs, max_update, *build = sys.argv[1:]
if "--n" in build:
    sys.exit("error: BUILD_ARGS holds --n, the number of training commands. Fix: pass it as "
             f"N={build[build.index('--n') + 1] if build.index('--n') + 1 < len(build) else ''}")
schedule = ({"max_update": int(max_update)} if max_update else
            {"epochs": float(epochs)} if epochs else "paper")
Path(grid).write_text(json.dumps({
    "experiment": "exp1", "title": "make demo: Experiment 1, one seed",
    "presets": [preset], "levels": [float(x) for x in levels.split(",")],
    "seeds": [int(seed)], "n": [int(n)], "schedule": schedule, "build_args": build},
    indent=1) + "\n")
try:
    print(load_grid(grid).cells()[0].databin(out).parent)
except UserError as e:
    sys.exit(f"error: {e}")
EOF_GRID
) || exit 2
rel=${databin#"$out/data-bin/"}

# 2. data: entropy-controlled levels, then fairseq binarization with the fixed dictionary, in
# one build and one binarize (the sweep would build level by level)
if [ ! -f "$databin/.done-$levels" ]; then
  step fairseq-entropy build exp1 --out "$out/data/$rel" --levels "$levels" --seed "$seed" \
    ${N:+--n "$N"} "${build_args[@]}"
  step fairseq-entropy binarize "$out/data/$rel" --out "$databin" "${binarize_args[@]}"
  # recorded only once the data exist: a failed build leaves nothing that refuses its fix
  echo "$data_args" > "$out/.data-args"
  touch "$databin/.done-$levels"
fi

# 3. train, decode and score each level: the sweep of the grid, packed.  CPU: one slot per
# core with one thread each (the CNN is bound by arithmetic at batch 32: a second thread adds
# little, and packing adds the padding of every run's batch to the pack's longest target).
nlevels=$(awk -F, '{print NF}' <<< "$levels")
# (nproc without OMP_NUM_THREADS, which nproc would report instead of the cores)
if [ "$device" = cpu ]; then jobs=${JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
else jobs=${JOBS:-1}; fi
size=0
if [ "${PACK:-1}" = 1 ]; then size=$(( (nlevels + jobs - 1) / jobs )); fi  # one pack per slot
best=(--no-score-best)
if [ "${SCORE_BEST:-0}" = 1 ]; then best=(); fi
step fairseq-entropy sweep "$grid" --root "$out" --jobs "$jobs" --pack "$size" \
  --device "$device" "${best[@]}" ${DECODE_SAMPLE:+--decode-sample "$DECODE_SAMPLE"} \
  ${RECIPE:+--recipe "$RECIPE"}

# 4. table + plot
step fairseq-entropy aggregate "$out/runs" --out "$out/results" --force
echo "wall time: $(( $(date +%s) - start )) s"
echo "data: $out/data  binarized: $out/data-bin  runs (checkpoints, logs, generate output):" \
     "$out/runs  packs: $out/packs  tensorboard: tensorboard --logdir $out/runs"
