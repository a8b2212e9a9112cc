"""The cells of a grid as runs: their data, their run, their outcome, progress and status.

Each cell (:class:`~.grids.Cell`) runs in three steps (:func:`run_cell`):

1. its data, shared with every cell of the same (experiment, N, seed, level):
   ``fairseq-entropy build`` and ``fairseq-entropy binarize`` (:func:`prepare_data`), under a
   file lock so that concurrent cells build it once (both write through temporary names);
2. ``fairseq-entropy run`` (:func:`run_command`, every setting an option:
   :func:`~.run.run_level` trains, decodes and scores, holding the run's lock, resuming from
   ``checkpoint_last.pt``, skipping a scored run), or a user's own recipe script
   (:func:`recipe_command`, the settings in its environment, :func:`cell_env`).  Its output
   goes to ``RUN_DIR/sweep.log``;
3. the cell's outcome (:class:`CellResult`): ``done`` (trained and scored now), ``skipped``
   (scored before), ``locked`` (another process holds its run directory, exit status
   :data:`~.locks.LOCKED_EXIT`), ``failed`` (with the reason) or ``cancelled`` (Slurm ended its
   task, or a signal stopped the sweep; running it again resumes it).

:class:`Progress` prints the sweep's progress lines, :func:`write_status` merges the outcomes
into ``sweep-status.tsv``, :func:`format_summary` sums them up.  The executors that run many
cells are in :mod:`.executors`.
"""

from __future__ import annotations

import csv
import fcntl
import io
import math
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..files import atomic_write_text, read_json
from ..progress import training_done, training_progress
from .decoding import SAMPLE_LABEL
from .grids import Cell
from .locks import LOCK_ENV, LOCKED_EXIT
from .processes import CHILDREN, Stopping
from .presets import load_presets
from .rerun import ScheduleChanged, expected_schedule
from .rerun import scored as scored_run
from .run import RunOptions

#: seconds between progress lines of a sweep
PROGRESS_INTERVAL_S = 30.0
#: a run (or pack) directory's record of the wall time of every sweep segment that ran it
WALL_FILE = "sweep-wall.tsv"
STATUSES = ("done", "failed", "skipped", "locked", "cancelled")


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
         str(cell.databin(root)),
         *(["--format", cell.data_format] if cell.data_format != "pairs" else [])]
    return [b, z]


def pending_data_commands(cell: Cell, root: str | os.PathLike) -> List[List[str]]:
    """The commands of :func:`data_commands` that :func:`prepare_data` would still run: none
    once the binarized level is complete (its ``manifest.json``), only ``binarize`` once the
    built level is."""
    if (cell.databin(root) / "manifest.json").exists():
        return []
    build, binarize = data_commands(cell, root)
    built = (cell.build_dir(root) / cell.level_name / "manifest.json").exists()
    return [binarize] if built else [build, binarize]


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
            for cmd in pending_data_commands(cell, root):
                # a child of the sweep's registry: a stopped sweep stops it too
                p = CHILDREN.start([sys.executable, "-m", "fairseq_entropy.cli", *cmd[1:]],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=env)
                stdout, stderr = p.communicate()
                rc = CHILDREN.wait(p)
                if rc != 0:
                    raise RuntimeError(f"{' '.join(cmd)} failed (exit {rc}): "
                                       f"{last_line(stderr or stdout)}")
    return databin


# ----------------------------------------------------------------------------------- cells
@dataclass
class CellResult:
    """Outcome of one cell: ``status`` in :data:`STATUSES`, ``reason`` (failed, locked and
    cancelled cells), wall time in seconds (once the cell's training began: every sweep
    segment that ran its run, a resumed run included, :class:`WallSegment`) and the accuracy of
    the last checkpoint (None if unscored)."""

    cell: str
    status: str
    reason: str = ""
    wall_s: float = 0.0
    accuracy: Optional[float] = None


def _ledger_total(text: str) -> float:
    """The seconds over every segment line (local time, seconds) of a ledger's text; a line
    that is not a segment (edited by hand) is not counted."""
    total = 0.0
    for line in text.splitlines():
        try:
            total += float(line.split("\t")[1])
        except (IndexError, ValueError):
            continue
    return total


#: seconds between two writes of a running segment's line (:class:`WallSegment`)
WALL_BEAT_S = 30.0


