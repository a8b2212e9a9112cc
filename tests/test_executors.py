"""The submitit executor without Slurm: what is submitted, cancelled tasks, the [resources]
table, a stopped sweep, task threads (experiments/executors.py, slurm.py; the real Slurm is
tests/integration/test_slurm.py)."""
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairseq_entropy.cli import main as cli
from fairseq_entropy.experiments import status as sweep_status
from fairseq_entropy.experiments import executors, locks, slurm, sweep
from fairseq_entropy.experiments.grids import Cell, GridError, load_grid
from fairseq_entropy.experiments.processes import CHILDREN

BIN = Path(sys.executable).parent
GRID = """experiment = "exp1"
presets = ["exp1_fconv"]
levels = [3]
seeds = [5, 2]

[resources]
timeout_min = 5
{extra}
"""
RECIPE = """#!/usr/bin/env bash
# stands in for train_level.sh: records its PID and threads, waits for $WAIT, writes a score
set -eu
run=$3
mkdir -p "$run"
echo $$ > "$run/pid"
echo "${OMP_NUM_THREADS:-unset}" > "$run/threads"
[ -n "${SIGNAL_PARENT:-}" ] && kill -TERM $PPID
sleep "${WAIT:-0}"
mkdir -p "$run/last"
echo "{\\"accuracy\\": 0.$SEED}" > "$run/last/score.json"
"""


def setup(tmp_path, extra=""):
    (tmp_path / "grid.toml").write_text(GRID.format(extra=extra))
    (tmp_path / "recipe.sh").write_text(RECIPE)
    cells = load_grid(tmp_path / "grid.toml").cells()
    for c in cells:  # data already binarized: prepare_data skips it
        c.databin(tmp_path).mkdir(parents=True)
        (c.databin(tmp_path) / "manifest.json").write_text("{}")
    return cells


def score(cell, root, acc):
    (cell.run_dir(root) / "last").mkdir(parents=True)
    (cell.run_dir(root) / "last" / "score.json").write_text(f'{{"accuracy": {acc}}}')


# ----------------------------------------------------------------------- what is submitted
def test_scored_and_locked_cells_are_not_submitted(tmp_path, capsys):
    cells = setup(tmp_path)
    score(cells[0], tmp_path, 0.25)
    with locks.RunLock(cells[1].run_dir(tmp_path)):
        todo, known = executors.pending_cells(cells, tmp_path)
        assert todo == [] and [known[0].status, known[1].status] == ["skipped", "locked"]
        assert known[0].accuracy == 0.25 and f"pid {os.getpid()}" in known[1].reason
        results = executors.run_submitit(cells, tmp_path, {}, cluster="debug")
    assert [r.status for r in results] == ["skipped", "locked"]
    assert capsys.readouterr().out == ("nothing to run: all 2 cell(s) are scored (1) or locked "
                                       "by a running process (1); nothing submitted\n")
    assert not (tmp_path / "submitit").exists()
    # released cleanly: an empty lock file is free
    assert executors.pending_cells(cells, tmp_path)[0] == [1]


