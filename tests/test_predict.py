"""The model of the entropy curve (analysis/statistics.py fit_logistic and its bootstrap,
analysis/prediction.py) and ``fairseq-entropy predict``."""
import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import brentq

from fairseq_entropy.analysis import prediction
from fairseq_entropy.analysis import statistics as st
from fairseq_entropy.analysis.report import write_report
from fairseq_entropy.cli import main

REPO = Path(__file__).resolve().parents[1]
CNN = REPO / "results" / "exp1_cnn_authors" / "results.tsv"
MEASURES = REPO / "fairseq_entropy" / "analysis" / "split_measures.tsv"
LEVELS = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]


def rows_of(curves, model="cnn", experiment="exp1", checkpoint="last", levels=LEVELS):
    """Result rows from a (seeds, levels) array of accuracies."""
    return [{"experiment": experiment, "model": model, "preset": model, "seed": s,
             "level": f"entropy_{h}", "entropy_bits": h, "accuracy": float(a),
             "checkpoint": checkpoint, "n_train": 6000}
            for s, accs in enumerate(curves, start=1) for h, a in zip(levels, accs)]


def seed_population(k, h50, spread, n_seeds, rng):
    """Per-seed curves: the logistic (k, h50 + e), e ~ N(0, spread), plus N(0, 0.02) noise."""
    shifts = rng.normal(0.0, spread, n_seeds)
    return np.clip([st.logistic(LEVELS, k, h50 + e) + rng.normal(0, 0.02, len(LEVELS))
                    for e in shifts], 0.0, 1.0)


# ------------------------------------------------------------------------------ the fit
def test_fit_recovers_a_known_logistic_from_noisy_points():
    rng = np.random.default_rng(3)
    h = np.linspace(0, 3, 13)
    acc = st.logistic(h, 3.5, 1.6) + rng.normal(0, 0.01, len(h))
    k, h50 = st.fit_logistic(h, acc)
    assert k == pytest.approx(3.5, rel=0.08)
    assert h50 == pytest.approx(1.6, abs=0.03)
    # H90 by hand: 1/(1 + exp(-3.5 (H - 1.6))) = 0.9  <=>  H = 1.6 + ln 9 / 3.5
    assert st.h90_in_range(k, h50, h) == pytest.approx(1.6 + math.log(9) / 3.5, abs=0.05)
    assert st.fit_h50(h, acc) == h50


def test_entropy_at_inverts_the_logistic_and_h90_outside_the_levels_is_nan():
    assert float(st.logistic(st.entropy_at(2.0, 1.0, 0.9), 2.0, 1.0)) == pytest.approx(0.9)
    assert st.entropy_at(2.0, 1.0, 0.5) == 1.0
    # k = 1, H50 = 2.5: H90 = 2.5 + ln 9 = 4.70 lies beyond the 3-bit levels
    assert math.isnan(st.h90_in_range(1.0, 2.5, LEVELS))
    assert math.isnan(st.h90_in_range(st.NAN, st.NAN, LEVELS))


def test_leave_one_level_out_of_an_exact_logistic_has_no_error():
    means = list(st.logistic(LEVELS, 3.0, 1.5))
    loo = prediction.leave_one_level_out(LEVELS, means)
    assert [x["entropy_bits"] for x in loo] == LEVELS
    assert max(abs(x["error"]) for x in loo) < 1e-4
    assert loo[3]["measured"] == pytest.approx(0.5)


def test_leave_one_level_out_error_is_the_refit_prediction_minus_the_level():
    means = [0.02, 0.05, 0.1, 0.3, 0.45, 0.8, 0.97]
    loo = prediction.leave_one_level_out(LEVELS, means)
    k, h50 = st.fit_logistic(LEVELS[:4] + LEVELS[5:], means[:4] + means[5:])
    assert loo[4]["predicted"] == pytest.approx(float(st.logistic(2.0, k, h50)))
    assert loo[4]["error"] == pytest.approx(loo[4]["predicted"] - 0.45)


