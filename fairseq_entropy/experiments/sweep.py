"""Running the cells of a grid: data, locks, resume, and local, GPU-packed or Slurm executors.

Each cell (:class:`~.grids.Cell`) runs in three steps:

1. its data, shared with every cell of the same (experiment, N, seed, level):
   ``fairseq-entropy build`` and ``fairseq-entropy binarize``, under a file lock so that
   concurrent cells build it once (both write through temporary names);
2. ``recipes/train_level.sh PRESET DATABIN RUN_DIR`` (fairseq-train, fairseq-generate with the
   last and best-on-validation checkpoints, ``fairseq-entropy score``). The recipe holds the
   run directory's :class:`RunLock` while it runs, resumes from ``checkpoint_last.pt`` when a
   run was cut off (``fairseq-train`` does this by itself; the ``systematicity`` task makes the
   resumed run train on the same batches, and fairseq reseeds torch before every update), and
   skips a run whose ``last/score.json`` exists;
3. the cell's outcome: ``done`` (trained and scored now), ``skipped`` (scored before),
   ``locked`` (another process holds its run directory) or ``failed`` (with the reason).

Executors: :func:`run_local` (worker slots: one single-threaded run per CPU core, or K runs per
GPU assigned round-robin through ``CUDA_VISIBLE_DEVICES``, see :func:`device_slots`) and
:func:`run_submitit` (a Slurm job array through submitit, one task per cell, resources from
the grid file; submitit's ``local`` and ``debug`` clusters run the same code without Slurm).
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from ..errors import UserError
from ..files import atomic_write_text, pid_alive
from ..progress import training_progress
from .grids import Cell

#: exit status of ``fairseq-entropy lock`` (and so of ``train_level.sh``) when the run
#: directory is locked by another process (EX_TEMPFAIL of sysexits.h)
LOCKED_EXIT = 75
#: environment variable naming the run directory whose lock the process already holds
LOCK_ENV = "FAIRSEQ_ENTROPY_LOCK"
#: seconds between progress lines of a sweep
PROGRESS_INTERVAL_S = 30.0
STATUSES = ("done", "failed", "skipped", "locked")


def default_recipe() -> Path:
    """``recipes/train_level.sh`` of the source tree this package runs from."""
    return Path(__file__).resolve().parents[2] / "recipes" / "train_level.sh"


# ----------------------------------------------------------------------------------- locks
class LockHeld(UserError, RuntimeError):
    """The run directory is locked by a live process."""


class RunLock:
    """Exclusive lock of a run directory: ``DIR/.lock`` holds the owner's host and PID.

    The lock is an ``flock`` on that file, which the kernel releases when the last process
    holding the file open exits, however it ends; the host and PID written into the file say
    who holds it. A file left by a process that is gone (its flock is free) is a stale lock:
    it is taken over and a message says whose it was.

    Args:
        directory: the run directory (created if missing).
        log: where messages go (default: standard error).
    """

    FILE = ".lock"

    def __init__(self, directory: str | os.PathLike, log: Callable[[str], None] = None):
        self.dir = Path(directory)
        self.path = self.dir / self.FILE
        self.fd: Optional[int] = None
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))

    @staticmethod
    def _holder(fd: int) -> dict:
        try:
            text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
            return json.loads(text) if text else {}
        except (OSError, json.JSONDecodeError):
            return {}

    @staticmethod
    def describe(holder: dict) -> str:
        """``pid 123 on host h since 2026-01-01T10:00:00`` (or ``an unknown process``)."""
        if not holder.get("pid"):
            return "an unknown process"
        return (f"pid {holder['pid']} on host {holder.get('host', '?')} since "
                f"{holder.get('started', '?')}")

    def acquire(self, inheritable: bool = False) -> "RunLock":
        """Take the lock (never waits).

        Args:
            inheritable: keep the lock's file descriptor open in child processes, so that
                the lock stays held while any of them runs.

        Raises:
            LockHeld: another process holds it; the message names that process and the fix.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder(fd)
            os.close(fd)
            raise LockHeld(f"{self.dir} is locked by {self.describe(holder)}: a run is "
                           "training there. Fix: wait for it to finish, or stop that process; "
                           f"the lock ({self.path}) is freed when it exits") from None
        old = self._holder(fd)
        if old.get("pid"):
            same_host = old.get("host") == socket.gethostname()
            gone = "no longer running" if same_host and not pid_alive(int(old["pid"])) \
                else "no longer holding it"
            self.log(f"{self.path}: taking over the stale lock of {self.describe(old)} "
                     f"({gone}); a cut-off run resumes from checkpoint_last.pt")
        record = {"host": socket.gethostname(), "pid": os.getpid(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        os.set_inheritable(fd, inheritable)
        self.fd = fd
        return self

    def release(self) -> None:
        """Empty the lock file (a clean release leaves no stale lock) and free the lock."""
        if self.fd is None:
            return
        os.ftruncate(self.fd, 0)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def run_locked(directory: str | os.PathLike, command: Sequence[str]) -> int:
    """Run ``command`` while holding the :class:`RunLock` of ``directory``.

    The command inherits the lock (its file descriptor) and ``FAIRSEQ_ENTROPY_LOCK`` names the
    directory, so that ``recipes/train_level.sh`` knows it already holds it. SIGINT and SIGTERM
    are passed on to the command.

    Returns:
        the command's exit status, or :data:`LOCKED_EXIT` when the lock is held elsewhere
        (the command is then not started).
    """
    lock = RunLock(directory)
    try:
        lock.acquire(inheritable=True)
    except LockHeld as e:
        print(f"fairseq-entropy lock: {e}", file=sys.stderr, flush=True)
        return LOCKED_EXIT
    env = dict(os.environ, **{LOCK_ENV: str(Path(directory).resolve())})
    try:
        child = subprocess.Popen(list(command), env=env, pass_fds=(lock.fd,))
        handlers = {s: signal.signal(s, lambda sig, _f: child.send_signal(sig))
                    for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            return child.wait()
        finally:
            for s, h in handlers.items():
                signal.signal(s, h)
    finally:
        lock.release()


# ------------------------------------------------------------------------------------ data
def data_commands(cell: Cell, root: str | os.PathLike) -> List[List[str]]:
    """The ``fairseq-entropy build`` and ``binarize`` commands of a cell's data."""
    build = cell.build_dir(root)
    if cell.experiment == "exp1":
        b = ["fairseq-entropy", "build", "exp1", "--out", str(build), "--levels",
             f"{cell.level:g}", "--n", str(cell.n), "--seed", str(cell.seed),
             *cell.build_args]
    else:
        b = ["fairseq-entropy", "build", "exp2", "--out", str(build), "--support",
             str(int(cell.level)), "--seed", str(cell.seed)]
    z = ["fairseq-entropy", "binarize", str(build / cell.level_name), "--out",
         str(cell.databin(root))]
    return [b, z]


def prepare_data(cell: Cell, root: str | os.PathLike, env: Optional[dict] = None) -> Path:
    """Build and binarize a cell's level unless done; safe when cells run it concurrently.

    A blocking flock on a file beside the binarized level makes concurrent callers wait for
    the first; the binarized level is complete once its ``manifest.json`` exists (it is
    renamed into place whole).

    Raises:
        RuntimeError: a command failed; the message has its output.
    """
    databin = cell.databin(root)
    if (databin / "manifest.json").exists():
        return databin
    databin.parent.mkdir(parents=True, exist_ok=True)
    with open(databin.parent / f".{databin.name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        if not (databin / "manifest.json").exists():
            build, binarize = data_commands(cell, root)
            steps = [binarize] if (cell.build_dir(root) / cell.level_name /
                                   "manifest.json").exists() else [build, binarize]
            for cmd in steps:
                res = subprocess.run([sys.executable, "-m", "fairseq_entropy.cli", *cmd[1:]],
                                     capture_output=True, text=True, env=env)
                if res.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd)} failed (exit {res.returncode}): "
                                       f"{_last_line(res.stderr or res.stdout)}")
    return databin


# ----------------------------------------------------------------------------------- cells
@dataclass
class CellResult:
    """Outcome of one cell: ``status`` in :data:`STATUSES`, ``reason`` (failed and locked
    cells), wall time in seconds and the accuracy of the last checkpoint (None if unscored)."""

    cell: str
    status: str
    reason: str = ""
    wall_s: float = 0.0
    accuracy: Optional[float] = None


def cell_env(cell: Cell, slot: Optional[dict] = None) -> Dict[str, str]:
    """Environment of a cell's recipe: seed, schedule and the worker slot's variables."""
    env = {"SEED": str(cell.seed), **cell.schedule.env(), **(slot or {})}
    return env


def recipe_command(cell: Cell, root: str | os.PathLike,
                   recipe: Optional[str | os.PathLike] = None) -> List[str]:
    """``bash recipes/train_level.sh PRESET DATABIN RUN_DIR`` of a cell."""
    return ["bash", str(recipe or default_recipe()), cell.preset, str(cell.databin(root)),
            str(cell.run_dir(root))]


def scored(cell: Cell, root: str | os.PathLike) -> Optional[float]:
    """Accuracy in ``last/score.json`` of the cell's run, or None if it is not scored."""
    f = cell.run_dir(root) / "last" / "score.json"
    if not f.exists():
        return None
    return float(json.loads(f.read_text())["accuracy"])


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


class _Children:
    """Process groups started by this process, terminated together on SIGINT/SIGTERM."""

    def __init__(self):
        self.lock = threading.Lock()
        self.procs: set = set()
        self.stopping = False

    def start(self, cmd, **kw) -> subprocess.Popen:
        with self.lock:
            if self.stopping:
                raise RuntimeError("the sweep is stopping")
            p = subprocess.Popen(cmd, start_new_session=True, **kw)
            self.procs.add(p)
            return p

    def done(self, p) -> None:
        with self.lock:
            self.procs.discard(p)

    def terminate(self, sig=signal.SIGTERM) -> None:
        with self.lock:
            self.stopping = True
            for p in self.procs:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass


CHILDREN = _Children()


def run_cell(cell: Cell, root: str | os.PathLike, slot: Optional[dict] = None,
             recipe: Optional[str | os.PathLike] = None) -> CellResult:
    """Run one cell (data, then the recipe) and return its outcome; never raises for a
    failure of the cell itself (it is returned as ``failed`` with the reason)."""
    start = time.monotonic()
    acc = scored(cell, root)
    if acc is not None:
        return CellResult(cell.name, "skipped", "scored before", 0.0, acc)
    if CHILDREN.stopping:
        return CellResult(cell.name, "failed", "the sweep was stopped before this cell began")
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop(LOCK_ENV, None)
    try:
        prepare_data(cell, root, env)
    except (RuntimeError, OSError) as e:
        return CellResult(cell.name, "failed", f"data: {e}", time.monotonic() - start)
    env.update(cell_env(cell, slot))
    run = cell.run_dir(root)
    run.mkdir(parents=True, exist_ok=True)
    log = run / "sweep.log"
    with open(log, "a") as out:
        command = " ".join(recipe_command(cell, root, recipe))
        out.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%S')} {command}\n")
        out.flush()
        try:
            p = CHILDREN.start(recipe_command(cell, root, recipe), env=env, stdout=out,
                               stderr=subprocess.STDOUT)
        except RuntimeError as e:
            return CellResult(cell.name, "failed", str(e), time.monotonic() - start)
        try:
            rc = p.wait()
        finally:
            CHILDREN.done(p)
    wall = time.monotonic() - start
    tail = _last_line(log.read_text().split("=== ")[-1])
    if rc == LOCKED_EXIT:
        return CellResult(cell.name, "locked", tail, wall)
    acc = scored(cell, root)
    if rc != 0 or acc is None:
        return CellResult(cell.name, "failed", f"exit {rc}: {tail} (log: {log})", wall)
    return CellResult(cell.name, "done", "", wall, acc)


# ------------------------------------------------------------------------------- executors
def device_slots(jobs: Optional[int], device: str, gpus: int = 0,
                 per_gpu: int = 1, cores: Optional[int] = None) -> List[Dict[str, str]]:
    """Worker slots: the environment each concurrently running cell gets.

    Args:
        jobs: number of slots (None: one per core on a CPU, ``gpus x per_gpu`` on GPUs).
        device: ``cpu`` or ``gpu``.
        gpus: number of GPUs (e.g. ``torch.cuda.device_count()``).
        per_gpu: runs packed on each GPU (K).
        cores: CPU cores (default ``os.cpu_count()``).

    Returns:
        one dict per slot. CPU: ``DEVICE=cpu``, ``OMP_NUM_THREADS=1``. GPU: ``DEVICE=gpu``
        and ``CUDA_VISIBLE_DEVICES`` assigned round-robin (slot i gets GPU i mod gpus, so
        that the first slots spread over all GPUs), at most ``per_gpu`` slots per GPU.

    Raises:
        ValueError: a GPU sweep without GPUs, or more jobs than ``gpus x per_gpu``.
    """
    if device == "cpu":
        n = jobs or cores or os.cpu_count() or 1
        return [{"DEVICE": "cpu", "OMP_NUM_THREADS": "1"} for _ in range(n)]
    if gpus < 1:
        raise ValueError("no GPU found. Fix: run with --device cpu, or on a machine with a GPU")
    capacity = gpus * per_gpu
    n = jobs or capacity
    if n > capacity:
        raise ValueError(f"--jobs {n} exceeds {gpus} GPU(s) x {per_gpu} run(s) per GPU. Fix: "
                         f"raise --per-gpu to {-(-n // gpus)} or lower --jobs")
    return [{"DEVICE": "gpu", "CUDA_VISIBLE_DEVICES": str(i % gpus)} for i in range(n)]


class Progress:
    """Progress line at least every :data:`PROGRESS_INTERVAL_S` seconds: cells finished,
    running, elapsed and an estimate of the time left.

    When every running cell has written a training progress line (:func:`training_progress`
    of the ``train.log`` given to :meth:`begin`): the longest time left of a running cell, plus
    one mean run for every further wave of ``workers`` cells (the mean wall time of the cells
    that trained so far, or before any finished, the running cells' mean elapsed + left).
    Otherwise, once a cell has trained: the mean wall time of the cells that trained so far x
    cells left / workers, less the time since the last cell finished (which the running cells
    have already worked); once the running cells outlast it, how far past the estimate they
    are."""

    def __init__(self, total: int, workers: int, out=None, clock=time.monotonic):
        self.total, self.workers = total, max(workers, 1)
        self.results: List[CellResult] = []
        self.running: Dict[str, Path] = {}
        self.clock = clock
        self.start = self.last_finish = clock()
        self.out = out or sys.stdout

    def begin(self, cell: str, train_log: str | os.PathLike) -> None:
        """Cell ``cell`` started; its training writes progress lines to ``train_log``."""
        self.running[cell] = Path(train_log)

    def add(self, r: CellResult) -> None:
        self.running.pop(r.cell, None)
        self.results.append(r)
        self.last_finish = self.clock()
        print(f"[{len(self.results)}/{self.total}] {r.cell}: {r.status}"
              + (f" (accuracy {r.accuracy:.4f}, {r.wall_s:.0f} s)" if r.accuracy is not None
                 and r.status == "done" else "") + (f" - {r.reason}" if r.reason
                                                    and r.status != "skipped" else ""),
              file=self.out, flush=True)

    def _from_running_cells(self, left_cells: int, mean_run: Optional[float] = None,
                            every: bool = False) -> Optional[float]:
        runs = [training_progress(log) for log in list(self.running.values())]
        if every and not all(runs):
            return None
        runs = [t for t in runs if t]
        if not runs:
            return None
        waves = math.ceil(max(left_cells - len(self.running), 0) / self.workers)
        if mean_run is None:
            mean_run = sum(e + left for e, left in runs) / len(runs)
        return max(left for _, left in runs) + waves * mean_run

    def line(self) -> str:
        now = self.clock()
        elapsed = now - self.start
        trained = [r.wall_s for r in self.results if r.status == "done"]
        left_cells = self.total - len(self.results)
        left = "? s left"
        if trained:
            mean = sum(trained) / len(trained)
            estimate = self._from_running_cells(left_cells, mean, every=True) \
                if self.running else None
            if estimate is not None:
                left = f"~{estimate:.0f} s left (from the running cells' training progress)"
            else:
                estimate = mean * left_cells / self.workers - (now - self.last_finish)
                # past 0: the running cells take longer than the cells before them
                left = f"~{max(estimate, 0):.0f} s left" + (
                    f" ({-estimate:.0f} s past the estimate)" if estimate < 0 else "")
        else:
            estimate = self._from_running_cells(left_cells)
            if estimate is not None:
                left = f"~{estimate:.0f} s left (from the running cells' training progress)"
        return (f"sweep: {len(self.results)}/{self.total} cells finished, "
                f"{min(left_cells, self.workers)} running, {elapsed:.0f} s elapsed, {left}")


@contextmanager
def _stop_children_on_signal(pool: ThreadPoolExecutor):
    """On SIGINT or SIGTERM (main thread only): stop every running cell's process group,
    drop the cells not yet started, and exit with 128 + the signal number. A stopped cell
    resumes from its ``checkpoint_last.pt`` when the sweep is run again."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(sig, _frame):
        CHILDREN.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        print(f"sweep: stopped by signal {sig}; running cells were terminated. Fix: run the "
              "same command again to resume them (finished cells are skipped)",
              file=sys.stderr, flush=True)
        raise SystemExit(128 + sig)

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run_local(cells: Sequence[Cell], root: str | os.PathLike, slots: Sequence[dict],
              runner: Callable[[Cell, dict], CellResult] = None,
              progress: Optional[Progress] = None) -> List[CellResult]:
    """Run cells on this machine, one per slot at a time (:func:`device_slots`).

    Args:
        runner: ``runner(cell, slot) -> CellResult`` (default :func:`run_cell` under ``root``).
    """
    runner = runner or (lambda cell, slot: run_cell(cell, root, slot))
    progress = progress or Progress(len(cells), len(slots))
    free: List[dict] = list(slots)
    guard = threading.Lock()

    def task(cell):
        with guard:
            slot = free.pop(0)
        progress.begin(cell.name, cell.run_dir(root) / "train.log")
        try:
            return runner(cell, slot)
        except Exception as e:  # a bug in one cell must not stop the others
            return CellResult(cell.name, "failed", f"{type(e).__name__}: {e}")
        finally:
            with guard:
                free.append(slot)

    results: Dict[int, CellResult] = {}
    with ThreadPoolExecutor(max_workers=len(slots)) as pool, _stop_children_on_signal(pool):
        futures = {pool.submit(task, c): i for i, c in enumerate(cells)}
        pending = set(futures)
        last = time.monotonic()
        while pending:
            finished, pending = wait(pending, timeout=5, return_when=FIRST_COMPLETED)
            for f in finished:
                results[futures[f]] = f.result()
                progress.add(results[futures[f]])
            if time.monotonic() - last >= PROGRESS_INTERVAL_S and pending:
                print(progress.line(), file=progress.out, flush=True)
                last = time.monotonic()
    return [results[i] for i in range(len(cells))]


def _submitit_cell(cell: Cell, root: str, recipe: Optional[str]) -> CellResult:
    """Body of one submitit task (module level, so that it pickles)."""
    return run_cell(cell, root, None, recipe)


def run_submitit(cells: Sequence[Cell], root: str | os.PathLike, resources: dict,
                 cluster: Optional[str] = None, recipe: Optional[str | os.PathLike] = None,
                 progress: Optional[Progress] = None) -> List[CellResult]:
    """Run cells as one submitit job array (Slurm), one task per cell, and wait for them.

    Args:
        resources: the grid's ``[resources]`` table, passed to
            ``AutoExecutor.update_parameters`` (``timeout_min``, ``gpus_per_node``,
            ``cpus_per_task``, ``mem_gb``, ``slurm_partition``, ``slurm_array_parallelism``...).
        cluster: None (Slurm when available, else local), ``slurm``, ``local`` or ``debug``.

    Returns:
        the cells' outcomes; a task that crashed is ``failed`` with submitit's error.
    """
    import submitit

    folder = Path(root) / "submitit" / "%j"
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    params = {"name": "fairseq-entropy-sweep", **resources}
    executor.update_parameters(**params)
    jobs = executor.map_array(_submitit_cell, list(cells), [str(root)] * len(cells),
                              [str(recipe) if recipe else None] * len(cells))
    progress = progress or Progress(len(cells), len(cells))
    for cell in cells:
        progress.begin(cell.name, cell.run_dir(root) / "train.log")
    print(f"submitted {len(jobs)} task(s) with {cluster or executor.cluster}: job "
          f"{jobs[0].job_id if jobs else '-'}; logs in {folder.parent}", flush=True)
    results: List[Optional[CellResult]] = [None] * len(cells)
    last = time.monotonic()
    while any(r is None for r in results):
        for i, job in enumerate(jobs):
            if results[i] is None and job.done():
                try:
                    results[i] = job.result()
                except Exception as e:  # the task crashed or was cancelled
                    results[i] = CellResult(cells[i].name, "failed",
                                            f"submitit: {_last_line(str(e))}")
                progress.add(results[i])
        if any(r is None for r in results):
            if time.monotonic() - last >= PROGRESS_INTERVAL_S:
                print(progress.line(), flush=True)
                last = time.monotonic()
            time.sleep(1.0)
    return results  # type: ignore[return-value]


# --------------------------------------------------------------------------------- summary
def summarize(results: Sequence[CellResult]) -> Dict[str, int]:
    """Count of cells per status (every status of :data:`STATUSES`, zeros included)."""
    return {s: sum(r.status == s for r in results) for s in STATUSES}


def write_status(results: Sequence[CellResult], path: str | os.PathLike) -> Path:
    """``sweep-status.tsv``: cell, status, accuracy, wall seconds, reason.

    Merged with the file already there: the rows of ``results`` replace the rows of the same
    cells, in place, and the rows of other cells (another grid or seed run into the same
    root) are kept.  The read-merge-write holds an exclusive lock on ``.<name>.lock`` beside
    the file, so sweeps that finish at the same time do not drop each other's rows; the file
    itself is replaced whole (never half-written)."""
    path = Path(path)
    header = ["cell", "status", "accuracy", "wall_s", "reason"]
    fresh = {r.cell: [r.cell, r.status, "" if r.accuracy is None else f"{r.accuracy:.6f}",
                      f"{r.wall_s:.1f}", r.reason] for r in results}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows: Dict[str, list] = {}
        if path.exists():
            for row in list(csv.reader(io.StringIO(path.read_text()), delimiter="\t"))[1:]:
                if row:
                    rows[row[0]] = row
        rows.update(fresh)
        buf = io.StringIO()
        w = csv.writer(buf, delimiter="\t", lineterminator="\n")
        w.writerow(header)
        w.writerows(rows.values())
        atomic_write_text(path, buf.getvalue())
    return path


def format_summary(results: Sequence[CellResult]) -> str:
    """``done 4, failed 1, skipped 2, locked 0`` and one line per failed or locked cell."""
    counts = summarize(results)
    lines = ["sweep finished: " + ", ".join(f"{s} {counts[s]}" for s in STATUSES)]
    for r in results:
        if r.status in ("failed", "locked"):
            lines.append(f"  {r.status}: {r.cell}: {r.reason}")
    return "\n".join(lines) + "\n"


def result_dict(r: CellResult) -> dict:
    """A :class:`CellResult` as a plain dict."""
    return asdict(r)
