"""A fairseq data-bin directory as this package writes and reads it.

``fairseq-preprocess --source-lang in --target-lang out --dataset-impl mmap`` writes each split
as ``<split>.in-out.in.{bin,idx}`` (commands) and ``<split>.in-out.out.{bin,idx}`` (actions)
beside ``dict.in.txt`` and ``dict.out.txt``.  This module holds the language suffixes
(:data:`SOURCE_LANG`, :data:`TARGET_LANG`), :class:`BinarizeError` (the error of every
binarizing step) and a reader of the mmap indexed datasets (:func:`read_mmap_index`,
:func:`read_mmap_sequences`) that does not import fairseq, which the command line avoids.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Tuple

import numpy as np

from ..errors import UserError

SOURCE_LANG, TARGET_LANG = "in", "out"


class BinarizeError(UserError, RuntimeError):
    """Binarization failed; the message names the file and the fix."""


#: fairseq's mmap index: magic, then version (uint64, 1), dtype code (uint8), number of
#: sequences (uint64), then int32 sizes and int64 byte pointers into the .bin file
_MMAP_MAGIC = b"MMIDIDX\x00\x00"
_MMAP_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16,
                9: np.uint32, 10: np.uint64}


def read_mmap_index(prefix: str | os.PathLike) -> Tuple[np.dtype, np.ndarray, np.ndarray]:
    """The header of a fairseq ``mmap`` indexed dataset ``prefix.idx`` (the format written by
    ``fairseq.data.indexed_dataset.MMapIndexedDataset``, which ``fairseq-preprocess
    --dataset-impl mmap`` uses): the token dtype, the sizes [N] (int32, tokens per sequence,
    end-of-sentence included) and the byte offsets [N] (int64) of the sequences in
    ``prefix.bin``.  Read without importing fairseq, which the command line avoids.

    Raises:
        BinarizeError: the file is missing or not a version-1 fairseq mmap index.
    """
    path = f"{prefix}.idx"
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        folder, name = os.path.split(path)
        levels = sorted(entry.name for entry in os.scandir(folder or ".")
                        if entry.is_dir() and os.path.isfile(os.path.join(entry.path, name))) \
            if os.path.isdir(folder or ".") else []
        if levels:
            shown = ", ".join(os.path.join(folder, lv) for lv in levels[:4])
            raise BinarizeError(f"{path} not found: {folder} holds binarized levels "
                                f"({', '.join(levels)}), not one level. Fix: pass one level "
                                f"folder, e.g. {shown}") from e
        raise BinarizeError(f"{path} not found. Fix: binarize the level first "
                            "(fairseq-entropy binarize)") from e
    if len(blob) < 26 or blob[:9] != _MMAP_MAGIC or \
            int.from_bytes(blob[9:17], "little") != 1 or blob[17] not in _MMAP_DTYPES:
        raise BinarizeError(f"{path} is not a fairseq mmap index. Fix: binarize the level "
                            "with fairseq-entropy binarize (--dataset-impl mmap)")
    n = int.from_bytes(blob[18:26], "little")
    if len(blob) < 26 + 12 * n:
        raise BinarizeError(f"{path} is truncated ({len(blob)} bytes for {n} sequences). "
                            "Fix: binarize the level again")
    sizes = np.frombuffer(blob, dtype=np.int32, count=n, offset=26)
    pointers = np.frombuffer(blob, dtype=np.int64, count=n, offset=26 + 4 * n)
    return np.dtype(_MMAP_DTYPES[blob[17]]), sizes, pointers


def read_mmap_sequences(prefix: str | os.PathLike) -> List[np.ndarray]:
    """Every sequence of token ids of the fairseq ``mmap`` dataset ``prefix`` (``.idx`` and
    ``.bin``), in order; see :func:`read_mmap_index`.

    Raises:
        BinarizeError: a missing or malformed file.
    """
    dtype, sizes, pointers = read_mmap_index(prefix)
    try:
        data = Path(f"{prefix}.bin").read_bytes()
    except OSError as e:
        raise BinarizeError(f"{prefix}.bin not found. Fix: binarize the level again") from e
    end = int(pointers[-1]) + int(sizes[-1]) * dtype.itemsize if len(sizes) else 0
    if len(data) < end:
        raise BinarizeError(f"{prefix}.bin is truncated. Fix: binarize the level again")
    return [np.frombuffer(data, dtype=dtype, count=int(k), offset=int(p))
            for k, p in zip(sizes, pointers)]
