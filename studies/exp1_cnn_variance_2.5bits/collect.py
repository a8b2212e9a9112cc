"""accuracy_by_data_and_training_seed.tsv from the runs of run.sh (RUNS, default
/work/runs/var/runs) and the diagonal of our builds from committed results."""
import csv
import glob
import json
import os
import sys
from pathlib import Path

RUNS = os.environ.get("RUNS", "/work/runs/var/runs")
#: the repository's results/ (this script lives in studies/<study>/)
RESULTS = Path(__file__).resolve().parents[2] / "results"


def read_tsv(path):
    with open(path) as f:
        return list(csv.DictReader(f, delimiter="\t"))


rows = {}
for path in glob.glob(f"{RUNS}/*/last/score.json"):
    with open(path) as f:
        score = json.load(f)
    data, seed = path.split("/")[-3][1:].split("_t")
    rows[(data, seed)] = (score["accuracy"], "run.sh (this commit's code)")
# the per-level make demo of 2026-12-01 (results/demo_cpu_seed1/results.tsv as of 9f335b6;
# the file now holds the packed demo of 2026-12-02)
for r in read_tsv(f"{RESULTS}/demo_cpu_seed1/results.tsv"):
    if r["level"] == "entropy_2.5" and r["checkpoint"] == "last":
        rows.setdefault(("1", "1"), (float(r["accuracy"]), "make demo (results/demo_cpu_seed1)"))
for r in read_tsv(f"{RESULTS}/exp1_cnn_authors/results.tsv"):
    if r["level"] == "entropy_2.5" and r["checkpoint"] == "last" and r["seed"] in ("231", "830"):
        rows.setdefault((r["seed"], r["seed"]), (float(r["accuracy"]),
                        "results/exp1_cnn_authors (code before f5f64a0)"))
out = csv.writer(sys.stdout, delimiter="\t", lineterminator="\n")
out.writerow(["data", "training_seed", "accuracy", "source"])
for (data, seed), (acc, source) in sorted(rows.items()):
    out.writerow([data if data == "authors" else f"build seed {data}", seed, f"{acc:.4f}",
                  source])
