"""Decoding the test split of a run: how much of it is decoded so far, the split's size, and
the fairseq-generate options that decode a sample of it (a smoke test of a run)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ..scan.databin import SOURCE_LANG, TARGET_LANG, BinarizeError, read_mmap_index
from ..scan.lm_format import data_format

#: seconds between the progress lines of a decoding
DECODE_PROGRESS_S = 30.0
#: label (decode file and score folder) of a decode of a sample of the test split
SAMPLE_LABEL = "sample"


def count_hypotheses(path: str | os.PathLike) -> int:
    """Number of hypothesis (``H-``) lines in a fairseq-generate output written so far (0
    when the file does not exist)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return 0
    return data.count(b"\nH-") + data.startswith(b"H-")


def split_size(databin: str | os.PathLike, split: str = "test") -> Optional[int]:
    """Sentences of a binarized split, from its fairseq index header (None when unreadable)."""
    prefix = Path(databin) / (split if data_format(databin) == "lm" else
                              f"{split}.{SOURCE_LANG}-{TARGET_LANG}.{SOURCE_LANG}")
    try:
        return len(read_mmap_index(prefix)[1])
    except BinarizeError:
        return None


def sample_args(total: Optional[int], sample: int, gen_batch: int) -> tuple:
    """fairseq-generate options that decode about ``sample`` of the ``total`` test sentences:
    every K-th batch (K = total // sample) of batches of at most ``sample // 16`` sentences;
    fairseq orders the batches by length, so the sample spans the split's lengths.
    fairseq-generate shards its batches by the distributed world size and rank, read here
    as the number of shards and the shard decoded (``--distributed-world-size K
    --distributed-rank 0``; nothing distributed starts).

    Returns:
        ``(options, batch size, expected sentences)``; no options when the sample is the
        whole split (or its size is unknown).
    """
    if not total or sample >= total:
        return (), gen_batch, total
    batch = max(1, min(gen_batch, sample // 16))
    shards = max(1, total // sample)
    batches = -(-total // batch)
    expected = min(total, -(-batches // shards) * batch)
    return ("--distributed-world-size", str(shards), "--distributed-rank", "0"), batch, expected
