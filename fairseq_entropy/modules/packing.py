"""Real-token rows of a padded batch: the teacher-forced decoders compute their position-wise
layers (projections, feed-forward, norms, dropout, classifier) on the ``[n, D]`` stack of a
batch's n real tokens instead of the padded ``[B, T, D]`` layout, and scatter back only where
sentences interact (attention)."""

from __future__ import annotations

from typing import Tuple

from torch import Tensor


def real_rows(tokens: Tensor, pad: int) -> Tensor:
    """Indices ``[n]`` of the non-pad entries of ``tokens [B, T]`` in the flattened ``[B * T]``
    batch, sentence by sentence and left to right."""
    return tokens.ne(pad).reshape(-1).nonzero().squeeze(1)


def pack_rows(x: Tensor, rows: Tensor) -> Tensor:
    """The entries ``rows [n]`` of ``x [B, T, ...]`` (token ids ``[B, T]`` or features
    ``[B, T, D]``) as ``[n, ...]``."""
    return x.reshape(-1, *x.shape[2:]).index_select(0, rows)


def unpack_rows(x: Tensor, rows: Tensor, shape: Tuple[int, int]) -> Tensor:
    """Scatter the rows ``x [n, D]`` of the real tokens back to a zero-padded ``[B, T, D]``
    (``rows [n]`` from :func:`real_rows`; ``shape``: (B, T)).  Differentiable in ``x``."""
    bsz, length = shape
    out = x.new_zeros(bsz * length, x.size(-1)).index_copy(0, rows, x)
    return out.view(bsz, length, -1)
