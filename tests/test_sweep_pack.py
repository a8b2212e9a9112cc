"""Packed sweeps (``sweep --pack K``, a grid's ``pack = K``; experiments/packs.py): the grid
option, the grouping into packs, the dry run, and a packed sweep writing the cell layout of an
unpacked one."""
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_entropy.cli import main as cli
from fairseq_entropy.experiments import packs, sweep
from fairseq_entropy.experiments.grids import Cell, GridError, Schedule, load_grid
from fairseq_entropy.tasks.packed_runs import run_lines
from _toy import tiny_level  # noqa: E402

BIN = Path(sys.executable).parent
GRID = """experiment = "exp1"
presets = ["exp1_fconv"]
levels = [0, 3]
seeds = [5]
n = [320]
schedule = {{max_update = 4}}
{extra}"""


def cell(level, preset="exp1_fconv", schedule=Schedule(max_update=4), seed=5):
    return Cell("exp1", preset, "cnn", 320, seed, level, schedule)


# ------------------------------------------------------------------------------ the option
@pytest.mark.parametrize("value", ["-1", "1.5", '"4"', "true"])
def test_a_bad_grid_pack_is_refused_with_its_line_and_a_fix(value, tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(extra=f"pack = {value}\n"))
    with pytest.raises(GridError) as e:
        load_grid(grid)
    msg = str(e.value)
    assert msg.startswith(f"{grid}:7: pack = ") and "Fix: an integer >= 0" in msg


def test_grid_pack_is_read_and_defaults_to_no_packing(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(extra="pack = 16\n"))
    assert load_grid(grid).pack == 16
    grid.write_text(GRID.format(extra=""))
    assert load_grid(grid).pack == 0


# ---------------------------------------------------------------------------- the grouping
def test_cells_are_packed_by_preset_and_schedule_in_grid_order(tmp_path):
    levels = [0, 0.5, 1, 1.5, 2]
    cells = [cell(v) for v in levels] + [cell(0, "exp1_cnn_authors")] + \
        [cell(3, schedule=Schedule(max_update=5))]
    units = packs.make_packs(cells, tmp_path, 2)
    got = [[c.level for c in packs.cells_of(u)] if isinstance(u, packs.Pack) else u.level
           for u in units]
    # exp1_fconv max_update 4: 5 cells -> 2 + 2 + 1 alone; the other preset and the other
    # schedule are each a group of one, so alone
    assert [len(c) for c in packs._chunks(cells[:5] * 7, 16)] == [12, 12, 11]  # 35 cells
    assert got == [[0, 0.5], [1, 1.5], 2, 0, 3]
    assert [type(u).__name__ for u in units] == ["Pack", "Pack", "Cell", "Cell", "Cell"]
    assert packs.make_packs(cells, tmp_path, 1) == cells and \
        packs.make_packs(cells, tmp_path, 0) == cells
    first = units[0]
    assert first.dir.parent == tmp_path / "packs/exp1/exp1_fconv/n320"
    assert first.label() == ("exp1_fconv/n320/" + first.dir.name
                             + ": seed5/entropy_0.0, seed5/entropy_0.5")


def test_a_pack_of_build_args_cells_is_named_as_its_cells_are(tmp_path):
    """A pack of cells built with ``build_args`` carries their data tag in its name, and its
    label lists each cell by the rest of the cell's name."""
    tagged = [Cell("exp1", "exp1_fconv", "cnn", 320, 5, v, Schedule(max_update=4),
                   ("--component", "direction", "--restricted", "left")) for v in (0, 0.4)]
    (pack,) = packs.make_packs(tagged, tmp_path, 2)
    tag = "exp1+component=direction+restricted=left"
    assert pack.dir.parent == tmp_path / "packs" / tag / "exp1_fconv/n320"
    assert pack.name == f"{tag}/exp1_fconv/n320/{pack.dir.name}"
    assert pack.label() == f"{pack.name}: seed5/entropy_0.0, seed5/entropy_0.4"
    assert [c.name for c in tagged] == [f"{tag}/exp1_fconv/n320/seed5/entropy_{v}"
                                        for v in ("0.0", "0.4")]


