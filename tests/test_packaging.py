"""A plain (non-editable) install works outside the checkout: presets and recipes are package
data, and the CLI prints no library noise."""

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _toy import write_tiny_corpus

REPO = Path(__file__).resolve().parents[1]


def run(cmd, **kw):
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert res.returncode == 0, f"{cmd}:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    return res


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package built as a wheel from a copy of the sources and installed with
    ``pip install --target`` into a folder outside the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    shutil.copy(REPO / "setup.py", src)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("fairseq_entropy", "recipes"):
        shutil.copytree(REPO / folder, src / folder, ignore=ignore)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", src])
    wheel, = (tmp / "dist").glob("fairseq_entropy-*.whl")
    run([*pip, "install", "--no-deps", "--target", tmp / "target", wheel])
    # fairseq and torch still come from this interpreter's environment
    env = dict(os.environ, PYTHONPATH=str(tmp / "target"), OMP_NUM_THREADS="1")
    return tmp, env


def test_installed_package_is_the_wheel_not_the_checkout(installed):
    tmp, env = installed
    out = run([sys.executable, "-c", "import fairseq_entropy; print(fairseq_entropy.__file__)"],
              cwd=tmp, env=env).stdout
    assert Path(out.strip()).is_relative_to(tmp / "target")


@pytest.mark.slow
def test_train_args_works_from_a_plain_install(installed):
    tmp, env = installed
    (tmp / "data").mkdir()
    data = write_tiny_corpus(tmp / "data")  # 4 x 5 = 20 training pairs
    res = run([tmp / "target" / "bin" / "fairseq-entropy", "train-args", "exp1_fconv",
               "--data", data], cwd=tmp, env=env)
    args = res.stdout.split()
    # 20 commands, batch 32: 1 update per epoch; 24 epochs (20 is not in
    # epochs_by_train_size); warm-up round(0.06 x 24) = 1; min lr 0.1 x 1e-3
    assert args[args.index("--arch") + 1] == "fconv_scan_exp1"
    assert args[args.index("--max-update") + 1] == "24"
    assert args[args.index("--warmup-updates") + 1] == "1"
    assert args[args.index("--min-lr") + 1] == "0.0001"
    assert res.stderr == ""  # no tensorboardX notice, no debug lines


def test_recipes_dir_points_into_the_install(installed):
    tmp, env = installed
    out = run([tmp / "target" / "bin" / "fairseq-entropy", "recipes-dir"], cwd=tmp,
              env=env).stdout.strip()
    assert Path(out) == tmp / "target" / "fairseq_entropy" / "recipes"
    assert (Path(out) / "train_level.sh").read_text() == \
        (REPO / "recipes" / "train_level.sh").read_text()
    # the sweep grids travel with the recipes, each the checkout's file
    grids = sorted(p.name for p in (REPO / "recipes" / "grids").glob("*.toml"))
    assert "exp1.toml" in grids
    assert sorted(p.name for p in (Path(out) / "grids").glob("*.toml")) == grids
    for name in grids:
        assert (Path(out) / "grids" / name).read_text() == \
            (REPO / "recipes" / "grids" / name).read_text()


def test_sweep_of_a_plain_install_runs_the_installed_package(installed):
    tmp, env = installed
    grid = tmp / "g.toml"
    grid.write_text('experiment = "exp1"\npresets = ["exp1_fconv"]\nlevels = [3]\nseeds = [1]\n'
                    'n = [320]\nschedule = {max_update = 2}\n')
    out = run([tmp / "target" / "bin" / "fairseq-entropy", "sweep", grid, "--root",
               tmp / "s", "--dry-run", "--device", "cpu", "--jobs", "1"], cwd=tmp,
              env=env).stdout
    (line,) = [ln for ln in out.splitlines() if " -m fairseq_entropy.cli run " in ln]
    assert " run exp1_fconv " in line
    # the installed recipes are where recipes-dir says, for a user's own --recipe
    recipes = run([tmp / "target" / "bin" / "fairseq-entropy", "recipes-dir"], cwd=tmp,
                  env=env).stdout.strip()
    assert (Path(recipes) / "train_level.sh").is_file()


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_build_shows_a_progress_bar_on_a_terminal_only(tmp_path, monkeypatch, capsys):
    from fairseq_entropy.cli import main

    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert main(["build", "exp1", "--out", str(tmp_path / "a"), "--levels", "2,3",
                 "--n", "320"]) == 0
    assert "build exp1: 100%" in sys.stderr.getvalue() and "2/2" in sys.stderr.getvalue()
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert main(["build", "exp1", "--out", str(tmp_path / "b"), "--levels", "2,3",
                 "--n", "320"]) == 0
    assert sys.stderr.getvalue() == ""
    # level by level gives the data of one builder call with every level
    from fairseq_entropy.scan.builders import build_exp1
    from fairseq_entropy.scan.grammar import Grammar

    together = build_exp1(Grammar.paper(), [2, 3], 320, "jump", 1, 0.05)
    for level in together:
        for split in ("train", "valid"):
            lines = (tmp_path / "a" / level.name / f"{split}.in").read_text().splitlines()
            assert lines == [str(c) for c in level.splits[split]], (level.name, split)


def test_fairseq_train_and_generate_start_without_a_tensorboardx_notice():
    """fairseq's speech tasks log "Please install tensorboardX" on import, before any
    ``--user-dir``; the environment installs tensorboardX, so their logs start clean."""
    for tool in ("fairseq-train", "fairseq-generate"):
        res = subprocess.run([str(Path(sys.executable).parent / tool), "--help"],
                             capture_output=True, text=True, env=dict(os.environ,
                                                                      OMP_NUM_THREADS="1"))
        assert res.returncode == 0 and "usage:" in res.stdout
        assert "tensorboardX" not in res.stdout + res.stderr
