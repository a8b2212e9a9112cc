"""scan.measure on hand-made data sets: counts, entropy (bits) and divergences computed by hand,
the TSV and text forms, the refused requests, and agreement with ``fairseq-entropy measure``."""
import json

import pytest

from fairseq_entropy.cli import main as cli
from fairseq_entropy.errors import UserError
from fairseq_entropy.scan.datafiles import Example, write_pair, write_scan_file
from fairseq_entropy.scan.grammar import PAPER_VERBS, Grammar
from fairseq_entropy.scan.measure import (MeasureError, guess_grammar, measure, measure_text,
                                          measure_tsv, read_data_set)

G = Grammar.paper()


def examples(commands, grammar=G):
    return [Example(c, " ".join(grammar.interpret(c))) for c in commands]


# first slot (executed first): walk walk walk run; second slot: run run look look
FOUR = examples(["walk and run", "run after walk", "walk left and look",
                 "look twice after run"])
H_3_1 = 0.811278  # -(3/4 log2 3/4 + 1/4 log2 1/4), 6 decimals
TRAIN = examples(["walk and run", "run and walk"])
TEST = examples(["jump and walk"])


def zeros(**counts):
    return {v: counts.get(v, 0) for v in PAPER_VERBS}


def test_counts_and_entropy_by_hand():
    rec = measure({"four": FOUR})["four"]
    assert rec["n_commands"] == 4
    assert rec["verb_counts"] == {"first": zeros(walk=3, run=1), "second": zeros(run=2, look=2)}
    assert rec["entropy_bits"] == {"first": H_3_1, "second": 1.0}
    assert rec["slot_order"] == "execution"
    comp = rec["components"]
    assert comp["verb"]["first"] == {"entropy_bits": H_3_1, "counts": zeros(walk=3, run=1)}
    assert comp["direction"]["first"] == {"entropy_bits": H_3_1,
                                          "counts": {"left": 1, "right": 0, "none": 3}}
    assert comp["direction"]["second"] == {"entropy_bits": 0.0,
                                           "counts": {"left": 0, "right": 0, "none": 4}}
    assert comp["repetition"]["second"]["counts"] == {"twice": 1, "thrice": 0, "none": 3}
    assert comp["repetition"]["second"]["entropy_bits"] == H_3_1
    assert comp["conjunction"] == {"command": {"entropy_bits": 1.0,
                                               "counts": {"and": 2, "after": 2, "none": 0}}}
    assert "unseen_in_train" not in rec and "atom_divergence" not in rec


def test_surface_order_and_chosen_classes():
    rec = measure({"four": FOUR}, components=["verb", "conjunction"],
                  slot_order="surface")["four"]
    assert list(rec["components"]) == ["verb", "conjunction"]
    # written first: walk, run, walk (left), look (twice) -> H(1/2, 1/4, 1/4) = 1.5 bits
    assert rec["components"]["verb"]["surface_first"] == {
        "entropy_bits": 1.5, "counts": zeros(walk=2, run=1, look=1)}
    # written second: run, walk, look, run -> H(1/2, 1/4, 1/4) = 1.5 bits
    assert rec["components"]["verb"]["surface_second"] == {
        "entropy_bits": 1.5, "counts": zeros(run=2, walk=1, look=1)}
    assert rec["slot_order"] == "surface"
    assert rec["entropy_bits"] == {"first": H_3_1, "second": 1.0}  # verb slots: execution


def test_unseen_pairs_and_divergences_by_hand():
    rec = measure({"test": TEST}, train=TRAIN)["test"]
    assert rec["entropy_bits"] == {"first": 0.0, "second": 0.0}
    assert rec["unseen_in_train"] == [["jump", "first"]]
    assert rec["unseen_components_in_train"] == [["verb", "jump", "first"]]
    # atoms: train walk, run, and (1/3 each); test jump, and, walk (1/3 each):
    # D_A = 1 - (sqrt(1/9) + sqrt(1/9)) = 1/3
    assert rec["atom_divergence"] == round(1 / 3, 6)
    # slot compounds: train first:walk first:run second:run second:walk (1/4 each), test
    # first:jump second:walk (1/2 each): D = 1 - (1/4)^0.1 (1/2)^0.9 = 1 - 2^-1.1
    by_kind = rec["compound_divergence_by_kind"]
    assert by_kind == {"phrase": None, "clause": None, "slot": round(1 - 2 ** -1.1, 6),
                       "slot_clause": round(1 - 2 ** -1.1, 6), "verb_pair": 1.0}
    # pooled: train 10 compounds (1/10 each), test 5 (1/5 each), second:walk shared twice
    assert rec["compound_divergence"] == round(1 - 2 * 0.1 ** 0.1 * 0.2 ** 0.9, 6)