def test_the_cli_submits_only_the_cells_left_and_keeps_the_wall_times(tmp_path, capsys,
                                                                      monkeypatch):
    cells = setup(tmp_path)
    monkeypatch.setenv("WAIT", "0.3")
    score(cells[0], tmp_path, 0.5)
    status = tmp_path / "sweep-status.tsv"
    sweep_status.write_status([sweep.CellResult(cells[0].name, "done", "", 42.5, 0.5)], status)
    args = ["sweep", str(tmp_path / "grid.toml"), "--root", str(tmp_path), "--executor",
            "submitit-local", "--recipe", str(tmp_path / "recipe.sh")]
    assert cli(args) == 0
    out = capsys.readouterr().out
    assert "1 of 2 cell(s) scored or locked: not submitted" in out
    submit = next(ln for ln in out.splitlines() if ln.startswith("submitted"))
    assert submit.startswith("submitted 1 task(s) with local: job array ")
    assert "_" not in submit.split("job array ")[1].split(";")[0]  # the array, not a task
    rows = {r.split("\t")[0]: r.split("\t") for r in status.read_text().splitlines()[1:]}
    wall = rows[cells[1].name][3]
    assert rows == {cells[0].name: [cells[0].name, "skipped", "0.500000", "42.5",
                                    "scored before"],
                    cells[1].name: [cells[1].name, "done", "0.200000", wall, ""]}
    assert float(wall) >= 0.3
    assert cli(args) == 0
    out = capsys.readouterr().out
    assert "nothing to run: all 2 cell(s) are scored (2) or locked by a running process (0); " \
           "nothing submitted" in out and "submitted 1" not in out
    walls = {r.split("\t")[0]: r.split("\t")[3] for r in status.read_text().splitlines()[1:]}
    assert walls == {cells[0].name: "42.5", cells[1].name: wall}


# --------------------------------------------------------------------------- cancelled tasks
class FakePaths:
    def __init__(self, pickle):
        self.result_pickle = pickle


class FakeJob:
    def __init__(self, tmp_path, job_id, state="RUNNING", result=None):
        self.job_id, self.state, self._result = job_id, state, result
        self.paths = FakePaths(tmp_path / f"{job_id}.pkl")
        if result is not None:
            self.paths.result_pickle.write_text("x")

    def done(self):
        return self._result is not None

    def result(self):
        if isinstance(self._result, Exception):
            raise self._result
        return self._result


def test_a_task_slurm_ended_is_cancelled_not_failed(tmp_path):
    cells = [Cell("exp1", "exp1_fconv", "cnn", 6000, s, 3.0) for s in range(5)]
    failed = sweep.CellResult(cells[1].name, "failed", "exit 241: done training in 8.5 seconds")
    jobs = [FakeJob(tmp_path, "18_0", "CANCELLED"),                   # cancelled while pending
            FakeJob(tmp_path, "18_1", "CANCELLED", failed),           # killed while running
            FakeJob(tmp_path, "18_2", "TIMEOUT"),
            FakeJob(tmp_path, "18_3", "FAILED", RuntimeError("boom\nOOM killed")),
            FakeJob(tmp_path, "18_4", "COMPLETED", sweep.CellResult(cells[4].name, "done",
                                                                    accuracy=1.0))]
    now = [0.0]
    watch = executors._ArrayWatch.__new__(executors._ArrayWatch)
    watch.jobs, watch.cells, watch.cluster, watch.clock = jobs, cells, "slurm", lambda: now[0]
    watch.missing_since, watch.sacct = {}, True
    out = [watch.outcome(i, j.state) for i, j in enumerate(jobs)]
    assert [r.status for r in out] == ["cancelled"] * 3 + ["failed", "done"]
    assert {r.reason for r in out[:3]} == {
        "cancelled by Slurm (scancel, time limit or preemption): re-run to resume"}
    assert out[3].reason == "submitit: OOM killed"
    # accounting off and the task gone from the queue: cancelled after VANISHED_S, not never
    gone = FakeJob(tmp_path, "19_0", "UNKNOWN")
    watch.jobs = [gone]
    assert watch.outcome(0, "") is None and watch.outcome(0, "PENDING") is None
    assert watch.outcome(0, "") is None
    now[0] = executors.VANISHED_S - 1
    assert watch.outcome(0, "") is None
    now[0] += 2
    r = watch.outcome(0, "")
    assert r.status == "cancelled" and r.reason.startswith("gone from the Slurm queue")
    lines = sweep_status.format_summary(out).splitlines()
    assert lines[0] == "sweep finished: done 1, failed 1, skipped 0, locked 0, cancelled 3"
    assert lines[1] == f"  cancelled: {cells[0].name}: {slurm.CANCELLED_MESSAGE}"


