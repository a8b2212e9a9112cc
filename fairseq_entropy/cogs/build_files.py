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
from typing import Callable

from ..scan.manifests import BUILD_MANIFEST, manifest_differences, write_levels
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
        OutputError: a level's directory cannot be created or renamed into place
            (:func:`~fairseq_entropy.files.atomic_directory`).
    """
    record = build.record

    def filler(level) -> Callable[[Path], None]:
        def fill(tmp: Path) -> None:
            (tmp / "train.tsv").write_text("".join(build.train_lines[i] for i in level.lines),
                                           encoding="utf-8")
            for stem, path in build.sources.items():
                if stem != "train":
                    shutil.copyfile(path, tmp / f"{stem}.tsv")
            (tmp / BUILD_MANIFEST).write_text(_json({**record, **level.fields}))
        return fill

    return write_levels(out_dir, record, [(lv.name, filler(lv)) for lv in build.levels], force,
                        differences=_differences)
