"""Misuse of ``run``, ``score``, ``train-args``, ``lock`` and ``recipes/train_level.sh`` on a
tiny exp1 run: a run directory that holds another training (schedule, preset, data, seed),
a preset that contradicts the checkpoint, a GPU that is not there, paths fairseq cannot take,
an unknown architecture, a checkpoint that is not one, a file where a run directory belongs,
the recipe's variables, and a decode that was cut off."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_entropy.analysis.columns import ScoreError
from fairseq_entropy.analysis.scoring import check_sources
from fairseq_entropy.cli import main as cli
from fairseq_entropy.experiments import sweep
from fairseq_entropy.experiments.grids import Cell
from fairseq_entropy.experiments.presets import load_presets, train_args, train_args_sha256
from fairseq_entropy.experiments.rerun import NotTheRunsScore, scored
from fairseq_entropy.experiments.rerun import ScheduleChanged
from fairseq_entropy.experiments.run import run_level
from _toy import tiny_level  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RUN = ["--device", "cpu", "--gen-batch", "64", "--valid-batch", "64"]


def env(**extra):
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                OMP_NUM_THREADS="1", **extra)


def error_line(capsys) -> str:
    """The one ``error:`` line of a refused command (and nothing else on stderr)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: " in err[0] and "Fix: " in err[0], err
    return err[0]


