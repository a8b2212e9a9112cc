"""Executors: run many cells of a sweep, on this machine or as a Slurm job array.

:func:`run_local` runs one cell per worker slot at a time (one single-threaded run per CPU
core, or K runs per GPU assigned round-robin through ``CUDA_VISIBLE_DEVICES``, see
:func:`~.devices.device_slots`); SIGINT/SIGTERM stops every running cell's process group.
:func:`run_submitit` submits a submitit job array (one task per cell, resources from the
grid file; submitit's ``local`` and ``debug`` clusters run the same code without Slurm).
Either takes packs (:class:`~.packs.Pack`, ``sweep --pack K``) among its cells: a pack takes
one worker slot or one task, and yields the outcome of each of its cells.  Both print a
:class:`~.status.Progress` line at least every :data:`~.status.PROGRESS_INTERVAL_S` seconds.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import slurm
from .grids import Cell
from .locks import lock_holder
from .packs import Pack, Unit, cells_of, progress_line, run_pack
from .processes import CHILDREN, GRACE_S, on_stop_signals, stop_on_signals
from .run import RunOptions
from .status import PROGRESS_INTERVAL_S, Progress, write_status
from .sweep import CellResult, last_line, run_cell, scored


def _stop_children_on_signal(pool: ThreadPoolExecutor, on_stop: Optional[Callable] = None):
    """On SIGINT or SIGTERM (main thread only): stop every running cell's process group
    (:func:`~.processes.stop_on_signals`: SIGTERM, SIGKILL after a grace period), drop the
    cells not yet started, and exit with 128 + the signal number once the running cells'
    processes have exited. A stopped cell resumes from its ``checkpoint_last.pt`` when the
    sweep is run again.  ``on_stop(sig)`` runs once the processes have exited, before the
    exit (the sweep writes its status file there)."""
    def then(sig):
        pool.shutdown(wait=False, cancel_futures=True)
        if on_stop is not None:
            on_stop(sig)
        print(f"sweep: stopped by signal {sig}; running cells were terminated. Fix: run the "
              "same command again to resume them (finished cells are skipped)",
              file=sys.stderr, flush=True)
        raise SystemExit(128 + sig)

    return stop_on_signals(CHILDREN, then=then)


def stopped_reason(sig: int) -> str:
    """The reason of a cell that a stop signal ``sig`` ended or kept from finishing."""
    return f"the sweep was stopped (signal {sig}) before this cell finished: re-run to resume"


def flat_cells(units: Sequence[Unit]) -> List[Cell]:
    """The cells of ``units`` (cells and packs), in order."""
    return [c for u in units for c in cells_of(u)]


def train_log(unit: Unit, cell: Cell, root: str | os.PathLike) -> Path:
    """Where a cell's training progress lines go: its pack's log, or its own ``train.log``."""
    return unit.train_log if isinstance(unit, Pack) else cell.run_dir(root) / "train.log"


def run_unit(unit: Unit, root: str | os.PathLike, slot: Optional[dict] = None,
             recipe: Optional[str | os.PathLike] = None,
             options: Optional[RunOptions] = None) -> List[CellResult]:
    """The outcomes of one unit: :func:`~.packs.run_pack` of a pack, :func:`run_cell` of a
    cell, run with ``options`` (:class:`~.run.RunOptions`) or a user's ``recipe``."""
    if isinstance(unit, Pack):
        return run_pack(unit, root, slot, recipe, options=options)
    return [run_cell(unit, root, slot, recipe, options)]