def test_states_come_from_squeue_when_sacct_fails(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "squeue").write_text('#!/bin/sh\n[ "$5" = 18 ] || { echo "slurm_load_jobs error: '
                                 'Invalid job id specified" >&2; exit 1; }\n'
                                 'printf "18_0|RUNNING\\n18_1|CANCELLED+\\n"\n')
    (fake / "sacct").write_text("#!/bin/sh\necho 'Slurm accounting storage is disabled' >&2\n"
                                "exit 1\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    assert slurm.squeue_states("18") == {"18_0": "RUNNING", "18_1": "CANCELLED"}
    assert slurm.squeue_states("7") == {}
    assert slurm.sacct_works("18") == "Slurm accounting storage is disabled"
    cells = [Cell("exp1", "exp1_fconv", "cnn", 6000, s, 3.0) for s in range(3)]
    jobs = [FakeJob(tmp_path, f"18_{i}", "UNKNOWN") for i in range(3)]
    watch = executors._ArrayWatch(jobs, cells, "slurm", out=open(os.devnull, "w"))
    assert watch.sacct is False
    assert watch.states([0, 1, 2]) == {0: "RUNNING", 1: "CANCELLED", 2: ""}
    assert slurm.normal_state("CANCELLED by 0") == "CANCELLED" and slurm.normal_state(None) == ""


def test_sacct_warnings_are_kept_off_the_console(caplog):
    filt = slurm.SacctWarnings()
    log = logging.getLogger("submitit")
    log.addFilter(filt)
    try:
        with caplog.at_level(logging.WARNING, logger="submitit"):
            for n in (1, 2):
                log.warning(f"Call #{n} - Bypassing sacct error Command 'sacct' returned 1")
            log.warning("something else")
    finally:
        log.removeFilter(filt)
    assert [r.getMessage() for r in caplog.records] == ["something else"]
    assert filt.count == 2 and filt.last.startswith("Call #2")


def test_sigterm_in_a_task_reports_the_cell_cancelled(tmp_path, monkeypatch):
    (cell,) = setup(tmp_path)[:1]
    monkeypatch.setenv("SIGNAL_PARENT", "1")
    monkeypatch.setenv("WAIT", "30")
    start = time.monotonic()
    try:
        r = executors._submitit_cell(cell, str(tmp_path), str(tmp_path / "recipe.sh"))
    finally:
        CHILDREN.stopping = False
    assert time.monotonic() - start < 20  # the recipe was stopped, not waited for
    assert (r.status, r.reason) == ("cancelled", slurm.CANCELLED_MESSAGE)


# --------------------------------------------------------------------------------- threads
def test_a_slurm_task_runs_with_its_cpus_as_threads(tmp_path, monkeypatch, capsys):
    import torch

    (cell,) = setup(tmp_path)[:1]
    assert slurm.task_threads({"SLURM_CPUS_PER_TASK": "3"}) == 3
    assert slurm.task_threads({}) is None and slurm.thread_env(None) == {}
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    monkeypatch.setenv("OMP_NUM_THREADS", "8")  # restored after the test
    monkeypatch.setenv("MKL_NUM_THREADS", "8")
    before = torch.get_num_threads()
    try:
        r = executors._submitit_cell(cell, str(tmp_path), str(tmp_path / "recipe.sh"))
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert r.status == "done"
    assert (cell.run_dir(tmp_path) / "threads").read_text() == "3\n"
    assert f"{cell.name}: 3 thread(s) per process (SLURM_CPUS_PER_TASK)" in capsys.readouterr().out


# ------------------------------------------------------------------------------- resources
def test_a_misspelled_resources_key_is_refused_at_load_and_by_dry_run(tmp_path, capsys):
    (tmp_path / "grid.toml").write_text(GRID.format(extra="cpus_per_tsk = 1"))
    with pytest.raises(GridError) as e:
        load_grid(tmp_path / "grid.toml")
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'grid.toml'}:8: [resources] unknown key 'cpus_per_tsk'")
    assert "parameters cpus_per_task, " in msg and "slurm_partition" in msg and "Fix: " in msg
    assert cli(["sweep", str(tmp_path / "grid.toml"), "--dry-run", "--executor", "slurm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown key 'cpus_per_tsk'" in err[0]
    (tmp_path / "grid.toml").write_text(GRID.format(extra='mem_gb = "4G"'))
    with pytest.raises(GridError, match=r"grid.toml:8: \[resources\] mem_gb = '4G' is not of "
                                        r"type float. Fix: write a finite, positive float, "
                                        r"e.g. mem_gb = 4"):
        load_grid(tmp_path / "grid.toml")
    (tmp_path / "grid.toml").write_text(GRID.format(
        extra='slurm_partition = "gpu"\nslurm_array_parallelism = 4\nmem_gb = 8\n'
              'gpus_per_node = 1\nslurm_additional_parameters = {exclusive = true}'))
    assert load_grid(tmp_path / "grid.toml").resources["slurm_array_parallelism"] == 4


def test_valid_keys_are_submitits_own():
    from submitit.auto.auto import AutoExecutor
    from submitit.slurm.slurm import SlurmExecutor

    keys = slurm.resource_keys()
    assert set(AutoExecutor._valid_parameters()) <= set(keys)
    assert {f"slurm_{k}" for k in SlurmExecutor._valid_parameters()} <= set(keys)
    assert "cpus_per_tsk" not in keys and "slurm_cpus_per_tsk" not in keys
    assert slurm.array_id("18_0") == "18" and slurm.array_id("18") == "18"


# --------------------------------------------------------------------------- stopped sweep
def test_sigterm_of_the_sweep_cancels_the_array_and_writes_the_status(tmp_path):
    cells = setup(tmp_path)
    # the recipes wait far longer than the tasks may take to start on a loaded machine (each
    # is a new interpreter importing submitit and the package), so both are running when the
    # sweep is stopped
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", WAIT="900")
    p = subprocess.Popen([sys.executable, "-m", "fairseq_entropy.cli", "sweep",
                          str(tmp_path / "grid.toml"), "--root", str(tmp_path), "--executor",
                          "submitit-local", "--recipe", str(tmp_path / "recipe.sh")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    pids = [c.run_dir(tmp_path) / "pid" for c in cells]
    deadline = time.monotonic() + 300
    while not all(f.exists() and f.read_text().strip() for f in pids):
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 128 + signal.SIGTERM, out + err
    array = out.split("job array ")[1].split(";")[0]
    assert err.strip().splitlines()[-1] == (
        "sweep: stopped by signal 15 with 0/2 task(s) finished; cancelled job array "
        f"{array}. Fix: run the same command again to resume (finished cells are skipped)")
    rows = [r.split("\t") for r in (tmp_path / "sweep-status.tsv").read_text().splitlines()[1:]]
    assert [r[1] for r in rows] == ["cancelled", "cancelled"]
    assert rows[0][4].startswith("the sweep was stopped (signal 15) and its job array")
    for f in pids:  # the recipes were stopped with their tasks (within 30 s on a loaded machine)
        pid = int(f.read_text())
        for _ in range(300):
            if not os.path.exists(f"/proc/{pid}") or \
                    Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"recipe {pid} still runs")


# -------------------------------------------------------------------------------- progress
def test_progress_does_not_count_down_training_while_a_cell_decodes(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("progress: epoch 8/8 | update 75/80 | 60 s elapsed | ~8 s left | last valid "
                   "seq_acc n/a\n")
    progress = sweep_status.Progress(1, 1, out=open(os.devnull, "w"), clock=lambda: 100.0)
    progress.begin("a", log)
    assert progress.line().endswith("~8 s left (from the running cells' training progress)")
    with open(log, "a") as f:
        f.write("2026-01-01 | INFO | fairseq_cli.train | done training in 68.1 seconds\n")
    line = progress.line()
    assert "~8 s left" not in line
    assert line.endswith("? s left, and 1 cell(s) decoding (time not known before a cell "
                         "finished)")
