# Data of the side-by-side: the authors' Experiment 1 2-bit training file and test file
# (ltgoslo/systematicity-entropy, data/experiment1/), binarized with every training command
# kept (as the authors trained); the validation split is 300 test commands, used only for the
# "best" label (a test-selected diagnostic like the authors' own selection)
R=/work/.mirror/ltgoslo+systematicity-entropy/repo
git -C $R show HEAD:data/experiment1/high_20.txt > high_20.txt
git -C $R show HEAD:data/experiment1/test.txt > test.txt
python -c "import random; l=open('test.txt').read().splitlines(); open('valid300.txt','w').write('\n'.join(random.Random(1).sample(l, 300))+'\n')"
fairseq-entropy binarize --grammar paper --train high_20.txt --valid valid300.txt --test test.txt --out bin_high20 --jobs 1
