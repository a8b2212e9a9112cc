"""Seed statistics, H50, agreement with the paper and the report (analysis/statistics.py,
analysis/report.py)."""
import math

import numpy as np
import pytest

from fairseq_entropy.analysis import statistics as st
from fairseq_entropy.analysis.report import write_report
from fairseq_entropy.analysis.paper import paper_results

LEVELS = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]


def rows_of(curves_by_seed, model="cnn", experiment="exp1", checkpoint="last"):
    """Result rows from {seed: [accuracy per level of LEVELS]}."""
    return [{"experiment": experiment, "model": model, "seed": seed,
             "level": f"entropy_{h}", "entropy_bits": h, "accuracy": acc,
             "checkpoint": checkpoint}
            for seed, accs in curves_by_seed.items() for h, acc in zip(LEVELS, accs)]


def test_cell_mean_std_and_ci_by_hand():
    rows = rows_of({1: [0.5] * 7, 2: [0.7] * 7})
    cells = st.cell_statistics(rows)
    assert len(cells) == 7
    c = cells[0]
    assert c["mean"] == pytest.approx(0.6) and c["n"] == 2
    assert c["std"] == pytest.approx(math.sqrt(2 * 0.1 ** 2 / 1))  # sample std, ddof 1
    # the bootstrap means of two values are 0.5, 0.6 or 0.7: the 95% interval is [0.5, 0.7]
    assert c["ci_low"] == pytest.approx(0.5) and c["ci_high"] == pytest.approx(0.7)


def test_ci_of_one_seed_is_nan_and_said_so():
    cells = st.cell_statistics(rows_of({1: [0.3] * 7}))
    assert all(math.isnan(c["ci_low"]) and math.isnan(c["std"]) for c in cells)
    assert cells[0]["note"] == "one seed: no std, no CI"
    assert st.bootstrap_mean_ci([0.4, 0.4, 0.4]) == (0.4, 0.4)


def test_bootstrap_ci_brackets_the_mean_inside_the_data_range():
    low, high = st.bootstrap_mean_ci([0.2, 0.4, 0.6, 0.8, 1.0])
    assert 0.2 <= low < 0.6 < high <= 1.0
    assert (low, high) == st.bootstrap_mean_ci([0.2, 0.4, 0.6, 0.8, 1.0])  # fixed seed


def test_h50_of_an_exact_logistic_curve():
    acc = st.logistic(LEVELS, 4.0, 1.25)
    assert st.fit_h50(LEVELS, acc) == pytest.approx(1.25, abs=1e-4)
    assert st.spearman_rho(LEVELS, list(acc)) == pytest.approx(1.0)


def test_h50_ci_over_seeds_with_a_known_crossing():
    # five seeds whose own curves cross 0.5 at 1.0 ... 1.5; the mean curve crosses near 1.25
    curves = {s: list(st.logistic(LEVELS, 5.0, h)) for s, h in
              zip((830, 231, 42, 9876, 2), (1.0, 1.1, 1.25, 1.4, 1.5))}
    (curve,) = [c for c in st.curve_statistics(rows_of(curves))]
    assert curve["seeds"] == 5 and curve["levels"] == 7
    assert curve["h50"] == pytest.approx(1.25, abs=0.02)
    assert 0.95 <= curve["h50_ci_low"] < 1.25 < curve["h50_ci_high"] <= 1.55
    assert curve["rho"] == pytest.approx(1.0)


def test_h50_is_nan_when_the_curve_never_crosses():
    flat = {1: [0.97, 0.96, 0.98, 0.95, 0.97, 0.96, 0.95], 2: [0.95] * 7}
    (curve,) = st.curve_statistics(rows_of(flat, model="equivariant"))
    assert math.isnan(curve["h50"])
    assert "no 0.5 crossing" in curve["note"]


