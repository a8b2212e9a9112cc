"""Build requests (the options of ``fairseq-entropy build`` into levels and manifest params),
the SCAN-files summary lines, and a build manifest without levels."""

import json

import pytest

from fairseq_entropy.scan.binarize import level_dirs
from fairseq_entropy.scan.build_requests import (check_build_args, level_summary, request_exp1,
                                                  request_exp2)
from fairseq_entropy.scan.builders import build_exp1, build_exp2
from fairseq_entropy.scan.databin import BinarizeError
from fairseq_entropy.scan.grammar import Grammar
from fairseq_entropy.scan.levels import BuildError
from fairseq_entropy.scan.scan_files import scan_files_summary


def test_request_exp1_is_build_exp1_level_by_level():
    g = Grammar.paper()
    seen = []
    levels, params = request_exp1(g, [0.0, 1.5], 200, 3, 0.05,
                                  each=lambda xs: [seen.append(x) or x for x in xs])
    assert seen == [0.0, 1.5]
    assert params == {"builder": "exp1-mixing", "seed": 3, "n_train": 200,
                      "restricted_verb": "jump", "valid_fraction": 0.05}
    whole = build_exp1(g, [0.0, 1.5], 200, "jump", 3, 0.05)
    assert [lv.splits for lv in levels] == [lv.splits for lv in whole]


def test_request_exp1_component_default_value_and_verb_refuses_restricted():
    g = Grammar.paper()
    levels, params = request_exp1(g, [1.0], 120, 1, 0.1, component="modifier")
    assert params["component"] == "modifier" and params["restricted_value"] == "around"
    assert levels[0].component == "modifier"
    with pytest.raises(BuildError, match="--restricted applies to --component"):
        request_exp1(g, [1.0], 120, 1, 0.1, restricted="left")


def test_request_exp2_params_and_summary():
    g = Grammar.paper()
    levels, params = request_exp2(g, [2], 1, 0.05)
    assert params["builder"] == "exp2-support" and params["restricted_verb"] == "lunge"
    assert [lv.splits for lv in levels] == [lv.splits for lv in build_exp2(g, [2])]
    man = levels[0].manifest(g)
    assert level_summary(levels[0], g) == (
        f"support_2: target 1.000 bits, measured {man['entropy_bits']:.4f} bits (first slot); "
        f"train {man['sizes']['train']}, valid {man['sizes']['valid']}, test 7056")


def test_exp1_summary_says_when_the_validation_set_is_smaller_than_asked():
    """At 0 bits every training command has jump second and another verb first: the pool of
    such commands, counted from the grammar here, minus the 6000 training commands is all the
    validation set can hold, fewer than the 300 (5% of N) asked."""
    g = Grammar.paper()
    pool = sum(1 for c in g.commands(one_clause=False) if c.conjunction is not None
               and executed(c)[1].verb == "jump" and executed(c)[0].verb != "jump")
    levels, _ = request_exp1(g, [0.0, 3.0], 6000, 1, 0.05)
    zero, three = (level_summary(lv, g, 300) for lv in levels)
    assert zero.endswith(f"train 6000, valid {pool - 6000} (of 300 asked: the cells' distinct "
                         "commands left after the training set ran out), test 7056")
    assert three.endswith("train 6000, valid 300, test 7056")


def executed(command):
    """The clauses of a two-clause command in execution order ("X after Y" runs Y first)."""
    a, b = command.left, command.right
    return (a, b) if command.conjunction == "and" else (b, a)


def test_scan_files_summary():
    man = {"valid": {"fraction": 0.1, "seed": 3}, "sizes": {"train": 36, "valid": 4, "test": 9},
           "restricted_pairs": [["jump", "first"]]}
    assert scan_files_summary(man, "t.txt") == (
        "no --valid file: held out 4 of the 40 commands of t.txt for validation (fraction 0.1,"
        " seed 3)\nsplits: train 36, valid 4, test 9; (verb, slot) pairs in test but not in "
        "train: (jump, first)\n")
    man["valid"] = {"path": "v.txt"}
    man["restricted_pairs"] = []
    assert scan_files_summary(man, "t.txt").startswith("splits: train 36") and \
        scan_files_summary(man, "t.txt").endswith("not in train: none\n")
    del man["sizes"]["test"]  # binarized without --test: said, not "pairs ...: none"
    assert scan_files_summary(man, "t.txt") == (
        "splits: train 36, valid 4; no test split (no --test file): this data trains, but "
        "fairseq-generate and score need a test split (binarize again with --test FILE)\n")


