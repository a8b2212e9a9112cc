"""The one aggregation path on committed results: ``results/exp1_cnn_authors/results.tsv``
aggregates to a summary whose values match an independent computation from its rows, and a
re-aggregation of the written ``results.tsv`` gives the same files."""

import csv
import math
from collections import defaultdict
from pathlib import Path

import pytest
from scipy.stats import spearmanr

from fairseq_entropy.analysis import figures, report
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


def test_figures_draw_one_checkpoint_when_there_is_no_last(tmp_path, monkeypatch):
    """Only best and test-loss scores: the figures draw the best checkpoint (the fixed order
    last, best, test-loss) and say so; test-loss stays in the tables."""
    import json
    given = []

    def keep(cells, paper_rows, name, path, *args, title=None, **kwargs):
        given.append((name, list(cells), title))
        return Path(path)

    monkeypatch.setattr(report, "plot_figure", keep)
    runs = tmp_path / "runs"
    for level, bits, best, test_loss in (("entropy_0.0", 0.0, 0.1, 0.0),
                                         ("entropy_1.5", 1.5, 0.9, 0.2),
                                         ("entropy_3.0", 3.0, 0.95, 0.3)):
        for seed in (1, 2):
            for ckpt, acc in (("best", best), ("test-loss", test_loss)):
                d = runs / f"seed{seed}" / level / ckpt
                d.mkdir(parents=True)
                (d / "score.json").write_text(json.dumps({
                    "experiment": "exp1", "preset": "exp1_fconv", "model": "cnn",
                    "n_train": 6000, "level": level, "entropy_bits": bits,
                    "checkpoint": ckpt, "seed": seed, "data_seed": 1, "accuracy": acc}))
    res = aggregate([runs], tmp_path / "out")
    assert [name for name, _, _ in given] == ["exp1", "overview"]
    for name, cells, title in given:
        assert {c["checkpoint"] for c in cells} == {"best"}
        assert [(c["level"], c["mean"]) for c in cells] == [
            ("entropy_0.0", pytest.approx(0.1)), ("entropy_1.5", pytest.approx(0.9)),
            ("entropy_3.0", pytest.approx(0.95))]
        # one line in its panel, of three cells
        assert [len(line) for line in figures.lines_of(cells).values()] == [3]
    assert given[1][2] == "Accuracy against entropy, every curve (best checkpoint)"
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Figures: the best checkpoint; the tables below also hold the test-loss " \
        "checkpoint(s), not drawn." in md
    assert {r["checkpoint"] for r in read_tsv(res["summary"])} == {"best", "test-loss"}


def test_a_panel_of_two_checkpoints_is_two_lines():
    """Cells of two checkpoints handed to the figure function are never one line."""
    cells = [{"experiment": "exp1", "model": "exp1_fconv", "train_size": 6000, "level": lvl,
              "checkpoint": ckpt, "schedule": "unknown", "entropy_bits": h, "mean": 0.5,
              "n": 1} for ckpt in ("test-loss", "best") for lvl, h in
             (("entropy_3.0", 3.0), ("entropy_0.0", 0.0))]
    lines = figures.lines_of(cells)
    assert [(key[-1], [c["entropy_bits"] for c in rs]) for key, rs in lines.items()] == [
        ("best", [0.0, 3.0]), ("test-loss", [0.0, 3.0])]
    assert figures.drawn_checkpoint(cells) == "best"
    assert figures.drawn_checkpoint(cells + [dict(cells[0], checkpoint="last")]) == "last"


def test_without_matplotlib_the_tables_and_report_are_written_and_figures_said_not_drawn(
        tmp_path, monkeypatch, capsys):
    from fairseq_entropy.analysis import report
    from fairseq_entropy.cli import main as cli

    monkeypatch.setattr(report, "matplotlib_available", lambda: False)
    assert cli(["aggregate", str(COMMITTED), "--out", str(tmp_path / "agg")]) == 0
    out = capsys.readouterr().out
    assert f"figures: {report.NOT_DRAWN}" in out and "plot:" not in out
    assert sorted(p.name for p in (tmp_path / "agg").iterdir()) == \
        ["curves.tsv", "report.md", "results.tsv", "summary.tsv"]
    assert f"Figures: {report.NOT_DRAWN}" in (tmp_path / "agg" / "report.md").read_text()
    # the same tables as with matplotlib
    monkeypatch.undo()
    res = aggregate([COMMITTED], tmp_path / "drawn")
    for name in ("summary.tsv", "curves.tsv"):
        assert (tmp_path / "agg" / name).read_text() == (tmp_path / "drawn" / name).read_text()
    assert res["not_drawn"] is None and res["plot"].is_file()
