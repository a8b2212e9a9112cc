"""Grids, the sweep's locks and executors, and exact resume of a killed cell
(experiments/grids.py, sweep.py, locks.py, devices.py, executors.py, recipes/train_level.sh)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fairseq_entropy.cli import main as cli
from fairseq_entropy.progress import training_progress
from fairseq_entropy.experiments import status as sweep_status
from fairseq_entropy.experiments import devices, executors, locks, sweep
from fairseq_entropy.experiments.grids import (AUTHORS_SEEDS, Cell, GridError, Schedule,
                                               load_grid)
from _toy import cut_and_binarize  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GRIDS = REPO / "recipes" / "grids"
BIN = Path(sys.executable).parent


def env(**extra):
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                OMP_NUM_THREADS="1", **extra)


# ---------------------------------------------------------------------------------- grids
def test_every_paper_grid_expands():
    sizes = {"exp1_transformer_sinusoidal": 7 * 5, "exp1": 6 * 7 * 5,
             "exp1_train_size": 3 * 7 * 5, "exp2": 5 * 8 * 5, "beyond_paper": 4 * 7 * 5,
             "demo_cnn": 3 * 2, "exp1_cnn_authors": 7 * 5, "exp1_direction_cnn": 5 * 5,
             "batch_pool_transformer": 7 * 5, "exp1_lm": 4 * 7 * 5, "exp2_lm": 3 * 8 * 5,
             "exp1_equivariant_decoder_input": 2 * 7 * 5}
    # every grid file but cogs_entropy, which needs COGS itself (tests/test_cogs_sweep.py)
    assert sorted(sizes) == sorted(p.stem for p in GRIDS.glob("*.toml")
                                   if p.stem != "cogs_entropy")
    for name, n in sizes.items():
        grid = load_grid(GRIDS / f"{name}.toml")
        assert len(grid.cells()) == n, name
        if name != "demo_cnn":
            assert tuple(grid.seeds) == AUTHORS_SEEDS == (830, 231, 42, 9876, 2)
    exp1 = load_grid(GRIDS / "exp1.toml")
    assert len(exp1.cells(["exp1_transformer_sinusoidal"])) == 35
    sizes = {c.n for c in load_grid(GRIDS / "exp1_train_size.toml").cells()}
    assert sizes == {3000, 4000, 6000}
    exp2 = load_grid(GRIDS / "exp2.toml").cells()
    assert {c.n for c in exp2} == {None} and {c.level_name for c in exp2} == {
        f"support_{k}" for k in range(1, 9)}


def test_cells_share_data_across_presets_and_paths_are_distinct(tmp_path):
    cells = load_grid(GRIDS / "exp1.toml").cells()
    assert len({c.data_key for c in cells}) == 35          # 7 levels x 5 seeds, 6 presets
    assert len({c.run_dir(tmp_path) for c in cells}) == 210
    c = Cell("exp1", "exp1_fconv", "cnn", 6000, 830, 1.5, Schedule())
    assert c.databin(tmp_path) == tmp_path / "data-bin/exp1/n6000/seed830/entropy_1.5"
    assert c.run_dir(tmp_path) == tmp_path / "runs/exp1/exp1_fconv/n6000/seed830/entropy_1.5"


def test_dry_run_lists_the_35_cells_of_the_sinusoidal_grid(tmp_path, capsys):
    assert cli(["sweep", str(GRIDS / "exp1_transformer_sinusoidal.toml"), "--dry-run",
                "--root", str(tmp_path), "--device", "cpu", "--jobs", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# grid") and "35 cells" in out[0]
    assert sum(ln.startswith("# cell ") for ln in out) == 35
    runs = [ln for ln in out if " -m fairseq_entropy.cli run exp1_transformer_sinusoidal " in ln]
    assert len(runs) == 35 and runs[0].startswith("OMP_NUM_THREADS=1 ")
    first = tmp_path / "runs/exp1/exp1_transformer_sinusoidal/n6000/seed830/entropy_0.0"
    assert runs[0].endswith(f"{first} --seed 830 --device cpu --select valid --gen-batch 512 "
                            "--valid-batch 512")
    assert sum(ln.startswith("fairseq-entropy build exp1") for ln in out) == 35
    assert sum(ln.startswith("fairseq-entropy binarize") for ln in out) == 35
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_the_run_settings_are_options_and_a_shell_variable_changes_nothing(
        tmp_path, capsys, monkeypatch):
    for k, v in (("SCORE_BEST", "0"), ("SELECT", "test-loss"), ("GEN_BATCH", "7"),
                 ("VALID_BATCH", "9")):
        monkeypatch.setenv(k, v)
    args = ["sweep", str(GRIDS / "demo_cnn.toml"), "--dry-run", "--root", str(tmp_path),
            "--device", "cpu", "--jobs", "1"]
    assert cli(args) == 0
    runs = [ln for ln in capsys.readouterr().out.splitlines() if " run exp1_" in ln]
    assert len(runs) == 6 and all(ln.endswith("--select valid --gen-batch 512 --valid-batch "
                                              "512") for ln in runs)
    assert cli(args + ["--no-score-best", "--select", "test-loss", "--gen-batch", "64",
                       "--valid-batch", "32"]) == 0
    runs = [ln for ln in capsys.readouterr().out.splitlines() if " run exp1_" in ln]
    assert all(ln.endswith("--select test-loss --gen-batch 64 --valid-batch 32 "
                           "--no-score-best") for ln in runs)
    # a user's own recipe gets the same settings as variables, set by the sweep
    recipe = tmp_path / "my_recipe.sh"
    recipe.write_text("#!/bin/bash\n")
    assert cli(args + ["--recipe", str(recipe), "--gen-batch", "64"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if str(recipe) in ln]
    assert len(lines) == 6 and all(
        "SELECT=valid SCORE_BEST=1 GEN_BATCH=64 VALID_BATCH=512" in ln for ln in lines)


def test_sweep_n_keeps_the_chosen_training_sizes(tmp_path, capsys):
    grid = load_grid(GRIDS / "exp1_train_size.toml")
    cells = grid.cells(["exp1_transformer_sinusoidal"], [830], None, [4000])
    assert {c.n for c in cells} == {4000} and len(cells) == 7
    with pytest.raises(GridError, match="n\\(s\\) 5000 not in the grid. Fix: choose from "
                                        "3000, 4000, 6000"):
        grid.cells(None, None, None, [5000])
    with pytest.raises(GridError, match="has no n"):
        load_grid(GRIDS / "exp2.toml").cells(sizes=[3000])
    assert cli(["sweep", str(GRIDS / "exp1_train_size.toml"), "--dry-run", "--root",
                str(tmp_path), "--n", "3000", "--seed", "2", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "7 cells (1 preset(s) x 1 N x 7 levels x 1 seeds)" in out and "n4000" not in out


def test_seed_filter_keeps_whole_curves_of_the_chosen_seeds(tmp_path, capsys):
    grid = load_grid(GRIDS / "exp1.toml")
    cells = grid.cells(["exp1_cnn_authors"], [231, 42])
    assert len(cells) == 14 and {c.seed for c in cells} == {231, 42}
    assert {c.level for c in cells} == {0, 0.5, 1, 1.5, 2, 2.5, 3}
    with pytest.raises(GridError, match=r"exp1.toml: seed\(s\) 7 not in the grid. Fix: choose "
                                        r"from 830, 231, 42, 9876, 2"):
        grid.cells(None, [7])
    assert cli(["sweep", str(GRIDS / "exp1.toml"), "--dry-run", "--root", str(tmp_path),
                "--device", "cpu", "--preset", "exp1_cnn_authors", "--seed", "42"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "7 cells (1 preset(s) x 1 N x 7 levels x 1 seeds)" in first


def test_level_filter_keeps_the_chosen_levels(tmp_path, capsys):
    grid = load_grid(GRIDS / "exp1.toml")
    cells = grid.cells(["exp1_cnn_authors"], [830], [1, 2.5])
    assert [(c.level, c.level_name) for c in cells] == [(1, "entropy_1.0"),
                                                        (2.5, "entropy_2.5")]
    with pytest.raises(GridError, match=r"exp1.toml: level\(s\) 1.2 not in the grid. Fix: "
                                        r"choose from 0, 0.5, 1, 1.5, 2, 2.5, 3"):
        grid.cells(None, None, [1.2])
    assert cli(["sweep", str(GRIDS / "exp1.toml"), "--dry-run", "--root", str(tmp_path),
                "--device", "cpu", "--preset", "exp1_cnn_authors", "--level", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "5 cells (1 preset(s) x 1 N x 1 levels x 5 seeds)" in out[0]
    assert sum(ln.startswith("# cell ") for ln in out) == 5
    assert all("entropy_1.0" in ln for ln in out if ln.startswith("# cell "))


def test_dry_run_of_the_whole_exp1_grid_builds_each_level_once(tmp_path, capsys):
    assert cli(["sweep", str(GRIDS / "exp1.toml"), "--dry-run", "--root", str(tmp_path),
                "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(ln.startswith("# cell ") for ln in out) == 210
    assert sum(ln.startswith("fairseq-entropy build exp1") for ln in out) == 35


def test_dry_run_lists_only_the_data_commands_a_sweep_would_still_run(tmp_path, capsys):
    """A binarized level is skipped, a built one only binarized (as prepare_data does)."""
    cells = load_grid(GRIDS / "exp1.toml").cells(["exp1_cnn_authors"], [830], [1, 2.5, 3])
    binarized, built, _ = cells
    (binarized.databin(tmp_path)).mkdir(parents=True)
    (binarized.databin(tmp_path) / "manifest.json").write_text("{}")
    (built.build_dir(tmp_path) / built.level_name).mkdir(parents=True)
    (built.build_dir(tmp_path) / built.level_name / "manifest.json").write_text("{}")
    assert cli(["sweep", str(GRIDS / "exp1.toml"), "--dry-run", "--root", str(tmp_path),
                "--device", "cpu", "--preset", "exp1_cnn_authors", "--seed", "830",
                "--level", "1", "--level", "2.5", "--level", "3"]) == 0
    out = [ln for ln in capsys.readouterr().out.splitlines()
           if not ln.startswith(("# c", "OMP_NUM_THREADS="))]
    assert out[1:] == [f"# data {binarized.databin(tmp_path)}: built (skipped)",
                       *[" ".join(c) for c in sweep.data_commands(built, tmp_path)[1:]],
                       *[" ".join(c) for c in sweep.data_commands(cells[2], tmp_path)]]


def test_bad_grids_are_refused_with_file_and_fix(tmp_path):
    def grid(text):
        p = tmp_path / "g.toml"
        p.write_text(text)
        return p

    base = 'experiment = "exp1"\nlevels = [0, 3]\nseeds = [1]\n'
    with pytest.raises(GridError, match=r"g.toml:4: unknown preset 'nope'"):
        load_grid(grid(base + 'presets = ["nope"]\n'))
    with pytest.raises(GridError, match="is a preset of exp2 but the grid is of exp1"):
        load_grid(grid(base + 'presets = ["exp2_fconv"]\n'))
    with pytest.raises(GridError, match="n is given.*Fix: remove n"):
        load_grid(grid('experiment = "exp2"\nlevels = [1]\nseeds = [1]\nn = [6000]\n'
                       'presets = ["exp2_fconv"]\n'))
    with pytest.raises(GridError, match="unknown key.*seed"):
        load_grid(grid(base + 'presets = ["exp1_fconv"]\nseed = 3\n'))
    with pytest.raises(GridError, match="missing key 'presets'"):
        load_grid(grid(base))


def test_build_args_build_another_component_class_under_paths_of_its_own(tmp_path, capsys):
    grid = load_grid(GRIDS / "exp1_direction_cnn.toml")
    cells = grid.cells(seeds=[830])
    tag = "exp1+component=direction+restricted=left"
    assert cells[-1].databin(tmp_path) == tmp_path / f"data-bin/{tag}/n6000/seed830/entropy_1.58"
    assert cells[-1].run_dir(tmp_path) == (
        tmp_path / f"runs/{tag}/exp1_cnn_authors/n6000/seed830/entropy_1.58")
    four = Cell("exp1", "exp1_fconv", "cnn", 6000, 1, 1.0, build_args=("--verbs", "a,b,c,d"))
    assert four.data_tag == "exp1+verbs=a-b-c-d"  # fairseq reads commas as path lists
    verbs = Cell("exp1", "exp1_cnn_authors", "cnn", 6000, 830, 1.2)
    assert verbs.data_key != cells[3].data_key and verbs.level == cells[3].level
    assert cli(["sweep", str(GRIDS / "exp1_direction_cnn.toml"), "--dry-run", "--root",
                str(tmp_path), "--device", "cpu", "--seed", "830"]) == 0
    builds = [ln for ln in capsys.readouterr().out.splitlines()
              if ln.startswith("fairseq-entropy build")]
    assert len(builds) == 5
    assert all(ln.endswith("--seed 830 --component direction --restricted left")
               for ln in builds)
    # the cell's data step builds the direction-controlled level
    databin = sweep.prepare_data(cells[2], tmp_path, env=env())
    manifest = json.loads((databin / "manifest.json").read_text())
    assert manifest["component"] == "direction" and manifest["restricted_value"] == "left"
    assert abs(manifest["entropy_bits"] - 0.8) <= 0.01


def test_a_build_args_cell_is_named_apart_from_the_paper_cell_of_its_seed_and_level(
        tmp_path, capsys):
    """The paper's grid and a ``build_args`` grid swept into one root: cells of the same
    preset, N, seed and level whose run directories differ keep a row each in
    ``sweep-status.tsv``; the paper cell keeps its name (the committed status files use it)."""
    paper = load_grid(GRIDS / "exp1_cnn_authors.toml").cells(seeds=[830], levels=[0])[0]
    variant = load_grid(GRIDS / "exp1_direction_cnn.toml").cells(seeds=[830], levels=[0])[0]
    assert paper.run_dir(tmp_path) != variant.run_dir(tmp_path)
    assert paper.name == "exp1_cnn_authors/n6000/seed830/entropy_0.0"
    assert variant.name == ("exp1+component=direction+restricted=left/exp1_cnn_authors/n6000/"
                            "seed830/entropy_0.0")
    committed = (REPO / "results/exp1_cnn_authors/sweep-status.tsv").read_text().splitlines()
    assert paper.name in [row.split("\t")[0] for row in committed]
    status = tmp_path / "sweep-status.tsv"
    sweep_status.write_status([sweep.CellResult(paper.name, "done", "", 10.0, 0.75)], status)
    sweep_status.write_status([sweep.CellResult(variant.name, "done", "", 20.0, 0.125)], status)
    assert status.read_text().splitlines() == [
        "cell\tstatus\taccuracy\twall_s\treason",
        f"{variant.name}\tdone\t0.125000\t20.0\t",
        f"{paper.name}\tdone\t0.750000\t10.0\t",
    ]
    # the dry run names the cells as their rows do
    assert cli(["sweep", str(GRIDS / "exp1_direction_cnn.toml"), "--dry-run", "--root",
                str(tmp_path / "r"), "--device", "cpu", "--seed", "830"]) == 0
    shown = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("# cell ")]
    assert shown[0] == f"# cell 1/5 {variant.name}"


def test_bad_build_args_are_refused(tmp_path):
    def grid(extra, experiment="exp1", preset="exp1_fconv"):
        p = tmp_path / "g.toml"
        p.write_text(f'experiment = "{experiment}"\nlevels = [1]\nseeds = [1]\n'
                     f'presets = ["{preset}"]\n{extra}\n')
        return p

    for bad in ('["--levels", "1"]', '["--component"]', '["--component", "--restricted"]',
                '"--component direction"', '[1, 2]'):
        with pytest.raises(GridError, match=r"g.toml:5: build_args = .*Fix: a list of option-"
                                            r"value pairs of --component"):
            load_grid(grid(f"build_args = {bad}"))
    with pytest.raises(GridError, match="only Experiment 1.*Fix: remove build_args"):
        load_grid(grid('build_args = ["--component", "direction"]', "exp2", "exp2_fconv"))


# ---------------------------------------------------------------------------------- locks
def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_second_launch_is_refused_and_touches_nothing(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    with locks.RunLock(run):
        holder = json.loads((run / ".lock").read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        assert locks.run_locked(run, ["touch", str(run / "ran")]) == locks.LOCKED_EXIT == 75
        assert f"is locked by pid {os.getpid()} on host {socket.gethostname()}" \
            in capsys.readouterr().err
        assert not (run / "ran").exists()
        # the recipe itself: refused before it trains, decodes or scores anything
        res = subprocess.run(["bash", str(REPO / "recipes" / "train_level.sh"), "exp1_fconv",
                              str(load_cell(tiny_data).databin(tiny_data)), str(run)],
                             capture_output=True,
                             text=True, env=env(DEVICE="cpu"))
        assert res.returncode == 75, res.stderr
        assert "is locked by pid" in res.stderr
        assert sorted(p.name for p in run.iterdir()) == [".lock"]
    assert (run / ".lock").read_text() == ""  # released cleanly: no stale lock left
    assert locks.run_locked(run, ["touch", str(run / "ran")]) == 0
    assert (run / "ran").exists() and "stale" not in capsys.readouterr().err


def test_stale_lock_of_a_dead_process_is_taken_over_with_a_message(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    pid = dead_pid()
    (run / ".lock").write_text(json.dumps({"host": socket.gethostname(), "pid": pid,
                                           "started": "2026-01-01T00:00:00"}))
    messages = []
    lock = locks.RunLock(run, log=messages.append).acquire()
    try:
        assert len(messages) == 1
        assert f"taking over the stale lock of pid {pid} on host {socket.gethostname()}" \
            in messages[0] and "no longer running" in messages[0]
        assert json.loads((run / ".lock").read_text())["pid"] == os.getpid()
    finally:
        lock.release()


# ----------------------------------------------------------------------------- executors
def test_gpu_slots_round_robin_with_a_simulated_device_count():
    slots = devices.device_slots(None, "gpu", gpus=3, per_gpu=2)
    assert [s["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0", "1", "2", "0", "1", "2"]
    assert all(s["DEVICE"] == "gpu" for s in slots)
    assert len(devices.device_slots(4, "gpu", gpus=3, per_gpu=2)) == 4
    with pytest.raises(ValueError, match="exceeds 3 GPU"):
        devices.device_slots(7, "gpu", gpus=3, per_gpu=2)
    with pytest.raises(ValueError, match="no GPU"):
        devices.device_slots(None, "gpu", gpus=0)
    cpu = devices.device_slots(None, "cpu", cores=2)
    assert cpu == [{"DEVICE": "cpu", "OMP_NUM_THREADS": "1"}] * 2


def test_per_gpu_on_a_cpu_sweep_is_refused_not_ignored(tmp_path, capsys):
    grid = GRIDS / "demo_cnn.toml"
    for device in (["--device", "cpu"], []):  # this machine: auto finds no GPU in the tests
        if not device and devices.detect_device("auto", None)[0] != "cpu":
            continue
        assert cli(["sweep", str(grid), "--dry-run", "--root", str(tmp_path / "r"),
                    "--per-gpu", "16", *device]) == 2
        err = capsys.readouterr().err
        assert "--per-gpu 16: the cells train on the CPU" in err and "Fix: drop --per-gpu" in err
    assert cli(["sweep", str(grid), "--dry-run", "--root", str(tmp_path / "r"), "--device",
                "cpu", "--jobs", "3"]) == 0
    assert "3 worker slot(s)" in capsys.readouterr().out
    assert not (tmp_path / "r").exists()


def test_threads_per_cpu_cell(tmp_path, capsys):
    """--threads T gives each CPU cell OMP_NUM_THREADS=T (default 1) and, without --jobs,
    cores // T slots; slots that need more threads than cores are refused, and so is
    --threads where it would be ignored (GPU cells, Slurm / submitit tasks)."""
    assert devices.device_slots(None, "cpu", cores=4, threads=2) == \
        [{"DEVICE": "cpu", "OMP_NUM_THREADS": "2"}] * 2
    assert devices.device_slots(1, "cpu", cores=2, threads=2) == \
        [{"DEVICE": "cpu", "OMP_NUM_THREADS": "2"}]
    assert devices.device_slots(3, "cpu", cores=2) == \
        [{"DEVICE": "cpu", "OMP_NUM_THREADS": "1"}] * 3      # one thread each: as before
    with pytest.raises(ValueError, match=r"--threads 2 x 2 cell\(s\) at once = 4 threads on 3 "
                                         r"core\(s\).*Fix: --jobs 1 with --threads 2"):
        devices.device_slots(2, "cpu", cores=3, threads=2)
    grid = GRIDS / "demo_cnn.toml"
    root = ["--dry-run", "--root", str(tmp_path / "r")]
    assert cli(["sweep", str(grid), *root, "--device", "cpu", "--jobs", "1",
                "--threads", "2", "--seed", "830"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if " -m fairseq_entropy.cli run " in line]
    assert len(lines) == 3 and all(line.startswith("OMP_NUM_THREADS=2 ") for line in lines)
    assert "1 worker slot(s)" in out
    assert cli(["sweep", str(grid), *root, "--device", "gpu", "--gpus", "2",
                "--threads", "2"]) == 2
    assert "--threads 2: the cells train on GPUs, where it would be ignored" in \
        capsys.readouterr().err
    assert cli(["sweep", str(grid), *root, "--executor", "slurm", "--threads", "2"]) == 2
    assert "cpus_per_task" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_grid_level_the_builder_refuses_is_refused_before_any_cell(tmp_path, capsys):
    """N = 5 rounds 5 x 0.05 validation commands to 0; N = 60000 exceeds the 7 x 8 x 2 x
    21 x 21 = 49392 commands with jump not first (7 first verbs, 8 second verbs, 2
    conjunctions, 21 clauses per verb): both are refused with --dry-run and without, and
    nothing is written."""
    text = (GRIDS / "demo_cnn.toml").read_text()
    for n, reason in (("5", "the valid split would be empty (train 5, valid 0"),
                      ("60000", "N=60000 needs more commands than the 49392 that exist")):
        grid = tmp_path / f"n{n}.toml"
        grid.write_text(text.replace("n = [6000]", f"n = [{n}]"))
        for dry in (["--dry-run"], []):
            assert cli(["sweep", str(grid), "--root", str(tmp_path / "r"), *dry]) == 2
            out, err = capsys.readouterr()
            assert out == ""  # the error alone, no "# grid" header above it
            assert f"{grid}: level 0 at N = {n} cannot be built" in err and reason in err
            assert "in the grid file: its n, levels or build_args" in err
            assert not (tmp_path / "r").exists()


def test_more_gpus_than_torch_sees_are_refused_unless_planning(tmp_path, capsys):
    """--gpus beyond torch's count would give slots CUDA_VISIBLE_DEVICES that do not exist."""
    grid, seen = GRIDS / "demo_cnn.toml", devices.gpu_count()
    root = tmp_path / "r"
    for device in (["--device", "gpu"], []):
        assert cli(["sweep", str(grid), "--root", str(root), "--gpus", str(seen + 2),
                    *device]) == 2
        err = capsys.readouterr().err
        assert f"--gpus {seen + 2}: torch sees {seen} GPU(s)" in err
        assert f"Fix: --gpus {seen} or fewer" in err
        assert not root.exists()
    assert cli(["sweep", str(grid), "--dry-run", "--root", str(root), "--gpus", str(seen + 2),
                "--per-gpu", "2"]) == 0
    assert f"{2 * (seen + 2)} worker slot(s)" in capsys.readouterr().out
    assert not root.exists()


