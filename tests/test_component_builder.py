"""Entropy-controlled builds for component classes other than verbs (direction, repetition)."""

import math
from collections import Counter

import pytest

from fairseq_entropy.scan.components import build_exp1_component
from fairseq_entropy.scan.levels import BuildError
from fairseq_entropy.scan.grammar import Grammar

G = Grammar.paper()


def entropy_of(values):
    counts = Counter(values)
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values())


@pytest.mark.parametrize("component,restricted,levels", [
    ("direction", "left", [0.0, 0.5, 1.0, 1.5]),
    ("repetition", "twice", [0.0, 0.8, math.log2(3)]),
])
def test_component_levels_hit_their_targets(component, restricted, levels):
    built = build_exp1_component(G, component, restricted, levels, n=2000, seed=3)
    for level, target in zip(built, levels):
        train, valid = level.splits["train"], level.splits["valid"]
        assert len(train) == 2000 and len(valid) == 100
        second = [getattr(c.second, component) or "none" for c in train]
        assert abs(entropy_of(second) - target) <= 0.01
        # the restricted value is never executed first in training or validation
        for cmd in train + valid:
            assert (getattr(cmd.first, component) or "none") != restricted
        manifest = level.manifest(G)
        assert manifest["component"] == component
        assert manifest["entropy_bits"] == pytest.approx(entropy_of(second), abs=1e-6)


def test_direction_test_set_is_every_command_with_left_executed_first():
    (level,) = build_exp1_component(G, "direction", "left", [1.0], n=500, seed=1)
    test = level.splits["test"]
    # clauses with "left": 8 verbs x 3 phrases (left, opposite left, around left) x 3
    # repetitions = 72; second clauses: all 8 x 21 = 168; two conjunctions.
    assert len(test) == 72 * 168 * 2
    assert all(c.first.direction == "left" for c in test)
    assert len({str(c) for c in test}) == len(test)


def test_levels_above_the_class_maximum_are_refused():
    # log2 3 = 1.584963: the fix names the largest 3-decimal level (a level's name has 3
    # decimals), which can be built
    fix = r"direction class, log2\(3\) = 1\.58496 .*\[0, 1\.584\]"
    with pytest.raises(BuildError, match=fix):
        build_exp1_component(G, "direction", "left", [1.585], n=500)
    (top,) = build_exp1_component(G, "direction", "left", [1.584], n=500)
    second = [c.second.direction or "none" for c in top.splits["train"]]
    assert abs(entropy_of(second) - 1.584) <= 0.01
    with pytest.raises(BuildError, match="not a repetition value"):
        build_exp1_component(G, "repetition", "left", [0.5], n=500)
    with pytest.raises(BuildError, match="direction, modifier or repetition"):
        build_exp1_component(G, "verb", "jump", [0.5], n=500)


def test_same_seed_same_commands():
    a = build_exp1_component(G, "direction", "right", [0.5], n=400, seed=7)[0]
    b = build_exp1_component(G, "direction", "right", [0.5], n=400, seed=7)[0]
    c = build_exp1_component(G, "direction", "right", [0.5], n=400, seed=8)[0]
    assert [str(x) for x in a.splits["train"]] == [str(x) for x in b.splits["train"]]
    assert [str(x) for x in a.splits["train"]] != [str(x) for x in c.splits["train"]]


def test_build_and_measure_cli_for_a_component(tmp_path, capsys):
    import json

    from fairseq_entropy.cli import main as cli

    out = tmp_path / "dir"
    assert cli(["build", "exp1", "--component", "direction", "--restricted", "right",
                "--levels", "0.5", "--n", "300", "--out", str(out)]) == 0
    manifest = json.loads((out / "entropy_0.5" / "manifest.json").read_text())
    assert manifest["component"] == "direction" and manifest["restricted_value"] == "right"
    assert abs(manifest["entropy_bits"] - 0.5) <= 0.01
    capsys.readouterr()
    level = out / "entropy_0.5"
    assert cli(["measure", str(level / "test.in"), "--train", str(level / "train.in"),
                "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)[str(level / "test.in")]
    first = rec["components"]["direction"]["first"]["counts"]
    assert first == {"left": 0, "right": 72 * 168 * 2, "none": 0}
    assert ["direction", "right", "first"] in rec["unseen_components_in_train"]
    # training never executes "right" first, so the compound (first, clause with right) has no
    # training mass: the slot_clause divergence is 1 - C_0.1 over shared compounds only, > 0
    assert rec["compound_divergence_by_kind"]["slot_clause"] > 0.3
    assert 0 <= rec["atom_divergence"] < rec["compound_divergence"]
    assert cli(["measure", str(level / "test.in"), "--components", "adverb"]) == 2
    assert "unknown component class(es) adverb" in capsys.readouterr().err


def test_measure_tsv_rows(tmp_path, capsys):
    from fairseq_entropy.cli import main as cli

    train = tmp_path / "train.txt"
    train.write_text("IN: walk and jump OUT: WALK JUMP\nIN: run after look OUT: LOOK RUN\n")
    test = tmp_path / "test.txt"
    test.write_text("IN: jump and walk OUT: JUMP WALK\n")
    assert cli(["measure", str(train), str(test), "--train", str(train), "--tsv",
                "--components", "verb,conjunction"]) == 0
    header, row_train, row_test = [line.split("\t")
                                   for line in capsys.readouterr().out.splitlines()]
    cols = dict(zip(header, row_test))
    assert cols["n_commands"] == "1" and cols["H_verb_first"] == "0.0000"
    # train: first slot walk, look (1 bit); the test's (jump, first) and (walk, second) unseen
    assert dict(zip(header, row_train))["H_verb_first"] == "1.0000"
    assert cols["unseen_pairs"] == "verb:jump@first verb:walk@second"
    assert dict(zip(header, row_train))["compound_divergence"] == "0.0000"
    assert float(cols["compound_divergence_verb_pair"]) == 1.0
