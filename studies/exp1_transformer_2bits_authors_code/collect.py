# ruff: noqa: E501, E741  (a diagnostic script beside its tables)
"""Tables of the side-by-side at 2 bits (the authors' high_20.txt, and our seed-830 build): accuracy per run, loss per epoch."""

import json
import math
import re
import sys
from pathlib import Path

T = Path("/work/runs/tf2")
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
acc = [
    "data\timplementation\tdropout\tseed\tcheckpoint\taccuracy\taccuracy_and\taccuracy_after\tdecoded_by"
]
loss = ["implementation\tseed\tepoch\ttrain_loss_nats\ttest_loss_nats"]


def add_acc(impl, drop, seed, label, f, dec, data="high_20.txt (authors)"):
    if f.exists():
        j = json.loads(f.read_text())
        c = j["by_conjunction"]
        acc.append(
            f"{data}\t{impl}\t{drop}\t{seed}\t{label}\t{j['accuracy']:.4f}\t{c['and']['accuracy']:.4f}\t{c['after']['accuracy']:.4f}\t{dec}"
        )


for seed in [830, 231, 42, 9876, 2]:
    for impl, d, drop in (
        ("fairseq-entropy", f"ours_olddropout_s{seed}", "also on embeddings and GEGLU inner"),
        ("fairseq-entropy", f"ours_s{seed}", "the authors' placement"),
    ):
        for label, name in (("last", "last"), ("best on 300 test commands", "best")):
            add_acc(
                impl, drop, seed, label, T / "runs" / d / name / "score.json", "fairseq-generate"
            )
        tl = T / "runs" / d / "train.log"
        if tl.exists():
            for ep, l in re.findall(r"\| train \| epoch (\d+) \| loss ([0-9.]+)", tl.read_text()):
                loss.append(f"{impl} ({drop})\t{seed}\t{int(ep)}\t{float(l) * math.log(2):.4f}\t")
    add_acc(
        "authors' code",
        "theirs",
        seed,
        "lowest test loss (theirs)",
        T / f"runs/theirs_high_20_{seed}_van/score/score.json",
        "fairseq-generate (weights copied)",
    )
    ev = T / f"theirs_eval_s{seed}.log"
    if ev.exists():
        m = re.findall(r"INFO - root -\s+([01]\.\d+)\s*$", ev.read_text(), re.M)
        if m:
            acc.append(
                f"high_20.txt (authors)\tauthors' code\ttheirs\t{seed}\tlowest test loss (theirs)\t{float(m[-1]):.4f}\t\t\ttheir eval.py"
            )
    tr = T / f"theirs_train_s{seed}.log"
    if tr.exists():
        for i, (a, b) in enumerate(
            re.findall(r"Train loss: ([0-9.]+), val loss: ([0-9.]+)", tr.read_text()), 1
        ):
            loss.append(f"authors' code\t{seed}\t{i}\t{float(a):.4f}\t{float(b):.4f}")
OURS830 = "our seed-830 build (6000 + 300 valid)"
add_acc(
    "fairseq-entropy",
    "the authors' placement",
    830,
    "last",
    Path("/work/runs/tfd830/runs/exp1/exp1_transformer_sinusoidal/n6000/seed830/entropy_2.0/last/score.json"),
    "fairseq-generate",
    OURS830,
)
add_acc(
    "authors' code",
    "theirs",
    830,
    "lowest test loss (theirs)",
    T / "runs/theirs_ours830_830_van/score/score.json",
    "fairseq-generate (weights copied)",
    OURS830,
)
nd = T / "check/nodrop3.log"
for ep, l in re.findall(r"\| train \| epoch (\d+) \| loss ([0-9.]+)", nd.read_text()):
    loss.append(
        f"fairseq-entropy (the authors' placement, 3-epoch check)\t830\t{int(ep)}\t{float(l) * math.log(2):.4f}\t"
    )
(out / "accuracy.tsv").write_text("\n".join(acc) + "\n")
(out / "loss_per_epoch.tsv").write_text("\n".join(loss) + "\n")
print("\n".join(acc))