def test_local_executor_packs_k_runs_per_gpu(capsys):
    """8 cells on 2 simulated GPUs x 2 runs: 4 run at once, never 3 on one GPU."""
    slots = devices.device_slots(None, "gpu", gpus=2, per_gpu=2)
    barrier = threading.Barrier(4, timeout=60)
    guard = threading.Lock()
    running = {"0": 0, "1": 0}
    peak = {"0": 0, "1": 0}
    seen = []

    def runner(cell, slot):
        gpu = slot["CUDA_VISIBLE_DEVICES"]
        with guard:
            running[gpu] += 1
            peak[gpu] = max(peak[gpu], running[gpu])
            seen.append(gpu)
        barrier.wait()  # all four slots are busy at the same time
        with guard:
            running[gpu] -= 1
        if cell.seed == 3:
            raise RuntimeError("boom")
        return sweep.CellResult(cell.name, "done", accuracy=0.5)

    cells = [Cell("exp1", "exp1_fconv", "cnn", 6000, s, 3.0) for s in range(8)]
    results = executors.run_local(cells, "unused", slots, runner)
    assert peak == {"0": 2, "1": 2}
    assert sorted(seen) == ["0"] * 4 + ["1"] * 4
    assert [r.status for r in results] == ["done"] * 3 + ["failed"] + ["done"] * 4
    assert results[3].reason == "RuntimeError: boom"
    assert sweep_status.summarize(results) == {"done": 7, "failed": 1, "skipped": 0, "locked": 0,
                                          "cancelled": 0}