def test_tsv_by_hand():
    report = measure({"test": TEST}, train=TRAIN, components=["verb", "conjunction"])
    assert measure_tsv(report) == (
        "file\tn_commands\tH_verb_first\tH_verb_second\tH_conjunction_command\tunseen_pairs\t"
        "atom_divergence\tcompound_divergence\tcompound_divergence_phrase\t"
        "compound_divergence_clause\tcompound_divergence_slot\tcompound_divergence_slot_clause\t"
        "compound_divergence_verb_pair\n"
        "test\t1\t0.0000\t0.0000\t0.0000\tverb:jump@first\t0.3333\t0.6268\t\t\t0.5335\t0.5335\t"
        "1.0000\n")


def test_text_by_hand():
    report = measure({"test": TEST}, train=TRAIN, components=["conjunction"])
    assert measure_text(report, "train.txt") == (
        "test: 1 commands\n"
        "  first  slot  H = 0.0000 bits  walk=0 run=0 look=0 jump=1 sprint=0 crawl=0 squat=0 "
        "lunge=0\n"
        "  second slot  H = 0.0000 bits  walk=1 run=0 look=0 jump=0 sprint=0 crawl=0 squat=0 "
        "lunge=0\n"
        "  component classes, slots by execution order:\n"
        "    conjunction command        H = 0.0000 bits  and=1 after=0 none=0\n"
        "  (verb, slot) pairs absent from train.txt: (jump, first)\n"
        "  (component, slot) pairs absent from train.txt: none\n"
        "  divergence from train.txt (Keysers et al. 2020): atom 0.3333, compound 0.6268 "
        "(phrase=n/a clause=n/a slot=0.5335 slot_clause=0.5335 verb_pair=1.0000)\n")


def test_refused_requests_are_user_errors():
    with pytest.raises(MeasureError, match="unknown component class.*colour. Fix: "
                                           "--components takes verb, direction"):
        measure({"four": FOUR}, components=["verb", "colour"])
    with pytest.raises(MeasureError, match="train.txt holds no commands"):
        measure({"test": TEST}, train=[], train_name="train.txt")
    with pytest.raises(MeasureError, match="empty.txt holds no commands"):
        measure({"test": TEST, "empty.txt": []}, train=TRAIN)
    # one-word commands have no compounds: the compound divergence is undefined
    with pytest.raises(MeasureError, match="walks against train.txt: the test set has no "
                                           "compounds"):
        measure({"walks": examples(["walk", "jump"])}, train=TRAIN, train_name="train.txt")
    assert issubclass(MeasureError, UserError)
    # without a training set an empty data set is measured: no commands, no entropy
    rec = measure({"empty": []})["empty"]
    assert rec["n_commands"] == 0 and rec["entropy_bits"] == {"first": None, "second": None}


def test_grammar_is_guessed_from_the_words_or_named(tmp_path):
    scan = Grammar.scan()
    ex = examples(["turn left twice", "jump after walk"], scan)
    assert guess_grammar(ex).name == "scan" and guess_grammar(FOUR).name == "paper"
    write_scan_file(tmp_path / "s.txt", ex)
    assert read_data_set(tmp_path / "s.txt") == ex
    with pytest.raises(UserError, match=r"s.txt:1: unknown word 'turn'"):
        read_data_set(tmp_path / "s.txt", "paper")
    rec = measure({"s": ex})["s"]
    assert rec["verb_counts"]["first"] == {"walk": 1, "run": 0, "look": 0, "jump": 0, "turn": 1}


def test_agrees_with_the_command_line(tmp_path, capsys):
    write_pair(tmp_path / "four", FOUR)
    write_scan_file(tmp_path / "train.txt", TRAIN)
    write_pair(tmp_path / "test", TEST)
    files = [str(tmp_path / "four.in"), str(tmp_path / "test.out")]
    train = str(tmp_path / "train.txt")
    data = {f: read_data_set(f) for f in files}
    report = measure(data, train=read_data_set(train), train_name=train)
    assert cli(["measure", *files, "--train", train, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == report
    assert cli(["measure", *files, "--train", train, "--tsv"]) == 0
    assert capsys.readouterr().out == measure_tsv(report)
    assert cli(["measure", *files, "--train", train]) == 0
    assert capsys.readouterr().out == measure_text(report, train)
    assert cli(["measure", *files, "--slot-order", "surface", "--components",
                "direction,verb", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == measure(
        data, components=["direction", "verb"], slot_order="surface")


def test_divergences_without_compounds_are_user_errors():
    from fairseq_entropy.scan.divergence import DivergenceError, divergences

    walk, walk_twice = [G.parse("walk")], [G.parse("walk twice")]
    with pytest.raises(DivergenceError, match="the training set has no compounds"):
        divergences(walk, walk_twice)
    with pytest.raises(DivergenceError, match="the test set has no compounds"):
        divergences(walk_twice, walk)
    with pytest.raises(DivergenceError, match="non-empty training and test set"):
        divergences([], walk)
    assert issubclass(DivergenceError, UserError) and issubclass(DivergenceError, ValueError)