def run_local(units: Sequence[Unit], root: str | os.PathLike, slots: Sequence[dict],
              runner: Callable[[Unit, dict], CellResult | List[CellResult]] = None,
              progress: Optional[Progress] = None,
              on_stop: Optional[Callable[[int, List[Optional[CellResult]]], None]] = None,
              status: Optional[str | os.PathLike] = None) -> List[CellResult]:
    """Run cells and packs on this machine, one per slot at a time (:func:`device_slots`).

    Args:
        units: cells, and packs (:class:`~.packs.Pack`) of cells trained together.
        runner: ``runner(unit, slot)`` returning a :class:`CellResult` or, for a pack, a list
            of one per cell (default :func:`run_unit` under ``root``).
        on_stop: called as ``on_stop(signal, outcomes)`` when SIGINT/SIGTERM stopped the
            sweep, after every running cell's processes exited; ``outcomes[i]`` is the
            outcome of cell ``i`` of :func:`flat_cells`, None for a cell that did not finish.
        status: a ``sweep-status.tsv`` into which each cell's outcome is merged as soon as it
            finishes (None: none; ignored when ``progress`` is given).  A cell that ends
            unfinished after a stop signal is recorded ``cancelled``
            (:func:`stopped_reason`), not ``failed``.

    Returns:
        one outcome per cell of :func:`flat_cells` (``units``' cells in order).
    """
    runner = runner or (lambda unit, slot: run_unit(unit, root, slot))
    cells = flat_cells(units)
    index, first = {}, 0
    for u in units:
        index[id(u)] = list(range(first, first + len(cells_of(u))))
        first += len(cells_of(u))
    biggest = max((len(cells_of(u)) for u in units), default=1)
    progress = progress or Progress(len(cells), len(slots) * biggest, status=status)
    free: List[dict] = list(slots)
    guard = threading.Lock()

    def task(unit):
        with guard:
            slot = free.pop(0)
        for cell in cells_of(unit):
            progress.begin(cell.name, train_log(unit, cell, root))
        try:
            try:
                got = runner(unit, slot)
                got = got if isinstance(got, list) else [got]
            except Exception as e:  # a bug in one cell must not stop the others
                got = [CellResult(c.name, "failed", f"{type(e).__name__}: {e}")
                       for c in cells_of(unit)]
            with guard:  # recorded (and in ``status``) before the slot takes the next unit
                if CHILDREN.stopping:  # a stop signal ended the cell's processes
                    sig = CHILDREN.stopped_by or signal.SIGTERM
                    got = [r if r.status == "done" else
                           CellResult(r.cell, "cancelled", stopped_reason(sig), r.wall_s)
                           for r in got]
                for r in got:
                    progress.add(r)
            return got
        finally:
            with guard:
                free.append(slot)

    results: Dict[int, CellResult] = {}
    pool = ThreadPoolExecutor(max_workers=len(slots))
    # the pool's exit (which waits for the running cells) lies inside the signal handling
    stopped = None if on_stop is None else \
        (lambda sig: on_stop(sig, [results.get(i) for i in range(len(cells))]))
    with _stop_children_on_signal(pool, stopped), pool:
        futures = {pool.submit(task, u): u for u in units}
        pending = set(futures)
        last = time.monotonic()
        while pending:
            finished, pending = wait(pending, timeout=5, return_when=FIRST_COMPLETED)
            for f in finished:
                for i, r in zip(index[id(futures[f])], f.result()):
                    results[i] = r
            if time.monotonic() - last >= PROGRESS_INTERVAL_S and pending:
                print(progress.line(), file=progress.out, flush=True)
                last = time.monotonic()
    return [results[i] for i in range(len(cells))]


def _submitit_cell(cell: Unit, root: str, recipe: Optional[str],
                   options: Optional[RunOptions] = None) -> CellResult | List[CellResult]:
    """Body of one submitit task (module level, so that it pickles): a cell, or a pack (whose
    outcome is a list, one per cell).

    Inside Slurm, the recipe's processes get as many threads as the task has CPUs
    (``SLURM_CPUS_PER_TASK``, see :func:`~.slurm.task_threads`).  SIGTERM (Slurm's
    ``scancel``, time limit or preemption) stops the cell's processes and the outcome is
    ``cancelled`` (:data:`~.slurm.CANCELLED_MESSAGE`), which submitit still records.
    """
    threads = slurm.task_threads()
    env = slurm.thread_env(threads)
    os.environ.update(env)
    if threads is not None:
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)
        print(f"{cell.name}: {threads} thread(s) per process (SLURM_CPUS_PER_TASK)",
              flush=True)
    cancelled: List[int] = []
    # SIGTERM to the cell's process groups, SIGKILL to what is left after GRACE_S seconds
    with stop_on_signals(CHILDREN, then=cancelled.append):
        results = run_unit(cell, root, env or None, recipe, options)
    if cancelled:
        results = [r if r.status == "done" else
                   CellResult(r.cell, "cancelled", slurm.CANCELLED_MESSAGE, r.wall_s)
                   for r in results]
    return results if isinstance(cell, Pack) else results[0]


