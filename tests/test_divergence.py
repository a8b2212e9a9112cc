"""Atom / compound divergence (Keysers et al. 2020) on hand-computed splits."""

import math

import pytest

from fairseq_entropy.scan.divergence import (atom_counts, chernoff_coefficient, command_compounds,
                                             compound_counts, divergence, divergences)
from fairseq_entropy.scan.grammar import Grammar

G = Grammar.paper()


def parse_all(lines):
    return [G.parse(s) for s in lines]


def test_identical_sets_have_zero_divergence():
    cmds = parse_all(["walk left twice and jump", "run after look around right", "squat"])
    d = divergences(cmds, list(reversed(cmds)))
    assert d.atom == pytest.approx(0.0, abs=1e-12)
    assert d.compound == pytest.approx(0.0, abs=1e-12)
    assert all(v == pytest.approx(0.0, abs=1e-12) for v in d.by_kind.values() if v is not None)


def test_disjoint_sets_have_divergence_one():
    d = divergences(parse_all(["walk left"]), parse_all(["run right thrice"]))
    assert d.atom == 1.0
    assert d.compound == 1.0


def test_half_shared_atoms_by_hand():
    # train atoms {walk: 1/2, left: 1/2}; test {walk: 1/2, right: 1/2}:
    # C_0.5 = sqrt(1/2 * 1/2) = 1/2, so D_A = 1/2; the phrases differ, so D_C = 1.
    d = divergences(parse_all(["walk left"]), parse_all(["walk right"]))
    assert d.atom == pytest.approx(0.5)
    assert d.compound == pytest.approx(1.0)
    assert d.by_kind["phrase"] == pytest.approx(1.0)
    assert d.by_kind["slot"] is None  # no two-clause command in the test set


def test_chernoff_alpha_point_one_by_hand():
    # p = (0.9, 0.1), q = (0.5, 0.5): 0.9^0.1 = 0.98952, 0.1^0.1 = 0.79433, 0.5^0.9 = 0.53589
    # C = 0.53589 * (0.98952 + 0.79433) = 0.95595
    c = chernoff_coefficient({"a": 9, "b": 1}, {"a": 5, "b": 5}, 0.1)
    assert c == pytest.approx(0.95595, abs=5e-5)
    assert divergence({"a": 9, "b": 1}, {"a": 5, "b": 5}, 0.1) == pytest.approx(0.04405, abs=5e-5)


def test_alpha_point_one_forgives_rare_training_compounds():
    # A test compound seen once in 100 training compounds: C_0.1 = 0.01^0.1 = 0.631,
    # whereas C_0.5 = 0.01^0.5 = 0.1.
    p, q = {"x": 1, "y": 99}, {"x": 1}
    assert chernoff_coefficient(p, q, 0.1) == pytest.approx(0.01 ** 0.1)
    assert chernoff_coefficient(p, q, 0.5) == pytest.approx(0.1)


def test_compounds_of_one_command_follow_execution_order():
    cmd = G.parse("jump twice after walk around left")
    assert sorted(command_compounds(cmd)) == sorted([
        "phrase|walk around left",
        "clause|jump twice",
        "slot|first:walk", "slot|second:jump",
        "slot_clause|first:walk around left", "slot_clause|second:jump twice",
        "verb_pair|after:walk>jump",
    ])


def test_atom_counts_count_every_word():
    counts = atom_counts(parse_all(["walk and walk twice", "walk"]))
    assert counts == {"walk": 3, "and": 1, "twice": 1}


def test_unknown_kind_and_bad_alpha_are_refused():
    with pytest.raises(ValueError, match="unknown compound kind"):
        compound_counts(parse_all(["walk"]), ["verb"])
    with pytest.raises(ValueError, match="alpha"):
        chernoff_coefficient({"a": 1}, {"a": 1}, 1.5)
    with pytest.raises(ValueError, match="empty"):
        divergences([], parse_all(["walk"]))


def test_scan_addprim_jump_split(scan_reference):
    """On SCAN's add-primitive jump split every two-clause test command puts jump in a slot
    that training never has, so the slot compounds of jump are unseen: D_C(slot) is large while
    the atoms (jump occurs alone in training) are shared."""
    from fairseq_entropy.scan.datafiles import read_scan_file
    g = Grammar.scan()
    train, test = ([g.parse(ex.command)
                    for ex in read_scan_file(scan_reference / f"tasks_{s}_addprim_jump.txt", g)]
                   for s in ("train", "test"))
    d = divergences(train, test)
    slot_train = compound_counts(train, ["slot"])
    assert slot_train["slot|first:jump"] == 0 and slot_train["slot|second:jump"] == 0
    slot_test = compound_counts(test, ["slot"])
    jump_share = (slot_test["slot|first:jump"] + slot_test["slot|second:jump"]) / sum(
        slot_test.values())
    # The jump slot compounds have no mass in training, so C_0.1 over slot compounds is the
    # sum over the shared ones only, which is at most (1 - jump_share)^0.9.
    assert d.by_kind["slot"] >= 1 - (1 - jump_share) ** 0.9 - 1e-9
    assert d.atom < d.compound
    assert math.isfinite(d.atom)
