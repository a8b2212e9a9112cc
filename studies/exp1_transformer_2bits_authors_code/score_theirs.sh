# score_theirs.sh SEED [NAME]: the authors' model of that seed (trained_models/NAME, default
# high_20_SEED_van), decoded by fairseq-generate (greedy) on the 7056 test commands and scored
set -e
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)  # the repository
export PATH="$ROOT"/.venv/bin:$PATH OMP_NUM_THREADS=1
T=/work/runs/tf2 seed=$1 name=${2:-high_20_$1_van}
R=/work/runs/tf2/runs/theirs_$name
mkdir -p $R
python "$(dirname "$0")/theirs_to_fairseq.py" /work/runs/authors/systematicity_entropy/trained_models/$name/final_model.pt $T/runs/ours_olddropout_s830/checkpoints/checkpoint_last.pt $R/theirs.pt $seed 2>&1 | grep -v "INFO\|Warning\|DEBUG" || true
fairseq-generate $T/bin_high20 --user-dir "$ROOT"/fairseq_entropy --task systematicity --source-lang in --target-lang out --path $R/theirs.pt --cpu --gen-subset test --beam 1 --max-len-a 0 --max-len-b 60 --batch-size 512 --required-batch-size-multiple 1 > $R/generate-theirs.txt 2> $R/generate.log
fairseq-entropy score $R/generate-theirs.txt --out $R/score --data $T/bin_high20 --preset exp1_transformer_sinusoidal --seed $seed --checkpoint test-loss --path $R/theirs.pt --force > /dev/null
python -c "import json; j=json.load(open('$R/score/score.json')); print('theirs $name seed $seed', round(j['accuracy'],4), {k: round(v['accuracy'],4) for k, v in j['by_conjunction'].items()})"