FAKE_RECIPE = """#!/usr/bin/env bash
# stands in for train_level.sh: fails for seed 2, else writes a score
set -eu
preset=$1 data=$2 run=$3
[ "$SEED" = 2 ] && { echo "out of memory (simulated)" >&2; exit 3; }
mkdir -p "$run/last"
echo "{\\"accuracy\\": 0.$SEED}" > "$run/last/score.json"
"""


def fake_cells(tmp_path):
    recipe = tmp_path / "fake_train.sh"
    recipe.write_text(FAKE_RECIPE)
    cells = [Cell("exp1", "exp1_fconv", "cnn", 6000, s, 3.0) for s in (5, 2)]
    for c in cells:  # data already binarized: prepare_data skips it
        c.databin(tmp_path).mkdir(parents=True)
        (c.databin(tmp_path) / "manifest.json").write_text("{}")
    return cells, recipe


def test_submitit_executor_in_its_local_mode(tmp_path):
    cells, recipe = fake_cells(tmp_path)
    status = tmp_path / "sweep-status.tsv"
    results = executors.run_submitit(cells, tmp_path, {"timeout_min": 5, "cpus_per_task": 1,
                                                   "slurm_partition": "unused"},
                                 cluster="local", recipe=recipe, status=status)
    assert [r.status for r in results] == ["done", "failed"]
    # the executor itself wrote each task's row as its outcome arrived
    rows = [line.split("\t")[:3] for line in status.read_text().splitlines()[1:]]
    assert rows == [[cells[1].name, "failed", ""], [cells[0].name, "done", "0.500000"]]  # seed2, 5
    assert [r.accuracy for r in results] == [0.5, None]
    assert "exit 3: out of memory (simulated)" in results[1].reason
    assert len(list((tmp_path / "submitit").iterdir())) >= 1  # submitit's job folders
    # re-running skips the finished cells and retries the failed one
    again = executors.run_submitit(cells, tmp_path, {"timeout_min": 5}, cluster="debug",
                               recipe=recipe)
    assert [r.status for r in again] == ["skipped", "failed"]
    table = sweep_status.write_status(again, tmp_path / "status.tsv").read_text().splitlines()
    assert table[0] == "cell\tstatus\taccuracy\twall_s\treason"
    assert table[1].startswith("exp1_fconv/n6000/seed2/entropy_3.0\tfailed\t\t")
    assert table[2].startswith("exp1_fconv/n6000/seed5/entropy_3.0\tskipped\t0.500000\t")
    assert sweep_status.format_summary(again).startswith(
        "sweep finished: done 0, failed 1, skipped 1, locked 0, cancelled 0\n")


