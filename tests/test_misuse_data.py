"""Misuse of build, binarize, measure and the quickstart: outputs that would replace their
input, unbounded process counts and sizes, SIGTERM, unknown verbs and the messages' fixes."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairseq_entropy.cli import main
from fairseq_entropy.experiments.grids import GridError, load_grid

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def one_error(capsys, *needles):
    """The single ``error:`` line of the last command, holding every needle and a fix."""
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "error:" in x]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "Fix:" in lines[0], err
    for n in needles:
        assert n in lines[0], err
    return lines[0]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("b") / "exp1"
    assert main(["build", "exp1", "--out", str(out), "--n", "200", "--levels", "0,3"]) == 0
    return out


def tree(path):
    return sorted((str(p.relative_to(path)), p.stat().st_size) for p in path.rglob("*"))


@pytest.mark.parametrize("where", [".", "entropy_3.0", "sub", ".."])
def test_binarize_refuses_an_out_that_is_holds_or_lies_in_its_input(build, where, capsys):
    before = tree(build.parent)
    inp = build / "entropy_3.0" if where == "entropy_3.0" else build
    out = inp if where in (".", "entropy_3.0") else (build / "sub" if where == "sub"
                                                     else build.parent)
    assert main(["binarize", str(inp), "--out", str(out)]) == 2
    how = {".": "is the input", "entropy_3.0": "is the input", "sub": "is inside the input",
           "..": "holds the input"}[where]
    one_error(capsys, f"--out {out} {how} BUILD_DIR")
    assert tree(build.parent) == before  # nothing replaced, nothing left behind


@pytest.mark.parametrize("edit", ["drop the first pair", "swap one verb"])
def test_binarize_refuses_split_files_changed_after_the_build(build, edit, tmp_path, capsys):
    """The copied manifest would state 200 training commands and the build's verb counts."""
    import shutil

    level = tmp_path / "entropy_3.0"
    shutil.copytree(build / "entropy_3.0", level)
    src, tgt = (level / "train.in").read_text().splitlines(True), \
        (level / "train.out").read_text().splitlines(True)
    assert len(src) == 200
    if edit == "drop the first pair":
        src, tgt, needle = src[1:], tgt[1:], "train.in: 199 commands, "
    else:  # one walk becomes a run, in the command and its actions: still a valid pair
        i = next(i for i, line in enumerate(src) if line.split()[0] == "walk")
        from fairseq_entropy.scan.grammar import Grammar

        g = Grammar.paper()
        src[i] = "run" + src[i][len("walk"):]
        tgt[i] = " ".join(g.interpret(g.parse(src[i]))) + "\n"
        needle = "train.in: its slots' verb counts differ from those "
    (level / "train.in").write_text("".join(src))
    (level / "train.out").write_text("".join(tgt))
    assert main(["binarize", str(level), "--out", str(tmp_path / "bin")]) == 2
    one_error(capsys, needle, "records", "the split was changed after the build",
              "Fix: rebuild the level")
    assert not (tmp_path / "bin").exists()


def test_binarize_refuses_an_out_that_holds_a_train_file(tmp_path, capsys):
    (tmp_path / "scan.txt").write_text("IN: walk OUT: I_WALK\n")
    assert main(["binarize", "--train", str(tmp_path / "scan.txt"), "--out", str(tmp_path)]) == 2
    one_error(capsys, "holds the input --train")


