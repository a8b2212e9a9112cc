# Experiment 2 CNN aggregate over three seeds: seed 830 k = 1, 4 from the committed table
# (code before the CNN's window-order change), everything else from the current code's runs
set -e
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)  # the repository
cd "$ROOT"
export PATH="$ROOT"/.venv/bin:$PATH
rm -rf /work/runs/exp2/agg3
fairseq-entropy aggregate results/exp2_cnn_authors/seed830_k1_k4_before_f5f64a0.tsv /work/runs/diag/runs /work/runs/exp2/a/runs /work/runs/exp2/b/runs --out /work/runs/exp2/agg3
