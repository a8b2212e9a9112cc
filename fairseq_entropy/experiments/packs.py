"""Packed sweeps: the compatible cells of a grid trained K at a time in one fairseq-train
(``sweep --pack K``, a grid's ``pack = K``), then decoded and scored cell by cell.

Cells are compatible (:func:`pack_key`) when they share the presets file, the ``--user-dir``,
the preset, N, the schedule and every fairseq-train argument but the data and the seed (the
hash of :func:`~.presets.train_args` on each cell's own level, whose training-set size or
support size may change ``--max-update``); when the learning rate follows from the update
count alone (:func:`own_max_update`: ``--lr-scheduler fixed``, as the RNN presets train,
or inverse_sqrt),
``--max-update`` is left out of the hash too, and each run of the pack trains its own number
of updates (pack.json's ``max_update``, the ``packed_systematicity`` task).
:func:`make_packs` groups the cells still to train into the fewest :class:`Pack` s of at
most K cells, as even as can be, in grid order; a pack of one cell, a cell whose training
has finished (``checkpoints/trained``) and a cell whose own cut-off training left a
``checkpoint_last.pt`` run as ordinary cells (:func:`~.sweep.run_cell`).  A pack lives in::

    packs/<exp>/<preset>/[n<N>/]pack-<hash>/  pack.json, checkpoints/, tensorboard/, train.log

``<hash>`` follows from the pack's arguments and its runs, and an unfinished pack whose runs
are all still to train is taken again whole, so a pack cut off resumes from its packed
``checkpoint_last.pt``.

:func:`run_pack` (one executor task or worker slot per pack) holds every run's
:class:`~.locks.RunLock` while ``fairseq-train --task packed_systematicity`` trains them
(:func:`~.fairseq_train.train_command`), echoes its progress lines naming the runs, marks each
run's ``checkpoints/trained`` once its ordinary checkpoints are unpacked, releases the locks,
and then decodes and scores each cell as an ordinary cell does (:func:`~.sweep.run_cell`: the
recipe sees the finished training and only decodes), so run directories, ``score.json`` and
``sweep-status.tsv`` rows are those of an unpacked sweep.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from ..tasks.packed_own_length import own_max_update, without_max_update
from ..tasks.packed_runs import PACK_FILE, PackError, read_description, run_lines, write_pack
from .devices import default_device
from .grids import Cell
from .locks import LOCK_ENV, LockHeld, RunLock
from .presets import (PresetError, load_presets, max_update_of, train_args,
                      train_args_sha256)
from .processes import CHILDREN, Stopping, stop_on_signals
from .rerun import ScheduleChanged, check_trained, expected_schedule
from .fairseq_train import best_metric, train_command
from .run import SHOWN, RunOptions, console_line, subword_data, user_dir
from .sweep import CellResult, WallSegment, last_line, prepare_data, run_cell, scored

PACKS_DIR = "packs"
#: cells of a pack decoded at once in a GPU slot (fairseq-generate processes sharing the GPU)
GPU_DECODERS = 4
#: the packed task replacing ``systematicity`` in a pack's fairseq-train arguments
PACKED_TASK = ("--task", "packed_systematicity")


@dataclass(frozen=True)
class Pack:
    """Cells trained together by one fairseq-train.

    Attributes:
        cells: the pack's cells (2 or more), in grid order.
        key: their common :func:`pack_key`.
        dir: the pack directory (``pack.json``, ``checkpoints/``, ``train.log``).
    """

    cells: Tuple[Cell, ...]
    key: str
    dir: Path

    @property
    def name(self) -> str:
        """``<preset>/[n<N>/]pack-<hash>``, after ``<data_tag>/`` as in its cells' names
        (:attr:`~.grids.Cell.group`)."""
        return f"{self.cells[0].group}{self.dir.name}"

    @property
    def train_log(self) -> Path:
        """The pack's fairseq-train log (its progress lines)."""
        return self.dir / "train.log"

    def label(self) -> str:
        """The pack and its runs, for console lines: ``<name>: seed5/entropy_0.0,
        seed5/entropy_3.0``."""
        prefix = self.cells[0].group
        return f"{self.name}: " + ", ".join(c.name[len(prefix):] for c in self.cells)


Unit = Union[Cell, Pack]


def cells_of(unit: Unit) -> List[Cell]:
    """The cells a unit of work (a cell or a pack) trains."""
    return list(unit.cells) if isinstance(unit, Pack) else [unit]