def test_status_file_keeps_the_rows_of_other_grids_in_the_same_root(tmp_path):
    status = tmp_path / "sweep-status.tsv"
    r = sweep.CellResult
    sweep_status.write_status([r("a/seed1/entropy_0.0", "done", "", 10.0, 0.25),
                        r("a/seed1/entropy_3.0", "failed", "exit 1", 5.0)], status)
    # a second grid (other cells) and a re-run of the failed cell, in one later sweep
    sweep_status.write_status([r("b/seed1/entropy_0.0", "done", "", 20.0, 0.5),
                        r("a/seed1/entropy_3.0", "done", "", 30.0, 1.0)], status)
    assert status.read_text().splitlines() == [
        "cell\tstatus\taccuracy\twall_s\treason",
        "a/seed1/entropy_0.0\tdone\t0.250000\t10.0\t",
        "a/seed1/entropy_3.0\tdone\t1.000000\t30.0\t",   # replaced in place
        "b/seed1/entropy_0.0\tdone\t0.500000\t20.0\t",
    ]


def test_status_file_gets_each_cells_row_as_soon_as_it_finishes(tmp_path):
    """One worker slot: while the second cell runs, the status file already holds the first
    cell's outcome in place of the row a stopped sweep left, and the second's old row."""
    status = tmp_path / "sweep-status.tsv"
    cells = [Cell("exp1", "exp1_fconv", "cnn", 6000, s, 3.0) for s in (1, 2)]
    stopped = "the sweep was stopped (signal 15) before this cell finished: re-run to resume"
    sweep_status.write_status([sweep.CellResult(c.name, "cancelled", stopped) for c in cells],
                              status)
    seen = []

    def runner(cell, slot):
        seen.append(status.read_text().splitlines()[1:])
        return sweep.CellResult(cell.name, "done", wall_s=7.0 * cell.seed,
                                accuracy=0.25 * cell.seed)

    executors.run_local(cells, tmp_path, [{}], runner, status=status)
    first, second = cells[0].name, cells[1].name
    assert seen == [[f"{first}\tcancelled\t\t0.0\t{stopped}",
                     f"{second}\tcancelled\t\t0.0\t{stopped}"],
                    [f"{first}\tdone\t0.250000\t7.0\t",
                     f"{second}\tcancelled\t\t0.0\t{stopped}"]]
    assert status.read_text().splitlines()[1:] == [f"{first}\tdone\t0.250000\t7.0\t",
                                                   f"{second}\tdone\t0.500000\t14.0\t"]



