"""Child processes started each in a process group (session) of its own, stopped together.

A child in its own group gets no terminal signal directly (Ctrl-C reaches only the parent),
and one ``killpg`` stops it with every process it started.  The sweep keeps one registry of
the cells' processes (:data:`CHILDREN`); a run keeps one for its fairseq processes, and
``fairseq-entropy lock`` one for its command.  All three stop the same way
(:func:`stop_on_signals`): SIGINT or SIGTERM sends SIGTERM to every group, SIGKILL follows
after a grace period, and :meth:`ProcessGroups.wait` returns only once no process of the
child's group is left, so that a parent never exits (or frees a lock) before its children.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from typing import Callable, Optional, Sequence

#: the signals that stop a run or a sweep
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: seconds a child's process group gets to exit after SIGTERM before it is killed
GRACE_S = 30.0


@contextmanager
def on_stop_signals(handler: Callable[[int, object], None]):
    """Install ``handler(signum, frame)`` for SIGINT and SIGTERM while the block runs, and the
    previous handlers again after it.  Python delivers signals to the main thread only, so in
    any other thread this installs nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Stopping(RuntimeError):
    """A child was asked for after :meth:`ProcessGroups.terminate`."""


class ProcessGroups:
    """Registry of the running children, each the leader of its own process group."""

    def __init__(self):
        # re-entrant: a stop signal's handler (:func:`stop_on_signals`) runs in the main
        # thread between two bytecodes, possibly inside :meth:`start` or :meth:`done` of that
        # same thread, and takes the lock again in :meth:`terminate`
        self.lock = threading.RLock()
        self.procs: set = set()
        #: children being started (in ``Popen``, not registered yet)
        self.starting = 0
        self.stopping = False
        #: the signal :meth:`terminate` sent last
        self.sent: Optional[int] = None
        #: the signal that stopped the owner, when one did (set by the owner's handler)
        self.stopped_by: Optional[int] = None

    def start(self, cmd: Sequence[str], **kw) -> subprocess.Popen:
        """``subprocess.Popen(cmd, start_new_session=True, **kw)``, registered.

        A :meth:`terminate` that comes while the process is being started (a stop signal's
        handler run inside ``Popen``, before the process is registered) reaches it as soon as
        it is registered: it gets the signal ``terminate`` sent.

        Raises:
            Stopping: :meth:`terminate` was called before.
        """
        with self.lock:
            if self.stopping:
                raise Stopping("stopping: no new process is started")
            self.starting += 1
            try:
                p = subprocess.Popen(list(cmd), start_new_session=True, **kw)
                self.procs.add(p)
            finally:
                self.starting -= 1
            if self.stopping:
                _killpg(p.pid, self.sent)
            return p

    def wait(self, p: subprocess.Popen) -> int:
        """Wait for ``p`` to exit and forget it; when the registry is stopping
        (:meth:`terminate`), wait further until no process of ``p``'s group is left (the
        SIGKILL of :func:`stop_on_signals` bounds that wait).

        Returns:
            ``p``'s exit status (negative: the signal that ended it).
        """
        try:
            rc = p.wait()
            while self.stopping and group_alive(p.pid):
                time.sleep(0.05)
        finally:
            self.done(p)
        return rc

    def done(self, p: subprocess.Popen) -> None:
        """Forget ``p`` (it has exited)."""
        with self.lock:
            self.procs.discard(p)

    def running(self) -> bool:
        """Whether a child is being started, or registered and not :meth:`done` yet."""
        with self.lock:
            return bool(self.procs) or self.starting > 0

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to the process group of every registered child; no child is started
        from now on."""
        with self.lock:
            self.stopping, self.sent = True, sig
            for p in self.procs:
                _killpg(p.pid, sig)


def _killpg(pgid: int, sig: int) -> None:
    """``os.killpg(pgid, sig)``; a group already gone is no error."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def group_alive(pgid: int) -> bool:
    """Whether a process of process group ``pgid`` is alive (zombies, which hold nothing and
    wait only to be reaped, do not count).  Reads ``/proc`` where there is one, else asks
    ``killpg(pgid, 0)``."""
    proc = "/proc"
    if not os.path.isdir(os.path.join(proc, "self")):
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc, entry, "stat"), "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses
        fields = stat[stat.rindex(b")") + 2:].split()
        if fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:
            return True
    return False


@contextmanager
def stop_on_signals(children: ProcessGroups, grace_s: float = GRACE_S,
                    then: Optional[Callable[[int], None]] = None):
    """While the block runs, SIGINT or SIGTERM (main thread only) stops ``children``: it
    records the signal in ``children.stopped_by``, sends SIGTERM to every child's process
    group, SIGKILL to those left after ``grace_s`` seconds, and then calls ``then(signum)``
    (which may raise, e.g. to leave the block at once).  The owner waits for its children
    with :meth:`ProcessGroups.wait`, which returns once their groups are empty.

    Args:
        children: the registry whose processes are stopped.
        grace_s: seconds between SIGTERM and SIGKILL.
        then: called in the signal handler after the children were signalled.
    """
    timers = []

    def stop(sig, _frame):
        children.stopped_by = sig
        children.terminate(signal.SIGTERM)
        t = threading.Timer(grace_s, children.terminate, (signal.SIGKILL,))
        t.daemon = True
        t.start()
        timers.append(t)
        if then is not None:
            then(sig)

    try:
        with on_stop_signals(stop):
            yield
    finally:
        for t in timers:
            t.cancel()


#: the processes of a sweep's cells
CHILDREN = ProcessGroups()