def test_agreement_rule():
    assert st.agrees(0.75, 0.70, 0.02)          # within the 0.10 floor
    assert st.agrees(0.75, 0.50, 0.20)          # within 2 std = 0.40
    assert not st.agrees(0.30, 0.50, 0.05)      # 0.20 away, tolerance 0.10
    assert st.agrees(0.60, 0.50, 0.0)           # exactly at the floor
    assert not st.agrees(0.10, 0.50, 0.15)      # 0.40 away, tolerance 0.30


def test_agreement_table_against_the_packaged_paper_values():
    # paper: exp1 cnn, N = 6000, 3.0 bits: 0.984921 +- 0.020265 -> tolerance 0.10
    rows = [{"experiment": "exp1", "model": "cnn", "seed": s, "level": "entropy_3.0",
             "entropy_bits": 3.0, "accuracy": a, "checkpoint": "last", "train_size": 6000}
            for s, a in ((1, 0.90), (2, 0.90))]
    (cell,) = st.agreement_table(st.cell_statistics(rows), paper_results())
    assert cell["paper_mean"] == pytest.approx(0.984921)
    assert cell["tolerance"] == pytest.approx(0.10)
    assert cell["diff"] == pytest.approx(0.90 - 0.984921)
    assert cell["agree"] == "yes"
    rows = [dict(r, accuracy=0.88) for r in rows]
    assert st.agreement_table(st.cell_statistics(rows), paper_results())[0]["agree"] == "no"
    # a model the paper did not train has no paper value
    rows = [dict(r, model="transformer_learned") for r in rows]
    assert st.agreement_table(st.cell_statistics(rows), paper_results())[0]["agree"] == "n/a"


def test_report_files(tmp_path):
    curves = {s: list(np.clip(st.logistic(LEVELS, 4.0, 1.8) + d, 0, 1))
              for s, d in ((1, -0.03), (2, 0.0), (3, 0.03))}
    paths = write_report(rows_of(curves), tmp_path, command="fairseq-entropy aggregate runs")
    summary = (tmp_path / "summary.tsv").read_text().splitlines()
    header = summary[0].split("\t")
    assert header[:12] == ["experiment", "preset", "n_train", "checkpoint", "schedule",
                           "updates", "preset_max_update", "level", "entropy_bits", "mean",
                           "std", "n"]
    assert {"ci_low", "ci_high", "paper_mean", "agree"} <= set(header)
    assert len(summary) == 1 + 7
    first = dict(zip(header, summary[1].split("\t")))
    assert first["paper_mean"] == "0.000000" and first["n"] == "3"
    assert [p.name for p in paths["figures"]] == ["fig_exp1.png"]
    assert (tmp_path / "fig_exp1.png").stat().st_size > 10_000
    md = (tmp_path / "report.md").read_text()
    assert "![exp1](fig_exp1.png)" in md and "| exp1 | cnn |" in md
    assert "fairseq-entropy aggregate runs" in md
    curves_tsv = (tmp_path / "curves.tsv").read_text().splitlines()
    assert len(curves_tsv) == 2 and curves_tsv[1].startswith("exp1\tcnn\t\tlast\tunknown\t7\t3\t")


def test_figure_legend_names_the_seed_count_per_level_when_it_varies(tmp_path, monkeypatch):
    import matplotlib.axes

    from fairseq_entropy.analysis.figures import plot_figure

    labels = []
    real = matplotlib.axes.Axes.errorbar

    def spy(self, *args, **kwargs):
        labels.append(kwargs.get("label"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", spy)

    def cell(bits, n, model="cnn"):
        return {"model": model, "experiment": "exp1", "train_size": 6000, "checkpoint": "last",
                "entropy_bits": bits,
                "mean": bits / 3, "ci_low": math.nan, "ci_high": math.nan, "n": n}

    cells = [cell(0.0, 1), cell(1.0, 2), cell(3.0, 1), cell(0.0, 3, "rnn"), cell(3.0, 3, "rnn")]
    assert plot_figure(cells, [], "exp1", tmp_path / "f.png").exists()
    # no cell has a CI (ci_low is NaN): the legend claims none
    assert labels == ["ours, 1-2 seeds per level", "ours, 3 seeds"]