def test_status_rows_do_not_depend_on_the_order_in_which_cells_finish(tmp_path):
    """Rows merged one by one as cells finish end sorted by cell name, numbers as numbers."""
    r = sweep.CellResult
    names = ["a/n320/seed42/entropy_0.5", "a/n320/seed42/entropy_3.0",
             "a/n320/seed231/entropy_0.0", "a/n6000/seed5/entropy_0.0", "b/n320/seed5/k_8"]
    files = []
    for k, order in enumerate(([4, 2, 0, 3, 1], [0, 1, 2, 3, 4], [1, 3, 0, 4, 2])):
        status = tmp_path / f"status{k}.tsv"
        for i in order:
            sweep_status.write_status([r(names[i], "done", "", 1.0 + i, 0.1 * i)], status)
        files.append(status.read_bytes())
        rows = status.read_text().splitlines()[1:]
        assert [row.split("\t")[0] for row in rows] == names
    assert files[0] == files[1] == files[2]


def test_a_cell_ended_by_a_stop_signal_is_recorded_cancelled_not_failed(tmp_path):
    """The stop signal's handler stops the processes (``CHILDREN.terminate``); the cell its
    runner reports as failed (exit -15) goes into the status file as cancelled, so a cell
    that finished before the stop keeps its ``done``."""
    from fairseq_entropy.experiments.processes import CHILDREN

    status = tmp_path / "sweep-status.tsv"
    cells = [Cell("exp1", "exp1_fconv", "cnn", 6000, s, 3.0) for s in (1, 2)]

    def runner(cell, slot):
        if cell.seed == 1:
            return sweep.CellResult(cell.name, "done", wall_s=3.0, accuracy=0.5)
        CHILDREN.stopped_by = signal.SIGINT
        CHILDREN.terminate()
        return sweep.CellResult(cell.name, "failed", "exit -15: killed", 4.0)

    try:
        got = executors.run_local(cells, tmp_path, [{}], runner, status=status)
    finally:
        CHILDREN.stopping, CHILDREN.stopped_by = False, None
    reason = executors.stopped_reason(signal.SIGINT)
    assert [(g.status, g.reason) for g in got] == [("done", ""), ("cancelled", reason)]
    assert status.read_text().splitlines()[1:] == [
        f"{cells[0].name}\tdone\t0.500000\t3.0\t", f"{cells[1].name}\tcancelled\t\t4.0\t{reason}"]


