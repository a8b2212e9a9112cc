"""Reading and writing SCAN-style data: ``IN: ... OUT: ...`` files and ``.in``/``.out`` pairs.

Every reader validates each line against a :class:`~fairseq_entropy.scan.grammar.Grammar` and raises
:class:`DataFormatError` naming the file, the line number and the fix.  Writers go through a
temporary file that is renamed into place, so an interrupted write leaves nothing half-written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from ..errors import DataFormatError
from ..files import atomic_write_text, iter_text_lines, read_lines
from .grammar import Command, Grammar, GrammarError


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
            f"(verbs: {' '.join(grammar.verbs)})") from e
    expected = " ".join(grammar.interpret(cmd))
    if expected != ex.actions:
        raise DataFormatError(
            f"{where}: the actions do not match the command {ex.command!r}; the {grammar.name} "
            f"grammar gives {expected!r}. Fix: correct the OUT part or use the right grammar")


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
            cogs = "read a COGS .tsv with --format cogs, or " if \
                str(path).endswith(".tsv") and "\t" in line else ""
            raise DataFormatError(f"{where}: line does not start with 'IN:'. Fix: {cogs}write "
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
            other = tgt_path if p == src_path else src_path
            raise DataFormatError(f"{p}: file not found. Fix: check the path" + (
                f" (the data set is the pair {src_path.name} / {tgt_path.name})"
                if other.exists() else ""))
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


def command_examples(grammar: Grammar, commands: Iterable[Command]) -> List[Example]:
    """The (command, actions) pair of each of ``commands``, the actions given by
    :meth:`Grammar.interpret <fairseq_entropy.scan.grammar.Grammar.interpret>`: the inverse of
    :func:`parse_examples`."""
    return [Example(str(c), " ".join(grammar.interpret(c))) for c in commands]