@pytest.fixture(scope="module")
def databin(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("level")
    return tiny_level(tmp / "data", tmp / "bin")


@pytest.fixture(scope="module")
def trained(databin, tmp_path_factory):
    """A run of exp1_cnn_authors, 3 updates, seed 1, with only a sample decoded."""
    run = tmp_path_factory.mktemp("runs") / "sampled"
    assert cli(["run", "exp1_cnn_authors", str(databin), str(run), "--max-update", "3",
                "--decode-sample", "20", *RUN]) == 0
    assert (run / "checkpoints" / "trained").exists()
    assert not (run / "last" / "score.json").exists()
    return run


@pytest.fixture(scope="module")
def scored_run(trained, databin):
    """The same run finished: the whole test split decoded and scored."""
    run = trained.parent / "scored"
    shutil.copytree(trained, run)
    assert cli(["run", "exp1_cnn_authors", str(databin), str(run), "--max-update", "3",
                *RUN]) == 0
    assert (run / "last" / "score.json").is_file()
    return run


def args_sha(preset, databin, max_update=3):
    return train_args_sha256(train_args(load_presets()[preset], databin,
                                        max_update=max_update))


def test_score_checks_and_finds_the_preset_by_its_arguments_hash(scored_run, databin,
                                                                 tmp_path, capsys):
    gen = str(scored_run / "generate-last.txt")
    ours, theirs = args_sha("exp1_cnn_authors", databin), \
        args_sha("exp1_cnn_authors_pool16", databin)
    assert ours != theirs  # the two presets share the arch but not the arguments
    assert cli(["score", gen, "--out", str(tmp_path / "s"), "--preset",
                "exp1_cnn_authors_pool16"]) == 2
    line = error_line(capsys)
    assert "--preset exp1_cnn_authors_pool16" in line and theirs[:12] in line \
        and ours[:12] in line
    assert not (tmp_path / "s").exists()
    # without --preset, the hash tells the two presets of arch scan_cnn_paper apart
    assert cli(["score", gen, "--out", str(tmp_path / "s")]) == 0
    rec = json.loads((tmp_path / "s" / "score.json").read_text())
    assert rec["preset"] == "exp1_cnn_authors" and rec["schedule"]["train_args_sha256"] == ours
    assert cli(["score", gen, "--out", str(tmp_path / "t"), "--preset",
                "exp1_cnn_authors"]) == 0


def test_an_unfinished_run_refuses_another_schedule_preset_or_seed(trained, databin, capsys):
    sample = trained / "sample" / "score.json"
    before = sample.read_bytes()
    with pytest.raises(ScheduleChanged, match="trained with max_update 3, the run asks 4"):
        run_level("exp1_cnn_authors", databin, trained, max_update=4, decode_sample=20,
                  device="cpu")
    assert cli(["run", "exp1_cnn_authors_pool16", str(databin), str(trained),
                "--max-update", "3", "--decode-sample", "20", *RUN]) == 2
    line = error_line(capsys)
    assert "other fairseq-train arguments" in line
    assert args_sha("exp1_cnn_authors", databin)[:12] in line
    assert args_sha("exp1_cnn_authors_pool16", databin)[:12] in line
    assert cli(["run", "exp1_cnn_authors", str(databin), str(trained), "--max-update", "3",
                "--decode-sample", "20", "--seed", "5", *RUN]) == 2
    assert "trained with seed 1, the run asks --seed 5" in error_line(capsys)
    assert sample.read_bytes() == before


def test_a_cut_off_run_resumes_only_the_training_it_started(trained, databin, tmp_path,
                                                           capsys):
    """A cut-off run (its checkpoint_last.pt, no finished-training mark) resumed with another
    max_update or seed is refused before fairseq-train starts: it would mix two trainings."""
    cut = tmp_path / "cut"
    (cut / "checkpoints").mkdir(parents=True)
    shutil.copy(trained / "checkpoints" / "checkpoint_last.pt", cut / "checkpoints")
    assert cli(["run", "exp1_cnn_authors", str(databin), str(cut), "--max-update", "6",
                *RUN]) == 2
    assert f"{cut} was started (and cut off) with max_update 3, the run asks 6" in \
        error_line(capsys)
    assert cli(["run", "exp1_cnn_authors", str(databin), str(cut), "--max-update", "3",
                "--seed", "7", *RUN]) == 2
    assert "started (and cut off) with seed 1, the run asks --seed 7" in error_line(capsys)
    assert sorted(p.name for p in cut.rglob("*")) == ["checkpoint_last.pt", "checkpoints"]


def test_a_scored_run_refuses_other_data_or_seed(scored_run, databin, tmp_path, capsys):
    other = tmp_path / "other_bin"
    shutil.copytree(databin, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["seed"] = 99  # another data seed of the same level
    (other / "manifest.json").write_text(json.dumps(manifest))
    assert cli(["run", "exp1_cnn_authors", str(other), str(scored_run), "--max-update", "3",
                *RUN]) == 2
    line = error_line(capsys)
    assert "scored on exp1 level entropy_3.0 (data seed 5)" in line
    assert "(data seed 99)" in line
    assert cli(["run", "exp1_cnn_authors", str(databin), str(scored_run), "--max-update", "3",
                "--seed", "5", *RUN]) == 2
    assert "scored with seed 1, the run asks --seed 5" in error_line(capsys)
    # the run it holds is still skipped
    assert cli(["run", "exp1_cnn_authors", str(databin), str(scored_run), "--max-update", "3",
                *RUN]) == 0
    assert "already scored" in capsys.readouterr().out


@pytest.mark.parametrize("fields, what, folder", [
    ({"checkpoint": "best"}, "checkpoint 'best', not 'last'", "best"),
    ({"split": "valid"}, "split 'valid', not 'test'", "valid"),
    ({"test_sample": {"n": 20, "split_size": 1000}},
     "a sample of 20 test sentences (test_sample), not the whole split", "sample"),
])
def test_a_last_score_of_another_checkpoint_split_or_sample_is_not_the_runs_score(
        fields, what, folder, tmp_path, capsys):
    """``score generate-best.txt --out RUN/last`` (or ``--split valid``, or a sample's
    score) in ``last/score.json`` is refused by ``run`` and fails the sweep's cell, naming
    the file: it is neither reported as the run's accuracy nor decoded over."""
    root = tmp_path / "root"
    cell = Cell("exp1", "exp1_cnn_authors", "cnn", 6000, 1, 1.5)
    run = cell.run_dir(root)
    (run / "last").mkdir(parents=True)
    path = run / "last" / "score.json"
    rec = {"experiment": "exp1", "preset": "exp1_cnn_authors", "model": "cnn",
           "level": "entropy_1.5", "checkpoint": "last", "split": "test", "seed": 1,
           "data_seed": 1, "accuracy": 0.25}
    path.write_text(json.dumps(rec))
    # the run's own score counts: the cell is skipped with its accuracy
    assert scored(run) == 0.25
    got = sweep.run_cell(cell, root, {}, "unused.sh")
    assert (got.status, got.accuracy) == ("skipped", 0.25)
    path.write_text(json.dumps(dict(rec, **fields)))
    before = sorted(p.relative_to(run) for p in run.rglob("*")), path.read_bytes()
    fix = f"Fix: move the folder {run / 'last'} away (e.g. to {run / folder})"
    with pytest.raises(NotTheRunsScore, match=re.escape(f"{path} records {what}:")):
        scored(run)
    got = sweep.run_cell(cell, root, {}, "unused.sh")
    assert (got.status, got.accuracy) == ("failed", None)
    assert got.reason.startswith(f"{path} records {what}:") and fix in got.reason
    assert cli(["run", "exp1_cnn_authors", str(cell.databin(root)), str(run), *RUN]) == 2
    line = error_line(capsys)
    assert f"{path} records {what}:" in line and fix in line
    assert (sorted(p.relative_to(run) for p in run.rglob("*")), path.read_bytes()) == before


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_device_gpu_without_a_gpu_is_refused(databin, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(["run", "exp1_cnn_authors", str(databin), str(run), "--device", "gpu"]) == 2
    line = error_line(capsys)
    assert "--device gpu" in line and "Fix: pass --device cpu (DEVICE=cpu)" in line
    assert not run.exists()
    p = subprocess.run(["bash", str(REPO / "recipes" / "train_level.sh"), "exp1_cnn_authors",
                        str(databin), str(run)], env=env(DEVICE="gpu"), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "DEVICE=gpu" in p.stderr and "DEVICE=cpu" in p.stderr
    assert not run.exists()


def test_a_colon_in_run_dir_or_data_is_refused(databin, tmp_path, capsys):
    run = tmp_path / "x:y"
    assert cli(["run", "exp1_cnn_authors", str(databin), str(run), *RUN]) == 2
    assert f"RUN_DIR {run}: holds ':'" in error_line(capsys)
    assert not run.exists() and not (tmp_path / "x").exists()
    assert cli(["train-args", "exp1_cnn_authors", "--data", "db:x/entropy_3.0"]) == 2
    assert "--data db:x/entropy_3.0: holds ':'" in error_line(capsys)


def test_an_unknown_arch_is_refused_before_anything_is_written(databin, tmp_path, capsys):
    presets = tmp_path / "my.json"
    presets.write_text(json.dumps({"my": {"extends": "exp1_cnn_authors", "model": "mine",
                                          "arch": "no_such_arch"}}))
    assert cli(["train-args", "my", "--data", str(databin), "--presets", str(presets)]) == 2
    assert "preset my: arch 'no_such_arch' is not an architecture" in error_line(capsys)
    run = tmp_path / "run"
    assert cli(["run", "my", str(databin), str(run), "--presets", str(presets), *RUN]) == 2
    assert "no_such_arch" in error_line(capsys)
    assert not run.exists()
    # an unknown model argument reaches fairseq-train, whose refusal the failure names
    presets.write_text(json.dumps({"my": {"extends": "exp1_cnn_authors", "model": "mine",
                                          "model_args": ["--no-such-flag", "3"]}}))
    assert cli(["run", "my", str(databin), str(run), "--presets", str(presets),
                "--max-update", "1", *RUN]) == 1
    err = capsys.readouterr().err
    assert "fairseq-train failed (exit 2)" in err
    assert "unrecognized arguments: --no-such-flag 3" in err and "Fix: " in err


def test_score_of_a_path_that_is_no_checkpoint_is_one_line(scored_run, tmp_path, capsys):
    gen = scored_run / "generate-last.txt"
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--path", str(gen)]) == 2
    line = error_line(capsys)
    assert f"{gen}: not a fairseq checkpoint" in line and "Fix: pass --path" in line
    assert not (tmp_path / "s").exists()


def test_a_file_where_the_run_dir_belongs(databin, tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x\n")
    assert cli(["run", "exp1_cnn_authors", str(databin), str(f), *RUN]) == 2
    assert f"RUN_DIR {f} is a file. Fix: " in error_line(capsys)
    assert cli(["lock", str(f), "--", "true"]) == 2
    assert f"RUN_DIR {f} is a file. Fix: " in error_line(capsys)
    assert f.read_text() == "x\n"


@pytest.mark.parametrize("var,value", [("DEVICE", "tpu"), ("DECODE_SAMPLE", "0"),
                                       ("SEED", "-1"), ("MAX_UPDATE", "3x"),
                                       ("EPOCHS", "0"), ("SCORE_BEST", "2"),
                                       ("GEN_BATCH", "many")])
def test_train_level_errors_name_the_variable(var, value, tmp_path):
    run = tmp_path / "run"
    p = subprocess.run(["bash", str(REPO / "recipes" / "train_level.sh"), "exp1_cnn_authors",
                        str(tmp_path), str(run)], env=env(**{var: value}),
                       capture_output=True, text=True, timeout=60)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(err) == 1, p.stderr
    assert err[0].startswith(f"train_level.sh: error: {var}={value}: ") and "Fix: " in err[0]
    assert "--" not in err[0].split("Fix: ")[0]  # no option name, the variable
    assert not run.exists()


def cut(gen: Path, out: Path, keep: int) -> None:
    """The first ``keep`` sentences of a decode, as fairseq-generate wrote them (each
    sentence's lines whole), as an interrupted decode leaves them."""
    lines, seen = [], set()
    for line in gen.read_text().splitlines(keepends=True):
        if line.startswith("S-"):
            seen.add(line.split("\t")[0])
            if len(seen) > keep:
                break
        if seen:
            lines.append(line)
    out.write_text("".join(lines))


def test_an_interrupted_decode_is_named(scored_run, databin, tmp_path, capsys):
    short = tmp_path / "generate-last.txt"
    cut(scored_run / "generate-last.txt", short, 20)
    assert cli(["score", str(short), "--out", str(tmp_path / "s"), "--data", str(databin),
                "--path", str(scored_run / "checkpoints" / "checkpoint_last.pt")]) == 2
    line = error_line(capsys)
    assert "holds 20 samples but the test split has 48" in line
    assert "may have been interrupted" in line and "decode the whole test split again" in line
    assert not (tmp_path / "s").exists()


def test_cut_off_a_prefix_or_more_than_a_batch_multiple_missing():
    commands = [" ".join(["walk"] * (1 + i % 5)) for i in range(20)]

    def samples(ids, other=False):
        return {i: {"S": "run" if other else commands[i]} for i in ids}

    # ids 0..9; 8 missing out of order
    for ids in (range(10), [i for i in range(20) if i % 5 < 3]):
        with pytest.raises(ScoreError, match="may have been interrupted"):
            check_sources(samples(ids), commands, "g.txt", "d", "test")
    # fewer than 8 missing, not the first ids (the batch multiple), or other commands
    for ids, other in (([i for i in range(20) if i != 3], False), (range(10), True)):
        with pytest.raises(ScoreError, match="holds 1[09] samples") as e:
            check_sources(samples(ids, other), commands, "g.txt", "d", "test")
        assert "interrupted" not in str(e.value)