def record_segment(directory, seconds):
    """One finished segment of ``directory``'s wall-time ledger; the total over all."""
    return sweep.WallSegment(directory, time.monotonic()).close(seconds)


def test_wall_time_of_a_run_adds_every_segment(tmp_path):
    run = tmp_path / "run"
    assert record_segment(run, 12.5) == 12.5
    assert record_segment(run, 30.0) == 42.5
    assert (run / sweep.WALL_FILE).read_text().count("\n") == 2
    with open(run / sweep.WALL_FILE, "a") as f:
        f.write("a line edited by hand\n")
    assert record_segment(run, 1.0) == 43.5  # the hand-written line is not counted
    assert record_segment(tmp_path / "fresh", 2.0) == 2.0  # a new run starts from zero


def test_a_running_segment_is_on_the_ledger_before_it_ends(tmp_path, monkeypatch):
    """A sweep killed outright (no close) leaves its running segment counted to within a
    beat; a segment that did not run the run is taken back; a second close changes nothing."""
    monkeypatch.setattr(sweep, "WALL_BEAT_S", 0.05)
    run = tmp_path / "run"
    record_segment(run, 10.0)
    start = time.monotonic()
    segment = sweep.WallSegment(run, start)
    time.sleep(0.4)
    lines = (run / sweep.WALL_FILE).read_text().splitlines()
    assert len(lines) == 2 and lines[0].endswith("\t10.0")
    assert 0.05 <= float(lines[1].split("\t")[1]) <= time.monotonic() - start
    assert segment.close(None) == 10.0
    assert (run / sweep.WALL_FILE).read_text().splitlines() == lines[:1]
    segment = sweep.WallSegment(run, time.monotonic())
    assert segment.close(5.0) == 15.0 and segment.close(7.0) == 15.0
    assert [ln.split("\t")[1] for ln in (run / sweep.WALL_FILE).read_text().splitlines()] == [
        "10.0", "5.0"]


