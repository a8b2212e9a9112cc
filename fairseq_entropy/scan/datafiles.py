"""Reading and writing SCAN-style data: ``IN: ... OUT: ...`` files and ``.in``/``.out`` pairs.

Every reader validates each line against a :class:`~fairseq_entropy.scan.grammar.Grammar` and raises
:class:`DataFormatError` naming the file, the line number and the fix.  Writers go through a
temporary file that is renamed into place, so an interrupted write leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

from .grammar import Command, Grammar, GrammarError


class DataFormatError(ValueError):
    """A data file that cannot be read; the message names file, line and fix."""


@dataclass(frozen=True)
class Example:
    """One (command, actions) pair; both are space-separated token strings."""

    command: str
    actions: str


def _check(grammar: Optional[Grammar], ex: Example, where: str) -> None:
    if grammar is None:
        return
    try:
        cmd = grammar.parse(ex.command)
    except GrammarError as e:
        raise DataFormatError(
            f"{where}: {e}. Fix: the command must follow the {grammar.name} grammar "
            f"(verbs: {' '.join(grammar.verbs)})") from None
    expected = " ".join(grammar.interpret(cmd))
    if expected != ex.actions:
        raise DataFormatError(
            f"{where}: the actions do not match the command {ex.command!r}; the {grammar.name} "
            f"grammar gives {expected!r}. Fix: correct the OUT part or use the right grammar")


def iter_text_lines(path: str | os.PathLike) -> Iterator[Tuple[int, str]]:
    """Yield ``(line number, line)`` of a UTF-8 text file; each line keeps its ``"\\n"``.

    Raises:
        DataFormatError: the file does not exist, is a directory, or a line is not valid
            UTF-8 (names the file, line, byte and the fix).
    """
    path = Path(path)
    if path.is_dir():
        raise DataFormatError(f"{path} is a directory, not a file. Fix: pass a file inside it "
                              f"(e.g. {path / 'train.in'})")
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise DataFormatError(f"{path}: file not found") from None
    with f:
        for lineno, raw in enumerate(f, 1):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataFormatError(
                    f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at column "
                    f"{e.start + 1}). Fix: convert the file to UTF-8, e.g. iconv -f latin1 "
                    f"-t utf-8 {path.name} > {path.stem}.utf8{path.suffix}") from None


def read_lines(path: str | os.PathLike) -> List[str]:
    """The lines of a UTF-8 text file without their line ends (errors as
    :func:`iter_text_lines`)."""
    return [line.rstrip("\r\n") for _, line in iter_text_lines(path)]


def read_json(path: str | os.PathLike) -> dict:
    """Read a JSON file (UTF-8).

    Raises:
        DataFormatError: missing file, a directory, invalid UTF-8 or invalid JSON (names the
            file and line).
    """
    text = "".join(line for _, line in iter_text_lines(path))
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataFormatError(f"{path}:{e.lineno}: invalid JSON ({e.msg}). Fix: regenerate the "
                              "file with the command that wrote it") from None


def read_scan_file(path: str | os.PathLike, grammar: Optional[Grammar] = None) -> List[Example]:
    """Read a SCAN-format file (one ``IN: <command> OUT: <actions>`` per line).

    Blank lines are skipped.  With ``grammar`` every command is parsed and its actions checked.

    Raises:
        DataFormatError: a missing file or a directory, a line that is not UTF-8, a line
            without ``IN:``/``OUT:``, an empty side, an unknown word or actions that differ
            from the grammar's interpretation (names file:line).
    """
    out = []
    for lineno, line in iter_text_lines(path):
        line = line.strip()
        if not line:
            continue
        where = f"{path}:{lineno}"
        if not line.startswith("IN:"):
            raise DataFormatError(f"{where}: line does not start with 'IN:'. Fix: write "
                                  "'IN: <command> OUT: <actions>'")
        if " OUT:" not in line:
            raise DataFormatError(f"{where}: line has no 'OUT:'. Fix: write "
                                  "'IN: <command> OUT: <actions>'")
        cmd, act = line[3:].split(" OUT:", 1)
        ex = Example(" ".join(cmd.split()), " ".join(act.split()))
        if not ex.command or not ex.actions:
            raise DataFormatError(f"{where}: empty command or action side. Fix: both "
                                  "'IN:' and 'OUT:' need at least one token")
        _check(grammar, ex, where)
        out.append(ex)
    return out


def read_pair(prefix: str | os.PathLike, grammar: Optional[Grammar] = None,
              src: str = "in", tgt: str = "out") -> List[Example]:
    """Read ``<prefix>.in`` / ``<prefix>.out`` (one sentence per line, aligned).

    Raises:
        DataFormatError: missing file, a directory, a line that is not UTF-8, different line
            counts, an empty line, or (with ``grammar``) an invalid command or wrong actions;
            names file:line.
    """
    src_path, tgt_path = Path(f"{prefix}.{src}"), Path(f"{prefix}.{tgt}")
    for p in (src_path, tgt_path):
        if not p.exists():
            raise DataFormatError(f"{p}: file not found. Fix: a data set needs both "
                                  f"{src_path.name} and {tgt_path.name}")
    srcs = read_lines(src_path)
    tgts = read_lines(tgt_path)
    if len(srcs) != len(tgts):
        raise DataFormatError(f"{src_path} has {len(srcs)} lines but {tgt_path} has {len(tgts)}. "
                              "Fix: the two files must be line-aligned")
    out = []
    for i, (a, b) in enumerate(zip(srcs, tgts), 1):
        ex = Example(" ".join(a.split()), " ".join(b.split()))
        if not ex.command:
            raise DataFormatError(f"{src_path}:{i}: empty line. Fix: remove it from both files")
        if not ex.actions:
            raise DataFormatError(f"{tgt_path}:{i}: empty line. Fix: remove it from both files")
        _check(grammar, ex, f"{src_path}:{i}")
        out.append(ex)
    return out


def read_any(path: str | os.PathLike, grammar: Optional[Grammar] = None) -> List[Example]:
    """Read a SCAN-format file, or an ``.in``/``.out`` pair given by either file or its prefix.

    Raises:
        DataFormatError: see :func:`read_pair` and :func:`read_scan_file`.
    """
    p = str(path)
    for suffix in (".in", ".out"):
        if p.endswith(suffix):
            return read_pair(p[: -len(suffix)], grammar)
    if os.path.exists(p + ".in"):
        return read_pair(p, grammar)
    return read_scan_file(p, grammar)


# ----------------------------------------------------------------------------- atomic writes
_PARTIAL = ".partial."


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _partial_prefix(name: str) -> str:
    """Prefix of the temporary names of ``name``: ``.<name>.partial.<pid>.<host>.``."""
    return f".{name}{_PARTIAL}{os.getpid()}.{socket.gethostname()}."


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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place.

    The file gets the permissions of a plainly created file (0666 minus the umask); temporary
    files of earlier interrupted writes of ``path`` are removed first
    (:func:`remove_stale_partials`).

    Raises:
        DataFormatError: ``path`` is a directory, or a file stands where a parent directory
            is needed.
    """
    path = Path(path)
    make_parent_dirs(path)
    if path.is_dir():
        raise DataFormatError(f"{path} is a directory, not a file. Fix: choose another output "
                              "path, or remove the directory")
    remove_stale_partials(path)
    fd, tmp = tempfile.mkstemp(prefix=_partial_prefix(path.name), dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
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
    """
    dest = Path(dest)
    make_parent_dirs(dest)
    if dest.exists() and not dest.is_dir():
        raise DataFormatError(f"{dest} is a file, not a directory. Fix: choose another output "
                              "directory, or remove the file")
    remove_stale_partials(dest)
    tmp = Path(tempfile.mkdtemp(prefix=_partial_prefix(dest.name), dir=dest.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def format_pair(examples: Sequence[Example]) -> Tuple[str, str]:
    """The text of the ``.in`` and ``.out`` files of ``examples``."""
    return ("".join(e.command + "\n" for e in examples),
            "".join(e.actions + "\n" for e in examples))


def format_scan(examples: Iterable[Example]) -> str:
    """The text of a SCAN-format file of ``examples``."""
    return "".join(f"IN: {e.command} OUT: {e.actions}\n" for e in examples)


def write_pair(prefix: str | os.PathLike, examples: Sequence[Example]) -> None:
    """Write ``<prefix>.in`` and ``<prefix>.out`` atomically (each file)."""
    a, b = format_pair(examples)
    atomic_write_text(f"{prefix}.in", a)
    atomic_write_text(f"{prefix}.out", b)


def write_scan_file(path: str | os.PathLike, examples: Iterable[Example]) -> None:
    """Write a SCAN-format file atomically."""
    atomic_write_text(path, format_scan(examples))


def parse_examples(examples: Iterable[Example], grammar: Grammar) -> List[Command]:
    """Parse the commands of ``examples`` (already validated)."""
    return [grammar.parse(e.command) for e in examples]