@pytest.mark.parametrize("argv, needle", [
    (["binarize", "b", "--out", "o", "--workers", "100000"], "--workers"),
    (["binarize", "b", "--out", "o", "--jobs", str((os.cpu_count() or 1) + 1)], "--jobs"),
    (["build", "exp2", "--out", "o", "--support", "1..99999999999"], "--support"),
])
def test_process_counts_and_ranges_are_bounded(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    one_error(capsys, needle)


def test_a_huge_n_is_refused_at_once_with_the_bound(tmp_path, capsys):
    start = time.monotonic()
    assert main(["build", "exp1", "--out", str(tmp_path / "o"), "--n", "99999999999",
                 "--levels", "0"]) == 2
    one_error(capsys, "N=99999999999", "use N <= 6174")
    assert main(["build", "exp1", "--out", str(tmp_path / "o"), "--n", "1000000",
                 "--levels", "0"]) == 2
    one_error(capsys, "N=1000000", "use N <= 6174")
    assert time.monotonic() - start < 10  # not a timing test: counting to 1e11 takes hours
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("verbs, needle", [
    (["--verbs", "walk,jump,fly"], "unknown verb(s) 'fly'"),
    (["--verbs", "Walk,Jump", "--restricted-verb", "Jump"], "'Walk', 'Jump'"),
    (["--verbs", "walk,jump,walk twice"], "'walk twice'"),
    (["--verbs", "walk,walk,jump"], "walk given more than once"),
])
def test_build_refuses_verbs_outside_the_grammar(tmp_path, verbs, needle, capsys):
    assert main(["build", "exp1", "--out", str(tmp_path / "o"), "--n", "100", *verbs]) == 2
    line = one_error(capsys, "--verbs", needle)
    if "unknown" in needle:
        assert "walk,run,look,jump,sprint,crawl,squat,lunge" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("build_args, needle", [
    ('["--valid-fraction", "2"]', "outside (0, 1)"),
    ('["--restricted-verb", "walk", "--restricted-verb", "run"]', "given twice"),
    ('["--verbs", "walk,fly"]', "'fly'"),
    ('["--component", "direction", "--restricted", "around"]', "not a value of --component"),
    ('["--verbs", "walk,run", "--restricted-verb", "jump"]', "not in the verbs walk,run"),
])
def test_grid_build_args_are_checked_as_build_checks_them(tmp_path, build_args, needle):
    grid = tmp_path / "g.toml"
    grid.write_text('experiment = "exp1"\npresets = ["exp1_cnn_authors"]\nlevels = [0]\n'
                    f'seeds = [1]\nbuild_args = {build_args}\n')
    with pytest.raises(GridError, match="g.toml:5: build_args: ") as e:
        load_grid(grid)
    assert needle in str(e.value) and "Fix:" in str(e.value)


def test_messages_name_their_fix(tmp_path, capsys):
    assert main(["binarize", "b", "--out", "o", "--train", "scan.txt"]) == 2
    one_error(capsys, "not both")
    sub = tmp_path / "d"
    sub.mkdir()
    (sub / "u16.in").write_bytes("walk\n".encode("utf-16"))
    (sub / "u16.out").write_text("WALK\n")
    assert main(["measure", str(sub / "u16.in")]) == 2
    one_error(capsys, f"iconv -f utf-16 -t utf-8 {sub / 'u16.in'} > {sub / 'u16.utf8.in'}")
    with pytest.raises(SystemExit):
        main(["measure", "x.txt", "--components", ""])
    one_error(capsys, "verb,direction for component classes")
    (tmp_path / "e.in").write_text("")
    (tmp_path / "e.out").write_text("")
    assert main(["measure", str(tmp_path / "e.in")]) == 2
    one_error(capsys, f"{tmp_path / 'e.in'} holds no commands")


def cli(*args):
    return subprocess.Popen([sys.executable, "-m", "fairseq_entropy.cli", *args], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def children(pid):
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,pgid="], capture_output=True, text=True)
    rows = [tuple(map(int, r.split())) for r in out.stdout.splitlines()]
    return [r[0] for r in rows if r[1] == pid or (r[2] == pid and r[0] != pid)]


def test_sigterm_stops_build_like_ctrl_c(tmp_path):
    out = tmp_path / "o"
    p = cli("build", "exp1", "--out", str(out))
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("**/.*partial*")) and time.monotonic() < deadline:
        time.sleep(0.02)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert err.strip().count("\n") == 0 and "stopped" in err
    assert err.strip().endswith("Fix: run the same command again")
    assert not list(tmp_path.glob("**/.*partial*"))


def test_sigterm_stops_binarize_and_its_workers(build, tmp_path):
    out = tmp_path / "bin"
    p = cli("binarize", str(build), "--out", str(out), "--jobs", "2")
    deadline = time.monotonic() + 60
    while len(children(p.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    kids = children(p.pid)
    assert kids, "binarize started no worker"
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert "binarize: interrupted by SIGTERM and stopped" in err and "Traceback" not in err
    time.sleep(0.5)
    alive = [k for k in kids if subprocess.run(["ps", "-p", str(k), "-o", "stat="],
                                               capture_output=True, text=True).stdout.strip()
             not in ("", "Z")]
    assert not alive
    assert not list(tmp_path.glob("**/.*partial*"))


def test_quickstart_help_and_a_failed_build_leave_nothing_that_refuses_the_fix(tmp_path):
    qs = str(ROOT / "recipes" / "quickstart.sh")
    r = subprocess.run(["bash", qs, "--help"], capture_output=True, text=True, env=ENV)
    assert r.returncode == 0
    for var in ("DECODE_SAMPLE", "SCORE_BEST", "N ", "MAX_UPDATE", "BUILD_ARGS", "OUT"):
        assert f"\n  {var}" in r.stdout
    env = {**ENV, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "OUT": str(tmp_path / "q1"), "LEVELS": "0", "BUILD_ARGS": "--componet direction"}
    r = subprocess.run(["bash", qs], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "--componet" in r.stderr
    assert not (tmp_path / "q1" / ".data-args").exists()
    (tmp_path / "q2").mkdir()
    (tmp_path / "q2" / ".data-args").write_text("BUILD_ARGS=--n 5 BINARIZE_ARGS=\n")
    r = subprocess.run(["bash", qs], capture_output=True, text=True,
                       env={**env, "OUT": str(tmp_path / "q2"), "BUILD_ARGS": ""})
    assert r.returncode == 2 and r.stderr.startswith("error: OUT=") and "Fix:" in r.stderr
