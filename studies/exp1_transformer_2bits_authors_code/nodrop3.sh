ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)  # the repository
export PATH="$ROOT"/.venv/bin:$PATH OMP_NUM_THREADS=1
D=/work/runs/tf2/bin_high20
args=$(fairseq-entropy train-args exp1_transformer_sinusoidal --data $D)
rm -rf /work/runs/tf2/check/nodrop3
fairseq-train $D --user-dir "$ROOT"/fairseq_entropy $args --cpu --seed 830 --save-dir /work/runs/tf2/check/nodrop3 --no-save --num-workers 0 --required-batch-size-multiple 1 --disable-validation --max-epoch 3 --log-format simple --log-interval 100 --embedding-dropout 0 --activation-dropout 0 > /work/runs/tf2/check/nodrop3.log 2>&1
