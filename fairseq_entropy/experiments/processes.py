"""Child processes started each in a process group (session) of its own, stopped together.

A child in its own group gets no terminal signal directly (Ctrl-C reaches only the parent),
and one ``killpg`` stops it with every process it started.  The sweep keeps one registry of
the cells' processes (:data:`CHILDREN`); a run keeps one for its fairseq processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from contextlib import contextmanager
from typing import Callable, Optional, Sequence

#: the signals that stop a run or a sweep
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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
        self.lock = threading.Lock()
        self.procs: set = set()
        self.stopping = False
        #: the signal that stopped the owner, when one did (set by the owner's handler)
        self.stopped_by: Optional[int] = None

    def start(self, cmd: Sequence[str], **kw) -> subprocess.Popen:
        """``subprocess.Popen(cmd, start_new_session=True, **kw)``, registered.

        Raises:
            Stopping: :meth:`terminate` was called before.
        """
        with self.lock:
            if self.stopping:
                raise Stopping("stopping: no new process is started")
            p = subprocess.Popen(list(cmd), start_new_session=True, **kw)
            self.procs.add(p)
            return p

    def done(self, p: subprocess.Popen) -> None:
        """Forget ``p`` (it has exited)."""
        with self.lock:
            self.procs.discard(p)

    def running(self) -> bool:
        """Whether a registered child has not been :meth:`done` yet."""
        with self.lock:
            return bool(self.procs)

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to the process group of every registered child; no child is started
        from now on."""
        with self.lock:
            self.stopping = True
            for p in self.procs:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass


#: the processes of a sweep's cells
CHILDREN = ProcessGroups()