def progress_line(pack: Pack) -> Optional[str]:
    """`` [<pack label>] progress: ...``: the last progress line of the pack's training (for
    the executors whose packs print to a log of their own, Slurm's), None before the first."""
    try:
        with open(pack.train_log, "rb") as f:
            f.seek(max(f.seek(0, os.SEEK_END) - 65536, 0))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    at = tail.rfind("progress: ")
    return None if at < 0 else f" [{pack.label()}] {tail[at:].splitlines()[0]}"


def pack_key(cell: Cell, root: str | os.PathLike,
             table: Optional[dict] = None) -> Tuple[str, bool]:
    """The compatibility key of a cell and whether it is exact.

    Exact (the level is binarized): a hash of the presets file, ``--user-dir``, preset, N,
    schedule, the hash of the cell's fairseq-train arguments (:func:`~.presets.train_args` on
    its level; without the value of ``--max-update`` when :func:`own_max_update`) and whether
    its actions are subword pieces.  Without the level (a dry run before the data exist), the
    hash leaves the arguments out and, when the level sets the training-set size (Experiment
    2: no fixed N) and with it the number of updates (no ``max_update`` in the schedule),
    takes the level instead unless the preset's optimizer arguments let runs train their own
    number of updates: levels that will not pack together are not shown in one pack.

    Raises:
        KeyError: the cell's preset is not in ``table`` (default: its presets file).
    """
    table = table if table is not None else load_presets(cell.presets_file)
    databin = cell.databin(root)
    parts = [cell.presets_file or "", cell.user_dir or "", cell.preset, str(cell.n),
             cell.schedule.label]
    exact = True
    try:
        args = train_args(table[cell.preset], databin, cell.schedule.epochs,
                          cell.schedule.max_update)
        if own_max_update(args):
            args = without_max_update(args)
        parts += [train_args_sha256(args), str(subword_data(databin))]
    except PresetError:
        exact = False
        spec = table[cell.preset]
        if cell.n is None and cell.schedule.max_update is None and not own_max_update(
                [*spec.get("optimizer_args", []), "--lr", str(spec.get("lr", 3e-4))]):
            parts.append(cell.level_name)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest(), exact


def pack_parent(cell: Cell, root: str | os.PathLike) -> Path:
    """``ROOT/packs/<exp>/<preset>/[n<N>/]``: where the packs of a cell's group live."""
    n = Path(f"n{cell.n}") if cell.n is not None else Path()
    return Path(root) / PACKS_DIR / cell.data_tag / cell.preset / n


def pack_dir(cells: Sequence[Cell], key: str, root: str | os.PathLike) -> Path:
    """The directory of the pack of ``cells`` (named by ``key`` and the cells' run dirs)."""
    runs = "\n".join([key, *(str(c.run_dir(root).resolve()) for c in cells)])
    return pack_parent(cells[0], root) / f"pack-{hashlib.sha256(runs.encode()).hexdigest()[:12]}"


def _existing(parent: Path, key: str, free: Dict[str, Cell]) -> List[Pack]:
    """Packs under ``parent`` with ``key``, a packed ``checkpoint_last.pt`` and a run whose
    training is not marked finished, whose runs are all among ``free`` (run dir -> cell; their
    cells are taken out of it): a pack cut off while it trained or before its runs were
    unpacked and marked."""
    found = []
    for desc in sorted(parent.glob(f"pack-*/{PACK_FILE}")):
        try:
            raw = read_description(str(desc.parent))
        except (OSError, PackError):
            continue
        if raw["sweep_key"] != key or \
                not (desc.parent / "checkpoints" / "checkpoint_last.pt").is_file():
            continue
        dirs = [r["run_dir"] for r in raw["runs"]]
        # a finished pack whose runs all hold their checkpoints: each run only decodes
        done = all(Path(d, "checkpoints", "trained").exists() for d in dirs if d)
        if len(dirs) > 1 and all(d in free for d in dirs) and not done:
            found.append(Pack(tuple(free.pop(d) for d in dirs), key, desc.parent))
    return found


