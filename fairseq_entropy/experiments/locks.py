"""Exclusive locks of run directories, held by the process that trains in them.

:class:`RunLock` is an ``flock`` on ``RUN_DIR/.lock``, whose text is one JSON line
``{"host": ..., "pid": ..., "started": "YYYY-MM-DDTHH:MM:SS"}`` naming the holder (empty once
released cleanly).  :func:`run_locked` runs a command under it (``fairseq-entropy lock``);
:func:`~fairseq_entropy.experiments.run.run_level` holds it in-process.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..errors import UserError
from ..files import pid_alive
from .processes import GRACE_S, ProcessGroups, Stopping, stop_on_signals

#: exit status of ``fairseq-entropy lock`` and ``fairseq-entropy run`` (and so of
#: ``train_level.sh``) when the run directory is locked by another process (EX_TEMPFAIL)
LOCKED_EXIT = 75
#: environment variable naming the (resolved) run directory whose lock a parent process
#: (``fairseq-entropy lock``) already holds for this one
LOCK_ENV = "FAIRSEQ_ENTROPY_LOCK"


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

    def release(self) -> bool:
        """Close this process's hold on the lock; free it (and empty the file, so that a clean
        release leaves no stale lock) unless a child that inherited it still runs.  Returns
        whether the lock is free now (False: another process still holds it).

        The ``flock`` belongs to the open file, which children share when they inherit the
        descriptor (:meth:`acquire` with ``inheritable``): unlocking it here would free the
        lock under a child that still works in the directory.  So this only closes the
        descriptor, then tries the lock on a fresh one: taken, no process holds it any more,
        and the file is emptied and the lock freed; refused, a child (or a new holder)
        holds it, and its record is left alone.
        """
        if self.fd is None:
            return True
        os.close(self.fd)
        self.fd = None
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        return True

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def run_locked(directory: str | os.PathLike, command: Sequence[str],
               grace_s: float = GRACE_S) -> int:
    """Run ``command`` while holding the :class:`RunLock` of ``directory``.

    The command runs in a process group of its own and inherits the lock (its file
    descriptor), so the lock stays held while any process of the command lives, even one
    left behind by a command that exited or a holder that was killed; :data:`LOCK_ENV`
    names the resolved directory, so that a ``fairseq-entropy run`` on the same directory
    inside the command knows the lock is held for it.  SIGINT or SIGTERM stops the command's
    whole process group (SIGTERM, then SIGKILL after ``grace_s`` seconds), waits until no
    process of it is left, frees the lock and says so.

    Returns:
        the command's exit status, :data:`LOCKED_EXIT` when the lock is held elsewhere (the
        command is then not started), or 128 + the signal that stopped it.

    Raises:
        UserError: ``command`` names no executable program (checked before the lock is taken,
            so nothing is written).
    """
    if not command or shutil.which(command[0]) is None:
        raise UserError(f"command {command[0] if command else '(none)'}: no such program (not "
                        "a file that can be run, nor on PATH). Fix: give the program's path or the "
                        "name of one on PATH after --")
    lock = RunLock(directory)
    try:
        lock.acquire(inheritable=True)
    except LockHeld as e:
        print(f"fairseq-entropy lock: {e}", file=sys.stderr, flush=True)
        return LOCKED_EXIT
    env = dict(os.environ, **{LOCK_ENV: str(Path(directory).resolve())})
    children = ProcessGroups()
    try:
        with stop_on_signals(children, grace_s):
            try:
                rc = children.wait(children.start(command, env=env, pass_fds=(lock.fd,)))
            except Stopping:
                rc = None
    finally:
        free = lock.release()
    if children.stopped_by is not None:
        sig = children.stopped_by
        if free:
            print(f"fairseq-entropy lock: {directory}: stopped by signal {sig}; every process "
                  "of the command has exited and the lock is free. Fix: run the same command "
                  "again to resume", file=sys.stderr, flush=True)
        else:
            print(f"fairseq-entropy lock: {directory}: stopped by signal {sig}, but a process "
                  "that left the command's process group (e.g. through setsid) still holds "
                  f"the lock. Fix: stop it (fuser {Path(directory) / '.lock'} names it), then "
                  "run the same command again", file=sys.stderr, flush=True)
        return 128 + sig
    return rc


def held_by_parent(directory: str | os.PathLike) -> bool:
    """Whether :data:`LOCK_ENV` says that a parent process (:func:`run_locked`) holds the lock
    of ``directory`` for this one (compared as resolved paths)."""
    return os.environ.get(LOCK_ENV) == str(Path(directory).resolve())


def lock_holder(directory: str | os.PathLike) -> Optional[str]:
    """Who holds the :class:`RunLock` of ``directory`` (:meth:`RunLock.describe`), or None
    when no live process holds it.  Only looks: the lock is not taken and a stale lock file
    is left as it is.  An empty lock file (released cleanly) is free without a test; else a
    shared ``flock`` is tried for an instant."""
    path = Path(directory) / RunLock.FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if not RunLock._holder(fd).get("pid"):
            return None
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return RunLock.describe(RunLock._holder(fd))
    finally:
        os.close(fd)
    return None
