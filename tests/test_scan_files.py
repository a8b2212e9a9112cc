"""Binarizing SCAN-format files: held-out validation split, manifest, scoring on the result."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_entropy.analysis.scoring import split_commands
from fairseq_entropy.cli import main as cli
from fairseq_entropy.scan.grammar import Grammar

TRAIN = ["IN: jump OUT: I_JUMP", "IN: walk and run OUT: I_WALK I_RUN",
         "IN: run after look OUT: I_LOOK I_RUN", "IN: look and walk OUT: I_LOOK I_WALK"]
VALID = ["IN: walk OUT: I_WALK", "IN: turn left OUT: I_TURN_LEFT"]
TEST = ["IN: walk and jump OUT: I_WALK I_JUMP", "IN: jump after walk OUT: I_WALK I_JUMP"]


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_manifest_of_scan_files(tmp_path, capsys):
    train, valid, test = (write(tmp_path / f"{n}.txt", lines)
                          for n, lines in (("train", TRAIN), ("valid", VALID), ("test", TEST)))
    out = tmp_path / "bin" / "scan_toy"
    assert cli(["binarize", "--grammar", "scan", "--train", str(train), "--valid", str(valid),
                "--test", str(test), "--out", str(out)]) == 0
    assert "(verb, slot) pairs in test but not in train: (jump, second)" in \
        capsys.readouterr().out
    man = json.loads((out / "manifest.json").read_text())
    assert man["experiment"] == "scan" and man["level"] == "scan_toy"
    assert man["grammar"] == "scan" and man["sizes"] == {"train": 4, "valid": 2, "test": 2}
    for split, path in (("train", train), ("valid", valid), ("test", test)):
        assert man["sources"][split] == {"path": str(path.resolve()), "lines": len(
            path.read_text().splitlines()), "sha256": hashlib.sha256(
            path.read_bytes()).hexdigest()}
    # train has jump only alone (first slot); the test set executes it second
    assert man["restricted_pairs"] == [["jump", "second"]]
    # the controlled slot is where jump was seen: the first (one-clause commands count there).
    # First slot of train: jump (jump), walk (walk and run), look (run after look), look
    # (look and walk): p = 1/4, 1/4, 1/2
    h = 1.5
    assert man["controlled_slot"] == "first"
    assert man["entropy_bits"] == pytest.approx(h, abs=1e-6)
    assert man["valid"] == {"file": str(valid.resolve())}
    # the binarized test split decodes to the test commands, as fairseq-generate prints them
    assert split_commands(out, "test") == ["walk and jump", "jump after walk"]


def many_commands(n):
    """n valid SCAN lines: every clause of walk/run/look, one- and two-clause."""
    verbs = ["walk", "run", "look"]
    mods = ["", " left", " right", " twice", " opposite left", " around right thrice"]
    out = []
    for v in verbs:
        for m in mods:
            for w in verbs:
                out.append(f"IN: {v}{m} and {w} OUT: ")
    out = out[:n]
    g = Grammar.scan()
    return [line + " ".join(g.interpret(line[4:-6])) for line in out]


@pytest.mark.slow
def test_validation_is_held_out_of_train_with_a_seed(tmp_path, capsys):
    lines = many_commands(40)
    train = write(tmp_path / "train.txt", lines)
    test = write(tmp_path / "test.txt", TEST)

    def binarize(out, *extra):
        assert cli(["binarize", "--train", str(train), "--test", str(test), "--out",
                    str(tmp_path / out), *extra]) == 0
        return json.loads((tmp_path / out / "manifest.json").read_text())

    man = binarize("a", "--valid-fraction", "0.1", "--seed", "3")
    printed = capsys.readouterr().out
    assert "held out 4 of the 40 commands of" in printed and "(fraction 0.1, seed 3)" in printed
    assert man["sizes"] == {"train": 36, "valid": 4, "test": 2}
    assert man["valid"] == {"held_out_from": "train", "fraction": 0.1, "seed": 3}
    commands = [line[4:line.index(" OUT:")] for line in lines]
    a_train, a_valid = split_commands(tmp_path / "a", "train"), \
        split_commands(tmp_path / "a", "valid")
    # a partition of the file, each part in file order
    assert sorted(a_train + a_valid) == sorted(commands)
    assert a_train == [c for c in commands if c in a_train]
    assert a_valid == [c for c in commands if c in a_valid]
    # same seed, same bytes; another seed, another draw
    binarize("b", "--valid-fraction", "0.1", "--seed", "3")
    for f in ("valid.in-out.in.bin", "train.in-out.out.bin", "manifest.json"):
        a, b = (tmp_path / d / f for d in ("a", "b"))
        if f == "manifest.json":
            assert json.loads(a.read_text())["sizes"] == json.loads(b.read_text())["sizes"]
        else:
            assert a.read_bytes() == b.read_bytes()
    binarize("c", "--valid-fraction", "0.1", "--seed", "4")
    assert split_commands(tmp_path / "c", "valid") != a_valid
    # the default: 5% (2 of 40), seed 1
    man = binarize("d")
    assert man["sizes"]["valid"] == 2 and man["valid"]["fraction"] == 0.05
    # a fraction leaving nothing to validate on is refused
    assert cli(["binarize", "--train", str(train), "--out", str(tmp_path / "e"),
                "--valid-fraction", "0.01"]) == 2
    assert "leaves 40 for training and 0 for validation" in capsys.readouterr().err
    assert cli(["binarize", "--train", str(train), "--valid", str(train), "--out",
                str(tmp_path / "e"), "--valid-fraction", "0.1"]) == 2
    assert "--valid FILE and --valid-fraction both given" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()


def test_score_on_binarized_scan_data(tmp_path, capsys):
    train = write(tmp_path / "train.txt", many_commands(40))
    test = write(tmp_path / "test.txt", TEST)
    out = tmp_path / "bin"
    assert cli(["binarize", "--train", str(train), "--test", str(test), "--out", str(out)]) == 0
    gen = write(tmp_path / "gen.txt", [
        "S-1\tjump after walk", "T-1\tI_WALK I_JUMP", "H-1\t-0.1\tI_WALK I_JUMP",
        "D-1\t-0.1\tI_WALK I_JUMP", "S-0\twalk and jump", "T-0\tI_WALK I_JUMP",
        "H-0\t-0.2\tI_WALK I_WALK", "D-0\t-0.2\tI_WALK I_WALK"])
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--data", str(out),
                "--preset", "scan_equivariant", "--seed", "1",
                "--unverified", "--checkpoint", "last"]) == 0
    rec = json.loads((tmp_path / "s" / "score.json").read_text())
    assert rec["accuracy"] == 0.5 and rec["experiment"] == "scan" and rec["level"] == "bin"
    assert rec["grammar"] == "scan" and rec["n_train"] == 38 and rec["data_seed"] == 1
    assert cli(["aggregate", str(tmp_path / "s"), "--out", str(tmp_path / "r")]) == 0
    assert "scan       scan_equivariant" in capsys.readouterr().out
    # a decode of other data with the same number of commands is refused
    (tmp_path / "gen2.txt").write_text(gen.read_text().replace("jump after walk", "jump after "
                                                               "look"))
    assert cli(["score", str(tmp_path / "gen2.txt"), "--out", str(tmp_path / "s2"), "--data",
                str(out), "--preset", "scan_equivariant", "--seed", "1",
                "--unverified", "--checkpoint", "last"]) == 2
    assert "sample 1 is 'jump after look' but command 1" in capsys.readouterr().err


def test_user_dir_prints_the_absolute_package_path(tmp_path):
    res = subprocess.run([sys.executable, "-m", "fairseq_entropy.cli", "user-dir"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0
    path = Path(res.stdout.strip())
    assert path.is_absolute()
    assert path == Path(__file__).resolve().parents[1] / "fairseq_entropy"
