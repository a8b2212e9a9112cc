"""COGS: slots of hand-written sentences in both logical-form formats, slot counts and
entropies per case against hand computation, per-case scoring and its aggregation over seeds,
binarize --format cogs, and the file:line errors of bad rows."""

import json
import math

import pytest

from fairseq_entropy.analysis.cases import case_rows
from fairseq_entropy.analysis.scoring import write_score
from fairseq_entropy.cli import main
from fairseq_entropy.cogs.data import CASE_TYPES, CogsExample, case_type, read_cogs_tsv
from fairseq_entropy.cogs.measure import measure_cogs, slot_word_counts
from fairseq_entropy.cogs.slots import occurrences
from fairseq_entropy.errors import DataFormatError, UserError

# (sentence, original LF, variable-free LF)
ATE = ("A cat ate the cake .",
       "* cake ( x _ 4 ) ; eat . agent ( x _ 2 , x _ 1 ) AND eat . theme ( x _ 2 , x _ 4 ) "
       "AND cat ( x _ 1 )",
       "eat ( agent = cat , theme = * cake )")
DOG = ("The dog ate a cake .",
       "* dog ( x _ 1 ) ; eat . agent ( x _ 2 , x _ 1 ) AND eat . theme ( x _ 2 , x _ 4 ) "
       "AND cake ( x _ 4 )",
       "eat ( agent = * dog , theme = cake )")
CAT_DOG = ("The cat ate a dog .",
           "* cat ( x _ 1 ) ; eat . agent ( x _ 2 , x _ 1 ) AND eat . theme ( x _ 2 , x _ 4 ) "
           "AND dog ( x _ 4 )",
           "eat ( agent = * cat , theme = dog )")
RAN = ("Emma ran .", "run . agent ( x _ 1 , Emma )", "run ( agent = Emma )")
PASSIVE = ("The cake was eaten by a cat .",
           "* cake ( x _ 1 ) ; eat . theme ( x _ 3 , x _ 1 ) AND eat . agent ( x _ 3 , x _ 6 ) "
           "AND cat ( x _ 6 )",
           "eat ( theme = * cake , agent = cat )")
PP_DATIVE = ("Emma gave a cake to the cat .",
             "* cat ( x _ 6 ) ; give . agent ( x _ 1 , Emma ) AND give . theme ( x _ 1 , x _ 3 ) "
             "AND give . recipient ( x _ 1 , x _ 6 ) AND cake ( x _ 3 )",
             "give ( agent = Emma , theme = cake , recipient = * cat )")
DO_DATIVE = ("Emma gave the cat a cake .",
             "* cat ( x _ 3 ) ; give . agent ( x _ 1 , Emma ) AND give . recipient ( x _ 1 , "
             "x _ 3 ) AND give . theme ( x _ 1 , x _ 5 ) AND cake ( x _ 5 )",
             "give ( agent = Emma , recipient = * cat , theme = cake )")
INFINITIVE = ("The cat wanted to run .",
              "* cat ( x _ 1 ) ; want . agent ( x _ 2 , x _ 1 ) AND want . xcomp ( x _ 2 , "
              "x _ 4 ) AND run . agent ( x _ 4 , x _ 1 )",
              "want ( agent = * cat , xcomp = run ( agent = * cat ) )")
PP = ("Emma ate the cake on a table .",
      "* cake ( x _ 3 ) ; eat . agent ( x _ 1 , Emma ) AND eat . theme ( x _ 1 , x _ 3 ) AND "
      "cake . nmod . on ( x _ 3 , x _ 6 ) AND table ( x _ 6 )",
      "eat ( agent = Emma , theme = * cake ( nmod . on = table ) )")
SHARK = ("shark", "LAMBDA a . shark ( a )", "LAMBDA a . shark ( a )")
PAULA = ("Paula", "Paula", "Paula")
# gen: the shark (a primitive in training) as a subject; Emma (a subject in training) as an
# object
GEN_SHARK = ("The shark ate a cake .",
             "* shark ( x _ 1 ) ; eat . agent ( x _ 2 , x _ 1 ) AND eat . theme ( x _ 2 , "
             "x _ 4 ) AND cake ( x _ 4 )",
             "eat ( agent = * shark , theme = cake )")
