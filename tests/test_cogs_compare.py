"""The COGS comparison study (studies/cogs_slot_entropy/compare.py): published
accuracies per case beside slot entropy, and Spearman's rho with its exact permutation p."""

import csv
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "studies" / "cogs_slot_entropy"
COGS_CASES = 21


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("cogs_compare", STUDY / "compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spearman_of_a_monotone_sample_and_its_exact_p(compare):
    # 5 pairs in the same order: rho = 1; of the 5! = 120 pairings, the identity and the
    # reversal reach |rho| = 1, so the exact two-sided p is 2/120.
    rho, p = compare.spearman_permutation([1, 2, 3, 4, 5], [0.1, 0.2, 0.5, 0.7, 0.9])
    assert rho == pytest.approx(1.0)
    assert p == pytest.approx(2 / 120)
    rho, p = compare.spearman_permutation([1, 1, 1], [0.1, 0.2, 0.3])  # constant side
    assert rho != rho and p != p


def test_published_table_has_every_case_of_each_model_and_a_citation(compare):
    acc, cite = compare.published_table()
    assert set(acc) == set(compare.PUBLISHED) == set(cite)
    for column, cases in acc.items():
        assert len(cases) == COGS_CASES, column
        assert all(0 <= v <= 1 for v in cases.values())
        assert "github.com/ekinakyurek/lexical@3956fa2" in cite[column]


def write_entropy(tmp_path) -> Path:
    """Three lexical cases (two seen only as primitives) and one structural case."""
    entropy = tmp_path / "gen.tsv"
    rows = [("prim_to_subj_proper", "lexical", "word@primitive", "7.0", "5.0"),
            ("subj_to_obj_proper", "lexical", "agent@subject", "5.0", "4.0"),
            ("prim_to_obj_proper", "lexical", "word@primitive", "6.0", "4.5"),
            ("pp_recursion", "structural", "", "", "")]
    with open(entropy, "w") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["case", "type", "word", "held_out_slot", "seen_slot",
                    "seen_slot_entropy_bits", "tested_slot_entropy_bits"])
        for case, kind, slot, seen, tested in rows:
            w.writerow([case, kind, "w", "s", slot, seen, tested])
    return entropy


def write_logs(compare, tmp_path) -> Path:
    """Wu et al.'s four logs, two seeds each, in percent."""
    logs = tmp_path / "logs"
    logs.mkdir()
    # two seeds in percent: the study's mean is their average as a fraction
    per_seed = [{"prim_to_subj_proper": 90.0, "subj_to_obj_proper": 10.0,
                 "prim_to_obj_proper": 50.0, "pp_recursion": 0.0, "overall_acc": 1.0},
                {"prim_to_subj_proper": 100.0, "subj_to_obj_proper": 30.0,
                 "prim_to_obj_proper": 70.0, "pp_recursion": 2.0, "overall_acc": 1.0}]
    for name in compare.LOGS:
        (logs / name).write_text(json.dumps({f"{s}_x": r for s, r in zip((1, 2), per_seed)}))
    return logs


def test_comparison_puts_each_source_beside_the_entropies(compare, tmp_path):
    out = tmp_path / "out"
    compare.main(write_entropy(tmp_path), write_logs(compare, tmp_path), out)
    table = {r["case"]: r for r in csv.DictReader(open(out / "comparison.tsv"), delimiter="\t")}
    assert table["prim_to_subj_proper"]["wu2023_lstm_cogs"] == "0.9500"
    assert table["subj_to_obj_proper"]["wu2023_lstm_cogs"] == "0.2000"
    published, _ = compare.published_table()
    assert float(table["pp_recursion"]["akyurek2021_lstm"]) == pytest.approx(
        published["akyurek2021_lstm"]["pp_recursion"])
    spearman = {(r["model"], r["entropy"], r["cases"]): r
                for r in csv.DictReader(open(out / "spearman.tsv"), delimiter="\t")}
    # seen entropy 7, 5, 6 against accuracy .95, .20, .60: the same order, rho = 1 over the 3
    # lexical cases; exact p = 2/6 (identity and reversal of 3! pairings)
    r = spearman[("wu2023_lstm_cogs", "seen_slot_entropy_bits", "all")]
    assert (r["lexical_cases"], r["rho"], r["p_permutation"]) == ("3", "1.0000", "0.3333")
    # without the two words seen only as primitives one case is left: no rho
    r = spearman[("wu2023_lstm_cogs", "seen_slot_entropy_bits", "seen_in_a_sentence")]
    assert (r["lexical_cases"], r["rho"], r["p_permutation"]) == ("1", "", "")
    sources = {r["column"] for r in csv.DictReader(open(out / "sources.tsv"), delimiter="\t")}
    assert sources == {*(c for c, _ in compare.LOGS.values()), *compare.PUBLISHED}


def test_a_runs_cases_tsv_adds_its_gen_cases_at_the_last_checkpoint(compare, tmp_path):
    """A cases.tsv of `fairseq-entropy aggregate` (its CASE_COLUMNS) adds one column per
    preset and level: the gen split's cases at the last checkpoint, not the test split, the
    best checkpoint or the per-type rows."""
    from fairseq_entropy.analysis.cases import CASE_COLUMNS

    key = {"experiment": "cogs+gen", "preset": "p", "level": "vf", "checkpoint": "last",
           "schedule": "s", "split": "gen", "seeds": "2", "n": "2000", "std": "0.1",
           "min": "0", "max": "1"}
    rows = [dict(key, case="prim_to_subj_proper", type="lexical", mean="0.2"),
            dict(key, case="subj_to_obj_proper", type="lexical", mean="0.9"),
            dict(key, case="prim_to_obj_proper", type="lexical", mean="0.5"),
            dict(key, case="type:lexical", type="lexical", mean="0.5"),
            dict(key, case="prim_to_subj_proper", type="lexical", mean="0.99",
                 checkpoint="best"),
            dict(key, case="in_distribution", type="in_distribution", mean="1.0",
                 split="test", experiment="cogs")]
    cases = tmp_path / "cases.tsv"
    with open(cases, "w") as f:
        w = csv.DictWriter(f, CASE_COLUMNS, delimiter="\t", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "out"
    compare.main(write_entropy(tmp_path), write_logs(compare, tmp_path), out, cases)
    table = {r["case"]: r for r in csv.DictReader(open(out / "comparison.tsv"), delimiter="\t")}
    assert [table[c]["ours_p_vf"] for c in ("prim_to_subj_proper", "subj_to_obj_proper",
                                            "prim_to_obj_proper", "pp_recursion")] == \
        ["0.2000", "0.9000", "0.5000", ""]
    # seen entropy 7, 5, 6 against accuracy .2, .9, .5: reversed order, rho = -1, p = 2/6
    spearman = {(r["model"], r["entropy"], r["cases"]): r
                for r in csv.DictReader(open(out / "spearman.tsv"), delimiter="\t")}
    r = spearman[("ours_p_vf", "seen_slot_entropy_bits", "all")]
    assert (r["lexical_cases"], r["rho"], r["p_permutation"]) == ("3", "-1.0000", "0.3333")
    sources = {r["column"]: r["source"]
               for r in csv.DictReader(open(out / "sources.tsv"), delimiter="\t")}
    assert sources["ours_p_vf"] == f"this product: {cases}, seeds 2, last checkpoint"