@pytest.mark.parametrize("rng_seed", [11, 12])
def test_bootstrap_intervals_contain_the_population_values(rng_seed):
    k, h50, spread = 3.0, 1.5, 0.1
    curves = seed_population(k, h50, spread, 8, np.random.default_rng(rng_seed))
    boot = st.logistic_bootstrap(curves, LEVELS)
    # the population's mean curve, over the seeds' shifts (Gauss-Hermite, 40 nodes)
    x, w = np.polynomial.hermite_e.hermegauss(40)
    w = w / w.sum()

    def population(h):
        return float(np.sum(w * st.logistic(h, k, h50 + spread * x)))
    true_h50 = brentq(lambda h: population(h) - 0.5, 0, 3)
    true_h90 = brentq(lambda h: population(h) - 0.9, 0, 3)
    assert true_h50 == pytest.approx(1.5)  # symmetric shifts: the crossing stays
    assert boot["h50_ci"][0] < true_h50 < boot["h50_ci"][1]
    assert boot["h90_ci"][0] < true_h90 < boot["h90_ci"][1]
    assert boot["params"].shape == (st.N_RESAMPLES // 4, 2)
    low, high = st.logistic_band(boot["params"], [1.0, 1.5, 2.0])
    assert all(lo < population(h) < hi for h, lo, hi in zip([1.0, 1.5, 2.0], low, high))


def test_bootstrap_of_one_seed_has_no_interval():
    boot = st.logistic_bootstrap(np.array([st.logistic(LEVELS, 3.0, 1.5)]), LEVELS)
    assert math.isnan(boot["h50_ci"][0]) and boot["params"].shape == (0, 2)
    assert all(math.isnan(v) for v in st.logistic_band(boot["params"], [1.0])[0])


def test_curve_statistics_and_the_report_carry_h90():
    curves = [st.logistic(LEVELS, 3.0, 1.5 + d) for d in (-0.1, 0.0, 0.1)]
    (c,) = st.curve_statistics(rows_of(curves))
    assert c["h90"] == pytest.approx(brentq(
        lambda h: np.mean([st.logistic(h, 3.0, 1.5 + d) for d in (-0.1, 0.0, 0.1)]) - 0.9,
        0, 3), abs=0.01)
    assert c["h90_ci_low"] <= c["h90"] <= c["h90_ci_high"]
    assert len(c["fit"]["x"]) == st.FIT_POINTS and c["fit"]["x"][0] == 0.0


def test_write_report_writes_h90_in_curves_tsv_and_report_md(tmp_path):
    curves = [st.logistic(LEVELS, 3.0, 1.5 + d) for d in (-0.1, 0.0, 0.1)]
    write_report(rows_of(curves), tmp_path, paper_rows=[])
    (rec,) = csv.DictReader(open(tmp_path / "curves.tsv"), delimiter="\t")
    assert float(rec["h90"]) == pytest.approx(1.5 + math.log(9) / 3.0, abs=0.05)
    assert float(rec["k"]) > 0
    assert "H90 (bits)" in (tmp_path / "report.md").read_text()


# -------------------------------------------------------------- the slot entropy of a split
def test_addprim_jump_is_predicted_at_the_first_slot_where_jump_was_seen():
    s = prediction.split_entropy(MEASURES, "addprim_jump")
    assert (s["word"], s["held_out_slot"], s["seen_slot"]) == ("jump", "second", "first")
    assert s["entropy_bits"] == pytest.approx(2.2663)      # H_verb_first of the train file
    assert s["held_out_bits"] == pytest.approx(1.9970)
    assert s["source"] == f"{MEASURES}:4"


@pytest.mark.parametrize("split,results", [
    ("exp1/entropy_1.5", "exp1_cnn_authors"), ("exp1/entropy_3.0", "exp1_cnn_authors"),
    ("exp2/support_8", "exp2_cnn_authors")])
def test_the_same_rule_gives_back_the_levels_entropy(split, results):
    """The curves' x-axis is the entropy of the slot the held-out verb was seen in."""
    level = split.split("/")[1]
    bits = {r["level"]: float(r["entropy_bits"]) for r in csv.DictReader(
        open(REPO / "results" / results / "results.tsv"), delimiter="\t")}
    assert prediction.split_entropy(MEASURES, split)["entropy_bits"] == pytest.approx(bits[level],
                                                                               abs=1e-3)


@pytest.mark.parametrize("split,text", [("length", "holds out no (verb, slot) pair"),
                                        ("exp1/entropy_0.0", "holds out 8"),
                                        ("nosuch", "no training and test rows")])
def test_a_split_without_one_held_out_slot_is_refused(split, text):
    with pytest.raises(prediction.FitError, match="--split") as e:
        prediction.split_entropy(MEASURES, split)
    assert text in str(e.value) and "Fix:" in str(e.value)


# ---------------------------------------------------------------------------- the command
def cnn_means():
    """Mean accuracy per level of the committed CNN curve (last checkpoint), by hand."""
    acc = {}
    for r in csv.DictReader(open(CNN), delimiter="\t"):
        if r["checkpoint"] == "last":
            acc.setdefault(float(r["entropy_bits"]), []).append(float(r["accuracy"]))
    levels = sorted(acc)
    return levels, [sum(acc[h]) / len(acc[h]) for h in levels]


def synthetic_score(run_dir: Path, accuracy: float, preset="exp1_cnn_authors",
                    model="cnn_authors") -> Path:
    """A score.json of a SCAN run as ``score`` writes its fields (only those predict reads)."""
    path = run_dir / "last" / "score.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({
        "experiment": "scan", "preset": preset, "model": model, "n_train": 13936,
        "level": "scan_jump", "entropy_bits": 1.997, "checkpoint": "last", "seed": 1,
        "accuracy": accuracy}))
    return path