def test_a_cut_off_pack_is_taken_again_whole_and_trained_cells_stay_alone(tmp_path):
    cells = [cell(v) for v in (0, 0.5, 1, 1.5, 2)]
    old = packs.Pack(tuple(cells[1:3]), packs.pack_key(cells[1], tmp_path)[0],
                     tmp_path / "packs/exp1/exp1_fconv/n320/pack-old")
    packs.write_description(old, tmp_path)
    (old.dir / "checkpoints").mkdir()
    (old.dir / "checkpoints" / "checkpoint_last.pt").write_bytes(b"packed")
    own = cells[4].run_dir(tmp_path) / "checkpoints"  # its own cut-off, unpacked training
    own.mkdir(parents=True)
    (own / "checkpoint_last.pt").write_bytes(b"alone")
    units = packs.make_packs(cells, tmp_path, 2)
    # units in the order of their first cell: (0, 1.5), the old pack (0.5, 1), 2 alone
    assert [u.dir.name if isinstance(u, packs.Pack) else u.level for u in units] == \
        [packs.pack_dir([cells[0], cells[3]], old.key, tmp_path).name, "pack-old", 2]
    assert units[0].cells == (cells[0], cells[3]) and units[1].cells == tuple(cells[1:3])
    # once a member is scored (not among the cells to run), the old pack is not taken
    units = packs.make_packs([cells[1], cells[3]], tmp_path, 2)
    assert [c.level for c in units[0].cells] == [0.5, 1.5]


def test_local_executor_runs_one_pack_per_gpu_slot_and_reports_every_cell(tmp_path):
    """2 packs and a cell alone on 2 simulated GPUs x 1 slot: a pack holds one slot, its
    outcome is one row per cell, in the cells' order; a pack that raises fails its cells."""
    from fairseq_entropy.experiments import devices, executors, sweep

    slots = devices.device_slots(None, "gpu", gpus=2, per_gpu=1)
    cells = [cell(v) for v in (0, 0.5, 1, 1.5, 2)]
    units = packs.make_packs(cells, tmp_path, 2)
    seen = []

    def runner(unit, slot):
        seen.append((type(unit).__name__, len(packs.cells_of(unit)), slot["DEVICE"]))
        if isinstance(unit, packs.Pack) and unit.cells[0].level == 1:
            raise RuntimeError("out of memory")
        return [sweep.CellResult(c.name, "done", accuracy=c.level / 4)
                for c in packs.cells_of(unit)] if isinstance(unit, packs.Pack) else \
            sweep.CellResult(unit.name, "done", accuracy=0.5)

    results = executors.run_local(units, tmp_path, slots, runner)
    assert sorted(seen) == [("Cell", 1, "gpu"), ("Pack", 2, "gpu"), ("Pack", 2, "gpu")]
    assert [r.cell for r in results] == [c.name for c in cells]
    assert [r.status for r in results] == ["done", "done", "failed", "failed", "done"]
    assert [r.accuracy for r in results] == [0.0, 0.125, None, None, 0.5]
    assert results[2].reason == results[3].reason == "RuntimeError: out of memory"


def test_a_slurm_task_of_a_pack_reports_each_cell(tmp_path):
    """A pack's task: its result (a list) per cell; cancelled or crashed: every cell so."""
    from fairseq_entropy.experiments import executors, slurm, sweep
    from test_executors import FakeJob

    cells = [cell(v) for v in (0, 0.5, 1, 1.5)]
    first, second = packs.make_packs(cells, tmp_path, 2)
    done = [sweep.CellResult(c.name, "done", accuracy=0.25) for c in first.cells]
    jobs = [FakeJob(tmp_path, "18_0", "COMPLETED", done), FakeJob(tmp_path, "18_1", "TIMEOUT")]
    watch = executors._ArrayWatch.__new__(executors._ArrayWatch)
    watch.jobs, watch.cells, watch.cluster, watch.clock = jobs, [first, second], "slurm", \
        lambda: 0.0
    watch.missing_since, watch.sacct = {}, True
    assert watch.outcome(0, "COMPLETED") == done
    cancelled = watch.outcome(1, "TIMEOUT")
    assert [(r.cell, r.status, r.reason) for r in cancelled] == [
        (c.name, "cancelled", slurm.CANCELLED_MESSAGE) for c in second.cells]
    jobs[1] = FakeJob(tmp_path, "18_2", "FAILED", RuntimeError("boom\nOOM killed"))
    assert [(r.cell, r.status, r.reason) for r in watch.outcome(1, "FAILED")] == [
        (c.name, "failed", "submitit: OOM killed") for c in second.cells]


