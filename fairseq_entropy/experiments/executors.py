"""Executors: run many cells of a sweep, on this machine or as a Slurm job array.

:func:`run_local` runs one cell per worker slot at a time (one single-threaded run per CPU
core, or K runs per GPU assigned round-robin through ``CUDA_VISIBLE_DEVICES``, see
:func:`~.devices.device_slots`); SIGINT/SIGTERM stops every running cell's process group.
:func:`run_submitit` submits a submitit job array (one task per cell, resources from the
grid file; submitit's ``local`` and ``debug`` clusters run the same code without Slurm).
Both print a :class:`~.sweep.Progress` line at least every
:data:`~.sweep.PROGRESS_INTERVAL_S` seconds.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from .grids import Cell
from .processes import CHILDREN, stop_on_signals
from .sweep import PROGRESS_INTERVAL_S, CellResult, Progress, last_line, run_cell


def _stop_children_on_signal(pool: ThreadPoolExecutor):
    """On SIGINT or SIGTERM (main thread only): stop every running cell's process group
    (:func:`~.processes.stop_on_signals`: SIGTERM, SIGKILL after a grace period), drop the
    cells not yet started, and exit with 128 + the signal number once the running cells'
    processes have exited. A stopped cell resumes from its ``checkpoint_last.pt`` when the
    sweep is run again."""
    def then(sig):
        pool.shutdown(wait=False, cancel_futures=True)
        print(f"sweep: stopped by signal {sig}; running cells were terminated. Fix: run the "
              "same command again to resume them (finished cells are skipped)",
              file=sys.stderr, flush=True)
        raise SystemExit(128 + sig)

    return stop_on_signals(CHILDREN, then=then)


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
    pool = ThreadPoolExecutor(max_workers=len(slots))
    # the pool's exit (which waits for the running cells) lies inside the signal handling
    with _stop_children_on_signal(pool), pool:
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
                                            f"submitit: {last_line(str(e))}")
                progress.add(results[i])
        if any(r is None for r in results):
            if time.monotonic() - last >= PROGRESS_INTERVAL_S:
                print(progress.line(), flush=True)
                last = time.monotonic()
            time.sleep(1.0)
    return results  # type: ignore[return-value]
