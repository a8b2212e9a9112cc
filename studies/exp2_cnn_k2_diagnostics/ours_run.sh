ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)  # the repository
export PATH="$ROOT"/.venv/bin:$PATH
cd /work/runs/diag
fairseq-entropy build exp2 --out data/support_2 --support 2 --seed 830
fairseq-entropy binarize data/support_2/support_2 --out bin/support_2
SEED=830 DEVICE=cpu OMP_NUM_THREADS=1 bash "$ROOT"/recipes/train_level.sh exp2_cnn_authors bin/support_2 runs/support_2 --valid-subset valid,test