@pytest.mark.parametrize("pack, extra, refused", [
    ("4", ["--select", "test-loss"], True),
    ("0", ["--select", "test-loss"], False),                      # unpacked: any selection
    ("4", ["--select", "test-loss", "--no-score-best"], False),   # last checkpoints only
    ("4", ["--select", "valid"], False),
])
def test_a_packed_sweep_refuses_a_selection_other_than_validation(pack, extra, refused,
                                                                   tmp_path, capsys):
    """A pack keeps each run's best checkpoint by its validation seq_acc: with --select
    test-loss its best checkpoints would be scored under the wrong label, so the sweep refuses
    first."""
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(extra=""))
    code = cli(["sweep", str(grid), "--dry-run", "--root", str(tmp_path / "r"), "--device",
                "cpu", "--pack", pack, *extra])
    err = capsys.readouterr().err
    assert code == (2 if refused else 0), err
    if refused:
        assert "--select test-loss with packed runs (--pack 4)" in err and "Fix: --pack 0" in err
    assert not (tmp_path / "r").exists()


def test_dry_run_shows_the_packs_and_writes_nothing(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(extra="").replace("levels = [0, 3]",
                                                  "levels = [0, 0.5, 1, 1.5, 2, 2.5, 3]"))
    assert cli(["sweep", str(grid), "--dry-run", "--root", str(tmp_path / "r"), "--device",
                "cpu", "--pack", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "packs of up to 3 cells" in out[0]
    summary = next(ln for ln in out if ln.startswith("# packs of up to 3:"))
    # 7 cells in the fewest packs of at most 3, as even as can be: 3, 2, 2
    assert "3 pack(s) of 7 cell(s), 0 cell(s) on their own" in summary
    assert "the data are not built yet" in summary
    shown = [ln for ln in out if ln.startswith("# pack ")]
    assert len(shown) == 3 and shown[0].startswith("# pack 1/3 (3 cells) exp1_fconv/n320/pack-?: ")
    assert shown[1].endswith(": seed5/entropy_1.5, seed5/entropy_2.0")
    assert shown[2].endswith(": seed5/entropy_2.5, seed5/entropy_3.0")
    assert not (tmp_path / "r").exists()



def test_dry_run_of_experiment_2_packs_only_cells_of_one_support_size(tmp_path, capsys):
    """Each support size k has its own training set, so its own number of updates: before
    the data exist the dry run groups by level, as the sweep will by the arguments; a fixed
    max_update lets the levels share packs."""
    grid = tmp_path / "g.toml"
    body = ('experiment = "exp2"\npresets = ["exp2_transformer_l2"]\nlevels = [1, 2]\n'
            'seeds = [1, 2, 3]\n')
    grid.write_text(body)
    assert cli(["sweep", str(grid), "--dry-run", "--root", str(tmp_path / "r"), "--device",
                "cpu", "--pack", "4"]) == 0
    shown = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("# pack ")]
    assert [ln.split(": ", 1)[1] for ln in shown] == [
        "seed1/support_1, seed2/support_1, seed3/support_1",
        "seed1/support_2, seed2/support_2, seed3/support_2"]
    grid.write_text(body + "schedule = {max_update = 40}\n")
    assert cli(["sweep", str(grid), "--dry-run", "--root", str(tmp_path / "r"), "--device",
                "cpu", "--pack", "6"]) == 0
    shown = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("# pack ")]
    assert len(shown) == 1 and shown[0].startswith("# pack 1/1 (6 cells)")
    assert not (tmp_path / "r").exists()


