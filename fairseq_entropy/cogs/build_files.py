"""A COGS build on disk (``fairseq-entropy build cogs``).

``<out>/manifest.json`` records the build (:attr:`CogsBuild.record
<fairseq_entropy.cogs.builder.CogsBuild.record>`: package version, case, held-out pair, seed,
sizes, SHA-256 of the source files) and the levels written so far; each level directory
``<out>/entropy_<H>/`` holds ``train.tsv`` (the kept lines of COGS's ``train.tsv``, byte for
byte, in its order), ``dev.tsv``, ``test.tsv`` and ``gen.tsv`` copied unchanged, and its own
``manifest.json`` (the build's fields and the level's: target and measured entropy, slot
counts, sizes).  ``fairseq-entropy binarize --format cogs <out>/entropy_<H>`` reads a level
as it reads COGS's ``data/`` folder.

Every level is written into a temporary directory renamed into place once complete, and the
build manifest is written before the first level and after each one (as
:func:`~fairseq_entropy.scan.manifests.write_build` does), so no half-written level is ever
visible and an interrupted build is recognised when the same request is run again.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..files import atomic_directory, atomic_write_text, make_parent_dirs, read_json
from ..scan.levels import BuildError
from ..scan.manifests import BUILD_MANIFEST, PLANNED_LEVELS, manifest_differences
from .builder import CogsBuild

#: build manifest fields that do not tell two builds apart besides the bookkeeping ones
#: (the same files under another path are the same build)
_LOCATION = ("source_dir",)


def _json(obj) -> str:
    return json.dumps(obj, indent=2) + "\n"


def _differences(old: dict, new: dict) -> list:
    def strip(d: dict) -> dict:
        return {k: v for k, v in d.items() if k not in _LOCATION}

    return manifest_differences(strip(old), strip(new))


def write_cogs_build(out_dir: str | os.PathLike, build: CogsBuild, force: bool = False) -> Path:
    """Write the levels of ``build`` under ``out_dir`` (module docstring).

    Args:
        out_dir: the build directory; one subdirectory per level.
        build: the planned build (:func:`~fairseq_entropy.cogs.builder.plan_cogs_build`).
        force: replace a different build (or unrelated files) in ``out_dir``.

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`.

    Raises:
        BuildError: ``out_dir`` is a file, or holds a different build (or unrelated files)
            and not ``force``.
        DataFormatError: an existing manifest that is not valid JSON, or a file where a
            directory is needed.
        OutputError: a file that cannot be written (names it).
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise BuildError(f"{out} is a file. Fix: --out names the directory to write the build "
                         "into")
    manifest_path = out / BUILD_MANIFEST
    record = build.record
    if out.exists() and any(not p.name.startswith(".") for p in out.iterdir()):
        if manifest_path.exists():
            differ = _differences(read_json(manifest_path), record)
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
        old = read_json(manifest_path)
        old_levels = [n for n in old.get("levels", []) if (out / n).is_dir()]
        planned = list(old.get(PLANNED_LEVELS, old_levels))
    planned += [lv.name for lv in build.levels if lv.name not in planned]

    def write_manifest(names):
        atomic_write_text(manifest_path, _json({**record, "levels": names,
                                                PLANNED_LEVELS: planned}))

    write_manifest(old_levels)
    names = list(old_levels)
    for level in build.levels:
        with atomic_directory(out / level.name) as tmp:
            (tmp / "train.tsv").write_text("".join(build.train_lines[i] for i in level.lines),
                                           encoding="utf-8")
            for stem, path in build.sources.items():
                if stem != "train":
                    shutil.copyfile(path, tmp / f"{stem}.tsv")
            (tmp / BUILD_MANIFEST).write_text(_json({**record, **level.fields}))
        names = [n for n in names if n != level.name] + [level.name]
        write_manifest(names)
    return out