GEN_EMMA = ("A cat ate Emma .",
            "eat . agent ( x _ 2 , x _ 1 ) AND eat . theme ( x _ 2 , Emma ) AND cat ( x _ 1 )",
            "eat ( agent = cat , theme = Emma )")


def example(row, form):
    return CogsExample(row[0], row[1 if form == "original" else 2], "in_distribution", 1, "t")


def write(path, rows, form, cases=None):
    col = 1 if form == "original" else 2
    cases = cases or ["in_distribution"] * len(rows)
    path.write_text("".join(f"{r[0]}\t{r[col]}\t{c}\n" for r, c in zip(rows, cases)))
    return path


FORMS = ("original", "variable_free")


@pytest.mark.parametrize("form", FORMS)
def test_slots_of_each_construction(form):
    assert occurrences(example(ATE, form)) == [
        ("eat", "verb@active agent+theme"), ("cat", "agent@subject"), ("cake", "theme@object")]
    assert sorted(occurrences(example(PASSIVE, form))) == sorted([
        ("eat", "verb@passive agent+theme"), ("cake", "theme@subject"),
        ("cat", "agent@by_object")])
    assert sorted(occurrences(example(PP_DATIVE, form))) == sorted([
        ("give", "verb@active agent+recipient+theme pp_dative"), ("Emma", "agent@subject"),
        ("cake", "theme@object"), ("cat", "recipient@to_object")])
    assert sorted(occurrences(example(DO_DATIVE, form))) == sorted([
        ("give", "verb@active agent+recipient+theme do_dative"), ("Emma", "agent@subject"),
        ("cake", "theme@object"), ("cat", "recipient@object")])
    # the controller is counted once, for the outer verb
    assert sorted(occurrences(example(INFINITIVE, form))) == sorted([
        ("want", "verb@active agent"), ("cat", "agent@subject"),
        ("run", "verb@infinitive agent")])
    assert ("table", "pp_noun@object") in occurrences(example(PP, form))
    assert occurrences(example(SHARK, form)) == [("shark", "word@primitive")]


def report_of(tmp_path, form):
    train = [ATE, DOG, CAT_DOG, RAN, PASSIVE, SHARK, PAULA]
    write(tmp_path / "train.tsv", train, form)
    write(tmp_path / "gen.tsv", [GEN_SHARK, GEN_EMMA], form,
          ["prim_to_subj_common", "subj_to_obj_proper"])
    return measure_cogs(read_cogs_tsv(tmp_path / "train.tsv"),
                        read_cogs_tsv(tmp_path / "gen.tsv"))


def h(*counts):
    n = sum(counts)
    return -sum(c / n * math.log2(c / n) for c in counts)


@pytest.mark.parametrize("form", FORMS)
def test_slot_entropy_per_case_by_hand(tmp_path, form):
    rep = report_of(tmp_path, form)
    slots = rep["train"]["slots"]
    # agent@subject: cat (ATE, CAT_DOG), dog, Emma; theme@object: cake x2, dog
    assert slots["agent@subject"] == {"n": 4, "words": 3, "entropy_bits": round(h(2, 1, 1), 6)}
    assert slots["theme@object"] == {"n": 3, "words": 2, "entropy_bits": round(h(2, 1), 6)}
    assert slots["word@primitive"]["entropy_bits"] == 1.0  # shark, Paula
    assert slots["verb@active agent+theme"] == {"n": 3, "words": 1, "entropy_bits": 0.0}
    assert slots["agent@by_object"]["n"] == 1
    shark, emma = rep["cases"]
    assert shark["case"] == "prim_to_subj_common" and shark["type"] == "lexical"
    assert shark["held_out"] == {"word": "shark", "slot": "agent@subject", "sentences": 1,
                                 "share": 1.0}
    assert shark["train_contexts"] == {"count": 1, "slots": {"word@primitive": 1}}
    assert shark["seen_slot"] == "word@primitive"
    assert shark["seen_slot_entropy_bits"] == 1.0
    assert shark["tested_slot_entropy_bits"] == pytest.approx(1.5)
    assert emma["held_out"]["word"] == "Emma" and emma["held_out"]["slot"] == "theme@object"
    assert emma["train_contexts"] == {"count": 1, "slots": {"agent@subject": 1}}
    assert emma["seen_slot_entropy_bits"] == pytest.approx(1.5)
    assert emma["tested_slot_entropy_bits"] == pytest.approx(h(2, 1), abs=1e-6)


