# the authors' CNN code (ltgoslo/systematicity-entropy) on their Experiment 2 k = 2 file, their
# seed 830 regime (exp2_cnn_train.sh: 56 epochs, lr 3e-4, batch 32, val = the test file)
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)  # the repository
cd /work/runs/authors
export PYTHONPATH=.:systematicity_entropy:stub OMP_NUM_THREADS=1
P="$ROOT"/.venv/bin/python
$P systematicity_entropy/train_cnn.py --train_path full_2_7.txt --val_path test.txt --save_path exp2_2_830_cnn --batch_size 32 --epochs 56 --learning_rate 3e-4 --layers 3 --hidden_size 64 --task scan --patience 999 --dropout 0.1 --seed 830 --kernel_size 5 --wandb x > train_830.log 2>&1
$P systematicity_entropy/eval_cnn.py --model_path systematicity_entropy/trained_models/exp2_2_830_cnn/final_model.pt --val_path test.txt --task scan --hidden_size 64 --layers 3 --kernel_size 5 --wandb x --seed 830 > eval_830.log 2>&1
