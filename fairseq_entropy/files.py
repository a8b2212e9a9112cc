"""Files written safely and read with clear errors: the package's ground floor for I/O.

* Writers (:func:`atomic_write_bytes`, :func:`atomic_write_text`, :func:`atomic_directory`) go
  through a temporary name beside the destination (``.<name>.partial.<pid>.<host>.*``) that is
  renamed into place, so an interrupted write leaves the destination as it was; temporary
  names left by dead processes of this host are removed before the next write
  (:func:`remove_stale_partials`, which uses :func:`pid_alive`).
* Readers (:func:`iter_text_lines`, :func:`read_lines`, :func:`read_text`, :func:`read_json`)
  read UTF-8 (a byte-order mark dropped, CRLF read as LF) and raise
  :class:`~fairseq_entropy.errors.DataFormatError` naming the file, the line and the fix.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import glob
import json
import json.decoder
import json.scanner
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path
from typing import Iterator, List, Tuple

from .errors import DataFormatError


def iter_text_lines(path: str | os.PathLike) -> Iterator[Tuple[int, str]]:
    """Yield ``(line number, line)`` of a UTF-8 text file; each line keeps its ``"\\n"``.

    Text as editors and other tools write it is read as the same text: a UTF-8 byte-order mark
    at the start is dropped, Windows line ends (``"\\r\\n"``) read as ``"\\n"``, and a last
    line without a newline is yielded as it is.  Every reader of the package goes through this
    function (or :func:`read_lines`, :func:`read_text`, :func:`read_json`).

    Raises:
        DataFormatError: the file does not exist, is a directory, a line is not valid UTF-8
            (e.g. latin-1 or UTF-16) or holds a NUL byte (names the file, line, byte and the
            fix).
    """
    path = Path(path)
    if path.is_dir():
        raise DataFormatError(f"{path} is a directory, not a file. Fix: pass a file inside it "
                              f"(e.g. {path / 'train.in'})")
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise DataFormatError(f"{path}: file not found. Fix: check the path") from None
    utf8 = path.with_name(f"{path.stem}.utf8{path.suffix}")  # the converted file, beside it
    with f:
        for lineno, raw in enumerate(f, 1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            if b"\0" in raw:
                column = raw.index(b"\0") + 1
                raise DataFormatError(
                    f"{path}:{lineno}: holds a NUL byte at column {column} (a "
                    "binary file, or text in UTF-16). Fix: pass a UTF-8 text file, e.g. iconv "
                    f"-f utf-16 -t utf-8 {path} > {utf8}")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataFormatError(
                    f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at column "
                    f"{e.start + 1}). Fix: convert the file to UTF-8, e.g. iconv -f latin1 "
                    f"-t utf-8 {path} > {utf8}") from None
            yield lineno, line[:-2] + "\n" if line.endswith("\r\n") else line


def read_lines(path: str | os.PathLike) -> List[str]:
    """The lines of a UTF-8 text file without their line ends (errors as
    :func:`iter_text_lines`)."""
    return [line.rstrip("\r\n") for _, line in iter_text_lines(path)]


def read_text(path: str | os.PathLike) -> str:
    """The whole text of a UTF-8 text file, read as :func:`iter_text_lines` reads it (no
    byte-order mark, ``"\\n"`` line ends; errors as there)."""
    return "".join(line for _, line in iter_text_lines(path))


#: a JSON string or a bracket, for finding a key of one object in the text
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]]')


def _duplicate_line(text: str, start: int, end: int, key: str) -> int:
    """1-based line of the second ``key`` of the object ``text[start:end]`` (``start`` just
    after its ``{``), counting only the object's own keys, not those of nested values."""
    depth, count = 0, 0
    for m in _JSON_TOKEN.finditer(text, start, end):
        tok = m.group()
        if tok in "{[":
            depth += 1
        elif tok in "}]":
            depth -= 1
        elif depth == 0 and re.match(r"\s*:", text[m.end():end]) and json.loads(tok) == key:
            count += 1
            if count == 2:
                return text.count("\n", 0, m.start()) + 1
    return text.count("\n", 0, start) + 1


class _UniqueKeyDecoder(json.JSONDecoder):
    """A JSON decoder that refuses an object with a repeated key (the standard decoder keeps
    the last value silently); the error is a :class:`DataFormatError` without the file."""

    def __init__(self):
        super().__init__()
        self.parse_object = self._object
        self.scan_once = json.scanner.py_make_scanner(self)

    @staticmethod
    def _object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        pairs, end = json.decoder.JSONObject(s_and_end, strict, scan_once, None, list, memo)
        seen = set()
        for key, _ in pairs:
            if key in seen:
                line = _duplicate_line(s_and_end[0], s_and_end[1], end, key)
                raise DataFormatError(f"{line}: key {key!r} is repeated in one object (JSON "
                                      "would keep only the last value). Fix: keep one "
                                      f"{json.dumps(key)} entry and remove or rename the other")
            seen.add(key)
        return dict(pairs), end


def loads_json(text: str, source: str | os.PathLike):
    """``json.loads(text)``, refusing an object with a repeated key.

    Args:
        text: the JSON text.
        source: the file it came from (for the message).

    Raises:
        json.JSONDecodeError: invalid JSON.
        DataFormatError: ``source:line: key 'k' is repeated ...`` with the fix.
    """
    try:
        return _UniqueKeyDecoder().decode(text)
    except DataFormatError as e:
        raise DataFormatError(f"{source}:{e}") from None


def read_json(path: str | os.PathLike) -> dict:
    """Read a JSON file (UTF-8; :func:`loads_json`).

    Raises:
        DataFormatError: missing file, a directory, invalid UTF-8, invalid JSON, or an object
            with a repeated key (names the file and line).
    """
    text = read_text(path)
    try:
        return loads_json(text, path)
    except json.JSONDecodeError as e:
        raise DataFormatError(f"{path}:{e.lineno}: invalid JSON ({e.msg}). Fix: regenerate the "
                              "file with the command that wrote it") from None


#: characters fairseq reads as separators in a path, and why
FAIRSEQ_PATH_SEPARATORS = {
    ",": "fairseq-preprocess reads a comma in a data path as a list of paths",
    ":": "fairseq-train and fairseq-generate read ':' in a data directory as a list of "
         "directories",
}


def check_fairseq_path(path: str | os.PathLike, option: str, chars: str = ",:") -> None:
    """Refuse a path that fairseq would split into several paths.

    Args:
        path: the path given by the user.
        option: the option or argument that gave it (for the message).
        chars: the separators to refuse (see :data:`FAIRSEQ_PATH_SEPARATORS`).

    Raises:
        DataFormatError: ``path`` holds one of ``chars``; names the option, the character, the
            reason and the fix.
    """
    for c in chars:
        if c in str(path):
            raise DataFormatError(
                f"{option} {path}: holds {c!r}, and {FAIRSEQ_PATH_SEPARATORS[c]}. Fix: choose "
                f"a path without {c!r} (other characters, spaces included, are fine)")


_PARTIAL = ".partial."


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _partial_prefix(name: str) -> str:
    """Prefix of the temporary names of ``name``: ``.<name>.partial.<pid>.<host>.``."""
    return f".{name}{_PARTIAL}{os.getpid()}.{socket.gethostname()}."


def remove_own_partials(directory: str | os.PathLike) -> None:
    """Remove the temporary names this process left in ``directory`` (``.<name>.partial.<pid>
    .<host>.*`` of its own pid): after an interrupt, a child that was still writing into a
    temporary directory while it was being removed can leave it behind."""
    mark = f"{_PARTIAL}{os.getpid()}.{socket.gethostname()}."
    for p in Path(directory).glob(f".*{mark}*") if Path(directory).is_dir() else ():
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_partials(path: str | os.PathLike) -> List[Path]:
    """Remove temporary files/directories left beside ``path`` by interrupted writes.

    A temporary name records the writer's process id and host (:func:`_partial_prefix`); it is
    removed when that process is no longer running on this host.  Writes in progress, and those
    of other hosts, are left alone.

    Returns:
        the removed paths.
    """
    path = Path(path)
    removed = []
    host = socket.gethostname()
    if not path.parent.is_dir():
        return removed
    for p in path.parent.glob(f".{glob.escape(path.name)}{_PARTIAL}*"):
        pid, _, rest = p.name[len(path.name) + 1 + len(_PARTIAL):].partition(".")
        if not pid.isdigit() or not rest.startswith(host + ".") or pid_alive(int(pid)):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def make_parent_dirs(path: str | os.PathLike) -> None:
    """Create the parent directories of ``path``.

    Raises:
        DataFormatError: a file stands where a directory is needed (names it and the fix).
    """
    parent = Path(path).parent
    for p in [parent, *parent.parents]:
        if p.exists():
            if not p.is_dir():
                raise DataFormatError(f"{p} is a file, but {path} needs it to be a directory. "
                                      "Fix: choose an output path under a directory")
            break
    parent.mkdir(parents=True, exist_ok=True)


class OutputError(DataFormatError, OSError):
    """An output cannot be written (a read-only or full file system, a missing permission);
    the message names the user's path, never the temporary name written first."""


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for the duration of the block (main thread only).

    A stop signal that arrives inside the block is recorded and raised again, to the handler
    that was in place, when the block ends; so its exception (``KeyboardInterrupt``, or a CLI's
    stop exception) comes at the block's end rather than between two statements that must not
    be separated, such as creating a temporary file and recording its name for cleanup.  The
    deferral replaces the Python-level handlers rather than the thread's signal mask, since the
    kernel may hand a process-directed signal to any thread that does not block it.  Outside the
    main thread (where handlers cannot be set, and Python runs none) the block runs unchanged,
    as it does when a handler was installed outside Python.
    """
    if threading.current_thread() is not threading.main_thread() or \
            any(signal.getsignal(s) is None for s in _STOP_SIGNALS):
        yield
        return
    pending: List[int] = []
    old = {s: signal.signal(s, lambda signum, _frame: pending.append(signum))
           for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(pending):
            signal.raise_signal(s)


def _write_error(path: Path, e: OSError) -> OutputError:
    """:class:`OutputError` for a failed write of ``path`` (through a temporary name)."""
    reason = e.strerror or str(e)
    where = path.parent if isinstance(e, PermissionError) or \
        e.errno in (errno.EROFS, errno.EACCES) else path
    return OutputError(f"{path}: cannot write it ({reason}: {where}). Fix: choose an output "
                       f"path you can write to, or make {where} writable"
                       + (" (or free space on its file system)"
                          if e.errno in (errno.ENOSPC, errno.EDQUOT) else ""))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place.

    The file gets the permissions of a plainly created file (0666 minus the umask); temporary
    files of earlier interrupted writes of ``path`` are removed first
    (:func:`remove_stale_partials`).

    Raises:
        DataFormatError: ``path`` is a directory, or a file stands where a parent directory
            is needed.
        OutputError: the file cannot be written (names ``path``, not the temporary name).
    """
    path = Path(path)
    make_parent_dirs(path)
    if path.is_dir():
        raise DataFormatError(f"{path} is a directory, not a file. Fix: choose another output "
                              "path, or remove the directory")
    remove_stale_partials(path)
    tmp = None
    try:
        # a stop signal between creating the file and naming it in ``tmp`` would leave it behind
        with stop_signals_deferred():
            fd, tmp = tempfile.mkstemp(prefix=_partial_prefix(path.name), dir=path.parent)
            f = os.fdopen(fd, "wb")
        with f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            with stop_signals_deferred():
                if os.path.exists(tmp):
                    os.unlink(tmp)
        if isinstance(e, OSError):
            raise _write_error(path, e) from e
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8, ``"\\n"`` line ends) to ``path`` as :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_directory(dest: str | os.PathLike):
    """Yield a temporary directory beside ``dest`` that replaces ``dest`` on success.

    On any exception the temporary directory is removed and ``dest`` is left as it was.  The
    directory gets the permissions of a plainly created one (0777 minus the umask); temporary
    directories of earlier interrupted writes of ``dest`` are removed first.

    Raises:
        DataFormatError: ``dest`` is a file, or a file stands where a parent directory is
            needed.
        OutputError: the temporary directory cannot be created, or renamed into place
            (names ``dest``, not the temporary name).
    """
    dest = Path(dest)
    make_parent_dirs(dest)
    if dest.exists() and not dest.is_dir():
        raise DataFormatError(f"{dest} is a file, not a directory. Fix: choose another output "
                              "directory, or remove the file")
    remove_stale_partials(dest)
    tmp = None
    try:
        # a stop signal between creating the directory and naming it in ``tmp`` would leave it
        with stop_signals_deferred():
            tmp = Path(tempfile.mkdtemp(prefix=_partial_prefix(dest.name), dir=dest.parent))
    except OSError as e:
        raise _write_error(dest, e) from e
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException as e:
        with stop_signals_deferred():
            shutil.rmtree(tmp, ignore_errors=True)
        # an OSError naming the temporary directory is reported under the user's path
        if isinstance(e, OSError) and e.filename is not None and \
                str(e.filename).startswith(str(tmp)):
            raise _write_error(dest, e) from e
        raise