def pending_cells(cells: Sequence[Cell], root: str | os.PathLike
                  ) -> Tuple[List[int], Dict[int, CellResult]]:
    """Split ``cells`` into the indices still to run and the outcomes of those that are not
    run: ``skipped`` (scored before, :func:`~.sweep.scored`, with the accuracy) and ``locked``
    (another live process holds the run directory, :func:`~.locks.lock_holder`)."""
    todo, known = [], {}
    for i, cell in enumerate(cells):
        acc = scored(cell, root)
        holder = lock_holder(cell.run_dir(root)) if acc is None else None
        if acc is not None:
            known[i] = CellResult(cell.name, "skipped", "scored before", 0.0, acc)
        elif holder is not None:
            known[i] = CellResult(cell.name, "locked", f"{cell.run_dir(root)} is locked by "
                                  f"{holder}: a run is training there")
        else:
            todo.append(i)
    return todo, known


def nothing_left(known: Dict[int, CellResult]) -> str:
    """The line said when no cell is left to run: how many are scored and how many locked."""
    counts = {s: sum(r.status == s for r in known.values()) for s in ("skipped", "locked")}
    return (f"nothing to run: all {len(known)} cell(s) are scored ({counts['skipped']}) or "
            f"locked by a running process ({counts['locked']}); nothing submitted")


#: seconds between two status polls of a job array
POLL_S = 2.0
#: seconds a task may be missing from Slurm's queue, with no result and no state from
#: accounting, before it counts as cancelled
VANISHED_S = 60.0


class _ArrayWatch:
    """The outcome of each task of a submitted array, polled (see :func:`run_submitit`)."""

    def __init__(self, jobs, cells: Sequence[Unit], cluster: str, clock=time.monotonic,
                 out=None):
        self.jobs, self.cells, self.cluster, self.clock = jobs, cells, cluster, clock
        self.missing_since: Dict[int, float] = {}
        self.sacct = True
        if cluster == "slurm":
            why = slurm.sacct_works(slurm.array_id(jobs[0].job_id))
            if why is not None:
                self.sacct = False
                print(f"note: sacct fails ({why}): the tasks' states come from squeue",
                      file=out or sys.stdout, flush=True)

    def states(self, pending: Sequence[int]) -> Dict[int, str]:
        """Each pending task's state: submitit's (sacct), else squeue's (when sacct fails, or
        submitit says ``UNKNOWN``); ``""`` for a task Slurm no longer lists."""
        states = {i: (slurm.normal_state(self.jobs[i].state) or "UNKNOWN") if self.sacct
                  else "UNKNOWN" for i in pending}
        if self.cluster == "slurm" and any(s == "UNKNOWN" for s in states.values()):
            queue = slurm.squeue_states(slurm.array_id(self.jobs[0].job_id))
            if queue is not None:
                for i, s in states.items():
                    if s == "UNKNOWN":
                        states[i] = queue.get(str(self.jobs[i].job_id), "")
        return states

    def outcome(self, i: int, state: str) -> CellResult | List[CellResult] | None:
        """Task ``i``'s outcome (a pack's: one per cell), or None while it is pending or
        running."""
        names = [c.name for c in cells_of(self.cells[i])]
        got = self._outcome(i, state, names[0])
        if got is None or isinstance(got, list) or not isinstance(self.cells[i], Pack):
            return got
        # the task's own outcome of a pack is a list: a single one says how the task ended
        return [CellResult(n, got.status, got.reason, got.wall_s, got.accuracy) for n in names]

    def _outcome(self, i: int, state: str, name: str):
        job = self.jobs[i]
        cancelled = CellResult(name, "cancelled", slurm.CANCELLED_MESSAGE)
        if job.paths.result_pickle.exists() or (
                self.cluster != "slurm" and job.done()) or (
                state and state not in slurm.ACTIVE_STATES and state != "UNKNOWN"
                and state not in slurm.CANCELLED_STATES):
            try:
                result = job.result()
            except Exception as e:  # the task crashed outside the cell, or Slurm ended it
                result = CellResult(name, "failed", f"submitit: {last_line(str(e))}")
            if isinstance(result, list):
                return [CellResult(r.cell, "cancelled", slurm.CANCELLED_MESSAGE, r.wall_s)
                        if r.status == "failed" and state in slurm.CANCELLED_STATES else r
                        for r in result]
            if result.status == "failed" and state in slurm.CANCELLED_STATES:
                return CellResult(name, "cancelled", slurm.CANCELLED_MESSAGE, result.wall_s)
            return result
        if state in slurm.CANCELLED_STATES:
            return cancelled
        if self.cluster == "slurm" and state == "":
            first = self.missing_since.setdefault(i, self.clock())
            if self.clock() - first >= VANISHED_S:
                return CellResult(name, "cancelled", "gone from the Slurm queue without a "
                                  f"result: {slurm.CANCELLED_MESSAGE}")
        else:
            self.missing_since.pop(i, None)
        return None