def run_cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("form", ["run_dir", "score_json"])
def test_predict_addprim_jump_against_a_synthetic_measured_run(form, tmp_path, capsys):
    score = synthetic_score(tmp_path / "run", 0.25)
    measured = tmp_path / "run" if form == "run_dir" else score
    code, out, err = run_cli(["predict", str(CNN), "--split", "addprim_jump", "--split-measures",
                              str(MEASURES), "--measured-accuracy", str(measured), "--json"],
                             capsys)
    assert code == 0, err
    rec = json.loads(out)
    assert rec["target"]["entropy_bits"] == pytest.approx(2.2663)
    (c,) = rec["curves"]
    levels, means = cnn_means()
    k, h50 = st.fit_logistic(levels, means)
    predicted = 1 / (1 + math.exp(-k * (2.2663 - h50)))
    assert c["predicted"] == pytest.approx(predicted)
    assert c["measured"]["mean"] == 0.25 and c["measured"]["n"] == 1
    assert c["difference"] == pytest.approx(0.25 - predicted)
    assert c["inside"] == "no" and c["predicted_ci_low"] <= predicted <= c["predicted_ci_high"]
    assert c["h50"] == pytest.approx(h50) and len(c["loo"]) == 7
    assert c["loo_mae"] == pytest.approx(np.mean([abs(x["error"]) for x in c["loo"]]))


def test_predict_split_reads_the_packaged_measures_from_any_directory(tmp_path, capsys,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)  # no results/ here
    code, out, err = run_cli(["predict", str(CNN), "--split", "addprim_jump", "--json"],
                             capsys)
    assert code == 0, err
    rec = json.loads(out)
    assert rec["target"]["entropy_bits"] == pytest.approx(2.2663)
    assert rec["target"]["source"] == f"{MEASURES}:4"


def test_predict_prints_a_table_a_tsv_and_a_plot(tmp_path, capsys):
    synthetic_score(tmp_path / "run", 0.65)
    base = ["predict", str(CNN), "--entropy", "2.2663", "--measured-accuracy",
            str(tmp_path / "run")]
    code, out, err = run_cli(base + ["--plot", str(tmp_path / "p.png")], capsys)
    assert code == 0, err
    assert "H50 = 2.035 bits" in out and "mean absolute error" in out
    assert "inside the interval: yes" in out and (tmp_path / "p.png").stat().st_size > 0
    assert err == f"figure: {tmp_path / 'p.png'}\n"
    code, out, err = run_cli(base + ["--plot", str(tmp_path / "p.txt")], capsys)
    assert code == 2 and "--plot" in err and "ending in .png" in err
    assert not (tmp_path / "p.txt").exists()
    code, out, err = run_cli(base + ["--tsv"], capsys)
    rows = list(csv.DictReader(out.splitlines(), delimiter="\t"))
    assert code == 0 and tuple(rows[0]) == prediction.TSV_COLUMNS and len(rows) == 7
    assert [r["level"] for r in rows] == [f"entropy_{h}" for h in
                                          ("0.0", "0.5", "1.0", "1.5", "2.0", "2.5", "3.0")]
    assert {r["measured"] for r in rows} == {"0.650000"}


def test_a_scan_preset_of_the_same_model_is_compared_by_model(tmp_path, capsys):
    """A SCAN run needs a preset of the scan experiment (e.g. one that extends
    exp1_cnn_authors): its model names the curve it is compared with."""
    synthetic_score(tmp_path / "run", 0.6, preset="scan_cnn_authors")
    code, out, err = run_cli(["predict", str(CNN), "--entropy", "2.2663", "--measured-accuracy",
                              str(tmp_path / "run"), "--json"], capsys)
    assert code == 0, err
    (c,) = json.loads(out)["curves"]
    assert c["measured"]["matched_by"] == "model" and c["measured"]["preset"] == \
        "scan_cnn_authors"
    assert c["difference"] == pytest.approx(0.6 - c["predicted"])


def _header_only(tmp_path):
    p = tmp_path / "empty.tsv"
    p.write_text(CNN.read_text().splitlines()[0] + "\n")
    return p


def _one_level(tmp_path):
    p = tmp_path / "one.tsv"
    lines = CNN.read_text().splitlines()
    p.write_text("\n".join([lines[0]] + [ln for ln in lines if "entropy_3.0" in ln]) + "\n")
    return p


@pytest.mark.parametrize("make,args,text", [
    (lambda t: t / "nosuch.tsv", [], "not found"),
    (_header_only, [], "no result rows"),
    (_one_level, [], "fewer than 3 levels"),
    (lambda t: CNN, ["--measured-accuracy", "{t}/other"], "have no curve here"),
    (lambda t: CNN, ["--measured-accuracy", "{t}/other/last/score.json"],
     "no prediction to compare"),
    (lambda t: CNN, ["--split", "addprim_jump", "--entropy", "2"], "both give"),
    (lambda t: CNN, ["--json", "--tsv"], "one output format"),
])
def test_bad_input_exits_2_with_one_line(make, args, text, tmp_path, capsys):
    synthetic_score(tmp_path / "other", 0.5, preset="exp1_transformer_sinusoidal",
                    model="transformer")
    argv = ["predict", str(make(tmp_path)), "--split-measures", str(MEASURES),
            *[a.format(t=tmp_path) for a in args]]
    if "--measured-accuracy" in args and "no prediction" not in text:
        argv += ["--split", "addprim_jump"]
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "error:" in err and "Fix:" in err and text in err, err