class WallSegment:
    """The running segment of a run's (or pack's) wall-time ledger, :data:`WALL_FILE` in its
    directory, written while it runs.

    A run killed and resumed by a later sweep is one run: its wall time is the sum of the
    segments (one line each: local time, seconds; a line edited by hand is not counted).  The
    file lives in the run (or pack) directory, so a run started afresh in a new directory
    starts from zero; it is replaced whole, so a kill never leaves half a line.

    A daemon thread writes the segment's line every ``beat`` seconds (the first after
    ``beat`` seconds, by when a cell whose run directory another sweep holds has exited), so a
    sweep killed outright (SIGKILL, a lost machine) leaves the segment counted to within
    ``beat`` seconds instead of not at all.  :meth:`close` stops the thread and writes the
    final time, or takes the segment's line back.

    Args:
        directory: the run or pack directory (created if missing).
        start: the segment's start, in :func:`time.monotonic` seconds.
        beat: seconds between two writes (default :data:`WALL_BEAT_S`).
    """

    def __init__(self, directory: str | os.PathLike, start: float,
                 beat: Optional[float] = None):
        self.path = Path(directory) / WALL_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.before = self.path.read_text() if self.path.exists() else ""
        self.stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.start = start
        self.written = False
        self.total = 0.0
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        args=(WALL_BEAT_S if beat is None else beat,))
        self._thread.start()

    def _write(self, seconds: float) -> float:
        text = self.before + f"{self.stamp}\t{seconds:.1f}\n"
        atomic_write_text(self.path, text)  # replaced whole: a kill leaves the old or the new
        self.written = True
        return _ledger_total(text)

    def _beat(self, beat: float) -> None:
        while not self._closed.wait(beat):
            with self._lock:
                if not self._closed.is_set():
                    self._write(time.monotonic() - self.start)

    def close(self, seconds: Optional[float]) -> float:
        """End the segment: write ``seconds`` as its time and return the total over all
        segments, or, with ``None`` (it did not run the run: locked, or never started), take
        its line back and return the total of the earlier segments.  A second call changes
        nothing and returns the first one's total."""
        with self._lock:
            if self._closed.is_set():
                return self.total
            self._closed.set()
            if seconds is not None:
                total = self._write(seconds)
            else:
                if self.written:
                    atomic_write_text(self.path, self.before)
                total = _ledger_total(self.before)
            self.total = total
        self._thread.join()
        return total


#: variables of a worker slot (:func:`~.devices.device_slots`) that a cell's processes get
#: in their environment: the threads and the GPU they run on
PROCESS_VARIABLES = ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")


def cell_env(cell: Cell, slot: Optional[dict] = None,
             options: Optional[RunOptions] = None) -> Dict[str, str]:
    """Environment of a user's ``--recipe`` for a cell (the variables of
    ``recipes/train_level.sh``): seed, schedule, the sweep's run options, the user's
    ``PRESETS`` file and ``USER_DIR`` package (when the grid has them) and the worker slot's
    variables.  Every value is the sweep's own, so a variable of the user's shell never
    changes a cell."""
    env = {"SEED": str(cell.seed), **cell.schedule.env(), **(options or RunOptions()).env(),
           **(slot or {})}
    if cell.presets_file:
        env["PRESETS"] = cell.presets_file
    if cell.user_dir:
        env["USER_DIR"] = cell.user_dir
    return env


def run_command(cell: Cell, root: str | os.PathLike, slot: Optional[dict] = None,
                options: Optional[RunOptions] = None) -> List[str]:
    """The cell's ``fairseq-entropy run`` (:func:`~.run.run_level`), with every setting as
    an option: seed, schedule, device and sample decode of the worker slot, the sweep's
    :class:`~.run.RunOptions`, the grid's presets file and ``--user-dir``."""
    slot = slot or {}
    cmd = [sys.executable, "-m", "fairseq_entropy.cli", "run", cell.preset,
           str(cell.databin(root)), str(cell.run_dir(root)), "--seed", str(cell.seed)]
    if cell.schedule.epochs is not None:
        cmd += ["--epochs", f"{cell.schedule.epochs:g}"]
    if cell.schedule.max_update is not None:
        cmd += ["--max-update", str(cell.schedule.max_update)]
    if slot.get("DEVICE"):
        cmd += ["--device", slot["DEVICE"]]
    cmd += (options or RunOptions()).args()
    if slot.get("DECODE_SAMPLE"):
        cmd += ["--decode-sample", str(slot["DECODE_SAMPLE"])]
    if cell.presets_file:
        cmd += ["--presets", cell.presets_file]
    if cell.user_dir:
        cmd += ["--user-dir", cell.user_dir]
    return cmd


