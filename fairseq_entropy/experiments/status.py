"""A sweep's progress and outcomes: the progress line while cells run (:class:`Progress`),
``sweep-status.tsv`` (:func:`write_status`, one row per cell, merged as cells finish) and the
summary printed at the end (:func:`format_summary`), of the cells' outcomes
(:class:`~.sweep.CellResult`)."""

from __future__ import annotations

import csv
import fcntl
import io
import math
import os
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..files import atomic_write_text
from ..progress import training_done, training_progress
from .sweep import STATUSES, CellResult

#: seconds between progress lines of a sweep
PROGRESS_INTERVAL_S = 30.0


def grid_shape(cells: Sequence) -> str:
    """What a sweep's ``cells`` (:class:`~.grids.Cell`) span, for its first line:
    ``2 preset(s) x 1 N x 7 levels x 5 seeds`` (a COGS grid: ``... x 2 case(s) x ...``
    instead of N)."""
    cases = len({c.case for c in cells} - {None})
    return (f"{len({c.preset for c in cells})} preset(s) x "
            + (f"{cases} case(s) x " if cases else f"{len({c.n for c in cells})} N x ")
            + f"{len({c.level for c in cells})} levels x {len({c.seed for c in cells})} seeds")


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
