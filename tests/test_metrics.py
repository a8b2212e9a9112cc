"""Graded metrics (clause exact match, restricted-clause errors, chrF, BLEU) scored by hand."""

import pytest

from fairseq_entropy.analysis.metrics import clause_matches, graded_scores
from fairseq_entropy.scan.grammar import Grammar

G = Grammar.paper()

# (command, reference, hypothesis) with the clause verdicts worked out by hand
EXAMPLES = [
    # first: walk left = LTURN WALK, second: jump twice = JUMP JUMP; all right
    ("jump twice after walk left", "LTURN WALK JUMP JUMP", "LTURN WALK JUMP JUMP"),
    # first: jump = JUMP (wrong: WALK), second: walk = WALK (right)
    ("jump and walk", "JUMP WALK", "WALK WALK"),
    # first: jump left = LTURN JUMP (right), second: run = RUN (missing)
    ("jump left and run", "LTURN JUMP RUN", "LTURN JUMP"),
    # one clause, repeated once too often: wrong
    ("look", "LOOK", "LOOK LOOK"),
]


def test_clause_matches_by_hand():
    assert clause_matches([["LTURN", "WALK"], ["JUMP", "JUMP"]],
                          "LTURN WALK JUMP JUMP".split()) == [True, True]
    assert clause_matches([["JUMP"], ["WALK"]], ["WALK", "WALK"]) == [False, True]
    assert clause_matches([["LTURN", "JUMP"], ["RUN"]], ["LTURN", "JUMP"]) == [True, False]
    # overlapping spans: "JUMP" is both the prefix and the suffix, but only one clause fits
    assert clause_matches([["JUMP"], ["JUMP"]], ["JUMP"]) == [True, False]
    assert clause_matches([["LOOK"]], ["LOOK", "LOOK"]) == [False]


def test_graded_scores_by_hand():
    s = graded_scores(EXAMPLES, G, restricted_slot="first")
    # clauses: 2 + 2 + 2 + 1 = 7, matched: 2 + 1 + 1 + 0 = 4
    assert s.n_clauses == 7
    assert s.clause_accuracy == pytest.approx(4 / 7)
    # two-clause outputs: 3; only "jump and walk" is wrong in the first slot and right in the other
    assert s.except_restricted == pytest.approx(1 / 3)
    assert 0 < s.bleu < 100 and 0 < s.chrf < 100
    # the same outputs with the second slot held out: "jump left and run" is wrong only there
    assert graded_scores(EXAMPLES, G, "second").except_restricted == pytest.approx(1 / 3)


def test_perfect_and_disjoint_outputs_give_bleu_and_chrf_extremes():
    perfect = [(c, r, r) for c, r, _ in EXAMPLES]
    s = graded_scores(perfect, G)
    assert s.bleu == pytest.approx(100.0) and s.chrf == pytest.approx(100.0)
    assert s.clause_accuracy == 1.0 and s.except_restricted is None
    disjoint = [("walk", "WALK", "RTURN"), ("run", "RUN", "LTURN")]
    s = graded_scores(disjoint, G)
    assert s.bleu == 0.0 and s.clause_accuracy == 0.0


def test_reference_of_another_grammar_is_refused():
    with pytest.raises(ValueError, match="not its interpretation"):
        graded_scores([("walk", "I_WALK", "I_WALK")], G)
    with pytest.raises(ValueError, match="Fix"):
        graded_scores([("turn left", "LTURN", "LTURN")], G)
    with pytest.raises(ValueError, match="slot"):
        graded_scores(EXAMPLES, G, restricted_slot="third")