def test_dry_run_of_experiment_2_packs_support_sizes_together_under_a_fixed_lr(tmp_path,
                                                                             capsys):
    """The RNN's constant learning rate lets each run of a pack train its own number of
    updates, so its support sizes share packs (the Transformer's cosine schedule does not,
    above)."""
    grid = tmp_path / "g.toml"
    grid.write_text('experiment = "exp2"\npresets = ["exp2_rnn_gru_l2_h64"]\n'
                    'levels = [1, 2, 3]\nseeds = [1, 2]\n')
    assert cli(["sweep", str(grid), "--dry-run", "--root", str(tmp_path / "r"), "--device",
                "cpu", "--pack", "6"]) == 0
    shown = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("# pack ")]
    assert [ln.split(": ", 1)[1] for ln in shown] == [
        "seed1/support_1, seed2/support_1, seed1/support_2, seed2/support_2, "
        "seed1/support_3, seed2/support_3"]


@pytest.mark.parametrize("args,own", [
    (["--lr", "0.0001", "--lr-scheduler", "fixed", "--max-update", "9"], True),
    (["--lr", "0.0001", "--max-update", "9"], True),  # fairseq's default scheduler: fixed
    (["--lr", "0.0001", "--lr-scheduler", "cosine", "--max-update", "9"], False),
    (["--lr", "0.0001", "--lr-scheduler", "inverse_sqrt", "--max-update", "9"], True),
    (["--lr", "0.0001", "--lr-scheduler", "polynomial_decay", "--max-update", "9"], False),
    (["--lr", "0.1,0.01", "--lr-scheduler", "fixed", "--max-update", "9"], False),
    (["--lr", "0.1", "--force-anneal", "3", "--max-update", "9"], False),
    (["--lr", "0.1", "--max-epoch", "3", "--max-update", "9"], False),
])
def test_runs_train_their_own_max_update_only_under_a_learning_rate_of_the_updates(args,
                                                                                   own):
    assert packs.own_max_update(args) is own


def test_a_pack_of_runs_of_their_own_length_writes_each_runs_updates(tmp_path,
                                                                     monkeypatch):
    """pack.json gives each run its own max_update and argument hash; the pack trains to the
    largest (the ``packed_systematicity`` task stops each run at its own)."""
    from fairseq_entropy.experiments.presets import train_args_sha256
    from fairseq_entropy.tasks.packed_runs import read_pack

    updates = {1: 470, 2: 845}
    cells = [Cell("exp2", "exp2_rnn_gru_l2_h64", "rnn", None, s, k, Schedule())
             for k in (1, 2) for s in (1, 2)]
    monkeypatch.setattr(packs, "_cell_args", lambda c, root: [
        "--lr", "0.0001", "--max-update", str(updates[c.level]), "--lr-scheduler", "fixed"])
    pack = packs.Pack(tuple(cells), "key", tmp_path / "pack")
    packs.write_description(pack, tmp_path)
    runs = read_pack(str(pack.dir))
    assert [r["max_update"] for r in runs] == [470, 470, 845, 845]
    assert runs[0]["train_args_sha256"] == train_args_sha256(
        ["--lr", "0.0001", "--max-update", "470", "--lr-scheduler", "fixed"])
    monkeypatch.setattr(packs, "subword_data", lambda databin: False)
    cmd = packs.pack_command(pack, tmp_path, "cpu")
    assert cmd[cmd.index("--max-update") + 1] == "845"
    one = packs.Pack(tuple(c for c in cells if c.level == 1), "key", tmp_path / "one")
    packs.write_description(one, tmp_path)
    assert [r["max_update"] for r in read_pack(str(one.dir))] == [None, None]


# ------------------------------------------------------------------------ a packed sweep
POOLED = ("2026-12-07 06:42:15 | INFO | valid | epoch 002 | valid on 'valid' subset | "
          "loss_0 4.398 | loss_1 4.2 | loss 4.3 | seq_acc_0 0.25 | seq_acc_1 0.5 | "
          "seq_acc 0.375 | wps 300 | num_updates 8 | best_loss 4.3\n")


