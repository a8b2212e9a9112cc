"""SCAN-format files of a stated experiment (``binarize --experiment``), e.g. the paper
authors' own files: checked against the experiment, recorded as one of its levels, trained by
its presets through ``run`` and ``sweep``."""
import json
import math
from collections import Counter
from pathlib import Path

import pytest

from fairseq_entropy.cli import main as cli
from fairseq_entropy.experiments.grids import GridError, load_grid

N_TEST = 40  # test commands kept: enough to score, few enough to decode in seconds


def scan_lines(level: Path, split: str, limit=None) -> list:
    """A built level's split as SCAN-format lines (the authors' file format)."""
    ins = (level / f"{split}.in").read_text().splitlines()
    outs = (level / f"{split}.out").read_text().splitlines()
    return [f"IN: {i} OUT: {o}" for i, o in zip(ins, outs)][:limit]


def write(path: Path, lines) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def first_and_second(command: str):
    """(verb executed first, verb executed second) of a two-clause command, by hand: "X and
    Y" runs X first, "X after Y" runs Y first; None for a one-clause command."""
    words = command.split()
    for conj in ("and", "after"):
        if conj in words:
            i = words.index(conj)
            left, right = words[0], words[i + 1]
            return (left, right) if conj == "and" else (right, left)
    return None


def entropy_of(counts: Counter) -> float:
    n = sum(counts.values())
    return -sum(c / n * math.log2(c / n) for c in counts.values())


@pytest.fixture(scope="module")
def exp1_files(tmp_path_factory):
    """An Experiment 1 level at 2 bits (N = 400) written out as SCAN files."""
    tmp = tmp_path_factory.mktemp("exp1")
    assert cli(["build", "exp1", "--out", str(tmp / "build"), "--levels", "2", "--n", "400",
                "--seed", "3"]) == 0
    level = tmp / "build" / "entropy_2.0"
    train = write(tmp / "high_20.txt", scan_lines(level, "train") + scan_lines(level, "valid"))
    test = write(tmp / "test.txt", scan_lines(level, "test", N_TEST))
    return tmp, train, test


def test_an_exp1_file_is_checked_and_recorded_as_a_level_of_exp1(exp1_files, capsys):
    tmp, train, test = exp1_files
    out = tmp / "bin" / "high_20"
    assert cli(["binarize", "--grammar", "paper", "--train", str(train), "--valid",
                str(train), "--test", str(test), "--experiment", "exp1", "--out",
                str(out)]) == 0
    printed = capsys.readouterr().out
    m = json.loads((out / "manifest.json").read_text())
    assert (m["experiment"], m["restricted_verb"], m["controlled_slot"]) == \
        ("exp1", "jump", "second")
    # the second slot's entropy of the training file, counted here from the commands
    second = Counter(first_and_second(line.split(" OUT:")[0][4:])[1]
                     for line in train.read_text().splitlines()
                     if first_and_second(line.split(" OUT:")[0][4:]))
    assert m["entropy_bits"] == pytest.approx(entropy_of(second), abs=1e-6)
    assert abs(m["entropy_bits"] - 2.0) < 0.05
    assert f"second slot entropy {m['entropy_bits']:.4f} bits" in printed
    assert "a level of exp1 (checked: jump never executed first in training)" in printed


def test_the_presets_of_the_stated_experiment_train_it_and_scan_levels_name_the_fix(
        exp1_files, capsys):
    tmp, train, test = exp1_files
    plain, stated = tmp / "bin" / "plain", tmp / "bin" / "stated"
    for out, extra in ((plain, []), (stated, ["--experiment", "exp1"])):
        assert cli(["binarize", "--grammar", "paper", "--train", str(train), "--test",
                    str(test), "--out", str(out), *extra]) == 0
    capsys.readouterr()
    assert cli(["train-args", "exp1_transformer_sinusoidal", "--data", str(plain)]) == 2
    err = capsys.readouterr().err
    assert "a level of scan, but the preset" in err and "an scan" not in err
    assert "fairseq-entropy binarize --experiment exp1" in err
    assert cli(["train-args", "exp1_transformer_sinusoidal", "--data", str(stated)]) == 0


