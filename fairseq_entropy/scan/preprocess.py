"""The ``fairseq-preprocess`` call that turns ``{split}.{in,out}`` text files into fairseq's
binary mmap datasets with a given dictionary.

Each call runs ``python -m fairseq_cli.preprocess`` in a new interpreter; or, inside
:func:`preprocess_processes`, fairseq-preprocess's ``main`` in a reused worker process; or, in
a process that has imported fairseq already, that ``main`` in the calling process itself (the
import of fairseq costs about 3 s of CPU, more than binarizing a level).  A failure, or any
token replaced by ``<unk>``, is a :class:`~fairseq_entropy.scan.databin.BinarizeError` with
the end of fairseq-preprocess's output.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from .databin import SOURCE_LANG, TARGET_LANG, BinarizeError


#: fairseq-preprocess's summary of one binarized file: the share of tokens replaced by <unk>
_REPLACED = re.compile(r"tokens, ([0-9.]+(?:e[-+]?[0-9]+)?)% replaced")
#: worker processes that run fairseq-preprocess in-process; set by :func:`preprocess_processes`
_PREPROCESS_POOL = None
#: the thread that opened the last block of :func:`preprocess_processes` when that block ended
#: by an exception, until the next block opens (else None): a call that another thread (one of
#: the block's) makes meanwhile fails at once
_STOPPED_BLOCK_OWNER: Optional[threading.Thread] = None


@contextlib.contextmanager
def preprocess_processes(n: int):
    """Inside this block, :func:`run_preprocess` runs fairseq-preprocess in ``n`` reusable
    worker processes, each importing fairseq once, instead of one new interpreter per call
    (whose import of fairseq costs several seconds, more than binarizing a level).

    Calls from several threads share the workers.  Outside the block, or nested, each call
    runs as :func:`run_preprocess` says (a new ``python -m fairseq_cli.preprocess``, or this
    process when it has imported fairseq).  When the block ends by an exception
    (Ctrl-C, or SIGTERM raised as one) the workers are killed at once, so that none outlives this
    process, and the calls still waiting on them fail.  When it ends by any exception, the
    calls that other threads make afterwards (threads the caller has not joined yet) raise
    :class:`~fairseq_entropy.scan.databin.BinarizeError` at once instead of starting a
    fairseq-preprocess of their own, so that stopping does not wait for new interpreters.
    """
    global _PREPROCESS_POOL, _STOPPED_BLOCK_OWNER
    if _PREPROCESS_POOL is not None or n < 1:
        yield
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))
    _PREPROCESS_POOL = pool
    _STOPPED_BLOCK_OWNER = None
    try:
        yield
    except BaseException as e:
        _STOPPED_BLOCK_OWNER = threading.current_thread()
        if isinstance(e, KeyboardInterrupt):
            for proc in list((pool._processes or {}).values()):
                proc.kill()
        raise
    finally:
        _PREPROCESS_POOL = None
        pool.shutdown(wait=True, cancel_futures=True)


def _preprocess_main(argv: List[str], worker: bool = True) -> Tuple[int, str]:
    """fairseq-preprocess's ``main`` on ``argv``, in this process (a worker of
    :func:`preprocess_processes`, or with ``worker=False`` the caller's own main thread).

    Returns the exit status (0 or 1) and everything it logged or printed, which would otherwise
    reach the user's terminal.  ``main`` adds a handler logging to ``<destdir>/preprocess.log``
    on every call; the handler is closed and removed afterwards (the file stays, as it does
    after a ``python -m fairseq_cli.preprocess``).  ``sys.argv`` is ``[sys.argv[0]]`` meanwhile:
    fairseq's parser reads ``--user-dir`` from the process's own command line, which is not
    fairseq-preprocess's.  The redirection of stdout, stderr and the root logger holds for the
    whole process while ``main`` runs: what other threads print or log meanwhile goes into the
    returned text.  A failure of ``main`` (an error, or argparse's exit) is status 1; outside a
    worker, Ctrl-C and the CLI's SIGTERM exception are raised on, as they would be from a child
    process that the caller waits for.
    """
    import io
    import logging
    import traceback
    from contextlib import redirect_stderr, redirect_stdout

    caught = BaseException if worker else (Exception, SystemExit)
    buf = io.StringIO()
    root = logging.getLogger()
    with redirect_stdout(buf), redirect_stderr(buf):
        saved = root.handlers[:], root.level, sys.argv
        # a root handler first, so that the logging.basicConfig that fairseq_cli.preprocess
        # runs when first imported adds none
        root.handlers = [logging.StreamHandler(buf)]
        root.setLevel(logging.INFO)
        sys.argv = sys.argv[:1]
        preprocess = None
        try:
            from fairseq import options
            from fairseq_cli import preprocess
            preprocess.main(options.get_preprocessing_parser().parse_args(argv))
            status = 0
        except caught:
            traceback.print_exc()  # reported as a failed subprocess would be
            status = 1
        finally:
            for h in preprocess.logger.handlers[:] if preprocess is not None else []:
                if isinstance(h, logging.FileHandler):
                    h.close()
                    preprocess.logger.removeHandler(h)
            root.handlers, root.level, sys.argv = saved
    return status, buf.getvalue()


def _run_in_own_group(cmd: List[str]) -> Tuple[int, str]:
    """Run ``cmd`` in a process group of its own and return its exit status and output
    (stdout and stderr together).  On any exception here (Ctrl-C, SIGTERM) the whole group is
    killed, fairseq-preprocess's ``--workers`` pool included, before the exception goes on."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc.returncode, out


def run_preprocess(src_dir: Path, dest: Path, dict_path: Path, splits: Sequence[str],
                   workers: int = 1, tgt_dict_path: Optional[Path] = None,
                   only_source: bool = False, allow_unk: bool = False) -> None:
    """Run ``fairseq-preprocess`` on ``src_dir/{split}.{in,out}`` into ``dest`` with the
    dictionary ``dict_path`` (for the target side too unless ``tgt_dict_path`` is given): in a
    worker of :func:`preprocess_processes` when one is open (and ``workers`` is 1); else, when
    this process has imported fairseq already, in this process (from its main thread, with
    ``workers`` 1: see :func:`_preprocess_main` for its output); else as a new
    ``python -m fairseq_cli.preprocess``.  The files written are the same in all three cases.
    With ``only_source``, the files are ``src_dir/{split}`` (one sequence per line) and the
    result ``dest/{split}.{bin,idx}`` beside ``dest/dict.txt``: the layout of fairseq's
    ``language_modeling`` task.

    Args:
        allow_unk: accept tokens outside the dictionary (written as ``<unk>``); the caller
            counts and reports them.

    Raises:
        BinarizeError: fairseq-preprocess failed (with the end of its output), or, without
            ``allow_unk``, replaced tokens by ``<unk>``; or the call comes from another thread than
            the one that opened the last :func:`preprocess_processes` block, after that block
            ended by an exception.
    """
    sides = ["--only-source"] if only_source else [
        "--source-lang", SOURCE_LANG, "--target-lang", TARGET_LANG,
        "--tgtdict", str(tgt_dict_path or dict_path)]
    argv = [*sides, "--srcdict", str(dict_path),
            "--destdir", str(dest), "--workers", str(workers), "--dataset-impl", "mmap"]
    for split, flag in (("train", "--trainpref"), ("valid", "--validpref"),
                        ("test", "--testpref")):
        if split in splits:
            argv += [flag, str(src_dir / split)]
    pool = _PREPROCESS_POOL
    if pool is None and _STOPPED_BLOCK_OWNER not in (None, threading.current_thread()):
        raise BinarizeError(f"fairseq-preprocess of {src_dir} not started: the binarization "
                            "it belongs to was stopped (interrupted, or another level failed)")
    if pool is not None and workers == 1:
        status, log = pool.submit(_preprocess_main, argv).result()
    elif pool is None and workers == 1 and "fairseq" in sys.modules and \
            threading.current_thread() is threading.main_thread():
        status, log = _preprocess_main(argv, worker=False)
    else:
        status, log = _run_in_own_group([sys.executable, "-m", "fairseq_cli.preprocess", *argv])
    if status != 0:
        raise BinarizeError(f"fairseq-preprocess failed on {src_dir}:\n{log[-2000:]}")
    # fairseq-preprocess logs "[in] <file>: 300 sents, 2437 tokens, 0.0% replaced (by <unk>)"
    # for each file it binarizes; the vocabulary check before it makes the share 0
    for line in [] if allow_unk else log.splitlines():
        m = _REPLACED.search(line)
        if m and float(m.group(1)) > 0:
            raise BinarizeError(f"fairseq-preprocess replaced tokens by <unk> in {src_dir}: "
                                f"{line.strip()}. Fix: binarize with a dictionary that holds "
                                "every token of the files")