def test_a_runs_log_keeps_its_own_metrics_under_their_ordinary_names():
    progress = "progress: epoch 2/2 | update 8/8 | 1 s elapsed | ~0 s left\n"
    pooled_progress = progress.replace("\n", " | last valid seq_acc 0.3750\n")
    assert run_lines([pooled_progress, POOLED], 1) == [
        progress, "2026-12-07 06:42:15 | INFO | valid | epoch 002 | valid on 'valid' subset | "
                  "loss 4.2 | seq_acc 0.5 | num_updates 8\n"]
    # runs validated at their own epochs: run k's own lines only, not the pack's pooled one
    own = ["x | INFO | fairseq_entropy.tasks.packed | run %d (p/seed1/support_%d): valid on "
           "'valid' subset | epoch 001 | loss 2.7 | seq_acc 0.0 | num_updates %d\n" % (k, k, u)
           for k, u in ((0, 12), (1, 23))]
    assert run_lines([own[0], own[1], POOLED, progress], 1) == [own[1], progress]
    assert run_lines([own[0], own[1], POOLED], 0) == [own[0]]


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory):
    """The grid's two levels built and binarized under a sweep root (48 test commands)."""
    root = tmp_path_factory.mktemp("packroot")
    (root / "g.toml").write_text(GRID.format(extra=""))
    for c in load_grid(root / "g.toml").cells():
        tiny_level(root / "build" / str(c.level), c.databin(root), bits=c.level)
    return root


def _sweep(root, *extra):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "fairseq_entropy.cli", "sweep",
                           str(root / "g.toml"), "--root", str(root), "--device", "cpu",
                           *extra], capture_output=True, text=True, env=env, timeout=600)


def _layout(root):
    runs = root / "runs"
    # a run's tensorboard/ is there in both; its event files are named by time and host
    return sorted(str(p.relative_to(runs)) for p in runs.rglob("*")
                  if "tensorboard" not in p.relative_to(runs).parts[5:-1])


def _rows(root):
    rows = list(csv.reader((root / "sweep-status.tsv").open(), delimiter="\t"))
    return [[r[0], r[1], r[4]] for r in rows]  # cell, status, reason (not the wall time)


@pytest.mark.slow  # two sweeps of two tiny cells
def test_packed_sweep_writes_the_cell_layout_of_an_unpacked_one(tiny_root, tmp_path):
    roots = {}
    for name in ("alone", "packed"):
        roots[name] = tmp_path / name
        shutil.copytree(tiny_root, roots[name])
    res = _sweep(roots["alone"], "--jobs", "2")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = _sweep(roots["packed"], "--pack", "2", "--jobs", "1")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout
    cells = load_grid(tiny_root / "g.toml").cells()
    assert "# 1 pack(s) of 2 cell(s), 0 cell(s) on their own" in out
    # the pack's console lines name its runs
    assert "seed5/entropy_0.0, seed5/entropy_3.0] " in out and "done training" in out
    assert _layout(roots["packed"]) == _layout(roots["alone"])
    assert _rows(roots["packed"]) == _rows(roots["alone"])
    for c in cells:
        run = c.run_dir(roots["packed"])
        score = json.loads((run / "last" / "score.json").read_text())
        alone = json.loads((c.run_dir(roots["alone"]) / "last" / "score.json").read_text())
        assert sorted(score) == sorted(alone) and score["n"] == alone["n"] == 48
        # the best is the last state: its checkpoint a copy, decoded once (as alone)
        assert (run / "checkpoints" / "checkpoint_best.pt").read_bytes() == \
            (run / "checkpoints" / "checkpoint_last.pt").read_bytes()
        assert score["seed"] == 5 and score["schedule"]["max_update"] == 4
        assert "skip training" in (run / "sweep.log").read_text()
        # its train.log has its own validations, under the ordinary metric names
        valid = [ln for ln in (run / "train.log").read_text().splitlines() if "valid on" in ln]
        assert valid and not any(re.search(r"\b\w+_[01] ", ln) for ln in valid), valid
        assert (run / "tensorboard").resolve() == next(
            (roots["packed"] / "packs").rglob("pack-*")).resolve() / "tensorboard"
    # cut off while decoding: the rerun trains nothing again (the pack is finished), each
    # cell decodes once more
    (pack,) = list((roots["packed"] / "packs").rglob("pack-*"))
    before = (pack / "checkpoints" / "checkpoint_last.pt").read_bytes()
    for c in cells:
        shutil.rmtree(c.run_dir(roots["packed"]) / "last")
    res = _sweep(roots["packed"], "--pack", "2")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "done 2, failed 0" in res.stdout and "0 pack(s)" in res.stdout, res.stdout
    assert (pack / "checkpoints" / "checkpoint_last.pt").read_bytes() == before
    assert (pack / "train.log").read_text().count("=== ") == 1


