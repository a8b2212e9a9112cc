"""The progress lines: training's, written by the ``systematicity`` task, and decoding's,
written by a run while ``fairseq-generate`` works; both read by the sweep.

:class:`TrainingProgress` writes ``progress: epoch k/N | update u/U | E s elapsed | ~L s left |
last valid seq_acc A`` at least every ``--progress-interval`` seconds of training;
:func:`decoding_line` is ``progress: decoding LABEL | D/T sentences | E s elapsed | ~L s
left``.  :func:`parse_progress` and :func:`training_progress` read the elapsed and remaining
seconds of either back, :func:`parse_decoding` the counts of a decoding line, and
:func:`training_done` whether the training has ended, so the formats live in this module alone.
"""

from __future__ import annotations

import math
import os
import re
import time
from typing import Optional


#: seconds of training after which the first progress line is due (when ``interval`` is
#: longer), so that a sweep can tell the time left within its first progress line
FIRST_LINE_S = 5.0


class TrainingProgress:
    """Wall-clock progress of one training run, logged at least every ``interval`` seconds,
    the first line after ``min(interval, FIRST_LINE_S)`` seconds of training.

    Args:
        interval: seconds between progress lines (0: never).
        max_update: fairseq's ``--max-update`` (0: unbounded).
        max_epoch: fairseq's ``--max-epoch`` (0: unbounded).
        updates_per_epoch: estimate used until the first epoch has finished, or None.
        clock: a function returning seconds (``time.monotonic``).
    """

    def __init__(self, interval: float, max_update: int, max_epoch: int,
                 updates_per_epoch: Optional[int], clock=time.monotonic):
        self.interval = interval
        self.max_update = max_update or 0
        self.max_epoch = max_epoch or 0
        self.updates_per_epoch = updates_per_epoch
        self.clock = clock
        self.epoch = 1
        self.epoch_start_update: Optional[int] = None
        self.start: Optional[float] = None
        self.start_update = 0
        self.last_line: Optional[float] = None
        self.seq_acc: Optional[float] = None

    def begin_epoch(self, epoch: int, update: Optional[int]) -> None:
        """Start of epoch ``epoch`` after ``update`` completed updates (None before the first
        step)."""
        if update is not None and self.epoch_start_update is not None and epoch > self.epoch:
            self.updates_per_epoch = update - self.epoch_start_update
        self.epoch, self.epoch_start_update = epoch, update

    def total_updates(self) -> Optional[int]:
        """Updates of the whole run: ``max_update``, or ``max_epoch`` x updates per epoch,
        whichever is smaller; None when neither is known."""
        bounds = [self.max_update] if self.max_update else []
        if self.max_epoch and self.updates_per_epoch:
            bounds.append(self.max_epoch * self.updates_per_epoch)
        return min(bounds) if bounds else None

    def step(self, update: int) -> Optional[str]:
        """Called at every training step with fairseq's update number (updates completed
        before the step); returns the progress line when one is due (else None)."""
        now = self.clock()
        if self.start is None:
            self.start, self.start_update, self.last_line = now, update, now
            if self.epoch_start_update is None:
                self.epoch_start_update = update
            return None
        due = self.interval if self.last_line > self.start else \
            min(self.interval, FIRST_LINE_S)
        if not self.interval or now - self.last_line < due:
            return None
        self.last_line = now
        return self.line(update, now)

    def line(self, update: int, now: float) -> str:
        """``progress: epoch k/N | update u/U | E s elapsed | ~L s left | last valid seq_acc A``
        (read back by :func:`parse_progress`)."""
        elapsed = now - self.start
        total = self.total_updates()
        epochs = self.max_epoch or (math.ceil(total / self.updates_per_epoch)
                                    if total and self.updates_per_epoch else None)
        done = update - self.start_update
        left = "?" if not total or done <= 0 else \
            f"~{max(total - update, 0) * elapsed / done:.0f}"
        acc = "n/a" if self.seq_acc is None else f"{self.seq_acc:.4f}"
        return (f"progress: epoch {self.epoch}/{epochs or '?'} | update {update}/"
                f"{total or '?'} | {elapsed:.0f} s elapsed | {left} s left | "
                f"last valid seq_acc {acc}")


#: the time fields of :meth:`TrainingProgress.line`
PROGRESS_PATTERN = re.compile(r"progress: .*?\| (\d+) s elapsed \| ~(\d+) s left")


def parse_progress(text: str) -> Optional[tuple]:
    """``(elapsed, left)`` seconds of the last progress line in ``text`` (any log text), or
    None when it has none with a known time left."""
    found = PROGRESS_PATTERN.findall(text)
    return (float(found[-1][0]), float(found[-1][1])) if found else None


def _tail(path: str | os.PathLike) -> Optional[str]:
    """The last 64 KiB of a file as text, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - 65536, 0))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


#: what fairseq-train logs when its training has ended (decoding follows in a run)
TRAINING_DONE = "done training in"


def training_progress(train_log: str | os.PathLike) -> Optional[tuple]:
    """``(elapsed, left)`` seconds of the last progress line of a run's ``train.log`` (the
    ``systematicity`` task writes one at least every ``--progress-interval`` seconds), or
    None when the file is missing or has no such line yet.  Reads the last 64 KiB only."""
    tail = _tail(train_log)
    return None if tail is None else parse_progress(tail)


def training_done(train_log: str | os.PathLike) -> bool:
    """Whether fairseq-train logged the end of its training (:data:`TRAINING_DONE`) in the
    last 64 KiB of ``train_log`` after its last progress line: the run is decoding or
    scoring, and its training progress line no longer says how long it has left."""
    tail = _tail(train_log) or ""
    end = tail.rfind(TRAINING_DONE)
    return end >= 0 and end > tail.rfind("progress: ")


def decoding_line(label: str, done: int, total: Optional[int], elapsed: float) -> str:
    """``progress: decoding LABEL | D/T sentences | E s elapsed | ~L s left``: the progress
    of a ``fairseq-generate`` run (``done`` of ``total`` sentences decoded after ``elapsed``
    seconds; ``? s left`` until one is done or when the total is unknown).  Its time fields
    are those of the training line, so :func:`parse_progress` reads both."""
    left = "?" if not total or done <= 0 else f"~{max(total - done, 0) * elapsed / done:.0f}"
    return (f"progress: decoding {label} | {done}/{total or '?'} sentences | "
            f"{elapsed:.0f} s elapsed | {left} s left")


#: the counts of :func:`decoding_line`
DECODING_PATTERN = re.compile(r"progress: decoding (\S+) \| (\d+)/(\d+|\?) sentences")


def parse_decoding(text: str) -> Optional[tuple]:
    """``(label, done, total)`` of the last :func:`decoding_line` in ``text`` (``total`` None
    when unknown), or None when it has none."""
    found = DECODING_PATTERN.findall(text)
    if not found:
        return None
    label, done, total = found[-1]
    return label, int(done), None if total == "?" else int(total)
