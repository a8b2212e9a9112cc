"""One run: train a preset on one binarized level, decode the test split with the last and the
best checkpoints, and score both (``fairseq-entropy run``, ``recipes/train_level.sh``).

:func:`run_level` does, in a run directory ``RUN``:

1. skip when ``RUN/last/score.json`` exists (:func:`scored`), before and again after taking
   the run's :class:`~.locks.RunLock` (held in this process, and inherited by the children,
   so that it stays held while any of them runs); a score whose recorded schedule
   (``max_update`` and the hash of the preset's fairseq-train arguments), training data
   (its manifest's hash) or seed differs from the one asked now is not skipped but refused
   (:class:`ScheduleChanged`, :mod:`.rerun`): its run directory holds another experiment;
   so is one that scores another checkpoint, another split or a sample
   (:class:`~.rerun.NotTheRunsScore`), which is not the run's score;
2. ``fairseq-train`` (unless ``RUN/checkpoints/trained`` marks a finished training: started
   again on a finished ``checkpoint_last.pt`` it would make one more update; that checkpoint
   must record the training asked now, :func:`~.rerun.check_trained`), resuming from
   ``RUN/checkpoints/checkpoint_last.pt`` when one exists.  Its whole output is appended to
   ``RUN/train.log``; the lines with ``valid on``, ``progress: ``, ``done training`` or
   ``Error`` are echoed as `` [<run name>] <line>`` (:func:`console_line`);
3. ``fairseq-generate`` of the test split with ``checkpoint_last.pt`` into
   ``RUN/generate-last.txt`` (its log in ``generate-last.log``) and, with ``score_best``, with
   ``checkpoint_best.pt`` into ``generate-<best label>.txt`` (a copy of the last decode when
   the two checkpoint files are equal); a ``build cogs`` level's split ``gen_case`` (its
   case's gen sentences, :func:`~fairseq_entropy.cogs.binarize.case_splits`) likewise, into
   ``RUN/generate-gen_case-<label>.txt``;
4. the scores, in this process (:func:`~fairseq_entropy.analysis.scoring.write_score`): the
   best decodes' into ``RUN/<best label>/`` (``RUN/gen_case-<best label>/``), then
   ``RUN/gen_case-last/`` and the last test decode's into ``RUN/last/`` (whose
   ``score.json`` marks the run as finished).

fairseq-train and fairseq-generate run as children, each in a process group of its own;
SIGTERM or SIGINT of this process terminates them, waits until they exited, releases
the lock and raises :class:`RunStopped`.
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ..analysis.checkpoint_labels import SELECTIONS
from ..analysis.provenance import resolve_provenance
from ..analysis.scoring import score_lines, write_score
from ..cogs.binarize import case_splits, decode_max_len
from ..errors import UserError
from ..files import check_fairseq_path, read_json
from ..progress import decoding_line
from .decoding import (DECODE_PROGRESS_S, SAMPLE_LABEL, count_hypotheses, sample_args,
                       split_size)
from .devices import default_device
from .locks import LockHeld, RunLock, held_by_parent
from .archs import check_arch
from .presets import (TASK_ARGS, check_preset, load_presets, own_schedule,
                      preset_args_sha256, train_args)
from .fairseq_train import best_metric, check_extra_args, tool_path, train_command
from .rerun import check_device, check_run_dir, check_trained, expected_schedule, scored
from .processes import GRACE_S, ProcessGroups, Stopping, stop_on_signals

#: fairseq-train output lines echoed to the console
SHOWN = re.compile(r"valid on|progress: |done training|Error")
_VALID = re.compile(r"(valid on 'valid' subset).*(seq_acc [0-9.]*).*(num_updates [0-9]*).*")
#: U+2581, the word-start mark of sentencepiece pieces, in UTF-8
PIECE_MARK = "\u2581".encode()


class DataDirError(UserError, FileNotFoundError):
    """The binarized level directory of a run does not exist."""


class RunFailed(RuntimeError):
    """fairseq-train, fairseq-generate or the scoring exited with an error; the message names
    the log to read."""


class RunStopped(Exception):
    """The run was stopped by signal :attr:`signal` (its children have exited, the lock is
    free); running it again resumes it."""

    def __init__(self, sig: int):
        super().__init__(f"stopped by signal {sig}")
        self.signal = sig


@dataclass(frozen=True)
class RunOptions:
    """How every cell of a sweep is run and scored: the options of ``fairseq-entropy run``
    (:func:`run_level`) that a grid does not set per cell, given once on the sweep's command
    line.

    Attributes:
        select: ``valid`` or ``test-loss``: how the best checkpoint is chosen
            (:func:`run_level`).
        score_best: decode and score the best checkpoint too.
        gen_batch: sentences per fairseq-generate batch.
        valid_batch: sentences per validation batch.

    Raises:
        UserError: an unknown ``select`` or a batch below 1.
    """

    select: str = "valid"
    score_best: bool = True
    gen_batch: int = 512
    valid_batch: int = 512

    def __post_init__(self):
        if self.select not in SELECTIONS:
            raise UserError(f"--select {self.select}: expected one of {', '.join(SELECTIONS)}")
        if self.gen_batch < 1 or self.valid_batch < 1:
            raise UserError("--gen-batch and --valid-batch take a number of sentences >= 1")

    def args(self) -> list:
        """The options of ``fairseq-entropy run``."""
        return ["--select", self.select, "--gen-batch", str(self.gen_batch),
                "--valid-batch", str(self.valid_batch),
                *([] if self.score_best else ["--no-score-best"])]

    def env(self) -> dict:
        """The same settings as the variables of ``recipes/train_level.sh``, for a user's own
        ``--recipe``."""
        return {"SELECT": self.select, "SCORE_BEST": "1" if self.score_best else "0",
                "GEN_BATCH": str(self.gen_batch), "VALID_BATCH": str(self.valid_batch)}


@dataclass
class RunResult:
    """Outcome of :func:`run_level`: ``status`` ``done`` (trained and scored now),
    ``skipped`` (scored before) or ``locked`` (``reason`` names the holder); ``accuracy`` of
    the last checkpoint (``last/score.json``), None when locked."""

    status: str
    run_dir: str
    accuracy: Optional[float] = None
    reason: str = ""


def user_dir() -> Path:
    """The plugin directory for ``fairseq-* --user-dir``: this package."""
    return Path(__file__).resolve().parents[1]


def check_user_dir(path: str | os.PathLike) -> Path:
    """A user's ``--user-dir`` package as an absolute path, for fairseq-train and
    fairseq-generate both (fairseq imports one ``--user-dir``; the package must itself
    ``import fairseq_entropy`` to register the plugin's task, criterions and models).

    Raises:
        UserError: ``path`` is not a directory holding ``__init__.py``.
    """
    d = Path(path).resolve()
    if not (d / "__init__.py").is_file():
        raise UserError(f"--user-dir {path}: not a Python package directory (no __init__.py "
                        "in it). Fix: pass the folder of your package, whose __init__.py "
                        "imports fairseq_entropy and registers your models")
    return d


def console_line(line: str, name: str) -> Optional[str]:
    """The console form of one fairseq-train output line, or None when it is not shown.

    Shown are lines with ``valid on``, ``progress: ``, ``done training`` or ``Error``, as
    `` [<name>] <line>``; a progress line keeps only its part from ``progress: ``, and a
    validation line on ``valid`` only ``valid on 'valid' subset seq_acc A num_updates U``.
    """
    line = line.rstrip("\n")
    if not SHOWN.search(line):
        return None
    if "progress: " in line:
        line = line[line.rindex("progress: "):]
    return _VALID.sub(r"\1 \2 \3", f" [{name}] {line}")


def subword_data(databin: str | os.PathLike) -> bool:
    """Whether the level's actions are sentencepiece pieces: ``spm.model`` exists and the
    target dictionary ``dict.out.txt`` holds the word-start mark U+2581."""
    d = Path(databin)
    try:
        return (d / "spm.model").is_file() and PIECE_MARK in (d / "dict.out.txt").read_bytes()
    except OSError:
        return False


def _stop_on_signal(children: ProcessGroups):
    """On SIGINT/SIGTERM (main thread only): stop the children's process groups
    (:func:`~.processes.stop_on_signals`, killed after :data:`GRACE_S` seconds) and raise
    :class:`RunStopped` once they exited (at once when none runs)."""
    def then(sig):
        if not children.running():
            raise RunStopped(sig)

    return stop_on_signals(children, GRACE_S, then)


def _wait(children: ProcessGroups, p: subprocess.Popen) -> int:
    """Wait for ``p`` (and, when stopping, for every process of its group); raise
    :class:`RunStopped` when a signal stopped the run meanwhile."""
    rc = children.wait(p)
    if children.stopping:
        raise RunStopped(children.stopped_by or signal.SIGTERM)
    return rc


def _start(children: ProcessGroups, cmd, **kw) -> subprocess.Popen:
    try:
        return children.start(cmd, **kw)
    except Stopping:
        raise RunStopped(children.stopped_by or signal.SIGTERM) from None


def decode_name(label: str, split: str = "test") -> str:
    """The name of a run's decode (``generate-<name>.txt``) and score folder (``RUN/<name>/``)
    of checkpoint ``label`` on ``split``: ``<label>`` for ``test``, else ``<split>-<label>``
    (``gen_case-last``)."""
    return label if split == "test" else f"{split}-{label}"


def _score(run: Path, label: str, checkpoint: str, databin: str, presets: dict, preset: str,
           model: str, seed: int, out, sample: bool = False, split: str = "test") -> None:
    """Score ``RUN/generate-<name>.txt`` into ``RUN/<name>/`` (:func:`decode_name` of
    ``label`` and ``split``; ``score.json``, ``examples.tsv``, replacing an earlier score;
    ``sample``: a decode of a sample of the
    test split by the last checkpoint, marked ``test_sample``) with the provenance of
    ``RUN/checkpoints/<checkpoint>`` (:func:`~fairseq_entropy.analysis.provenance.
    resolve_provenance`), and print :func:`~fairseq_entropy.analysis.scoring.score_lines`.

    Raises:
        UserError: the decode, the data or the checkpoint contradict each other (ScoreError,
            DataFormatError): nothing is written.
    """
    name = decode_name(label, split)
    gen = str(run / f"generate-{name}.txt")
    # a sample's decode is of the last checkpoint: that is its checkpoint label
    meta = resolve_provenance(gen, "last" if sample else label, presets,
                              path=str(run / "checkpoints" / checkpoint), data=databin,
                              preset=preset, model=model, seed=seed, split=split,
                              own_schedule=own_schedule, args_sha256=preset_args_sha256)
    rec = write_score(gen, str(run / name), meta["meta"], meta["data"], split, force=True,
                      sample=sample)
    print(score_lines(rec, split, run / name), file=out, flush=True)


def _train(children: ProcessGroups, cmd: Sequence[str], run: Path, fds: tuple, out) -> None:
    """fairseq-train: its output appended to ``RUN/train.log``, the :func:`console_line` of
    each line to ``out``.

    Raises:
        RunFailed: a non-zero exit status.
    """
    with open(run / "train.log", "a") as log:
        # unbuffered: each line reaches train.log (read by the sweep's progress) at once
        p = _start(children, cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                   errors="replace", pass_fds=fds,
                   env=dict(os.environ, PYTHONUNBUFFERED="1"))
        error = ""
        for line in p.stdout:
            if "error: " in line:  # argparse's refusal, e.g. of an unknown preset argument
                error = line.strip()
            log.write(line)
            log.flush()
            shown = console_line(line, run.name)
            if shown is not None:
                print(shown, file=out, flush=True)
        rc = _wait(children, p)
    if rc != 0:
        said = f" ({error})" if error else ""
        raise RunFailed(f"fairseq-train failed (exit {rc}){said}: see {run / 'train.log'}"
                        + (". Fix: correct the preset's arguments (model_args, task_args, "
                           "...) or the extra fairseq-train arguments" if error else ""))


def _generate(children: ProcessGroups, cmd: Sequence[str], run: Path, label: str,
              fds: tuple, total: Optional[int] = None, out=None,
              interval: float = DECODE_PROGRESS_S) -> None:
    """fairseq-generate into ``RUN/generate-<label>.txt``, its log ``generate-<label>.log``.

    Every ``interval`` seconds while it works, a :func:`~fairseq_entropy.progress.
    decoding_line` (hypotheses written so far, :func:`count_hypotheses`, of ``total``
    sentences, and the time left) goes to ``out`` as `` [<run name>] <line>`` and is
    appended to ``RUN/train.log``, where the sweep reads its progress.

    Raises:
        RunFailed: a non-zero exit status.
    """
    log = run / f"generate-{label}.log"
    txt_path = run / f"generate-{label}.txt"
    with open(txt_path, "w") as txt, open(log, "w") as err:
        p = _start(children, cmd, stdout=txt, stderr=err, pass_fds=fds)
        start = time.monotonic()
        while True:
            try:
                p.wait(timeout=interval)
                break
            except subprocess.TimeoutExpired:
                line = decoding_line(label, count_hypotheses(txt_path), total,
                                     time.monotonic() - start)
                _progress(run, line, out)
        rc = _wait(children, p)
    if rc != 0:
        raise RunFailed(f"fairseq-generate failed (exit {rc}): see {log}")


def _progress(run: Path, line: str, out) -> None:
    """A progress line to ``out`` (as `` [<run name>] <line>``) and ``RUN/train.log``."""
    if out is not None:
        print(f" [{run.name}] {line}", file=out, flush=True)
    with open(run / "train.log", "a") as log:
        log.write(line + "\n")


def run_level(preset: str, databin: str | os.PathLike, run_dir: str | os.PathLike,
              seed: int = 1, epochs: Optional[float] = None, max_update: Optional[int] = None,
              device: Optional[str] = None, gen_batch: int = 512, valid_batch: int = 512,
              score_best: bool = True, select: str = "valid", extra_args: Sequence[str] = (),
              presets: Optional[str | os.PathLike] = None,
              user_dir: Optional[str | os.PathLike] = None, out=None,
              decode_sample: Optional[int] = None) -> RunResult:
    """Train, decode and score one run (see the module docstring for the steps and files).

    Args:
        preset: a preset name of the presets file.
        databin: the binarized level (``fairseq-entropy binarize``).
        run_dir: the run directory (created).
        seed: the training seed (``fairseq-train --seed``).
        epochs, max_update: override the preset's schedule (e.g. a CPU-sized run).
        device: ``cpu`` or ``gpu`` (None: :func:`~.devices.default_device`).
        gen_batch: sentences per fairseq-generate batch.
        valid_batch: sentences per validation batch (``--batch-size-valid``); the greedy
            seq_acc decoding runs once per output position and batch, so large batches are
            faster, and the outputs do not depend on the batch.
        score_best: also decode and score the best checkpoint.
        select: ``valid`` (best = highest validation seq_acc, scored as ``best``) or
            ``test-loss`` (best = lowest test loss, validating on the test split too, scored
            as ``test-loss``: the paper authors' selection, a diagnostic).
        extra_args: further fairseq-train arguments, appended last.
        presets: a user's presets file, added to the packaged ``presets.json``
            (:func:`~.presets.load_presets`).
        user_dir: a user's ``--user-dir`` package (:func:`check_user_dir`) given to
            fairseq-train and fairseq-generate instead of this plugin (default: the plugin).
        out: where the console lines go (default: standard output).
        decode_sample: a smoke test: decode about this many test sentences
            (:func:`sample_args`) with the last checkpoint only, into
            ``RUN/generate-sample.txt``, and score them into ``RUN/sample/score.json``,
            marked ``test_sample``; ``last/score.json`` is not written, so the run is not
            finished, and a later full run decodes the whole split with the same training.

    Returns:
        a :class:`RunResult`; ``locked`` when another live process holds ``RUN_DIR/.lock``.

    Raises:
        PresetError: an unknown preset or arch, or its arguments cannot be built for the
            level.
        DataDirError: ``databin`` is not a directory.
        UserError: a bad ``select``, ``device`` (``gpu`` without one) or ``user_dir``, a
            ``run_dir`` that is a file or holds ``:``, or an option of :data:`RUN_OWNED_ARGS`
            among ``extra_args`` (:func:`check_extra_args`).
        ScheduleChanged: ``run_dir`` was scored, or trained (``checkpoints/trained``), with
            another schedule, preset arguments, data or seed than asked now.
        RunFailed: a child process failed.
        RunStopped: SIGTERM/SIGINT stopped the run (its children exited, the lock is free).
    """
    out = out or sys.stdout
    run = Path(run_dir)
    if select not in SELECTIONS:
        raise UserError(f"select {select!r}: expected one of {', '.join(SELECTIONS)}. Fix: "
                        "pass one of them")
    if device is not None and device not in ("cpu", "gpu"):
        raise UserError(f"device {device!r}: expected cpu or gpu. Fix: pass one of them")
    check_extra_args(extra_args)
    plugin = str(check_user_dir(user_dir)) if user_dir is not None else None
    check_run_dir(run_dir)
    table = load_presets(presets)
    check_preset(table, preset)
    expected = expected_schedule(table[preset], databin, epochs, max_update, seed, extra_args,
                                 best_metric(select) if score_best else None)
    acc = scored(run, expected)
    if acc is not None:
        print(f"skip {run_dir} (already scored)", file=out, flush=True)
        return RunResult("skipped", str(run_dir), acc, "scored before")
    # the inputs are checked before the lock is taken, so a refused run writes nothing
    check_fairseq_path(databin, "LEVEL_DATABIN", ":")
    if not Path(databin).is_dir():
        raise DataDirError(f"{databin}: no such directory. Fix: pass the binarized level "
                           "(fairseq-entropy binarize BUILD_DIR --out DATABIN writes it)")
    train_args(table[preset], databin, epochs, max_update)
    check_device(device)
    check_arch(preset, table[preset], plugin)
    check_trained(run, expected)
    lock = None
    if not held_by_parent(run):
        try:
            lock = RunLock(run).acquire()
        except LockHeld as e:
            return RunResult("locked", str(run_dir), None, str(e))
    children = ProcessGroups()
    try:
        with _stop_on_signal(children):
            fds = (lock.fd,) if lock else ()
            return _run_locked(children, fds, table, preset, str(databin), run,
                               str(run_dir), seed, epochs, max_update, device, gen_batch,
                               valid_batch, score_best, select, extra_args, plugin, out,
                               expected, decode_sample)
    finally:
        if lock:
            lock.release()


def _run_locked(children, fds, presets, preset, databin, run, run_name, seed, epochs, max_update,
                device, gen_batch, valid_batch, score_best, select, extra_args, plugin, out,
                expected=None, decode_sample=None) -> RunResult:
    """The steps of :func:`run_level` under the run's lock (``presets``: the loaded presets
    table, which holds ``preset``; ``plugin``: the ``--user-dir`` of fairseq-train and
    fairseq-generate, None for this package)."""
    spec = presets[preset]
    acc = scored(run, expected)
    if acc is not None:
        print(f"skip {run_name} (scored meanwhile)", file=out, flush=True)
        return RunResult("skipped", run_name, acc, "scored meanwhile")
    if not Path(databin).is_dir():
        raise DataDirError(f"{databin}: no such directory. Fix: pass the binarized level "
                           "(fairseq-entropy binarize BUILD_DIR --out DATABIN writes it)")
    device = device or default_device()
    device_args = ["--cpu"] if device == "cpu" else []
    args = train_args(spec, databin, epochs, max_update)
    model = spec.get("model", preset)
    best_label = SELECTIONS[select].label
    subword = subword_data(databin)
    longest = decode_max_len(databin)  # COGS: its logical forms, up to hundreds of tokens
    max_len = str(longest) if longest else "400" if subword else "60"
    plugin = plugin or str(user_dir())
    run.mkdir(parents=True, exist_ok=True)
    trained = run / "checkpoints" / "trained"
    if trained.exists():
        check_trained(run, expected)
        print(f"skip training {run_name} (finished before); decoding", file=out, flush=True)
    else:
        cmd = [*train_command(databin, run, args, plugin, device, valid_batch, select,
                              subword, extra_args), "--seed", str(seed), *extra_args]
        _train(children, cmd, run, fds, out)
        trained.touch()

    total = split_size(databin)
    shard_args, batch, expected = sample_args(total, decode_sample, gen_batch) \
        if decode_sample else ((), gen_batch, total)

    def generate(checkpoint: str, label: str, split: str = "test") -> None:
        cmd = [tool_path("fairseq-generate"), databin, "--user-dir", plugin,
               *TASK_ARGS[spec.get("format", "pairs")], "--path",
               str(run / "checkpoints" / checkpoint), *device_args, "--gen-subset", split,
               "--beam", "1", "--max-len-a", "0", "--max-len-b", max_len,
               *(["--post-process", "sentencepiece"] if subword else []),
               "--batch-size", str(batch), "--required-batch-size-multiple", "1",
               *(shard_args if split == "test" else ())]
        _generate(children, cmd, run, decode_name(label, split), fds,
                  expected if split == "test" else split_size(databin, split), out)

    def score(label: str, checkpoint: str, split: str = "test") -> None:
        _score(run, label, checkpoint, databin, presets, preset, model, seed, out,
               sample=bool(decode_sample), split=split)

    ckpts = run / "checkpoints"
    if decode_sample:
        generate("checkpoint_last.pt", SAMPLE_LABEL)
        score(SAMPLE_LABEL, "checkpoint_last.pt")
        rec = read_json(run / SAMPLE_LABEL / "score.json")
        return RunResult("done", run_name, float(rec["accuracy"]),
                         f"a sample of {rec['n']} test sentences (not a finished run)")
    splits = ["test", *case_splits(databin)]  # a build cogs level: its case's gen sentences
    for split in splits:
        generate("checkpoint_last.pt", "last", split)
    if score_best:
        best, last = ckpts / "checkpoint_best.pt", ckpts / "checkpoint_last.pt"
        same = best.is_file() and filecmp.cmp(best, last, shallow=False)
        for split in splits:
            if same:
                shutil.copyfile(run / f"generate-{decode_name('last', split)}.txt",
                                run / f"generate-{decode_name(best_label, split)}.txt")
            else:
                generate("checkpoint_best.pt", best_label, split)
        for split in splits:
            score(best_label, "checkpoint_best.pt", split)
    for split in reversed(splits):  # last/score.json, written last, marks the run finished
        score("last", "checkpoint_last.pt", split)
    return RunResult("done", run_name, scored(run))