def test_the_authors_style_exp1_file_trains_through_run(exp1_files, tmp_path):
    tmp, train, test = exp1_files
    data = tmp_path / "bin"
    assert cli(["binarize", "--grammar", "paper", "--train", str(train), "--test", str(test),
                "--experiment", "exp1", "--out", str(data)]) == 0
    run = tmp_path / "run"
    assert cli(["run", "exp1_transformer_sinusoidal", str(data), str(run), "--max-update",
                "4", "--device", "cpu", "--no-score-best"]) == 0
    score = json.loads((run / "last" / "score.json").read_text())
    assert score["n"] == N_TEST and score["seed"] == 1


def test_the_authors_style_exp1_file_trains_through_sweep(exp1_files, tmp_path, capsys):
    tmp, train, test = exp1_files
    data = tmp_path / "bin" / "high_20"
    assert cli(["binarize", "--grammar", "paper", "--train", str(train), "--test", str(test),
                "--experiment", "exp1", "--out", str(data)]) == 0
    grid = write(tmp_path / "authors.toml", [
        'experiment = "exp1"', 'presets = ["exp1_transformer_sinusoidal"]', "levels = [2]",
        "seeds = [7]", "schedule = {max_update = 4}", "[data]", '"2" = "bin/high_20"'])
    root = tmp_path / "sweep"
    assert cli(["sweep", str(grid), "--root", str(root), "--jobs", "1"]) == 0
    run = root / "runs" / "exp1" / "exp1_transformer_sinusoidal" / "seed7" / "entropy_2.0"
    score = json.loads((run / "last" / "score.json").read_text())
    assert score["n"] == N_TEST and score["seed"] == 7
    assert not (root / "data").exists() and not (root / "data-bin").exists()


