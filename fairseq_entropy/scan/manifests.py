"""A build on disk: one directory per level and the build manifest that ties them together.

``<out>/manifest.json`` records the package version, the grammar (name and verbs), the build
request (builder, seed, restricted verb, N, ...) and the levels written so far; each level
directory holds ``{train,valid,test}.{in,out}`` and its own ``manifest.json`` (the build's
fields and :meth:`Level.manifest <fairseq_entropy.scan.levels.Level.manifest>`).  The build
manifest is written before the first level and after each one, so an interrupted build is
recognised, and resumed, when the same request is run again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable, Sequence, Tuple

from ..files import atomic_directory, atomic_write_text, make_parent_dirs, read_json
from ..version import __version__
from .datafiles import command_examples, write_pair
from .grammar import Grammar
from .levels import SPLITS, BuildError, Level

BUILD_MANIFEST = "manifest.json"


def manifest_sha256(source: bytes | str | os.PathLike) -> str:
    """The SHA-256 (hex) of a level's ``manifest.json``, by which checkpoints, scores and
    resumed runs name the data they were trained on: of ``source``'s bytes, or of the file
    ``source`` names (a level directory: its ``manifest.json``).

    Raises:
        OSError: the file cannot be read.
    """
    if not isinstance(source, bytes):
        path = Path(source)
        source = (path / "manifest.json" if path.is_dir() else path).read_bytes()
    return hashlib.sha256(source).hexdigest()


def _json(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"


#: build manifest field: every level asked of the build so far, written before the first of
#: them; ``levels`` lists those written, so a level planned but not listed is missing (an
#: interrupted build).  Not part of the levels' own manifests.
PLANNED_LEVELS = "planned_levels"
#: build manifest fields that do not tell two builds apart
_BOOKKEEPING = ("levels", PLANNED_LEVELS, "package_version")


def manifest_differences(old: dict, new: dict) -> list:
    """How two build manifests differ, one ``field: X there, Y now`` per differing field
    (bookkeeping fields -- the levels written so far, the package version -- ignored); empty
    when they are the same build."""
    keys = sorted((set(old) | set(new)) - set(_BOOKKEEPING))
    return [f"{k}: {json.dumps(old.get(k))} there, {json.dumps(new.get(k))} now"
            for k in keys if old.get(k) != new.get(k)]


def write_levels(out_dir: str | os.PathLike, record: dict,
                 levels: Sequence[Tuple[str, Callable[[Path], None]]], force: bool = False,
                 differences: Callable[[dict, dict], list] = manifest_differences) -> Path:
    """Write a build's ``levels`` under ``out_dir`` beside its build manifest (module
    docstring): the build manifest first, then each level into a temporary directory renamed
    into place once complete, the manifest rewritten after each.

    Levels already listed in an existing manifest of the same build are kept; a level written
    again replaces its directory.

    Args:
        record: the build's manifest fields (package, request, sources); an existing build in
            ``out_dir`` whose record ``differences`` tells apart is refused.
        levels: ``(name, fill)`` per level: ``fill(directory)`` writes the level's files,
            its own ``manifest.json`` included, into the (temporary) ``directory``.
        force: replace a different existing build (or unrelated files).
        differences: how two build manifests differ (:func:`manifest_differences`).

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`.

    Raises:
        BuildError: ``out_dir`` is a file, or holds a different build (or unrelated files)
            and not ``force``.
        DataFormatError: an existing manifest that is not valid JSON, or a file where a
            directory is needed.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise BuildError(f"{out} is a file. Fix: --out names the directory to write the build "
                         "into")
    manifest_path = out / BUILD_MANIFEST
    if out.exists() and any(not p.name.startswith(".") for p in out.iterdir()):
        if manifest_path.exists():
            differ = differences(read_json(manifest_path), record)
            if differ and not force:
                raise BuildError(f"{out} already holds a different build ({manifest_path}): "
                                 f"{'; '.join(differ)}. Fix: choose another --out, or pass "
                                 "--force to replace it")
            if differ:
                shutil.rmtree(out)
        elif not force:
            raise BuildError(f"{out} is not empty and holds no {BUILD_MANIFEST}. Fix: choose "
                             "an empty or new --out, or pass --force to replace it")
        else:
            shutil.rmtree(out)
    make_parent_dirs(manifest_path)
    old_levels, planned = [], []
    if manifest_path.exists():
        old_manifest = read_json(manifest_path)
        old_levels = [n for n in old_manifest.get("levels", []) if (out / n).is_dir()]
        planned = list(old_manifest.get(PLANNED_LEVELS, old_levels))
    planned += [name for name, _ in levels if name not in planned]

    def write_manifest(names):
        atomic_write_text(manifest_path, _json({**record, "levels": names,
                                                PLANNED_LEVELS: planned}))

    # the manifest comes first, so that an interrupted build is recognised when re-run
    write_manifest(old_levels)
    names = list(old_levels)
    for name, fill in levels:
        with atomic_directory(out / name) as tmp:
            fill(tmp)
        names = [n for n in names if n != name] + [name]
        write_manifest(names)
    return out


def write_build(out_dir: str | os.PathLike, grammar: Grammar, levels: Sequence[Level],
                params: dict, force: bool = False) -> Path:
    """Write the SCAN ``levels`` under ``out_dir`` with a build-level and a per-level
    ``manifest.json`` (:func:`write_levels`): each level's ``{train,valid,test}.{in,out}``.

    Args:
        params: the build request (builder, seed, restricted verb, N, ...) recorded in the
            manifest; an existing build in ``out_dir`` with different params is refused.
        force: replace a different existing build.

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`.

    Raises:
        BuildError, DataFormatError: as :func:`write_levels`.
        OutputError: a level's directory cannot be created or renamed into place
            (:func:`~fairseq_entropy.files.atomic_directory`).
    """
    record = {"package": "fairseq-entropy", "package_version": __version__,
              "grammar": grammar.name, "verbs": list(grammar.verbs), **params}

    def filler(level: Level) -> Callable[[Path], None]:
        def fill(tmp: Path) -> None:
            for split in SPLITS:
                write_pair(tmp / split, command_examples(grammar, level.splits[split]))
            (tmp / BUILD_MANIFEST).write_text(_json({**record, **level.manifest(grammar)}))
        return fill

    return write_levels(out_dir, record, [(lv.name, filler(lv)) for lv in levels], force)
