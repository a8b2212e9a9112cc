"""The sweep's Slurm executor against a real one-node Slurm (tests/integration/slurm_cluster.sh).

Skipped, with the reason, when the cluster cannot be started here (not root, no apt-get, the
packages do not install, a daemon does not start).  One test function, so that pytest-xdist
runs it in one worker.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairseq_entropy.cli import main as cli
from fairseq_entropy.experiments.grids import load_grid
from fairseq_entropy.experiments.slurm import CANCELLED_MESSAGE
from _toy import cut_and_binarize  # noqa: E402

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "slurm_cluster.sh"
BIN = Path(sys.executable).parent

GRID = """experiment = "exp1"
presets = ["exp1_fconv"]
levels = [3]
seeds = [5, 6]
n = [320]
schedule = {{max_update = 20}}

[resources]
timeout_min = 10
cpus_per_task = {cpus}
mem_gb = 2
"""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    """A running one-node Slurm, started (and stopped) by slurm_cluster.sh."""
    if os.geteuid() != 0:
        pytest.skip("a one-node Slurm needs root to start (slurm_cluster.sh)")
    try:
        res = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True,
                             timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip("cannot start a one-node Slurm: slurm_cluster.sh start took over 600 s")
    if res.returncode != 0:
        lines = (res.stderr or res.stdout).strip().splitlines() or ["no output"]
        pytest.skip(f"cannot start a one-node Slurm: {lines[-1]}")
    yield
    subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, timeout=120)


def node_cpus() -> int:
    """The CPUs Slurm gives the test node (its configuration, as sinfo reports it)."""
    return int(subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True,
                              check=True).stdout.split()[0])


def tiny_root(tmp: Path, cpus: int) -> Path:
    """Two cells' binarized levels (320 training commands, 48 test commands), and two grids of
    the same cells: 1 CPU per task (both run at once on a node of 2 or more) and all ``cpus``
    of the node (the second task waits for the first)."""
    (tmp / "one.toml").write_text(GRID.format(cpus=1))
    (tmp / "whole.toml").write_text(GRID.format(cpus=cpus))
    for cell in load_grid(tmp / "one.toml").cells():
        build = cell.build_dir(tmp)
        assert cli(["build", "exp1", "--out", str(build), "--levels", "3", "--n", "320",
                    "--seed", str(cell.seed)]) == 0
        level = build / cell.level_name
        cut_and_binarize(level, cell.databin(tmp))
    return tmp


def sweep(root: Path, grid: str, extra=(), **kw):
    cmd = [sys.executable, "-m", "fairseq_entropy.cli", "sweep", str(root / grid), "--root",
           str(root), "--executor", "slurm", *extra]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=root, **kw)


def queue() -> dict:
    out = subprocess.run(["squeue", "-h", "--array", "-o", "%i %T"], capture_output=True,
                         text=True).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def why() -> str:
    """The queue with each task's pending reason, and the node's state, for failure messages."""
    run = lambda *a: subprocess.run(a, capture_output=True, text=True).stdout.strip()  # noqa: E731
    return (f"queue: {run('squeue', '-h', '--array', '-o', '%i %T %r')!r}; "
            f"node: {run('sinfo', '-h', '-N', '-o', '%N %t %c %C %E')!r}")


def status(root: Path) -> dict:
    rows = (root / "sweep-status.tsv").read_text().splitlines()[1:]
    return {r.split("\t")[0]: r.split("\t") for r in rows}


def test_slurm_sweep_scores_skips_cancels_and_resumes(cluster, tmp_path):
    cpus = node_cpus()
    root = tiny_root(tmp_path, cpus)
    cells = load_grid(root / "one.toml").cells()

    # 1. both cells run as one array, and are scored
    p = sweep(root, "one.toml")
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0, out
    array = next(ln for ln in out.splitlines() if ln.startswith("submitted 2 task(s)"))
    assert array.split("job array ")[1].split(";")[0].isdigit(), array  # 18, not 18_0
    assert "done 2, failed 0, skipped 0, locked 0, cancelled 0" in out
    scores = {c.name: json.loads((c.run_dir(root) / "last/score.json").read_text())
              for c in cells}
    assert [s["n"] for s in scores.values()] == [48, 48]
    rows = status(root)
    assert [rows[c.name][1] for c in cells] == ["done", "done"]
    walls = [rows[c.name][3] for c in cells]
    assert all(float(w) > 0 for w in walls)

    # 2. a rerun submits nothing, says so, and keeps the wall times of the scored runs
    jobs = sorted((root / "submitit").iterdir())
    p = sweep(root, "one.toml")
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    assert "nothing to run: all 2 cell(s) are scored (2)" in out and "nothing submitted" in out
    assert "submitted" not in out.replace("nothing submitted", "")
    assert sorted((root / "submitit").iterdir()) == jobs
    assert [status(root)[c.name][1:4:2] for c in cells] == [["skipped", w] for w in walls]

    # 3. every CPU of the node per task: one task runs, the other waits; cancel both
    for c in cells:
        shutil.rmtree(c.run_dir(root))
    p = sweep(root, "whole.toml")
    deadline = time.monotonic() + 120
    while sorted(queue().values()) != ["PENDING", "RUNNING"] and time.monotonic() < deadline:
        time.sleep(0.5)
    tasks = queue()
    assert sorted(tasks.values()) == ["PENDING", "RUNNING"], why()
    running = next(t for t, s in tasks.items() if s == "RUNNING")
    subprocess.run(["scancel", next(t for t, s in tasks.items() if s == "PENDING")], check=True)
    cell = cells[int(running.split("_")[1])]
    first = cell.run_dir(root) / "train.log"  # wait until the running task trains
    while "| INFO | fairseq" not in (first.read_text() if first.exists() else "") \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    subprocess.run(["scancel", running], check=True)
    out, _ = p.communicate(timeout=180)
    assert p.returncode == 2, out
    assert out.count(f"cancelled - {CANCELLED_MESSAGE}") == 2, out
    assert "failed - " not in out and "done 0, failed 0, skipped 0, locked 0, cancelled 2" in out
    assert out.strip().splitlines()[-1].endswith(
        "Fix: re-run the same command to resume them (finished cells are skipped)")
    assert {status(root)[c.name][1] for c in cells} == {"cancelled"}
    log = root / "submitit" / running / f"{running}_0_log.out"
    assert f"{cell.name}: {cpus} thread(s) per process (SLURM_CPUS_PER_TASK)" in log.read_text()

    # 4. SIGTERM of the sweep cancels its array and writes the status file
    while queue() and time.monotonic() < deadline + 60:
        time.sleep(0.5)
    p = sweep(root, "whole.toml")
    deadline = time.monotonic() + 120
    while "RUNNING" not in queue().values() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "RUNNING" in queue().values(), why()
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, out
    array = out.split("job array ")[1].split(";")[0]
    assert out.strip().splitlines()[-1] == (
        f"sweep: stopped by signal 15 with 0/2 task(s) finished; cancelled job array {array}. "
        "Fix: run the same command again to resume (finished cells are skipped)")
    assert {status(root)[c.name][1] for c in cells} == {"cancelled"}

    # 5. once Slurm has ended the tasks, the rerun resumes both cells to scores
    while queue() and time.monotonic() < deadline + 60:
        time.sleep(0.5)
    assert not queue(), why()
    p = sweep(root, "one.toml")
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0, out
    assert "done 2, failed 0, skipped 0, locked 0, cancelled 0" in out
    for c in cells:
        assert json.loads((c.run_dir(root) / "last/score.json").read_text())["n"] == 48

    # 6. packed (--pack 2): one task trains both cells in one fairseq-train, then decodes and
    # scores each; the same files and status rows as the unpacked cells
    layout = {c.name: sorted(p.name for p in c.run_dir(root).iterdir()) for c in cells}
    for c in cells:
        shutil.rmtree(c.run_dir(root))
    p = sweep(root, "one.toml", extra=["--pack", "2"])
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0, out
    assert "submitted 1 task(s)" in out and "# 1 pack(s) of 2 cell(s)" in out
    assert "done 2, failed 0, skipped 0, locked 0, cancelled 0" in out
    assert [status(root)[c.name][1] for c in cells] == ["done", "done"]
    for c in cells:
        assert json.loads((c.run_dir(root) / "last/score.json").read_text())["n"] == 48
        assert sorted(p.name for p in c.run_dir(root).iterdir()) == layout[c.name]