def test_a_file_that_contradicts_exp1_is_refused_with_its_line(exp1_files, tmp_path, capsys):
    tmp, train, test = exp1_files
    lines = train.read_text().splitlines()
    lines.insert(6, "IN: walk twice after jump left OUT: LTURN JUMP WALK WALK")
    bad = write(tmp_path / "bad.txt", lines)
    out = tmp_path / "bin"
    assert cli(["binarize", "--grammar", "paper", "--train", str(bad), "--test", str(test),
                "--experiment", "exp1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:7: 'walk twice after jump left' executes jump first" in err
    assert "Fix: remove the command" in err and not out.exists()
    # a test file without the tested pair (jump executed first) is refused too
    assert cli(["binarize", "--grammar", "paper", "--train", str(train), "--test", str(train),
                "--experiment", "exp1", "--out", str(out)]) == 2
    assert "no command executes jump first" in capsys.readouterr().err and not out.exists()


@pytest.fixture(scope="module")
def exp2_files(tmp_path_factory):
    """An Experiment 2 level of support size 3 written out as SCAN files."""
    tmp = tmp_path_factory.mktemp("exp2")
    assert cli(["build", "exp2", "--out", str(tmp / "build"), "--support", "3", "--seed",
                "3"]) == 0
    level = tmp / "build" / "support_3"
    train = write(tmp / "full_3.txt", scan_lines(level, "train"))
    test = write(tmp / "test.txt", scan_lines(level, "test", N_TEST))
    built = json.loads((level / "manifest.json").read_text())
    return tmp, train, test, built


def test_an_exp2_file_records_its_support_and_is_checked(exp2_files, tmp_path, capsys):
    tmp, train, test, built = exp2_files
    out = tmp_path / "bin"
    assert cli(["binarize", "--grammar", "paper", "--train", str(train), "--test", str(test),
                "--experiment", "exp2", "--support", "3", "--out", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    first = Counter(first_and_second(line.split(" OUT:")[0][4:])[0]
                    for line in train.read_text().splitlines()
                    if first_and_second(line.split(" OUT:")[0][4:]))
    assert m["experiment"] == "exp2" and m["controlled_slot"] == "first"
    assert m["support"][0] == "lunge" and set(m["support"]) == set(first) == \
        set(built["support"])
    assert capsys.readouterr().out.count("(k = 3)") == 1
    assert cli(["train-args", "exp2_transformer_l2", "--data", str(out)]) == 0
    # the wrong support size, and a command executing lunge second, are refused
    assert cli(["binarize", "--grammar", "paper", "--train", str(train), "--test", str(test),
                "--experiment", "exp2", "--support", "4", "--out", str(tmp_path / "b4")]) == 2
    assert "not --support 4. Fix: pass --support 3" in capsys.readouterr().err
    lines = train.read_text().splitlines()
    lines.insert(0, "IN: walk and lunge OUT: WALK LUNGE")
    bad = write(tmp_path / "bad.txt", lines)
    assert cli(["binarize", "--grammar", "paper", "--train", str(bad), "--test", str(test),
                "--experiment", "exp2", "--out", str(tmp_path / "b5")]) == 2
    assert f"{bad}:1: 'walk and lunge' executes lunge second" in capsys.readouterr().err


@pytest.mark.parametrize("args,text", [
    (["--support", "3"], "describe the experiment stated with --experiment"),
    (["--restricted-verb", "walk"], "describe the experiment stated with --experiment"),
    (["--experiment", "exp1", "--support", "3"], "--support 3 applies to Experiment 2"),
    (["--experiment", "exp1", "--restricted-verb", "fly"], "not a verb of the paper grammar"),
    (["--experiment", "exp2", "--support", "9"], "the paper grammar has 8 verbs"),
])
def test_bad_stated_options_are_refused(exp1_files, tmp_path, capsys, args, text):
    tmp, train, test = exp1_files
    out = tmp_path / "bin"
    assert cli(["binarize", "--grammar", "paper", "--train", str(train), "--test", str(test),
                "--out", str(out), *args]) == 2
    assert text in capsys.readouterr().err and not out.exists()


def test_a_build_directory_takes_no_stated_experiment(exp1_files, tmp_path, capsys):
    tmp, _, _ = exp1_files
    assert cli(["binarize", str(tmp / "build"), "--experiment", "exp1", "--out",
                str(tmp_path / "bin")]) == 2
    assert "a build directory records its own" in capsys.readouterr().err


def test_grid_data_must_be_levels_of_the_grid_experiment(exp1_files, tmp_path):
    tmp, train, test = exp1_files
    assert cli(["binarize", "--grammar", "paper", "--train", str(train), "--test", str(test),
                "--out", str(tmp_path / "plain")]) == 0
    assert cli(["binarize", "--grammar", "paper", "--train", str(train), "--test", str(test),
                "--experiment", "exp1", "--out", str(tmp_path / "stated")]) == 0
    head = ['experiment = "exp1"', 'presets = ["exp1_transformer_sinusoidal"]', "seeds = [1]"]
    cases = [
        (["levels = [2]", "[data]", '"2" = "plain"'], "is a level of scan, the grid of exp1. "
         "Fix: binarize its files again with fairseq-entropy binarize --experiment exp1"),
        (["levels = [2, 3]", "[data]", '"2" = "stated"'], "no directory for level(s) 3"),
        (["levels = [3]", "[data]", '"3" = "stated"'], "not 3. Fix: key it by its entropy"),
        (["levels = [2]", "[data]", '"2" = "nosuch"'], "no manifest.json"),
        (["levels = [2]", "n = [400]", "[data]", '"2" = "stated"'], "n and data are both"),
        (["levels = [2]", "[data]", '"1" = "stated"'], "data key '1' is not a level"),
    ]
    for lines, text in cases:
        grid = write(tmp_path / "g.toml", head + lines)
        with pytest.raises(GridError, match=None) as e:
            load_grid(grid)
        assert text in str(e.value), (lines, str(e.value))
    grid = write(tmp_path / "g.toml", head + ["levels = [2]", "[data]", '"2" = "stated"'])
    (cell,) = load_grid(grid).cells()
    assert cell.n is None and cell.databin("root") == (tmp_path / "stated").resolve()
