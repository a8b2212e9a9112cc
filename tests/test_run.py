"""One run as one function (experiments/run.py), ``fairseq-entropy run`` (cli/run.py) and the
thin ``recipes/train_level.sh`` that calls it."""
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairseq_entropy.cli import main as cli
from fairseq_entropy.experiments.locks import LOCKED_EXIT, RunLock
from fairseq_entropy.experiments.presets import PresetError
from fairseq_entropy.experiments.fairseq_train import RUN_OWNED_ARGS
from fairseq_entropy.experiments.run import (DataDirError, console_line, run_level, scored)
from fairseq_entropy.files import pid_alive
from _toy import tiny_level  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def env(**extra):
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                OMP_NUM_THREADS="1", **extra)


@pytest.fixture(scope="module")
def databin(tmp_path_factory):
    """One binarized level: 320 training commands, 48 of the 7056 test commands."""
    tmp = tmp_path_factory.mktemp("level")
    return tiny_level(tmp / "data", tmp / "bin")


def test_console_lines_keep_validation_progress_and_errors_only():
    valid = ("2026-01-01 10:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss "
             "3.1 | seq_acc 0.25 | wps 1 | num_updates 10 | best_seq_acc 0.25\n")
    assert console_line(valid, "entropy_3.0") == \
        " [entropy_3.0] 2026-01-01 10:00:00 | INFO | valid | epoch 001 | valid on 'valid' " \
        "subset seq_acc 0.25 num_updates 10"
    progress = "2026 | INFO | fairseq_entropy.tasks.systematicity | progress: epoch 1/8 | x\n"
    assert console_line(progress, "r") == " [r] progress: epoch 1/8 | x"
    test = "2026 | INFO | valid | valid on 'test' subset | loss 2.0 | num_updates 10\n"
    assert console_line(test, "r") == f" [r] {test.strip()}"
    assert console_line("2026 | INFO | fairseq_cli.train | done training in 3.0 seconds",
                        "r").endswith("done training in 3.0 seconds")
    assert console_line("RuntimeError: boom", "r") == " [r] RuntimeError: boom"
    assert console_line("2026 | INFO | train | epoch 001 | loss 3.2", "r") is None


FAKE_CLI = """#!/usr/bin/env bash
printf '%s\\n' "$@" > "$ARGS_OUT"
"""


def test_recipe_maps_its_environment_to_run_options(tmp_path):
    fake = tmp_path / "bin" / "fairseq-entropy"
    fake.parent.mkdir()
    fake.write_text(FAKE_CLI)
    fake.chmod(0o755)
    out = tmp_path / "args.txt"
    base = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
                ARGS_OUT=str(out))
    for k in ("SEED", "EPOCHS", "MAX_UPDATE", "DEVICE", "GEN_BATCH", "VALID_BATCH",
              "SCORE_BEST", "SELECT", "PRESETS", "USER_DIR"):
        base.pop(k, None)
    recipe = ["bash", str(REPO / "recipes" / "train_level.sh"), "exp1_fconv", "bin/l", "runs/l"]
    subprocess.run(recipe, env=base, check=True)
    assert out.read_text().splitlines() == [
        "run", "exp1_fconv", "bin/l", "runs/l", "--seed", "1", "--select", "valid",
        "--gen-batch", "512", "--valid-batch", "512", "--"]
    subprocess.run(recipe + ["--valid-subset", "valid,test", "--lr", "1e-4"], check=True,
                   env=dict(base, SEED="7", EPOCHS="2.5", MAX_UPDATE="30", DEVICE="cpu",
                            GEN_BATCH="64", VALID_BATCH="32", SCORE_BEST="0",
                            SELECT="test-loss", PRESETS="my presets.json",
                            USER_DIR="my plugin"))
    assert out.read_text().splitlines() == [
        "run", "exp1_fconv", "bin/l", "runs/l", "--seed", "7", "--select", "test-loss",
        "--gen-batch", "64", "--valid-batch", "32", "--epochs", "2.5", "--max-update", "30",
        "--device", "cpu", "--no-score-best", "--presets", "my presets.json", "--user-dir",
        "my plugin", "--", "--valid-subset", "valid,test", "--lr", "1e-4"]


def test_options_after_the_positionals_and_extra_args_after_the_dashes(tmp_path, monkeypatch):
    seen = {}

    def fake_run_level(preset, databin, run_dir, **kw):
        seen.update(kw, preset=preset)
        from fairseq_entropy.experiments.run import RunResult
        return RunResult("skipped", run_dir)

    import fairseq_entropy.experiments.run as run_module
    monkeypatch.setattr(run_module, "run_level", fake_run_level)
    assert cli(["run", "exp1_fconv", "bin", "run", "--seed", "3", "--device", "cpu",
                "--no-score-best", "--", "--lr", "1e-4"]) == 0
    assert seen["seed"] == 3 and seen["device"] == "cpu" and seen["score_best"] is False
    assert seen["extra_args"] == ["--lr", "1e-4"] and seen["select"] == "valid"
    assert seen["gen_batch"] == seen["valid_batch"] == 512
    # extra arguments straight after the positionals, and a `--` among the extra arguments
    assert cli(["run", "exp1_fconv", "bin", "run", "--", "--lr", "1e-4", "--", "x"]) == 0
    assert seen["extra_args"] == ["--lr", "1e-4", "--", "x"] and seen["seed"] == 1
    with pytest.raises(SystemExit):
        cli(["run", "exp1_fconv", "bin", "run", "--select", "test"])