def run_submitit(cells: Sequence[Unit], root: str | os.PathLike, resources: dict,
                 cluster: Optional[str] = None, recipe: Optional[str | os.PathLike] = None,
                 progress: Optional[Progress] = None,
                 status: Optional[str | os.PathLike] = None,
                 options: Optional[RunOptions] = None) -> List[CellResult]:
    """Run cells as one submitit job array (Slurm), one task per cell or per pack
    (:class:`~.packs.Pack`), and wait for them.

    Cells already scored or locked (:func:`pending_cells`) are not submitted; when none is
    left, nothing is submitted and one line says so.  The submit line names the array's id
    (``scancel ID`` stops every task).  On SIGINT/SIGTERM the array is cancelled (the
    ``scancel`` command is printed when that fails), the outcomes so far are written to
    ``status`` (the unfinished cells as ``cancelled``) and the sweep exits with 128 + the
    signal number.  submitit's ``Bypassing sacct error`` warnings (Slurm without accounting)
    are summed up in one line.

    Args:
        resources: the grid's ``[resources]`` table, passed to
            ``AutoExecutor.update_parameters`` (``timeout_min``, ``gpus_per_node``,
            ``cpus_per_task``, ``mem_gb``, ``slurm_partition``, ``slurm_array_parallelism``...).
        cluster: None (Slurm when available, else local), ``slurm``, ``local`` or ``debug``.
        recipe, options: how each cell runs (:func:`run_unit`).
        status: the ``sweep-status.tsv`` into which each cell's outcome is merged as it
            arrives, and which a signal that stops the sweep completes (None: none).

    Returns:
        the cells' outcomes, in the order of :func:`flat_cells`: a task that crashed is
        ``failed`` with submitit's error; one that Slurm ended (scancel, time limit,
        preemption, or gone from the queue for :data:`VANISHED_S` seconds with no result) is
        ``cancelled``.
    """
    import submitit

    units, cells = list(cells), flat_cells(cells)
    todo, known = pending_cells(cells, root)
    results: List[Optional[CellResult]] = [known.get(i) for i in range(len(cells))]
    tasks, first = [], 0  # per unit with a cell to run: its cells' indices in ``cells``
    chosen = []
    for unit in units:
        span = list(range(first, first + len(cells_of(unit))))
        first += len(span)
        if any(i in todo for i in span):
            tasks.append(span)
            chosen.append(unit)
    if not todo:
        print(nothing_left(known), flush=True)
        return results  # type: ignore[return-value]
    folder = Path(root) / "submitit" / "%j"
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    executor.update_parameters(**{"name": "fairseq-entropy-sweep", **resources})
    sacct = slurm.SacctWarnings()
    logger = logging.getLogger("submitit")
    logger.addFilter(sacct)
    try:
        jobs = executor.map_array(_submitit_cell, chosen, [str(root)] * len(chosen),
                                  [str(recipe) if recipe else None] * len(chosen),
                                  [options] * len(chosen))
        array = slurm.array_id(jobs[0].job_id)
        kind = cluster or executor.cluster
        skipped = f", {len(known)} cell(s) scored or locked not submitted" if known else ""
        print(f"submitted {len(jobs)} task(s) with {kind}: job array {array}{skipped}; logs "
              f"in {folder.parent}", flush=True)
        size = sum(map(len, tasks))
        progress = progress or Progress(size, size, status=status)
        for unit in chosen:
            for cell in cells_of(unit):
                progress.begin(cell.name, train_log(unit, cell, root))
        with _cancel_array_on_signal(jobs, array, kind, cells, tasks, results, status):
            _wait_array(_ArrayWatch(jobs, chosen, kind), tasks, results, progress)
    finally:
        logger.removeFilter(sacct)
    if sacct.count:
        print(f"note: submitit's sacct call failed {sacct.count} time(s); the last: "
              f"{last_line(sacct.last)}", flush=True)
    return results  # type: ignore[return-value]


