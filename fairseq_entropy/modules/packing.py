"""Real-token rows of a padded batch: the teacher-forced decoders compute their position-wise
layers (projections, feed-forward, norms, dropout, classifier) on the ``[n, D]`` stack of a
batch's n real tokens instead of the padded ``[B, T, D]`` layout, and scatter back only where
sentences interact (attention).

Inside :func:`all_rows` every position counts as a row (the padded computation, with the pads'
rows computed too): shapes then do not depend on the data, as ``torch.func.vmap`` needs.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Iterator, Tuple

import torch
from torch import Tensor

_ALL_ROWS = contextvars.ContextVar("all_rows", default=False)


@contextmanager
def all_rows() -> Iterator[None]:
    """Within the block, :func:`real_rows` returns every position, pads included, so that the
    packed layers run on the padded batch (outputs at pads are then not zero, but every real
    position is computed as before)."""
    token = _ALL_ROWS.set(True)
    try:
        yield
    finally:
        _ALL_ROWS.reset(token)


def in_all_rows() -> bool:
    """Whether the caller runs inside :func:`all_rows` (the padded, data-independent path:
    no check there may read a tensor's values)."""
    return _ALL_ROWS.get()


def real_rows(tokens: Tensor, pad: int) -> Tensor:
    """Indices ``[n]`` of the non-pad entries of ``tokens [B, T]`` in the flattened ``[B * T]``
    batch, sentence by sentence and left to right (inside :func:`all_rows`: all ``B * T``)."""
    if _ALL_ROWS.get():
        return torch.arange(tokens.numel(), device=tokens.device)
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
