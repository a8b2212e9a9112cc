"""The decoder-only data format (``binarize --format lm``): one sequence per command,
``command <sep> actions </s>``, under the grammar's fixed dictionary plus :data:`SEP`.

The data-bin has fairseq's ``language_modeling`` layout: ``{split}.{bin,idx}`` beside
``dict.txt`` (``fairseq-preprocess --only-source``), so that the stock task loads it
(``--sample-break-mode eos`` gives one line per sample); the ``systematicity_lm`` task reads
it with the prompt (the command and ``<sep>``) masked out of the loss.  ``manifest.json``
records ``"format": "lm"`` (:data:`FORMAT_KEY`; data without the key is the pair format).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import List, Sequence

from ..files import atomic_directory, read_json
from .databin import BinarizeError
from .datafiles import read_pair
from .dictionary import dictionary_words, write_dictionary
from .grammar import Grammar
from .preprocess import run_preprocess

#: the separator between a command and its actions
SEP = "<sep>"
#: the key of ``manifest.json`` that names a data-bin's format
FORMAT_KEY = "format"
#: the formats ``binarize --format`` writes
FORMATS = ("pairs", "lm")
#: the dictionary file of an lm data-bin (fairseq's ``language_modeling`` name)
LM_DICT = "dict.txt"


def lm_words(grammar: Grammar) -> List[str]:
    """The lm format's dictionary: the grammar's fixed words
    (:func:`~fairseq_entropy.scan.dictionary.dictionary_words`), then :data:`SEP`."""
    return dictionary_words(grammar) + [SEP]


def lm_line(command: str, actions: str) -> str:
    """``command <sep> actions`` (fairseq-preprocess appends ``</s>``)."""
    return f"{command} {SEP} {actions}"


def data_format(data_dir: str | os.PathLike) -> str:
    """``lm`` or ``pairs``: the format a data-bin's ``manifest.json`` records, else ``lm`` for
    a directory holding ``dict.txt`` and no ``dict.in.txt`` (fairseq's language-modeling
    layout), else ``pairs``.

    Raises:
        DataFormatError: the manifest is not valid JSON (names the file and line).
    """
    d = Path(data_dir)
    manifest = d / "manifest.json"
    if manifest.is_file():
        fmt = read_json(manifest).get(FORMAT_KEY)
        if fmt:
            return str(fmt)
    if (d / LM_DICT).is_file() and not (d / "dict.in.txt").is_file():
        return "lm"
    return "pairs"


def binarize_level_lm(level_dir: str | os.PathLike, dest: str | os.PathLike,
                      grammar: Grammar, splits: Sequence[str], workers: int = 1) -> Path:
    """Write the lm format of the checked level ``level_dir`` (its ``splits``, each
    ``{split}.{in,out}``) to ``dest``: ``{split}.{bin,idx}``, ``dict.txt`` (:func:`lm_words`)
    and ``manifest.json`` (the level's, or an empty one, with ``"format": "lm"``), through a
    temporary directory renamed into place when complete.

    Raises:
        BinarizeError: a command or action line holds ``<sep>``, or fairseq-preprocess fails.
        DataFormatError: a split file is unreadable or not line-aligned.
    """
    level_dir, dest = Path(level_dir), Path(dest)
    manifest_path = level_dir / "manifest.json"
    with atomic_directory(dest) as tmp:
        lines = tmp / "lines"
        lines.mkdir()
        for split in splits:
            text = []
            for i, ex in enumerate(read_pair(level_dir / split), 1):
                if SEP in ex.command.split() or SEP in ex.actions.split():
                    raise BinarizeError(f"{level_dir / split}.in:{i}: holds {SEP}, the lm "
                                        "format's separator. Fix: remove it from the data")
                text.append(lm_line(ex.command, ex.actions) + "\n")
            (lines / split).write_text("".join(text), encoding="utf-8")
        dict_path = write_dictionary(tmp / "lm_words.txt", words=lm_words(grammar))
        run_preprocess(lines, tmp, dict_path, splits, workers, only_source=True)
        shutil.rmtree(lines)
        os.unlink(dict_path)
        manifest = read_json(manifest_path) if manifest_path.exists() else {}
        manifest[FORMAT_KEY] = "lm"
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return dest
