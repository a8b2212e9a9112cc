#!/usr/bin/env bash
# The packed runs' GPU check, in one call of at most 10 minutes on one GPU (a 15-minute
# machine lease leaves about 5 minutes for the machine's start):
#
#   0. install: when PYTHON cannot import the plugin and fairseq (a GPU node without
#      internet), install the wheelhouse of `make wheelhouse` (WHEELHOUSE, default
#      ./wheelhouse) with pip --no-index --target OUT_DIR/site, and put that on PYTHONPATH
#      and PATH; the node's own torch, numpy and scipy are used;
#   1. correctness at one level: 3 runs of the Transformer (seeds 1-3, dropout 0) trained
#      alone and as one pack for 200 updates; ||packed - alone|| / ||alone|| over all the
#      parameters of each run at most 1e-4 (benchmarks/gpu_check.py correctness);
#   2. speed: packed against separate model-updates/s at K = 1, 16, 64, side by side in one
#      process (benchmarks/bench_packed.py --device cuda), for the Transformer, the authors'
#      CNN and the equivariant model;
#   3. the Experiment 1 Transformer curve of seed 830 trained as one pack (7 levels, the
#      preset's schedule, or CURVE_MAX_UPDATE updates), each cell decoded and scored, then
#      aggregated (benchmarks/gpu_check.py curve: fairseq-entropy sweep --pack 7).  When its
#      time limit cuts the pack off, running the script again resumes the pack from its
#      packed checkpoint (the sweep's own resume) and finishes the curve.
#
# usage: benchmarks/gpu_check.sh [OUT_DIR]          (default gpu_check_out/)
#        SMOKE=1 benchmarks/gpu_check.sh [OUT_DIR]  the same steps on the CPU with tiny counts
#                                                   (a few updates, a sample decode), to check
#                                                   the script itself
# Each step runs under its own time limit (INSTALL_S, STEP1_S, STEP2_S, STEP3_S seconds:
# 120 + 80 + 100 + 290 = 590 on a GPU); the script prints each step's wall time and the
# total, and exits non-zero when a step fails or runs out of time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=$(mkdir -p "${1:-gpu_check_out}" && cd "${1:-gpu_check_out}" && pwd)
py=${PYTHON:-python}
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c 'import torch' 2>/dev/null || {
  echo "gpu_check.sh: error: $py cannot import torch. Fix: activate the project's venv" \
       "(. .venv/bin/activate) or set PYTHON=/path/to/its/python" >&2
  exit 2; }
began=$(date +%s)
if ! "$py" -c 'import fairseq_entropy, fairseq' 2>/dev/null; then
  wheels=${WHEELHOUSE:-$repo/wheelhouse}
  [ -f "$wheels/requirements.txt" ] || {
    echo "gpu_check.sh: error: $py cannot import fairseq, and $wheels holds no wheelhouse." \
         "Fix: make wheelhouse PY_VERSION=<this machine's X.Y> on a machine with internet," \
         "copy wheelhouse/ here (or set WHEELHOUSE=DIR), or install the plugin" >&2
    exit 2; }
  echo "== 0. install the plugin from $wheels (at most ${INSTALL_S:=120} s)"
  timeout "$INSTALL_S" "$py" -m pip install --quiet --no-index --no-deps --find-links "$wheels" \
    --target "$out/site" --upgrade -r "$wheels/requirements.txt" || {
    echo "gpu_check.sh: error: installing $wheels failed (see above). Fix: make the wheelhouse" \
         "for this machine's Python ($("$py" -c 'import sys; print(*sys.version_info[:2], sep=".")'))" >&2
    exit 2; }
  export PYTHONPATH="$out/site:$PYTHONPATH" PATH="$out/site/bin:$PATH"
  "$py" -c 'import fairseq_entropy, fairseq' || exit 2
  echo "== 0. install: done after $(( $(date +%s) - began )) s"
fi

if [ "${SMOKE:-0}" = 1 ]; then
  device=cpu cuda=cpu
  correct=(--updates 4 --n 320 --k 2)
  speed=(--ks 1,2 --seconds 0.2 --rounds 1 --n 200 --presets exp1_transformer_sinusoidal)
  curve=(--max-update 4 --n 320 --decode-sample 8)
  : "${STEP1_S:=300}" "${STEP2_S:=300}" "${STEP3_S:=600}"
else
  "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' || {
    echo "gpu_check.sh: error: torch sees no GPU. Fix: run it on a machine with one, or SMOKE=1 to check the script on the CPU" >&2
    exit 2; }
  device=gpu cuda=cuda
  correct=(--updates 200 --n 2000 --k 3)
  speed=(--ks 1,16,64 --seconds 1.5 --rounds 2 --n 2000
         --presets exp1_transformer_sinusoidal,exp1_cnn_authors,exp1_equivariant)
  curve=(--n 6000 ${CURVE_MAX_UPDATE:+--max-update "$CURVE_MAX_UPDATE"})
  : "${STEP1_S:=80}" "${STEP2_S:=100}" "${STEP3_S:=290}"
fi

failed=0
step() {  # NAME LIMIT_S COMMAND...
  local name=$1 limit=$2 start rc=0; shift 2
  start=$(date +%s)
  echo "== $name (at most $limit s)"
  timeout --signal=INT --kill-after=20 "$limit" "$@" || rc=$?
  echo "== $name: exit $rc after $(( $(date +%s) - start )) s"
  [ "$rc" = 0 ] || failed=1
}

step "1. correctness at one level" "$STEP1_S" \
  "$py" "$here/gpu_check.py" correctness --out "$out/correctness" --device "$device" "${correct[@]}"
step "2. packed against separate model-updates/s" "$STEP2_S" \
  "$py" "$here/bench_packed.py" --device "$cuda" "${speed[@]}"
step "3. Exp1 Transformer curve of one seed, one pack" "$STEP3_S" \
  "$py" "$here/gpu_check.py" curve --out "$out/curve" --device "$device" "${curve[@]}"
echo "gpu_check: $([ "$failed" = 0 ] && echo all steps passed || echo a step failed) in" \
     "$(( $(date +%s) - began )) s; outputs in $out"
exit "$failed"