def make_packs(cells: Sequence[Cell], root: str | os.PathLike, size: int,
               table: Optional[dict] = None) -> List[Unit]:
    """The units of work of ``cells`` (cells still to run) with packs of at most ``size``.

    ``size`` < 2 keeps every cell on its own.  Cells are grouped by :func:`pack_key`; in a
    group, unfinished packs of the same key whose runs are all here are taken first
    (:func:`_existing`: a cut-off pack resumes), then the remaining cells are cut, in grid
    order, into the fewest packs of at most ``size``, as even as can be (:func:`_chunks`).  A
    cell whose training finished, or whose own cut-off training left
    ``checkpoints/checkpoint_last.pt``, stays alone, as does a pack of one.  Units keep the
    order of their first cell.
    """
    if size < 2:
        return list(cells)
    order = {c: i for i, c in enumerate(cells)}
    groups: Dict[str, List[Cell]] = {}
    units: List[Unit] = []
    for cell in cells:
        key, _ = pack_key(cell, root, table)
        groups.setdefault(key, []).append(cell)
    for key, group in groups.items():
        free = {str(c.run_dir(root).resolve()): c for c in group}
        units += _existing(pack_parent(group[0], root), key, free)
        rest = []
        for cell in [c for c in group if str(c.run_dir(root).resolve()) in free]:
            ckpts = cell.run_dir(root) / "checkpoints"
            if (ckpts / "trained").exists() or (ckpts / "checkpoint_last.pt").exists():
                units.append(cell)
            else:
                rest.append(cell)
        for members in _chunks(rest, size):
            units.append(Pack(members, key, pack_dir(members, key, root)) if len(members) > 1
                         else members[0])
    return sorted(units, key=lambda u: order[cells_of(u)[0]])


def _chunks(cells: List[Cell], size: int) -> List[Tuple[Cell, ...]]:
    """``cells`` in order, cut into the fewest packs of at most ``size``, as even as can be
    (35 cells at 16: 12, 12 and 11), so that no pack outlasts the others by much."""
    count = -(-len(cells) // size)
    if not count:
        return []
    small, bigger = divmod(len(cells), count)
    out, at = [], 0
    for i in range(count):
        n = small + (i < bigger)
        out.append(tuple(cells[at:at + n]))
        at += n
    return out


def _cell_args(cell: Cell, root: str | os.PathLike) -> List[str]:
    """The cell's fairseq-train arguments on its own level (:func:`~.presets.train_args`)."""
    spec = load_presets(cell.presets_file)[cell.preset]
    return train_args(spec, cell.databin(root), cell.schedule.epochs, cell.schedule.max_update)


def write_description(pack: Pack, root: str | os.PathLike) -> Path:
    """``PACK_DIR/pack.json``: the runs (data, seed, run_dir, name) and the pack's key; when
    the runs' numbers of updates differ (their levels binarized), each run's own
    ``max_update`` and ``train_args_sha256``."""
    runs = [{"data": str(c.databin(root).resolve()), "seed": c.seed,
             "run_dir": str(c.run_dir(root).resolve()), "name": c.name} for c in pack.cells]
    try:
        args = [_cell_args(c, root) for c in pack.cells]
    except PresetError:  # a level not binarized yet: its pack cannot train (pack_command)
        args = []
    if len({max_update_of(a) for a in args}) > 1:
        for run, own in zip(runs, args):
            run.update(max_update=max_update_of(own), train_args_sha256=train_args_sha256(own))
    return write_pack(str(pack.dir), runs, pack.key)


def pack_command(pack: Pack, root: str | os.PathLike, device: str) -> List[str]:
    """The pack's ``fairseq-train --task packed_systematicity`` command: the preset arguments
    the cells share (:func:`pack_key`), with the largest ``--max-update`` of the cells when
    each trains its own."""
    first = pack.cells[0]
    databin = first.databin(root)
    args = max((_cell_args(c, root) for c in pack.cells), key=max_update_of)
    # unpacked by run_pack once trained: a pack cut off leaves no run checkpoints behind
    return [*train_command(pack.dir, pack.dir, [*args, *PACKED_TASK],
                           first.user_dir or str(user_dir()), device,
                           subword=subword_data(databin)), "--no-unpack-at-exit"]


def _env(slot: Optional[dict]) -> Dict[str, str]:
    """The environment of a pack's processes: this Python's scripts first on PATH, the slot's
    variables, no inherited lock."""
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONUNBUFFERED="1", **(slot or {}))
    env.pop(LOCK_ENV, None)
    return env


def _failed(pack: Pack, reason: str, start: float, status: str = "failed",
            segment: Optional[WallSegment] = None) -> List[CellResult]:
    """Every cell of ``pack`` as ``status`` with ``reason``; once the pack's training began
    (its wall-time ``segment`` runs), the wall time is the pack's over all its segments."""
    wall = time.monotonic() - start
    if segment is not None:
        wall = segment.close(wall)
    return [CellResult(c.name, status, reason, wall) for c in pack.cells]