def test_a_resumed_cells_wall_time_counts_its_earlier_segments(tiny_data, tmp_path,
                                                                monkeypatch):
    """Two sweeps of one cell whose recipe stops after a while (as a killed run does): the
    second outcome's wall time is both segments', and a locked cell adds nothing."""
    root = tmp_path / "root"
    shutil.copytree(tiny_data, root)
    cell = load_cell(root)
    recipe = tmp_path / "recipe.sh"
    recipe.write_text("sleep 0.3; exit 3\n")
    first = sweep.run_cell(cell, root, recipe=recipe)
    second = sweep.run_cell(cell, root, recipe=recipe)
    assert first.status == second.status == "failed" and "exit 3" in second.reason
    segments = [float(ln.split("\t")[1]) for ln in
                (cell.run_dir(root) / sweep.WALL_FILE).read_text().splitlines()]
    assert len(segments) == 2 and min(segments) >= 0.3
    assert first.wall_s == pytest.approx(segments[0], abs=0.06)
    assert second.wall_s == pytest.approx(sum(segments), abs=0.06)
    # a locked cell adds nothing, even one that exits after the running segment was written
    monkeypatch.setattr(sweep, "WALL_BEAT_S", 0.05)
    recipe.write_text(f"sleep 0.3; exit {locks.LOCKED_EXIT}\n")
    assert sweep.run_cell(cell, root, recipe=recipe).status == "locked"
    assert len((cell.run_dir(root) / sweep.WALL_FILE).read_text().splitlines()) == 2

# --------------------------------------------------------------------------- kill, resume
TINY_GRID = """experiment = "exp1"
presets = ["exp1_fconv"]
levels = [3]
seeds = [5]
n = [320]
schedule = {max_update = 80}
"""


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    """One binarized level (320 training commands, 48 of the 7056 test commands)."""
    tmp = tmp_path_factory.mktemp("tiny")
    cell = load_cell(tmp)
    build = cell.build_dir(tmp)
    assert cli(["build", "exp1", "--out", str(build), "--levels", "3", "--n", "320",
                "--seed", "5"]) == 0
    level = build / cell.level_name
    cut_and_binarize(level, cell.databin(tmp))
    return tmp


def load_cell(root):
    (root / "tiny.toml").write_text(TINY_GRID)
    (cell,) = load_grid(root / "tiny.toml").cells()
    return cell


def sweep_cmd(root):
    # the last checkpoint only: the resume is checked on the last checkpoint's score and
    # hypotheses, and decoding the best checkpoint too would start a fairseq-generate more in
    # each of the three sweeps
    return [sys.executable, "-m", "fairseq_entropy.cli", "sweep", str(root / "tiny.toml"),
            "--root", str(root), "--device", "cpu", "--jobs", "1", "--no-score-best"]


def hypotheses(run):
    return sorted(ln for ln in (run / "generate-last.txt").read_text().splitlines()
                  if ln.startswith(("H-", "P-")))


@pytest.mark.slow  # three sweeps of one tiny cell: about 20 Python start-ups of fairseq
def test_killed_cell_resumes_to_the_uninterrupted_score(tiny_data, tmp_path):
    roots = {}
    for name in ("straight", "killed"):
        roots[name] = tmp_path / name
        shutil.copytree(tiny_data, roots[name])
    cell = load_cell(roots["straight"])
    subprocess.run(sweep_cmd(roots["straight"]), check=True, capture_output=True, env=env())

    root = roots["killed"]
    run = cell.run_dir(root)
    proc = subprocess.Popen(sweep_cmd(root), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env())
    log = run / "train.log"
    # kill once the checkpoint of epoch 3 (of 8) is saved
    while proc.poll() is None and "epoch 3 @ 30 updates" not in (
            log.read_text() if log.exists() else ""):
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep ended before it could be killed"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert not (run / "last" / "score.json").exists()
    with locks.RunLock(run):  # the killed run's lock is free again
        pass
    res = subprocess.run(sweep_cmd(root), capture_output=True, text=True, env=env())
    text = log.read_text()
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:] + text[-3000:]
    assert "done 1, failed 0, skipped 0, locked 0" in res.stdout
    assert "Loaded checkpoint" in text and "num_updates 80" in text
    # the status row's wall time is both segments' (the killed one and the resumed one)
    segments = [float(ln.split("\t")[1]) for ln in
                (run / sweep.WALL_FILE).read_text().splitlines()]
    row = [r for r in (root / "sweep-status.tsv").read_text().splitlines()
           if r.startswith(cell.name + "\t")]
    assert len(segments) == 2 and float(row[0].split("\t")[3]) == round(sum(segments), 1)

    straight = json.loads((cell.run_dir(roots["straight"]) / "last/score.json").read_text())
    resumed = json.loads((run / "last/score.json").read_text())
    assert resumed["accuracy"] == straight["accuracy"] and resumed["n"] == 48
    # the same weights decode the same hypotheses with the same scores, to the last digit
    assert hypotheses(run) == hypotheses(cell.run_dir(roots["straight"]))

    # cut off after training, while decoding: decoded again without one more update
    checkpoint = (run / "checkpoints" / "checkpoint_last.pt").read_bytes()
    shutil.rmtree(run / "last")
    (run / "generate-last.txt").write_text("H-0\tcut off")
    res = subprocess.run(sweep_cmd(root), capture_output=True, text=True, env=env())
    assert "done 1, failed 0" in res.stdout
    assert "skip training" in (run / "sweep.log").read_text()
    assert (run / "checkpoints" / "checkpoint_last.pt").read_bytes() == checkpoint
    assert json.loads((run / "last/score.json").read_text())["accuracy"] == resumed["accuracy"]
    assert hypotheses(run) == hypotheses(cell.run_dir(roots["straight"]))


