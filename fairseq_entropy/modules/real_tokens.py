"""Real-token rows of a padded batch: the teacher-forced decoders compute their position-wise
layers (projections, feed-forward, norms, dropout, classifier) on the ``[n, D]`` stack of a
batch's n real tokens instead of the padded ``[B, T, D]`` layout, and scatter back only where
sentences interact (attention).

Inside :func:`all_rows` the rows are not read from the data, so that shapes do not depend on
it, as ``torch.func.vmap`` needs: they are given for the token tensors the caller registers
(the real tokens plus repeats of a pad position up to a common count), and are every position,
pads included, for other tensors.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Dict, Iterator, Optional, Tuple

import torch
from torch import Tensor

_ALL_ROWS: contextvars.ContextVar = contextvars.ContextVar("all_rows", default=None)


@contextmanager
def all_rows(rows: Optional[Dict[int, Tensor]] = None) -> Iterator[None]:
    """Within the block, :func:`real_rows` of a token tensor ``t`` returns ``rows[id(t)]``
    when given (indices ``[n]`` of its real tokens, then repeats of one pad position), else
    every position, pads included.  Either way every real position is computed as before;
    outputs at pad positions are then not zero."""
    token = _ALL_ROWS.set(dict(rows or {}))
    try:
        yield
    finally:
        _ALL_ROWS.reset(token)


def in_all_rows() -> bool:
    """Whether the caller runs inside :func:`all_rows` (the padded, data-independent path:
    no check there may read a tensor's values)."""
    return _ALL_ROWS.get() is not None


def real_rows(tokens: Tensor, pad: int) -> Tensor:
    """Indices ``[n]`` of the non-pad entries of ``tokens [B, T]`` in the flattened ``[B * T]``
    batch, sentence by sentence and left to right (inside :func:`all_rows`: the rows given
    for ``tokens``, else all ``B * T``)."""
    given = _ALL_ROWS.get()
    if given is not None:
        rows = given.get(id(tokens))
        return rows if rows is not None else torch.arange(tokens.numel(), device=tokens.device)
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