def test_misuse_of_build_measure_and_binarize_names_the_fix(tmp_path, capsys):
    from fairseq_entropy.cli import main as cli

    assert cli(["binarize", "--out", str(tmp_path / "bin")]) == 2
    assert "nothing to binarize. Fix: pass BUILD_DIR" in capsys.readouterr().err
    missing = tmp_path / "nofile"
    assert cli(["measure", f"{missing}.in"]) == 2
    assert capsys.readouterr().err.endswith(f"{missing}.in: file not found. Fix: check the "
                                            "path\n")
    (tmp_path / "half.in").write_text("walk\n")
    assert cli(["measure", str(tmp_path / "half.in")]) == 2
    assert "half.out: file not found. Fix: check the path (the data set is the pair half.in " \
        "/ half.out)" in capsys.readouterr().err
    assert cli(["build", "exp2", "--out", str(tmp_path / "e2"), "--support-order",
                "walk,run"]) == 2
    assert "Fix: pass --support-order with all 8 verbs, comma-separated, e.g. walk,run,look," \
        in capsys.readouterr().err
    # a level asked twice, and a restricted verb with another class: refused, not dropped
    assert cli(["build", "exp1", "--out", str(tmp_path / "e1"), "--levels", "3,0,3", "--n",
                "60"]) == 2
    assert "--levels 3,0,3: 3 given more than once. Fix: name each level once" in \
        capsys.readouterr().err
    assert cli(["build", "exp2", "--out", str(tmp_path / "e2"), "--support", "2,2"]) == 2
    assert "--support 2,2: 2 given more than once" in capsys.readouterr().err
    # 1.5004 would be named entropy_1.5, the directory of 1.5 as well
    assert cli(["build", "exp1", "--out", str(tmp_path / "e1"), "--levels", "1.5,1.5004",
                "--n", "60"]) == 2
    assert ("--levels 1.5,1.5004: 1.5004 has more than 3 decimals, but a level is named by "
            "its target with 3 (entropy_1.5)") in capsys.readouterr().err
    assert cli(["build", "exp1", "--out", str(tmp_path / "e1"), "--levels", "0", "--n", "60",
                "--component", "direction", "--restricted-verb", "walk"]) == 2
    assert "Fix: drop --restricted-verb (--restricted names the direction value" in \
        capsys.readouterr().err
    with pytest.raises(BuildError, match="--restricted-verb walk with --component direction"):
        check_build_args([("--component", "direction"), ("--restricted-verb", "walk")])
    assert not any(tmp_path.glob("bin*")) and not (tmp_path / "e2").exists()
    assert not (tmp_path / "e1").exists()


def test_options_that_would_be_ignored_are_refused(tmp_path, capsys):
    from fairseq_entropy.cli import main as cli

    (tmp_path / "b").mkdir()
    for argv, message in (
            (["measure", "x.in", "--json", "--tsv"], "--json and --tsv: one output format"),
            (["binarize", str(tmp_path / "b"), "--out", str(tmp_path / "bin"), "--seed", "5"],
             "--seed 5 draws the validation split held out of --train; a build directory has "
             "its validation split. Fix: drop --seed"),
            (["binarize", "--train", "t.txt", "--valid", "v.txt", "--out",
              str(tmp_path / "bin"), "--seed", "5"], "--valid gives it. Fix: drop --seed"),
            (["train-args", "exp1_fconv", "--data", "d", "--epochs", "5", "--max-update", "10"],
             "--epochs 5 and --max-update 10: a schedule is one of them. Fix: give one"),
            (["train-args", "exp1_fconv", "--field", "arch", "--epochs", "5"],
             "Fix: drop them, or drop --field"),
            (["run", "exp1_fconv", "d", str(tmp_path / "run"), "--epochs", "5", "--max-update",
              "10"], "a schedule is one of them")):
        assert cli(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)
    scan = tmp_path / "scan.txt"
    scan.write_text("kept\n")
    assert cli(["build", "scan", "--out", str(scan)]) == 2
    assert f"{scan} exists. Fix: pass --force to replace it" in capsys.readouterr().err
    assert scan.read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "scan.txt"]


def test_level_dirs_of_a_build_without_levels(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"levels": []}))
    with pytest.raises(BinarizeError, match="lists no levels"):
        level_dirs(tmp_path)


def test_a_build_whose_level_fails_to_binarize_leaves_no_partial_data_bin(tmp_path, capsys):
    """The 0-bit level's training file gets a word outside the grammar: binarize fails on it,
    and the 3-bit level it binarized meanwhile is removed with the new --out."""
    from fairseq_entropy.cli import main as cli

    build = tmp_path / "b"
    assert cli(["build", "exp1", "--out", str(build), "--levels", "0,3", "--n", "60"]) == 0
    train = build / "entropy_0.0" / "train.in"
    lines = train.read_text().splitlines()
    train.write_text("\n".join([*lines[:5], "fly twice", *lines[6:]]) + "\n")
    capsys.readouterr()
    assert cli(["binarize", str(build), "--out", str(tmp_path / "bin"), "--jobs", "2"]) == 2
    assert f"{train}:6" in capsys.readouterr().err
    assert not (tmp_path / "bin").exists()
    # an --out that held a level before: that level stays, the new one goes
    assert cli(["build", "exp1", "--out", str(tmp_path / "ok"), "--levels", "1.5", "--n",
                "60"]) == 0
    assert cli(["binarize", str(tmp_path / "ok"), "--out", str(tmp_path / "bin")]) == 0
    assert cli(["binarize", str(build), "--out", str(tmp_path / "bin"), "--jobs", "2"]) == 2
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["entropy_1.5"]