def _train(pack: Pack, root, cmd: List[str], env: dict, fds: tuple, out) -> int:
    """fairseq-train of the pack: its output appended to the pack's ``train.log``, its
    progress, validation and error lines to ``out`` as `` [<pack label>] <line>``."""
    label = pack.label()
    with open(pack.train_log, "a") as log:
        log.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(cmd)}\n")
        p = CHILDREN.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace", pass_fds=fds, env=env)
        for line in p.stdout:
            log.write(line)
            log.flush()
            shown = console_line(line, label)
            if shown is not None:
                print(shown, file=out, flush=True)
        return CHILDREN.wait(p)


def _unpack(pack: Pack, env: dict) -> Optional[str]:
    """Every run's ordinary checkpoints from the pack's last one (``fairseq-entropy unpack``);
    the reason when that fails, else None."""
    p = CHILDREN.start([sys.executable, "-m", "fairseq_entropy.cli", "unpack",
                        str(pack.dir / "checkpoints")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env)
    text, _ = p.communicate()
    return None if CHILDREN.wait(p) == 0 else f"unpack failed: {last_line(text)}"


def _run_files(pack: Pack, k: int, run: Path) -> None:
    """What a run's directory holds besides its unpacked checkpoints, as after an unpacked
    training: ``checkpoints/trained``; ``train.log`` with the run's view of the pack's console
    lines (:func:`~fairseq_entropy.tasks.packed_runs.run_lines`: progress, the run's own
    validations, end of training); ``tensorboard`` linking to the pack's (the run's scalars
    end in ``_k``)."""
    (run / "checkpoints" / "trained").touch()
    lines = [ln for ln in pack.train_log.read_text(errors="replace").splitlines(True)
             if SHOWN.search(ln)]
    with open(run / "train.log", "a") as log:
        log.write(f"=== trained as run {k} of the pack {pack.dir} (the whole log, every "
                  f"run's metrics ending in _<run>: {pack.train_log})\n")
        log.writelines(run_lines(lines, k))
    board = run / "tensorboard"
    if not board.exists() and not board.is_symlink():
        board.symlink_to(os.path.relpath(pack.dir / "tensorboard", run))


def run_pack(pack: Pack, root: str | os.PathLike, slot: Optional[dict] = None,
             recipe: Optional[str | os.PathLike] = None, out=None,
             options: Optional[RunOptions] = None) -> List[CellResult]:
    """Train a pack, then decode and score each of its cells (see the module docstring).

    Never raises for a failure of the pack or a cell: each cell's outcome is returned
    (``failed`` with the reason, ``locked`` when another process holds its run directory).

    Args:
        slot: the worker slot's variables (``DEVICE``, ``CUDA_VISIBLE_DEVICES``,
            ``OMP_NUM_THREADS``, ``DECODE_SAMPLE``...).
        recipe: a user's recipe that decodes and scores each cell (None: ``fairseq-entropy
            run``, :func:`~.sweep.run_cell`).
        out: where the pack's console lines go (default: standard output).
        options: how each cell is decoded and scored (:class:`~.run.RunOptions`).
    """
    out = out or sys.stdout
    start = time.monotonic()
    env = _env(slot)
    try:
        for cell in pack.cells:
            prepare_data(cell, root, env)
        expected = []
        for cell in pack.cells:
            spec = load_presets(cell.presets_file)[cell.preset]
            expected.append(expected_schedule(spec, cell.databin(root), cell.schedule.epochs,
                                              cell.schedule.max_update, cell.seed, (),
                                              best_metric("valid")))
            check_trained(cell.run_dir(root), expected[-1])
        cmd = pack_command(pack, root, (slot or {}).get("DEVICE") or default_device())
    except (RuntimeError, OSError, ScheduleChanged, PresetError) as e:
        return _failed(pack, f"pack {pack.name}: {e}", start)
    locks: List[RunLock] = []
    try:
        for cell in pack.cells:
            if scored(cell, root) is None:
                locks.append(RunLock(cell.run_dir(root)).acquire(inheritable=True))
    except LockHeld as e:
        for lock in locks:
            lock.release()
        return _failed(pack, f"pack {pack.name}: {e}", start, "locked")
    segment = WallSegment(pack.dir, start)
    try:
        done = pack.dir / "checkpoints" / "trained"
        if not done.exists():
            write_description(pack, root)
            try:
                rc = _train(pack, root, cmd, env, tuple(lock.fd for lock in locks), out)
            except Stopping:
                rc = None
            if rc is None or CHILDREN.stopping:
                return _failed(pack, "the sweep was stopped while the pack trained: re-run to "
                                     "resume it from its packed checkpoint", start,
                               segment=segment)
            if rc != 0:
                errors = [ln for ln in pack.train_log.read_text(errors="replace").splitlines()
                          if "error" in ln.lower()]
                return _failed(pack, f"pack fairseq-train failed (exit {rc}): "
                                     f"{last_line(errors[-1] if errors else '')} "
                                     f"(log: {pack.train_log})", start, segment=segment)
            done.touch()
        why = _unpack(pack, env)
        if why is not None:
            return _failed(pack, f"pack {pack.name}: {why}", start, segment=segment)
        for k, cell in enumerate(pack.cells):
            _run_files(pack, k, cell.run_dir(root))
    finally:
        for lock in locks:
            lock.release()
        trained = segment.close(time.monotonic() - start)  # after a _failed: its total

    def decode(cell):  # decoded and scored as an unpacked cell is: the pack's time added
        r = run_cell(cell, root, slot, recipe, options)
        if r.status not in ("locked", "skipped"):
            r.wall_s += trained
        return r

    # a CPU slot is one core: one decode at a time; a GPU slot decodes a few cells at once
    gpu = (slot or {}).get("DEVICE", default_device()) == "gpu"
    with ThreadPoolExecutor(max_workers=GPU_DECODERS if gpu else 1) as pool:
        return list(pool.map(decode, pack.cells))


def plan(cells: Sequence[Cell], root: str | os.PathLike, size: int, out=None,
         workers: Optional[int] = None) -> Tuple[List[Unit], List[CellResult]]:
    """The units of work of ``cells`` (still to run) with packs of at most ``size``: first
    every cell's data (:func:`~.sweep.prepare_data`, which the grouping reads; SIGINT or
    SIGTERM stops the build running and raises KeyboardInterrupt), then :func:`make_packs`;
    a line per pack names its cells.

    Args:
        workers: levels built at once (default: one per CPU core).

    Returns:
        the units, and a ``failed`` outcome for each cell whose data could not be made.
    """
    out = out or sys.stdout
    failed, ready = [], []
    env = _env(None)

    def interrupt(sig):  # the build or binarize running has been stopped
        raise KeyboardInterrupt

    def build(cell):
        try:
            prepare_data(cell, root, env)
            return None
        except (RuntimeError, OSError) as e:
            return CellResult(cell.name, "failed", f"data: {e}")

    # the levels are built side by side (one fairseq-entropy process each, at most one per
    # core); prepare_data's file lock keeps a level shared by two cells built once
    with stop_on_signals(CHILDREN, then=interrupt), \
            ThreadPoolExecutor(max_workers=min(len(cells), workers or os.cpu_count() or 1)) \
            as pool:
        for cell, why in zip(cells, pool.map(build, cells)):
            (failed if why else ready).append(why or cell)
    units = make_packs(ready, root, size)
    packs = [u for u in units if isinstance(u, Pack)]
    print(f"# {len(packs)} pack(s) of {sum(len(p.cells) for p in packs)} cell(s), "
          f"{len(units) - len(packs)} cell(s) on their own", file=out, flush=True)
    for p in packs:
        print(f"# pack {p.label()}", file=out, flush=True)
    return units, failed


def dry_run_lines(cells: Sequence[Cell], root: str | os.PathLike, size: int,
                  device: Optional[str] = None) -> List[str]:
    """What ``sweep --pack K --dry-run`` shows of the packs of the cells not scored: each
    pack's cells and, when their data exist, its fairseq-train command.  Writes nothing."""
    todo = [c for c in cells if scored(c, root) is None]
    units = make_packs(todo, root, size)
    exact = all(pack_key(c, root)[1] for c in todo)
    packs = [u for u in units if isinstance(u, Pack)]
    lines = [f"# packs of up to {size}: {len(packs)} pack(s) of "
             f"{sum(len(p.cells) for p in packs)} cell(s), {len(units) - len(packs)} cell(s) "
             "on their own" + ("" if exact else " (the data are not built yet: grouped by "
                               "preset, N, schedule and, where it sets the number of updates, "
                               "level; the sweep groups by the fairseq-train arguments once "
                               "they are)")]
    for i, p in enumerate(packs):
        # before the data exist, the pack's directory (named by its exact key) is not known
        label = p.label() if exact else p.label().replace(p.dir.name, "pack-?", 1)
        lines.append(f"# pack {i + 1}/{len(packs)} ({len(p.cells)} cells) {label}")
        if exact:
            lines.append(" ".join(pack_command(p, root, device or default_device())))
    return lines
