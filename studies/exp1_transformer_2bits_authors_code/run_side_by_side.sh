#!/bin/bash
# One worker over the side-by-side queue (several may run: each job is claimed by mkdir).
# ours = this plugin (the authors' dropout placement); theirs = the authors' train.py, its
# lowest-test-loss checkpoint decoded greedily by fairseq-generate (score_theirs.sh)
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)  # the repository
export PATH="$ROOT"/.venv/bin:$PATH OMP_NUM_THREADS=1 DEVICE=cpu
T=/work/runs/tf2
mkdir -p $T/claims
for job in ours:830 theirs:231 ours:231 theirs:42 ours:42 theirs:9876 ours:9876 theirs:2 ours:2; do
  kind=${job%:*} seed=${job#*:}
  [ -f $T/STOP ] && exit 0
  mkdir $T/claims/$kind.$seed 2>/dev/null || continue
  s=$(date +%s)
  case $kind in
    ours) SEED=$seed bash "$ROOT"/recipes/train_level.sh exp1_transformer_sinusoidal $T/bin_high20 $T/runs/ours_s$seed > $T/ours_s$seed.log 2>&1 ;;
    theirs)
      (cd /work/runs/authors && PYTHONPATH=.:systematicity_entropy:stub python systematicity_entropy/train.py --train_path $T/high_20.txt --val_path $T/test.txt --save_path high_20_${seed}_van --batch_size 32 --epochs 24 --learning_rate 3e-4 --layers 3 --hidden_size 128 --task scan --patience 999 --dropout 0.1 --seed $seed --type van --wandb x > $T/theirs_train_s$seed.log 2>&1)
      bash "$(dirname "$0")"/score_theirs.sh $seed >> $T/theirs_scores.txt 2>&1 ;;
  esac
  echo "$kind seed $seed: $(( $(date +%s) - s )) s" >> $T/times.txt
done
