"""Write ``exp1_cnn_authors_seed1.tsv``: our scored runs beside the paper's CNN curve.

    python results/exp1_cnn_authors_seed1.py RUNS_ROOT WALL_FILE \
        > results/exp1_cnn_authors_seed1.tsv

RUNS_ROOT holds ``<level>/{last,best}/score.json`` written by ``recipes/train_level.sh``;
WALL_FILE has one ``<level> wall_s <seconds>`` line per level (training, both decodes and
scoring).  A cell is in the band when |ours - paper mean| <= max(2 std, 0.10).
"""

import csv
import sys
from pathlib import Path

from fairseq_entropy.analysis.scoring import collect_scores, paper_results

PRESET = "exp1_cnn_authors"
PAPER_MODEL = "cnn"
COLUMNS = ("experiment", "preset", "seed", "entropy_bits", "accuracy", "paper_mean",
           "paper_std", "in_band", "wall_s", "checkpoint")


def main(runs_root: str, wall_file: str) -> None:
    wall = {}
    for line in Path(wall_file).read_text().splitlines():
        level, _, seconds = line.split()
        wall[level] = int(seconds)
    paper = {round(float(r["entropy_bits"]), 2): r for r in paper_results()
             if r["experiment"] == "exp1" and r["model"] == PAPER_MODEL}
    out = csv.writer(sys.stdout, delimiter="\t", lineterminator="\n")
    out.writerow(COLUMNS)
    for r in collect_scores([runs_root]):
        bits = round(float(r["entropy_bits"]), 2)
        ref = paper[bits]
        mean, std = float(ref["accuracy_mean"]), float(ref["accuracy_std"])
        acc = float(r["accuracy"])
        in_band = abs(acc - mean) <= max(2 * std, 0.10)
        out.writerow([r["experiment"], PRESET, r["seed"], f"{bits:g}", f"{acc:.4f}",
                      f"{mean:.4f}", f"{std:.4f}", str(in_band).lower(),
                      wall.get(r["level"], ""), r["checkpoint"]])


if __name__ == "__main__":
    main(*sys.argv[1:])