def recipe_command(cell: Cell, root: str | os.PathLike,
                   recipe: str | os.PathLike) -> List[str]:
    """``bash RECIPE PRESET DATABIN RUN_DIR`` of a cell run by a user's own recipe."""
    return ["bash", str(recipe), cell.preset, str(cell.databin(root)), str(cell.run_dir(root))]


def cell_command(cell: Cell, root: str | os.PathLike, slot: Optional[dict] = None,
                 recipe: Optional[str | os.PathLike] = None,
                 options: Optional[RunOptions] = None) -> tuple:
    """``(command, environment variables)`` of a cell: :func:`run_command` with the slot's
    :data:`PROCESS_VARIABLES`, or with a user's ``recipe`` :func:`recipe_command` and
    :func:`cell_env`."""
    if recipe:
        return recipe_command(cell, root, recipe), cell_env(cell, slot, options)
    return (run_command(cell, root, slot, options),
            {k: v for k, v in (slot or {}).items() if k in PROCESS_VARIABLES})


def scored(cell: Cell, root: str | os.PathLike,
           presets: Optional[str | os.PathLike] = None) -> Optional[float]:
    """Accuracy in ``last/score.json`` of the cell's run, or None if it is not scored
    (:func:`~.rerun.scored` of its run directory, compared with the schedule the cell would
    train with now: :func:`~.rerun.expected_schedule` of its preset, data and schedule).

    ``presets`` defaults to the cell's own presets file (:attr:`~.grids.Cell.presets_file`).

    Raises:
        ScheduleChanged: the run was scored with another ``max_update`` or other arguments,
            or its ``last/score.json`` scores another checkpoint, split or a sample
            (:class:`~.rerun.NotTheRunsScore`).
    """
    table = load_presets(presets if presets is not None else cell.presets_file)
    expected = expected_schedule(table[cell.preset], cell.databin(root), cell.schedule.epochs,
                                 cell.schedule.max_update, extra_args=()) \
        if cell.preset in table else None
    return scored_run(cell.run_dir(root), expected)


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped (``no output`` when there is none)."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def run_cell(cell: Cell, root: str | os.PathLike, slot: Optional[dict] = None,
             recipe: Optional[str | os.PathLike] = None,
             options: Optional[RunOptions] = None) -> CellResult:
    """Run one cell (data, then :func:`cell_command`) and return its outcome; never raises
    for a failure of the cell itself (it is returned as ``failed`` with the reason)."""
    start = time.monotonic()
    try:
        acc = scored(cell, root)
    except ScheduleChanged as e:
        return CellResult(cell.name, "failed", str(e))
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
    command, variables = cell_command(cell, root, slot, recipe, options)
    env.update(variables)
    run = cell.run_dir(root)
    run.mkdir(parents=True, exist_ok=True)
    log = run / "sweep.log"
    segment, rc = WallSegment(run, start), None
    try:
        with open(log, "a") as out:
            out.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(command)}\n")
            out.flush()
            try:
                p = CHILDREN.start(command, env=env, stdout=out, stderr=subprocess.STDOUT)
            except Stopping:
                return CellResult(cell.name, "failed", "the sweep is stopping",
                                  time.monotonic() - start)
            rc = CHILDREN.wait(p)
    finally:
        wall = time.monotonic() - start
        ran = rc is not None and rc != LOCKED_EXIT
        total = segment.close(wall if ran else None)
    if ran:
        wall = total
    tail = last_line(log.read_text().split("=== ")[-1])
    if rc == LOCKED_EXIT:
        return CellResult(cell.name, "locked", tail, wall)
    acc = scored_run(cell.run_dir(root))
    sample = run / SAMPLE_LABEL / "score.json"
    if rc == 0 and acc is None and (slot or {}).get("DECODE_SAMPLE") and sample.is_file():
        rec = read_json(sample)  # a smoke test: no last/score.json, so the cell is unscored
        return CellResult(cell.name, "done", f"a sample of {rec.get('n')} test sentences only, "
                          f"accuracy {rec.get('accuracy')} (not a finished run: re-run without "
                          "--decode-sample to score the whole split)", wall)
    if rc != 0 or acc is None:
        return CellResult(cell.name, "failed", f"exit {rc}: {tail} (log: {log})", wall)
    return CellResult(cell.name, "done", "", wall, acc)