def test_bad_input_is_refused_with_a_fix(tmp_path, capsys):
    with pytest.raises(PresetError, match="unknown preset 'nope'.*Fix:"):
        run_level("nope", tmp_path, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(DataDirError, match="no-data: no such directory. Fix:"):
        run_level("exp1_fconv", tmp_path / "no-data", tmp_path / "run")
    assert cli(["run", "exp1_fconv", str(tmp_path / "no-data"), str(tmp_path / "run")]) == 2
    assert "no such directory. Fix:" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before the lock: nothing written


def test_a_user_dir_must_be_a_package_and_not_among_the_extra_args(tmp_path, capsys):
    run = tmp_path / "run"
    (tmp_path / "plugin").mkdir()
    assert cli(["run", "exp1_fconv", "bin", str(run), "--user-dir", str(tmp_path / "plugin")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fairseq-entropy run: error: --user-dir {tmp_path / 'plugin'}: not "
                          "a Python package directory (no __init__.py in it). Fix: ")
    assert cli(["run", "exp1_fconv", "bin", str(run), "--seed", "1", "--", "--user-dir",
                "x"]) == 2
    assert "Fix: pass it as 'fairseq-entropy run --user-dir DIR' (USER_DIR=DIR for " \
        "train_level.sh): here it would reach fairseq-train but not fairseq-generate" in \
        capsys.readouterr().err
    assert cli(["run", "exp1_fconv", "bin", str(run), "--seed", "1", "--", "--user-dir=x"]) == 2
    assert "would reach fairseq-train" in capsys.readouterr().err
    assert not run.exists()


@pytest.mark.parametrize("option", sorted(RUN_OWNED_ARGS))
def test_every_option_the_run_sets_is_refused_among_the_extra_args(option, tmp_path, capsys):
    """``run ... -- --seed 5`` would train seed 5 and record seed 1; each option the run sets
    (and records) is refused after ``--``, as --opt VALUE and as --opt=VALUE, with its fix."""
    run = tmp_path / "run"
    for extra in ([option, "5"], [f"{option}=5"]):
        assert cli(["run", "exp1_fconv", "bin", str(run), "--", "--dropout", "0.2",
                    *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"fairseq-entropy run: error: {option} among the extra fairseq-train "
                              "arguments (after --): fairseq-entropy run sets it itself. Fix: ")
        assert err.count("\n") == 1
    assert not run.exists()


def test_a_held_lock_makes_the_run_locked_and_touches_nothing(databin, tmp_path, capsys):
    run = tmp_path / "run"
    with RunLock(run):
        result = run_level("exp1_fconv", databin, run)
        assert result.status == "locked" and f"is locked by pid {os.getpid()}" in result.reason
        assert cli(["run", "exp1_fconv", str(databin), str(run)]) == LOCKED_EXIT
        assert "fairseq-entropy run: " in capsys.readouterr().err
        assert sorted(p.name for p in run.iterdir()) == [".lock"]


def test_run_level_trains_decodes_scores_and_then_skips(databin, tmp_path):
    run = tmp_path / "entropy_3.0"
    out = io.StringIO()
    result = run_level("exp1_transformer_sinusoidal", databin, run, seed=3, max_update=10,
                       device="cpu", gen_batch=64, out=out)
    last = json.loads((run / "last" / "score.json").read_text())
    best = json.loads((run / "best" / "score.json").read_text())
    assert result.status == "done" and result.accuracy == last["accuracy"] == scored(run)
    assert last["n"] == best["n"] == 48 and last["seed"] == best["seed"] == 3
    assert best["checkpoint"] == "best" and last["checkpoint"] == "last"
    assert (run / "checkpoints" / "trained").exists()
    assert "num_updates 10" in (run / "train.log").read_text()
    lines = out.getvalue().splitlines()
    scores = [ln for ln in lines if ln.startswith(("exact-match accuracy", "graded: "))]
    assert len(scores) == 4  # two lines for each of the best and the last checkpoint
    assert f"{last['accuracy']:.4f} ({last['correct']}/48)" in scores[2]
    assert scores[2].endswith(f"wrote {run / 'last'}/score.json")
    train = [ln for ln in lines if ln not in scores]
    assert train and all(ln.startswith(" [entropy_3.0] ") for ln in train)
    assert any("valid on 'valid' subset seq_acc" in ln and ln.endswith("num_updates 10")
               for ln in lines)
    assert (run / ".lock").read_text() == ""
    again = io.StringIO()
    result = run_level("exp1_transformer_sinusoidal", databin, run, seed=3, max_update=10,
                       out=again)
    assert result.status == "skipped" and result.accuracy == last["accuracy"]
    assert again.getvalue() == f"skip {run} (already scored)\n"


def children_of(pid):
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def test_sigterm_stops_fairseq_train_and_frees_the_lock(databin, tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "fairseq_entropy.cli", "run", "exp1_fconv",
                             str(databin), str(run), "--max-update", "100000", "--device",
                             "cpu"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env())
    deadline = time.monotonic() + 120
    kids = []
    while time.monotonic() < deadline and proc.poll() is None:
        kids = children_of(proc.pid)
        log = run / "train.log"
        if kids and log.exists() and log.stat().st_size:
            break
        time.sleep(0.2)
    assert proc.poll() is None and kids, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped by signal 15" in err and "Fix: run the same command again" in err
    assert not any(pid_alive(k) for k in kids)
    assert (run / ".lock").read_text() == ""  # released cleanly, and free:
    with RunLock(run):
        pass
    assert not (run / "checkpoints" / "trained").exists()