def test_progress_time_left_before_any_cell_finished_comes_from_the_training_logs(tmp_path):
    import io

    line = ("2026-12-01 13:42:21 | INFO | fairseq_entropy.tasks.systematicity | progress: epoch "
            "{e}/24 | update 991/4512 | {el} s elapsed | ~{left} s left | last valid seq_acc n/a\n")
    a, b, c = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "c.log"
    a.write_text(line.format(e=5, el=100, left=900) + "noise\n" + line.format(e=6, el=400,
                                                                             left=1400))
    b.write_text("2026-12-01 | INFO | fairseq_cli.train | Start iterating over samples\n")
    assert training_progress(a) == (400.0, 1400.0)      # the last line counts
    assert training_progress(b) is None                 # no progress line yet
    assert training_progress(tmp_path / "missing.log") is None

    p = sweep_status.Progress(total=7, workers=2, out=io.StringIO(), clock=lambda: 0.0)
    p.begin("a", a)
    p.begin("b", b)
    # b has written nothing yet: a alone, 1400 s left of an 1800 s run; 5 cells wait,
    # ceil(5 / 2) = 3 more waves of 1800 s
    assert p.line().endswith("~6800 s left (from the running cells' training progress)")
    c.write_text(line.format(e=2, el=200, left=1000))
    p.begin("c", c)          # three running on two workers (a skipped cell overlapping)
    # mean run (1800 + 1200) / 2 = 1500, 4 cells wait: 2 waves; longest left 1400
    assert p.line().endswith("~4400 s left (from the running cells' training progress)")
    p.add(sweep.CellResult("c", "skipped", "scored before", 0.0, 0.5))
    assert "c" not in p.running
    # 6 cells left, 2 running: 4 wait, 2 waves of 1800 s after a's 1400 s
    assert p.line().endswith("~5000 s left (from the running cells' training progress)")


def test_training_progress_reads_the_line_the_task_writes(tmp_path):
    from fairseq_entropy.progress import TrainingProgress

    p = TrainingProgress(30, max_update=100, max_epoch=0, updates_per_epoch=10,
                         clock=lambda: 0.0)
    p.step(0)
    # 20 updates in 31 s, 80 left -> 80 * 31 / 20 = 124 s
    log = tmp_path / "train.log"
    log.write_text(f"2026-12-01 13:42:21 | INFO | fairseq_entropy.tasks.systematicity | "
                   f"{p.line(20, 31.0)}\n")
    assert training_progress(log) == (31.0, 124.0)


def test_progress_time_left_counts_down_between_finished_cells():
    import io

    now = [0.0]
    p = sweep_status.Progress(total=6, workers=2, out=io.StringIO(), clock=lambda: now[0])
    assert p.line().endswith("0 s elapsed, ? s left")            # nothing finished yet
    now[0] = 100.0
    p.add(sweep.CellResult("a", "done", wall_s=100.0, accuracy=0.5))
    now[0] = 101.0
    p.add(sweep.CellResult("b", "done", wall_s=100.0, accuracy=0.5))
    # 4 cells of ~100 s on 2 workers: 200 s from the last finish
    assert p.line() == "sweep: 2/6 cells finished, 2 running, 101 s elapsed, ~200 s left"
    now[0] = 151.0
    assert p.line().endswith("151 s elapsed, ~150 s left")
    now[0] = 500.0  # 200 s expected after the last finish at 101 s: 199 s over
    assert p.line().endswith("500 s elapsed, ~0 s left (199 s past the estimate)")


def test_progress_after_finished_cells_prefers_the_running_cells_training_logs(tmp_path):
    """Once cells have finished, the running cells' own progress lines still give the time
    left (a slower running cell is not reported as done); the finished cells' mean wall time
    prices the waves still to come."""
    import io

    line = ("2026-12-01 13:42:21 | INFO | fairseq_entropy.tasks.systematicity | progress: epoch "
            "5/24 | update 991/4512 | {el} s elapsed | ~{left} s left | last valid seq_acc n/a\n")
    now = [0.0]
    p = sweep_status.Progress(total=5, workers=2, out=io.StringIO(), clock=lambda: now[0])
    now[0] = 500.0
    p.add(sweep.CellResult("a", "done", wall_s=500.0, accuracy=0.5))
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(line.format(el=450, left=300))
    p.begin("b", a)
    p.begin("c", b)
    now[0] = 900.0
    # c has no progress line yet: the finished cells' mean, 4 cells x 500 s / 2 workers
    # = 1000 s from the last finish at 500 s, 400 s of it gone
    assert p.line().endswith("900 s elapsed, ~600 s left")
    b.write_text(line.format(el=100, left=700))
    # both running cells report: 700 s for the slower, then the 2 waiting cells as one more
    # wave of the finished cells' 500 s
    assert p.line().endswith("~1200 s left (from the running cells' training progress)")
