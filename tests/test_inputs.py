"""Malformed input and options are refused with the file, line and fix; outputs keep the
umask and leave no temporary files behind."""
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_entropy.cli import main as cli
from fairseq_entropy.scan.builders import build_exp1, build_exp2
from fairseq_entropy.scan.levels import BuildError
from fairseq_entropy.files import atomic_directory, atomic_write_text, remove_stale_partials
from fairseq_entropy.scan.grammar import Grammar

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- empty splits
def test_build_refuses_an_empty_validation_split(tmp_path, capsys):
    out = tmp_path / "tiny"
    # N=10 at 0 bits: 5% of 10 rounds to 0 validation commands
    assert cli(["build", "exp1", "--levels", "0", "--n", "10", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "level entropy_0.0: the valid split would be empty (train 10, valid 0, test 7056)" \
        in err and "Fix: raise --n" in err
    assert not out.exists()
    # 0.001 of a 441-command cell rounds to 0 in every cell of Experiment 2
    with pytest.raises(BuildError, match="the valid split would be empty"):
        build_exp2(Grammar.paper(), [1], valid_fraction=0.001)
    # 24 x 0.05 rounds to 1 validation command, which is enough
    assert len(build_exp1(Grammar.paper(), [3], n=24)[0].splits["valid"]) == 1


def make_level(root: Path, train, valid, test):
    root.mkdir(parents=True)
    for split, pairs in (("train", train), ("valid", valid), ("test", test)):
        (root / f"{split}.in").write_text("".join(c + "\n" for c, _ in pairs))
        (root / f"{split}.out").write_text("".join(a + "\n" for _, a in pairs))
    return root


PAIRS = [("walk", "WALK"), ("jump twice", "JUMP JUMP"), ("run left", "LTURN RUN")]


@pytest.mark.parametrize("empty", ["train", "valid", "test"])
def test_binarize_refuses_an_empty_split(tmp_path, capsys, empty):
    splits = {s: PAIRS for s in ("train", "valid", "test")}
    splits[empty] = []
    level = make_level(tmp_path / "lv", **splits)
    assert cli(["binarize", str(level), "--out", str(tmp_path / "bin")]) == 2
    err = capsys.readouterr().err
    assert f"{level / empty}.in is empty" in err and "Fix:" in err
    assert not (tmp_path / "bin").exists()


def test_binarize_refuses_train_without_valid(tmp_path, capsys):
    level = make_level(tmp_path / "lv", PAIRS, PAIRS, PAIRS)
    (level / "valid.in").unlink()
    (level / "valid.out").unlink()
    assert cli(["binarize", str(level), "--out", str(tmp_path / "bin")]) == 2
    assert "no valid.in; fairseq-train needs a validation split" in capsys.readouterr().err


def test_binarize_checks_every_pair_with_the_interpreter(tmp_path, capsys):
    # every word is in the dictionary, but line 2's actions are not those of its command
    level = make_level(tmp_path / "lv", [PAIRS[0], ("jump twice", "JUMP"), PAIRS[2]],
                       PAIRS, PAIRS)
    assert cli(["binarize", str(level), "--out", str(tmp_path / "bin")]) == 2
    err = capsys.readouterr().err
    assert f"{level / 'train.in'}:2: the actions do not match the command 'jump twice'" in err
    assert "gives 'JUMP JUMP'" in err
    assert not (tmp_path / "bin").exists()


# ----------------------------------------------------------------------------- numeric options
@pytest.mark.parametrize("argv", [
    ["build", "exp1", "--valid-fraction", "1.5"],
    ["build", "exp1", "--valid-fraction", "0"],
    ["build", "exp2", "--valid-fraction", "-0.1"],
    ["build", "exp1", "--n", "0"],
    ["build", "exp1", "--seed", "-1"],
    ["binarize", "--train", "x.txt", "--valid-fraction", "1"],
    ["binarize", "--train", "x.txt", "--workers", "0"],
    ["train-args", "exp1_fconv", "--data", ".", "--epochs", "0"],
    ["train-args", "exp1_fconv", "--data", ".", "--max-update", "-5"],
    ["score", "gen.txt", "--seed", "-2"],
    ["score", "gen.txt", "--checkpoint", "bets"],
])
def test_numeric_options_are_range_checked(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli(argv + ["--out", str(tmp_path / "o")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "expected" in err or "invalid choice" in err
    assert not (tmp_path / "o").exists()


def test_builders_range_check_the_fraction_themselves():
    with pytest.raises(BuildError, match=r"validation fraction 1.5 is outside \(0, 1\)"):
        build_exp1(Grammar.paper(), [3], n=100, valid_fraction=1.5)
    with pytest.raises(BuildError, match=r"outside \(0, 1\)"):
        build_exp2(Grammar.paper(), [1], valid_fraction=1.0)


# ----------------------------------------------------------------------------- encodings, dirs
def test_latin1_files_are_named_with_file_and_line(tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("IN: walk OUT: I_WALK\nIN: jump OUT: I_JUMP caf\xe9\n".encode("latin-1"))
    assert cli(["measure", str(bad)]) == 2
    err = capsys.readouterr().err
    # "IN: jump OUT: I_JUMP caf" has 24 bytes: 0xe9 is the 25th byte of line 2
    assert f"{bad}:2: not valid UTF-8 (byte 0xe9 at column 25)" in err and "iconv" in err
    assert cli(["binarize", "--train", str(bad), "--out", str(tmp_path / "b")]) == 2
    assert f"{bad}:2: not valid UTF-8" in capsys.readouterr().err
    level = make_level(tmp_path / "lv", PAIRS, PAIRS, PAIRS)
    (level / "test.out").write_bytes(b"WALK\nJUMP JUMP\nLTURN \xff\n")
    assert cli(["binarize", str(level), "--out", str(tmp_path / "b")]) == 2
    assert f"{level / 'test.out'}:3: not valid UTF-8 (byte 0xff at column 7)" \
        in capsys.readouterr().err
    assert cli(["measure", str(level / "test.in")]) == 2
    assert f"{level / 'test.out'}:3: not valid UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_directories_given_as_files_are_named(tmp_path, capsys):
    d = tmp_path / "adir"
    d.mkdir()
    assert cli(["measure", str(d)]) == 2
    err = capsys.readouterr().err
    assert f"{d} is a directory, not a file. Fix: pass a file inside it" in err
    assert "Errno" not in err
    assert cli(["measure", str(REPO / "README.md"), "--train", str(d)]) == 2
    assert f"{d} is a directory" in capsys.readouterr().err
    assert cli(["binarize", "--train", str(d), "--out", str(tmp_path / "b")]) == 2
    assert f"{d} is a directory" in capsys.readouterr().err
    level = make_level(tmp_path / "lv", PAIRS, PAIRS, PAIRS)
    (level / "manifest.json").write_text(json.dumps({"experiment": "exp1", "sizes": {}}))
    assert cli(["score", str(d), "--out", str(tmp_path / "s"), "--data", str(level),
                "--preset", "exp1_fconv", "--seed", "1",
                "--unverified", "--checkpoint", "last"]) == 2
    assert f"{d} is a directory, not a file" in capsys.readouterr().err
    assert cli(["score", str(level / "test.in"), "--out", str(tmp_path / "s"), "--data",
                str(d), "--preset", "exp1_fconv", "--seed", "1",
                "--unverified", "--checkpoint", "last"]) == 2
    assert f"{d}/manifest.json not found" in capsys.readouterr().err


def test_files_given_where_output_directories_go_are_named(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x\n")
    assert cli(["build", "exp1", "--levels", "3", "--n", "64", "--out", str(f)]) == 2
    assert f"{f} is a file. Fix: --out names the directory" in capsys.readouterr().err
    assert cli(["build", "exp1", "--levels", "3", "--n", "64", "--out", str(f / "sub")]) == 2
    assert f"{f} is a file, but {f / 'sub' / 'manifest.json'} needs it to be a directory" in \
        capsys.readouterr().err
    level = make_level(tmp_path / "lv", PAIRS, PAIRS, PAIRS)
    assert cli(["binarize", str(level), "--out", str(f)]) == 2
    assert f"{f} is a file, not a directory" in capsys.readouterr().err
    # no score.json at all (a root that does not hold --out: an --out inside a root is refused
    # before anything else)
    assert cli(["aggregate", str(tmp_path / "lv"), "--out", str(f)]) == 2
    assert f"no score.json under {tmp_path / 'lv'}" in capsys.readouterr().err
    assert f.read_text() == "x\n"


# ----------------------------------------------------------------------------- recipes
@pytest.mark.parametrize("script,argv", [("train_level.sh", []),
                                         ("train_level.sh", ["exp1_fconv", "data"]),
                                         ("quickstart.sh", ["extra"])])
def test_recipes_print_usage(script, argv):
    res = subprocess.run(["bash", str(REPO / "recipes" / script), *argv], capture_output=True,
                         text=True)
    assert res.returncode == 2
    assert res.stderr.startswith("usage: ") and "unbound variable" not in res.stderr


# ----------------------------------------------------------------------------- outputs
@pytest.fixture
def umask_002():
    old = os.umask(0o002)
    yield
    os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_outputs_respect_the_umask(tmp_path, umask_002):
    out = tmp_path / "data"
    assert cli(["build", "exp1", "--levels", "3", "--n", "64", "--out", str(out)]) == 0
    level = out / "entropy_3.0"
    assert mode(level) == 0o775  # mkdtemp alone gives 0700
    assert mode(level / "train.in") == 0o664 and mode(out / "manifest.json") == 0o664
    os.umask(0o022)
    assert cli(["binarize", str(out), "--out", str(tmp_path / "bin")]) == 0
    assert mode(tmp_path / "bin" / "entropy_3.0") == 0o755
    assert mode(tmp_path / "bin" / "entropy_3.0" / "manifest.json") == 0o644


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temporaries_of_interrupted_writes_are_removed_by_the_next_write(tmp_path):
    host = socket.gethostname()
    pid = dead_pid()
    stale_file = tmp_path / f".score.json.partial.{pid}.{host}.abc123"
    stale_file.write_text("{")
    stale_dir = tmp_path / f".entropy_3.0.partial.{pid}.{host}.xyz"
    stale_dir.mkdir()
    (stale_dir / "train.in").write_text("walk\n")
    live = tmp_path / f".score.json.partial.{os.getpid()}.{host}.live"  # a write in progress
    live.write_text("{")
    other_host = tmp_path / f".score.json.partial.{pid}.elsewhere.{host}x.q"
    other_host.write_text("{")
    atomic_write_text(tmp_path / "score.json", "{}\n")
    assert not stale_file.exists() and live.exists() and other_host.exists()
    with atomic_directory(tmp_path / "entropy_3.0") as tmp:
        (tmp / "x").write_text("1")
    assert not stale_dir.exists() and (tmp_path / "entropy_3.0" / "x").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.name, other_host.name, "score.json", "entropy_3.0"])
    assert remove_stale_partials(tmp_path / "score.json") == []


def test_an_interrupted_build_leaves_temporaries_the_next_build_removes(tmp_path):
    out = tmp_path / "data"
    code = ("import os, sys\n"
            "from fairseq_entropy.scan import datafiles\n"
            "real = datafiles.write_pair\n"
            "def killed(prefix, ex):\n"
            "    real(prefix, ex)\n"
            "    if str(prefix).endswith('valid'): os._exit(9)\n"
            "datafiles.write_pair = killed\n"
            "import fairseq_entropy.scan.manifests as b\n"
            "b.write_pair = killed\n"
            "from fairseq_entropy.cli import main\n"
            f"main(['build', 'exp1', '--levels', '3', '--n', '64', '--out', {str(out)!r}])\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert res.returncode == 9
    left = [p.name for p in out.iterdir() if ".partial." in p.name]
    assert len(left) == 1 and left[0].startswith(".entropy_3.0.partial.")
    assert cli(["build", "exp1", "--levels", "3", "--n", "64", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["entropy_3.0", "manifest.json"]
    assert json.loads((out / "entropy_3.0" / "manifest.json").read_text())["sizes"]["valid"] == 3
