"""The one aggregation path on committed results: ``results/exp1_cnn_authors/results.tsv``
aggregates to a summary whose values match an independent computation from its rows, and a
re-aggregation of the written ``results.tsv`` gives the same files."""

import csv
import math
from collections import defaultdict
from pathlib import Path

import pytest
from scipy.stats import spearmanr

from fairseq_entropy.analysis.aggregate import aggregate

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "results/exp1_cnn_authors/results.tsv"


def read_tsv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


@pytest.fixture(scope="module")
def aggregated(tmp_path_factory):
    out = tmp_path_factory.mktemp("agg")
    res = aggregate([COMMITTED], out / "first")
    again = aggregate([out / "first" / "results.tsv"], out / "second")
    return res, again, out


def test_summary_matches_the_rows_computed_independently(aggregated):
    _, _, out = aggregated
    cells = defaultdict(list)
    for r in read_tsv(COMMITTED):
        cells[(r["preset"], int(r["n_train"]), r["checkpoint"], r["level"])].append(
            (float(r["accuracy"]), float(r["entropy_bits"])))
    summary = read_tsv(out / "first" / "summary.tsv")
    assert len(summary) == len(cells) == 14
    for s in summary:
        got = cells[(s["preset"], int(s["n_train"]), s["checkpoint"], s["level"])]
        accs = [a for a, _ in got]
        mean = sum(accs) / len(accs)
        std = math.sqrt(sum((a - mean) ** 2 for a in accs) / (len(accs) - 1))
        assert int(s["n"]) == len(accs) == 3
        assert float(s["mean"]) == pytest.approx(mean, abs=1e-6)
        assert float(s["std"]) == pytest.approx(std, abs=1e-6)
        assert float(s["entropy_bits"]) == pytest.approx(got[0][1], abs=1e-6)
        assert float(s["ci_low"]) <= float(s["mean"]) <= float(s["ci_high"])


def test_spearman_matches_scipy_on_the_level_means(aggregated):
    res, _, out = aggregated
    curves = defaultdict(dict)
    for r in read_tsv(COMMITTED):
        curves[r["checkpoint"]].setdefault(float(r["entropy_bits"]), []).append(
            float(r["accuracy"]))
    by_ckpt = {c["checkpoint"]: c for c in read_tsv(out / "first" / "curves.tsv")}
    assert set(by_ckpt) == set(curves) == {"best", "last"}
    for ckpt, levels in curves.items():
        hs = sorted(levels)
        rho = spearmanr(hs, [sum(levels[h]) / len(levels[h]) for h in hs]).statistic
        assert float(by_ckpt[ckpt]["rho"]) == pytest.approx(rho, abs=1e-6)
        # committed results predate the schedule record: their schedule is "unknown"
        key = ("exp1", "exp1_cnn_authors", 6000, ckpt, "unknown")
        assert res["spearman"][key] == pytest.approx(rho)


def test_reaggregation_is_stable(aggregated):
    res, again, out = aggregated
    for name in ("results.tsv", "summary.tsv", "curves.tsv"):
        assert (out / "first" / name).read_text() == (out / "second" / name).read_text(), name
    assert res["table"] == again["table"]
    assert res["spearman"] == again["spearman"]
    assert res["agreement"] == again["agreement"]
    assert (out / "first" / "accuracy_vs_entropy.png").read_bytes()[:4] == b"\x89PNG"
