#!/bin/bash
# The authors' train.py on our seed-830 2-bit build (its 6000 training commands; the same 7056
# test commands), their seed 830; scored like the runs on high_20.txt.
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)  # the repository
export PATH="$ROOT"/.venv/bin:$PATH OMP_NUM_THREADS=1 DEVICE=cpu
T=/work/runs/tf2
[ -f $T/STOP ] && exit 0
mkdir $T/claims/theirs_ours830.830 2>/dev/null || exit 0
s=$(date +%s)
(cd /work/runs/authors && PYTHONPATH=.:systematicity_entropy:stub python systematicity_entropy/train.py --train_path $T/ours830_train.txt --val_path $T/ours830_test.txt --save_path ours830_830_van --batch_size 32 --epochs 24 --learning_rate 3e-4 --layers 3 --hidden_size 128 --task scan --patience 999 --dropout 0.1 --seed 830 --type van --wandb x > $T/theirs_train_ours830_s830.log 2>&1)
bash "$(dirname "$0")"/score_theirs.sh 830 ours830_830_van >> $T/theirs_scores.txt 2>&1
echo "theirs on ours830 seed 830: $(( $(date +%s) - s )) s" >> $T/times.txt