# ----------------------------------------------------------------------------- GPU check
REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_compares_all_parameters_and_refuses_a_machine_without_a_gpu(tmp_path):
    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_check

    a = {"w": torch.tensor([3.0, 4.0]), "k_proj.bias": torch.tensor([1.0])}
    b = {"w": torch.tensor([3.0, 4.5]), "k_proj.bias": torch.tensor([-1.0])}
    rel, one, name = gpu_check.distance(a, b)  # k_proj.bias left out: ||(0, .5)|| / ||(3, 4)||
    assert rel == pytest.approx(0.1) and one == pytest.approx(0.125) and name == "w"
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: gpu_check.sh would run")
    res = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), str(tmp_path)],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHON=sys.executable))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("gpu_check.sh: error: torch sees no GPU") and \
        "Fix: " in res.stderr and res.stderr.count("\n") == 1


@pytest.mark.slow  # one packed sweep killed while it trains, then run again
def test_a_pack_cut_off_resumes_from_its_packed_checkpoint(tiny_root, tmp_path):
    import signal
    import time

    root = tmp_path / "root"
    shutil.copytree(tiny_root, root)
    grid = root / "g.toml"
    grid.write_text(grid.read_text().replace("max_update = 4", "max_update = 30"))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "fairseq_entropy.cli", "sweep", str(grid), "--root",
           str(root), "--device", "cpu", "--jobs", "1", "--pack", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    parent = root / "packs" / "exp1" / "exp1_fconv" / "n320"

    def log():
        logs = list(parent.glob("pack-*/train.log"))
        return logs[0].read_text() if logs else ""

    # killed once the packed checkpoint of epoch 1 (10 updates of 30) is saved
    saved = re.compile(r"Saved checkpoint .*\(epoch 1 @ 10 updates")
    while proc.poll() is None and not saved.search(log()):
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep ended before it could be killed"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    cells = load_grid(grid).cells()
    assert not any((c.run_dir(root) / "checkpoints" / "checkpoint_last.pt").exists()
                   for c in cells)  # nothing unpacked from a pack cut off
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (pack,) = list(parent.glob("pack-*"))  # the same pack, taken again
    text = log()
    assert text.count("=== ") == 2 and "Loaded checkpoint" in text
    assert saved.search(text.split("=== ")[1]) and "Loaded checkpoint" in text.split("=== ")[2]
    assert "num_updates 30" in text.split("=== ")[2]
    for c in cells:
        score = json.loads((c.run_dir(root) / "last" / "score.json").read_text())
        assert score["schedule"]["max_update"] == 30 and score["n"] == 48
    # each cell's wall time: the pack's two training segments and its own decoding
    pack_wall = [float(ln.split("\t")[1])
                 for ln in (pack / sweep.WALL_FILE).read_text().splitlines()]
    assert len(pack_wall) == 2
    rows = dict(ln.split("\t")[::3] for ln in
                (root / "sweep-status.tsv").read_text().splitlines()[1:])
    for c in cells:
        (decoding,) = [float(ln.split("\t")[1]) for ln in
                       (c.run_dir(root) / sweep.WALL_FILE).read_text().splitlines()]
        assert float(rows[c.name]) == pytest.approx(sum(pack_wall) + decoding, abs=0.11)