def test_both_formats_count_the_same(tmp_path):
    a = report_of(tmp_path, "original")
    b = report_of(tmp_path, "variable_free")
    assert a["train"]["slots"] == b["train"]["slots"]
    assert [c["held_out"] for c in a["cases"]] == [c["held_out"] for c in b["cases"]]


def test_measure_cli_tsv(tmp_path, capsys):
    report_of(tmp_path, "variable_free")
    assert main(["measure", "--format", "cogs", "--train", str(tmp_path / "train.tsv"),
                 str(tmp_path / "gen.tsv"), "--tsv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split("\t")
    row = dict(zip(head, lines[1].split("\t")))
    assert len(lines) == 3
    assert row["case"] == "prim_to_subj_common" and row["word"] == "shark"
    assert float(row["tested_slot_entropy_bits"]) == pytest.approx(1.5)
    assert row["train_slots"] == "word@primitive:1"


def test_case_types_follow_the_paper():
    assert len(CASE_TYPES) == 21
    assert sorted(c for c, t in CASE_TYPES.items() if t == "structural") == [
        "cp_recursion", "obj_pp_to_subj_pp", "pp_recursion"]
    assert case_type("in_distribution") == "in_distribution"


@pytest.mark.parametrize("line, needle", [
    ("A cat ran .\trun ( agent = cat )\n", "2 tab-separated columns"),
    ("A cat ran .\t \tin_distribution\n", "empty logical form"),
    ("A cat ran .\trun ( agent = cat )\tin_distribution\textra\n", "4 tab-separated columns"),
])
def test_bad_rows_name_file_and_line(tmp_path, capsys, line, needle):
    path = tmp_path / "train.tsv"
    path.write_text(f"{RAN[0]}\t{RAN[2]}\tin_distribution\n" + line)
    with pytest.raises(DataFormatError, match=f"train.tsv:2: {needle}"):
        read_cogs_tsv(path)
    write(tmp_path / "gen.tsv", [GEN_EMMA], "variable_free")
    assert main(["measure", "--format", "cogs", "--train", str(path),
                 str(tmp_path / "gen.tsv")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and f"train.tsv:2: {needle}" in err and "Fix:" in err


def test_unreadable_lf_names_file_and_line(tmp_path):
    path = write(tmp_path / "gen.tsv", [ATE, ("A cat ran .", "", "run ( agent = dog )")],
                 "variable_free")
    with pytest.raises(DataFormatError, match=r"gen.tsv:2: the noun 'dog'"):
        slot_word_counts(read_cogs_tsv(path))
    for lf, message in (("this is ( not an LF", r"expected '\(' at LF token 2 after the "
                                                 r"predicate 'this'"),
                        ("run", "the LF is one word but the sentence is not")):
        path = write(tmp_path / "gen.tsv", [ATE, ("A cat ran .", "", lf)], "variable_free")
        with pytest.raises(DataFormatError, match=r"gen.tsv:2: " + message):
            slot_word_counts(read_cogs_tsv(path))


def test_score_per_case_and_type(tmp_path):
    data = tmp_path / "level"
    data.mkdir()
    sources = ["a b", "c d", "e f", "g h"]
    (data / "gen.in").write_text("".join(s + "\n" for s in sources))
    cases = ["subj_to_obj_common", "subj_to_obj_common", "cp_recursion", "in_distribution"]
    (data / "gen.case").write_text("".join(c + "\n" for c in cases))
    right = [True, False, False, True]
    gen = tmp_path / "generate.txt"
    gen.write_text("".join(f"S-{i}\t{s}\nT-{i}\tx y\nH-{i}\t-0.1\t{'x y' if ok else 'x z'}\n"
                           for i, (s, ok) in enumerate(zip(sources, right))))
    rec = write_score(gen, tmp_path / "score", {"grammar": "cogs"}, data, "gen")
    assert rec["accuracy"] == 0.5 and rec["graded"] is None
    assert rec["by_case"] == {"cp_recursion": {"accuracy": 0.0, "n": 1},
                              "in_distribution": {"accuracy": 1.0, "n": 1},
                              "subj_to_obj_common": {"accuracy": 0.5, "n": 2}}
    assert rec["by_case_type"] == {"in_distribution": {"accuracy": 1.0, "n": 1},
                                   "lexical": {"accuracy": 0.5, "n": 2},
                                   "structural": {"accuracy": 0.0, "n": 1}}
    assert json.loads((tmp_path / "score" / "score.json").read_text())["by_case"] == \
        rec["by_case"]


def test_an_unknown_reference_word_is_never_an_exact_match(tmp_path):
    """A gen reference word outside the training dictionary is binarized as <unk>, and
    fairseq-generate prints it as ``<<unk>>`` on the T- line (escaped) while a hypothesis of
    the <unk> symbol prints ``<unk>``: the sentence counts as wrong, never as a match of two
    unknowns."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for w in ("monk", "(", ")", "agent"):
        d.add_symbol(w)
    ref = d.encode_line("monastery ( agent )", add_if_not_exist=False, append_eos=False)
    target = d.string(ref, escape_unk=True)                   # as fairseq-generate's T- line
    hypothesis = d.string(ref)                                # the model's <unk> symbol
    assert target == "<<unk>> ( agent )" and hypothesis == "<unk> ( agent )"
    data = tmp_path / "level"
    data.mkdir()
    (data / "gen.in").write_text("the monastery\n")
    (data / "gen.case").write_text("unacc_to_transitive\n")
    gen = tmp_path / "generate.txt"
    gen.write_text(f"S-0\tthe monastery\nT-0\t{target}\nH-0\t-0.1\t{hypothesis}\n")
    rec = write_score(gen, tmp_path / "score", {"grammar": "cogs"}, data, "gen")
    assert rec["accuracy"] == 0.0


def test_cases_over_seeds(tmp_path):
    rows = []
    for seed, acc in ((1, 0.2), (2, 0.6)):
        path = tmp_path / f"s{seed}.json"
        path.write_text(json.dumps({"split": "gen",
                                    "by_case": {"pp_recursion": {"accuracy": acc, "n": 10}},
                                    "by_case_type": {"structural": {"accuracy": acc, "n": 10}}}))
        rows.append({"experiment": "cogs+gen", "preset": "p", "level": "vf",
                     "checkpoint": "last", "schedule": "s", "seed": seed, "path": str(path)})
    case, kind = case_rows(rows)
    assert case["case"] == "pp_recursion" and case["type"] == "structural"
    assert case["seeds"] == "1,2" and case["n"] == "10" and case["split"] == "gen"
    assert case["mean"] == pytest.approx(0.4) and case["std"] == pytest.approx(0.2828427)
    assert kind["case"] == "type:structural" and kind["mean"] == pytest.approx(0.4)


def test_binarize_cogs(tmp_path, capsys):
    src = tmp_path / "cogs"
    src.mkdir()
    write(src / "train.tsv", [ATE, DOG, CAT_DOG, RAN, SHARK], "variable_free")
    write(src / "dev.tsv", [DOG], "variable_free")
    pig = ("A cat ate a pig .", "", "eat ( agent = cat , theme = pig )")  # pig: not in train
    write(src / "gen.tsv", [GEN_SHARK, GEN_EMMA, pig], "variable_free",
          ["prim_to_subj_common", "subj_to_obj_proper", "subj_to_obj_proper"])
    out = tmp_path / "bin"
    assert main(["binarize", "--format", "cogs", str(src), "--out", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["sizes"] == {"train": 5, "valid": 1, "gen": 3} and m["grammar"] == "cogs"
    assert m["lf_format"] == "variable_free"
    # the dictionaries come from train: "pig" is <unk> on both sides of one gen sentence
    assert m["unknown_tokens"]["gen"] == {"source": 1, "target": 1, "sentences": 1}
    assert m["unknown_tokens"]["valid"] == {"source": 0, "target": 0, "sentences": 0}
    assert (out / "gen.case").read_text().split() == [
        "prim_to_subj_common", "subj_to_obj_proper", "subj_to_obj_proper"]
    assert (out / "gen.in-out.in.bin").is_file() and (out / "valid.in-out.out.idx").is_file()
    words = [line.split()[0] for line in (out / "dict.in.txt").read_text().splitlines()]
    assert sorted(words) == sorted({w for r in (ATE, DOG, CAT_DOG, RAN, SHARK)
                                    for w in r[0].split()})
    assert "binarized" in capsys.readouterr().out


def test_binarize_cogs_refuses_scan_options(tmp_path, capsys):
    assert main(["binarize", "--format", "cogs", str(tmp_path), "--out", str(tmp_path / "o"),
                 "--train", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--train" in err and "Fix:" in err


def test_aggregate_tables_cogs_cases_over_seeds(tmp_path, capsys):
    for seed, acc in ((1, 0.25), (2, 0.75)):
        run = tmp_path / "runs" / f"seed{seed}" / "gen-last"
        run.mkdir(parents=True)
        (run / "score.json").write_text(json.dumps({
            "experiment": "cogs", "preset": "cogs_transformer_sinusoidal",
            "model": "transformer_sinusoidal", "n_train": 5, "level": "vf",
            "entropy_bits": None, "checkpoint": "last", "seed": seed, "data_seed": None,
            "accuracy": acc, "split": "gen",
            "by_case": {"subj_to_obj_common": {"accuracy": acc, "n": 4}},
            "by_case_type": {"lexical": {"accuracy": acc, "n": 4}}}))
    assert main(["aggregate", str(tmp_path / "runs"), "--out", str(tmp_path / "agg")]) == 0
    assert "cases:" in capsys.readouterr().out
    rows = [line.split("\t") for line in
            (tmp_path / "agg" / "cases.tsv").read_text().splitlines()]
    got = [dict(zip(rows[0], r)) for r in rows[1:]]
    assert [(g["experiment"], g["case"], g["seeds"], g["mean"]) for g in got] == [
        ("cogs+gen", "subj_to_obj_common", "1,2", "0.500000"),
        ("cogs+gen", "type:lexical", "1,2", "0.500000")]
    assert not (tmp_path / "agg" / "report.md").exists()  # no entropy level: no curves
    # cases.md: the same numbers; std of 0.25 and 0.75 (ddof 1) = 0.5 / sqrt(2) = 0.354
    md = (tmp_path / "agg" / "cases.md").read_text().splitlines()
    assert "## cogs_transformer_sinusoidal, vf: gen split, last checkpoint" in md
    assert "| `subj_to_obj_common` | lexical | 1,2 | 4 | 0.500 | 0.354 | 0.250 | 0.750 |" in md
    assert "| **type:lexical** | lexical | 1,2 | 4 | 0.500 | 0.354 | 0.250 | 0.750 |" in md
    # from its results.tsv the cases cannot be made again, and aggregate says why
    results = tmp_path / "agg" / "results.tsv"
    assert main(["aggregate", str(results), "--out", str(tmp_path / "again")]) == 0
    assert "cases:   not written: the per-case accuracies are in the runs' score.json" in \
        capsys.readouterr().out
    assert not (tmp_path / "again" / "cases.tsv").exists()


def test_prepare_cogs_script(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    script = str(repo / "preprocess" / "prepare_cogs.sh")
    res = subprocess.run(["bash", script, str(tmp_path / "none"), str(tmp_path / "o")],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 2 and "none/train.tsv not found" in res.stderr
    assert "Fix:" in res.stderr and not (tmp_path / "o").exists()
    src = tmp_path / "cogs"
    src.mkdir()
    write(src / "train.tsv", [ATE, DOG, RAN], "original")
    write(src / "dev.tsv", [DOG], "original")
    res = subprocess.run(["bash", script, str(src), str(tmp_path / "bin")],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert f"data-bin: {tmp_path / 'bin'}" in res.stdout
    assert json.loads((tmp_path / "bin" / "manifest.json").read_text())["lf_format"] == \
        "original"
    assert (tmp_path / "bin" / "valid.case").read_text() == "in_distribution\n"


def test_binarize_names_a_bad_row_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "cogs"
    src.mkdir()
    write(src / "train.tsv", [ATE, DOG], "variable_free")
    (src / "dev.tsv").write_text(f"{DOG[0]}\t{DOG[2]}\tin_distribution\n{RAN[0]}\t\tx\n")
    out = tmp_path / "bin"
    assert main(["binarize", "--format", "cogs", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "dev.tsv:2: empty logical form" in err
    assert not out.exists()


def test_decode_length_follows_the_longest_logical_form(tmp_path):
    from fairseq_entropy.cogs.binarize import decode_max_len

    (tmp_path / "manifest.json").write_text(json.dumps(
        {"max_target_tokens": {"train": 48, "gen": 144}}))
    assert decode_max_len(tmp_path) == 152
    (tmp_path / "manifest.json").write_text(json.dumps({"experiment": "exp1"}))
    assert decode_max_len(tmp_path) is None


@pytest.mark.parametrize("form", FORMS)
def test_a_slot_absent_from_training_is_listed(tmp_path, form):
    subj_pp = ("A cat on a table ate the cake .",
               "* cake ( x _ 7 ) ; cat ( x _ 1 ) AND cat . nmod . on ( x _ 1 , x _ 4 ) AND "
               "table ( x _ 4 ) AND eat . agent ( x _ 5 , x _ 1 ) AND eat . theme ( x _ 5 , "
               "x _ 7 )",
               "eat ( agent = cat ( nmod . on = table ) , theme = * cake )")
    write(tmp_path / "train.tsv", [ATE, DOG, PP], form)
    write(tmp_path / "gen.tsv", [subj_pp, ATE], form, ["obj_pp_to_subj_pp"] * 2)
    rep = measure_cogs(read_cogs_tsv(tmp_path / "train.tsv"),
                       read_cogs_tsv(tmp_path / "gen.tsv"))
    (case,) = rep["cases"]
    assert case["unseen_slots"] == [["pp_noun@subject", 1]]
    # in half the sentences: held out; the slot has no training distribution
    assert case["held_out"] == {"word": "table", "slot": "pp_noun@subject", "sentences": 1,
                                "share": 0.5}
    assert case["train_contexts"] == {"count": 1, "slots": {"pp_noun@object": 1}}
    assert case["seen_slot_entropy_bits"] == 0.0 and case["tested_slot_entropy_bits"] is None
    write(tmp_path / "gen.tsv", [subj_pp, ATE, DOG], form, ["obj_pp_to_subj_pp"] * 3)
    (case,) = measure_cogs(read_cogs_tsv(tmp_path / "train.tsv"),
                           read_cogs_tsv(tmp_path / "gen.tsv"))["cases"]
    assert case["held_out"] is None  # in 1 of 3 sentences: no pair is held out
    assert case["other_unseen"] == [["table", "pp_noun@subject", 1]]


def test_cases_refuse_one_seed_twice(tmp_path):
    rows = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"split": "gen",
                                    "by_case": {"pp_recursion": {"accuracy": 0.5, "n": 2}}}))
        rows.append({"experiment": "cogs+gen", "preset": "p", "level": "vf",
                     "checkpoint": "last", "schedule": "s", "seed": 1, "path": str(path)})
    with pytest.raises(UserError, match=r"b.json and .*a.json are both seed 1"):
        case_rows(rows)
