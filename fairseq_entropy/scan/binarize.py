"""Binarization for fairseq: one fixed dictionary per grammar, shared by every level.

The dictionary lists every command word and every action of the grammar, so token ids agree
across levels, test sets and experiments.  It is passed to ``fairseq-preprocess`` as both
``--srcdict`` and ``--tgtdict`` (``--joined-dictionary`` cannot be combined with them).
fairseq-preprocess silently maps unknown words to ``<unk>``; :func:`check_vocabulary` refuses
such data before it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence

from .datafiles import (DataFormatError, atomic_directory, read_pair, read_scan_file,
                        write_pair)
from .grammar import Grammar

SOURCE_LANG, TARGET_LANG = "in", "out"


class BinarizeError(RuntimeError):
    """Binarization failed; the message names the file and the fix."""


def dictionary_words(grammar: Grammar) -> List[str]:
    """Command words then actions of ``grammar``, in a fixed order."""
    return grammar.command_words + grammar.action_words


def write_dictionary(path: str | os.PathLike, grammar: Grammar) -> Path:
    """Write a fairseq ``dict.txt`` (``<word> <count>`` lines) of :func:`dictionary_words`.

    Counts are 1: the dictionary is fixed, not learned from the data.
    """
    path = Path(path)
    path.write_text("".join(f"{w} 1\n" for w in dictionary_words(grammar)))
    return path


def check_vocabulary(prefix: str | os.PathLike, grammar: Grammar) -> None:
    """Refuse ``<prefix>.in``/``.out`` if any token is outside the grammar's dictionary.

    Raises:
        BinarizeError: naming the file, line and token, and the fix.
    """
    vocab = set(dictionary_words(grammar))
    for lang in (SOURCE_LANG, TARGET_LANG):
        p = f"{prefix}.{lang}"
        with open(p, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                for tok in line.split():
                    if tok not in vocab:
                        raise BinarizeError(
                            f"{p}:{lineno}: token {tok!r} is not in the {grammar.name} "
                            f"grammar's dictionary and would become <unk>. Fix: use "
                            f"--grammar {'scan' if grammar.name == 'paper' else 'paper'} if the "
                            "data uses that vocabulary, or correct the data")


def run_preprocess(src_dir: Path, dest: Path, dict_path: Path, splits: Sequence[str],
                   workers: int = 1) -> None:
    """Run ``fairseq-preprocess`` on ``src_dir/{split}.{in,out}`` into ``dest``."""
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess",
           "--source-lang", SOURCE_LANG, "--target-lang", TARGET_LANG,
           "--srcdict", str(dict_path), "--tgtdict", str(dict_path),
           "--destdir", str(dest), "--workers", str(workers), "--dataset-impl", "mmap"]
    for split, flag in (("train", "--trainpref"), ("valid", "--validpref"),
                        ("test", "--testpref")):
        if split in splits:
            cmd += [flag, str(src_dir / split)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise BinarizeError(f"fairseq-preprocess failed on {src_dir}:\n{res.stderr[-2000:]}")
    # fairseq-preprocess logs "... N replaced by <unk>"; the vocabulary check makes it 0.
    log = res.stdout + res.stderr
    for line in log.splitlines():
        if "replaced by <unk>" in line and "0.0% replaced" not in line and " 0%" not in line:
            raise BinarizeError(f"fairseq-preprocess replaced tokens by <unk> in {src_dir}: "
                                f"{line.strip()}")


def binarize_level(level_dir: str | os.PathLike, dest: str | os.PathLike, grammar: Grammar,
                   workers: int = 1) -> Path:
    """Binarize one level directory (``{train,valid,test}.{in,out}`` + optional manifest).

    The result is written to a temporary directory and renamed to ``dest`` when complete;
    ``manifest.json`` is copied beside the binarized data for the ``systematicity`` task.
    """
    level_dir, dest = Path(level_dir), Path(dest)
    splits = [s for s in ("train", "valid", "test")
              if (level_dir / f"{s}.{SOURCE_LANG}").exists()]
    if not splits:
        raise BinarizeError(f"{level_dir}: no train/valid/test .in/.out files. Fix: pass a "
                            "directory written by 'fairseq-entropy build'")
    for s in splits:
        try:
            read_pair(level_dir / s)  # aligned, no empty lines
        except DataFormatError as e:
            raise BinarizeError(str(e)) from None
        check_vocabulary(level_dir / s, grammar)
    with atomic_directory(dest) as tmp:
        dict_path = write_dictionary(tmp / "dict.txt", grammar)
        run_preprocess(level_dir, tmp, dict_path, splits, workers)
        os.unlink(dict_path)
        if (level_dir / "manifest.json").exists():
            shutil.copy(level_dir / "manifest.json", tmp / "manifest.json")
    return dest


def level_dirs(build_dir: str | os.PathLike) -> List[Path]:
    """Level directories of a build (those listed in its manifest), or the dir itself."""
    build_dir = Path(build_dir)
    if any((build_dir / f"{s}.{SOURCE_LANG}").exists() for s in ("train", "test")):
        return [build_dir]
    manifest = build_dir / "manifest.json"
    if manifest.exists():
        names = json.loads(manifest.read_text()).get("levels", [])
        return [build_dir / n for n in names]
    found = sorted(p for p in build_dir.iterdir() if (p / f"train.{SOURCE_LANG}").exists()) \
        if build_dir.is_dir() else []
    if not found:
        raise BinarizeError(f"{build_dir}: not a build directory (no manifest.json, no "
                            "train.in). Fix: pass the --out of 'fairseq-entropy build'")
    return found


def grammar_of_build(build_dir: str | os.PathLike) -> Optional[str]:
    """The grammar name recorded in a build's (or level's) manifest, if any."""
    manifest = Path(build_dir) / "manifest.json"
    return json.loads(manifest.read_text()).get("grammar") if manifest.exists() else None


def binarize_build(build_dir: str | os.PathLike, out: str | os.PathLike,
                   grammar: Optional[Grammar] = None, workers: int = 1) -> List[Path]:
    """Binarize every level of a build into ``out/<level>`` (or ``out`` for a single level)."""
    build_dir, out = Path(build_dir), Path(out)
    dirs = level_dirs(build_dir)
    if grammar is None:
        name = grammar_of_build(dirs[0]) or "paper"
        grammar = Grammar.paper() if name == "paper" else Grammar.scan()
    if dirs == [build_dir]:
        return [binarize_level(build_dir, out, grammar, workers)]
    return [binarize_level(d, out / d.name, grammar, workers) for d in dirs]


def binarize_scan_files(out: str | os.PathLike, grammar: Grammar, train: Optional[str] = None,
                        valid: Optional[str] = None, test: Optional[str] = None,
                        workers: int = 1) -> Path:
    """Binarize SCAN-format files (``IN: ... OUT: ...``) into ``out``.

    Every line is validated against ``grammar`` first (errors name file:line).
    """
    given = {"train": train, "valid": valid, "test": test}
    if not any(given.values()):
        raise BinarizeError("no SCAN file given. Fix: pass --train/--valid/--test FILE")
    with tempfile.TemporaryDirectory() as tmp:
        for split, path in given.items():
            if path:
                try:
                    examples = read_scan_file(path, grammar)
                except DataFormatError as e:
                    raise BinarizeError(str(e)) from None
                write_pair(Path(tmp) / split, examples)
        return binarize_level(tmp, out, grammar, workers)