# -------------------------------------------------------------------------------- progress
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
    are.  A cell whose training has ended (:func:`training_done`: it decodes) has no training
    progress to go by: before any cell finished, the line says how many cells decode.

    With ``status`` (a ``sweep-status.tsv`` path), each outcome given to :meth:`add` is also
    merged into that file at once (:func:`write_status`), so the file shows a finished cell
    while the sweep still runs the others."""

    def __init__(self, total: int, workers: int, out=None, clock=time.monotonic,
                 status: Optional[str | os.PathLike] = None):
        self.total, self.workers = total, max(workers, 1)
        self.status = status
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
        if self.status is not None:
            write_status([r], self.status)

    def _from_running_cells(self, left_cells: int, mean_run: Optional[float] = None,
                            every: bool = False) -> Optional[float]:
        runs = [None if training_done(log) else training_progress(log)
                for log in list(self.running.values())]
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
        decoding = sum(training_done(log) for log in list(self.running.values()))
        if decoding and not trained:
            left += f", and {decoding} cell(s) decoding (time not known before a cell finished)"
        return (f"sweep: {len(self.results)}/{self.total} cells finished, "
                f"{min(left_cells, self.workers)} running, {elapsed:.0f} s elapsed, {left}")


# --------------------------------------------------------------------------------- summary
def summarize(results: Sequence[CellResult]) -> Dict[str, int]:
    """Count of cells per status (every status of :data:`STATUSES`, zeros included)."""
    return {s: sum(r.status == s for r in results) for s in STATUSES}


def natural_key(name: str) -> tuple:
    """Sort key of a cell name comparing its runs of digits as numbers: ``seed42`` sorts
    before ``seed231``, ``entropy_0.5`` before ``entropy_3.0``, ``n320`` before ``n6000``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in re.split(r"(\d+)", name))


def write_status(results: Sequence[CellResult], path: str | os.PathLike) -> Path:
    """``sweep-status.tsv``: cell, status, accuracy, wall seconds, reason.

    Merged with the file already there: the rows of ``results`` replace the rows of the same
    cells, and the rows of other cells (another grid or seed run into the same root) are
    kept.  Rows are sorted by cell name with numbers compared as numbers (data tag of a
    ``build_args`` cell, preset, size, seed, level: ``seed42`` before ``seed231``), so the
    file does not depend on the order in which cells finished.  A ``skipped`` cell keeps the
    wall time of its row (the run it skipped).  The read-merge-write holds an exclusive lock
    on ``.<name>.lock`` beside the file, so sweeps that finish at the same time do not drop
    each other's rows; the file itself is replaced whole (never half-written)."""
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
        for cell, row in fresh.items():
            old = rows.get(cell)
            if row[1] == "skipped" and old and len(old) > 3 and old[3]:
                row[3] = old[3]
            rows[cell] = row
        ordered = [rows[c] for c in sorted(rows, key=natural_key)]
        buf = io.StringIO()
        w = csv.writer(buf, delimiter="\t", lineterminator="\n")
        w.writerow(header)
        w.writerows(ordered)
        atomic_write_text(path, buf.getvalue())
    return path


def format_summary(results: Sequence[CellResult]) -> str:
    """``done 4, failed 1, skipped 2, locked 0, cancelled 0`` and one line per failed, locked
    or cancelled cell, or other cell with a reason (a sample-only decode)."""
    counts = summarize(results)
    lines = ["sweep finished: " + ", ".join(f"{s} {counts[s]}" for s in STATUSES)]
    for r in results:
        if r.status in ("failed", "locked", "cancelled") or (r.status == "done" and r.reason):
            lines.append(f"  {r.status}: {r.cell}: {r.reason}")
    return "\n".join(lines) + "\n"


def result_dict(r: CellResult) -> dict:
    """A :class:`CellResult` as a plain dict."""
    return asdict(r)