def _wait_array(watch: _ArrayWatch, todo: Sequence[Sequence[int]], results: list,
                progress: Progress) -> None:
    """Poll every :data:`POLL_S` seconds until each task has an outcome (``todo[j]``: the
    indices in ``results`` of task j's cells), filling ``results`` (indexed like the sweep's
    cells) and printing progress."""
    pending = list(range(len(todo)))
    last = time.monotonic()
    while pending:
        states = watch.states(pending)
        for j in list(pending):
            got = watch.outcome(j, states.get(j, "UNKNOWN"))
            if got is not None:
                pending.remove(j)
                for i, r in zip(todo[j], got if isinstance(got, list) else [got]):
                    results[i] = r
                    progress.add(r)
        if pending:
            if time.monotonic() - last >= PROGRESS_INTERVAL_S:
                print(progress.line(), flush=True)
                for j in pending:  # a pack's task logs its progress to its own log
                    line = progress_line(watch.cells[j]) \
                        if isinstance(watch.cells[j], Pack) else None
                    if line:
                        print(line, flush=True)
                last = time.monotonic()
            time.sleep(POLL_S)


@contextmanager
def _cancel_array_on_signal(jobs, array: str, kind: str, cells: Sequence[Cell],
                            todo: Sequence[Sequence[int]], results: list,
                            status: Optional[str | os.PathLike]):
    """On SIGINT or SIGTERM (main thread only): cancel the array's tasks, write ``status``
    with the unfinished cells as ``cancelled``, print one line and exit with 128 + the
    signal number."""
    def stop(sig, _frame):
        if kind == "slurm":
            ok = slurm.cancel_array(array)
        else:
            ok = True
            for job in jobs:
                # SIGTERM, as scancel sends: submitit's local controller forwards it to its
                # task and waits for it, and the task stops its cell's processes (SIGKILL
                # after GRACE_S).  job.cancel() sends SIGINT, on which the controller kills
                # its task 1 s later, before a loaded task has stopped them: they were left
                # running.
                proc = getattr(job, "_process", None)
                try:
                    if proc is not None:
                        if proc.poll() is None:
                            proc.send_signal(signal.SIGTERM)
                    else:
                        job.cancel(check=False)
                except Exception:  # a task that has ended already
                    ok = ok and job.done()
            # submitit's local processes print their interruption first
            deadline = time.monotonic() + GRACE_S + 15
            for job in jobs:
                proc = getattr(job, "_process", None)
                if proc is not None:
                    try:
                        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        proc.kill()
        done = sum(all(results[i] is not None for i in task) for task in todo)
        how = f"cancelled job array {array}" if ok else \
            f"could not cancel job array {array}: run scancel {array}"
        reason = f"the sweep was stopped (signal {sig}) and its job array {array} cancelled: " \
                 "re-run to resume"
        final = [r or CellResult(cells[i].name, "cancelled", reason)
                 for i, r in enumerate(results)]
        if status is not None:
            write_status(final, status)
        print(f"sweep: stopped by signal {sig} with {done}/{len(todo)} task(s) finished; "
              f"{how}. Fix: run the same command again to resume (finished cells are "
              "skipped)", file=sys.stderr, flush=True)
        raise SystemExit(128 + sig)

    with on_stop_signals(stop):
        yield
