"""The cells of a grid as runs: their data, their run, their outcome, progress and status.

Each cell (:class:`~.grids.Cell`) runs in three steps (:func:`run_cell`):

1. its data, shared with every cell of the same (experiment, N or COGS case, seed, level):
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

The sweep's progress lines and ``sweep-status.tsv`` are in :mod:`.status`, the executors
that run many cells in :mod:`.executors`.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from ..files import atomic_write_text, read_json
from .decoding import SAMPLE_LABEL
from .grids import Cell
from .locks import LOCK_ENV, LOCKED_EXIT
from .processes import CHILDREN, Stopping
from .presets import load_presets
from .rerun import ScheduleChanged, expected_schedule
from .rerun import scored as scored_run
from .run import RunOptions

#: a run (or pack) directory's record of the wall time of every sweep segment that ran it
WALL_FILE = "sweep-wall.tsv"
#: the outcomes of a cell (:class:`CellResult`)
STATUSES = ("done", "failed", "skipped", "locked", "cancelled")


# ------------------------------------------------------------------------------------ data
def data_commands(cell: Cell, root: str | os.PathLike) -> List[List[str]]:
    """The ``fairseq-entropy build`` and ``binarize`` commands of a cell's data: ``build
    exp1|exp2``, or for a COGS cell ``build cogs COGS_DIR --case CASE`` (the data seed is the
    cell's seed, as for the others) and ``binarize --format cogs``."""
    build = cell.build_dir(root)
    if cell.experiment == "cogs":
        return [["fairseq-entropy", "build", "cogs", str(cell.cogs_dir), "--case",
                 str(cell.case), "--levels", f"{cell.level:g}", "--seed", str(cell.seed),
                 "--out", str(build)],
                ["fairseq-entropy", "binarize", "--format", "cogs",
                 str(build / cell.level_name), "--out", str(cell.databin(root))]]
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


def check_cogs_levels(grid_path: str | os.PathLike, cells: List[Cell],
                      root: str | os.PathLike) -> None:
    """Refuse a COGS grid level that ``build cogs`` would refuse (outside the case's reachable
    range), before any cell trains and with ``--dry-run`` too: the levels of ``cells`` not
    built under ``root`` yet are planned in memory once per case, all of them in one request
    (:func:`~fairseq_entropy.cogs.builder.plan_cogs_build`, as the cells' build commands of
    :func:`data_commands` plan them, with the first cell's seed); nothing is written.

    Raises:
        UserError: ``grid:line: levels ...`` naming the case and the builder's reason (the
            reachable range and the fix).
        DataFormatError: a COGS file that cannot be read (its file and line).
    """
    from ..cogs.builder import plan_cogs_build
    from ..errors import DataFormatError, UserError
    from ..files import read_text
    from .grid_files import key_line

    todo = [c for c in cells if not (c.databin(root) / "manifest.json").exists() and
            not (c.build_dir(root) / c.level_name / "manifest.json").exists()]
    for case in dict.fromkeys(c.case for c in todo):
        mine = [c for c in todo if c.case == case]
        levels = sorted({c.level for c in mine})
        try:
            plan_cogs_build(mine[0].cogs_dir, case, levels, mine[0].seed)
        except DataFormatError:  # a COGS file's own fault: its file and line say it
            raise
        except UserError as e:
            line = key_line(read_text(grid_path), "levels")
            raise UserError(f"{grid_path}:{line}: levels {', '.join(f'{v:g}' for v in levels)} "
                            f"of case {case} cannot all be built: {e} (in the grid file: its "
                            "levels, or its cases)") from None


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
