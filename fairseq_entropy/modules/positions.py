"""Position schemes of the paper's Transformer (``shared/design/positions.md``).

* :class:`AbsolutePositions` -- sinusoidal (Vaswani et al. 2017) or learned vectors added to the
  token embeddings.
* :class:`RotaryPositions` -- RoPE (Su et al., RoFormer) applied to queries and keys, plus the
  authors' non-rotation variant for reproduction.
* :class:`RelativePositions` -- DeBERTa-style disentangled attention (He et al. 2021) over
  log-bucketed relative distances.

Positions always count from the first non-pad token of a sentence (fairseq left-pads the
source), see :func:`token_positions`.
"""

from __future__ import annotations

import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .dropout import dropout_or_identity
from .real_tokens import in_all_rows

POSITION_ENCODINGS = ("sinusoidal", "learned", "relative", "rope")
ROPE_VARIANTS = ("standard", "authors")


def token_positions(tokens: Tensor, pad: int) -> Tensor:
    """Position of each token counted from the sentence's first non-pad token.

    Args:
        tokens: LongTensor [B, T]; padding may be on the left or on the right.
        pad: the padding index.

    Returns:
        LongTensor [B, T]: 0, 1, 2, ... over the non-pad tokens; pads get 0.
    """
    mask = tokens.ne(pad).long()
    return (torch.cumsum(mask, dim=1) - 1).clamp(min=0) * mask


def sinusoidal_table(num_positions: int, dim: int) -> Tensor:
    """The fixed sin/cos table of Vaswani et al. (2017, Sec. 3.5): [num_positions, dim].

    PE[p, 2i] = sin(p / 10000^(2i/dim)), PE[p, 2i+1] = cos(p / 10000^(2i/dim)).
    """
    pos = torch.arange(num_positions, dtype=torch.float32).unsqueeze(1)
    inv = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(num_positions, dim)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv[: dim // 2])
    return table


class AbsolutePositions(nn.Module):
    """Absolute position vectors added to token embeddings.

    Args:
        kind: ``"sinusoidal"`` (fixed table) or ``"learned"`` (trainable table, initialised
            U(-0.1, 0.1) like the token embeddings).
        max_positions: table size; positions beyond it raise ``ValueError``.
        dim: embedding size d.

    ``forward(positions [B, T]) -> [B, T, d]``.
    """

    def __init__(self, kind: str, max_positions: int, dim: int):
        super().__init__()
        self.kind = kind
        self.max_positions = max_positions
        if kind == "sinusoidal":
            self.register_buffer("table", sinusoidal_table(max_positions, dim), persistent=False)
        elif kind == "learned":
            self.table = nn.Parameter(torch.empty(max_positions, dim).uniform_(-0.1, 0.1))
        else:
            raise ValueError(f"unknown absolute position kind {kind!r}")

    def forward(self, positions: Tensor) -> Tensor:
        # (not checked inside vmap, where values cannot be read: F.embedding still refuses)
        if not in_all_rows() and positions.numel() and \
                int(positions.max()) >= self.max_positions:
            raise ValueError(f"position {int(positions.max())} exceeds the table of "
                             f"{self.max_positions} positions; raise --max-source-positions / "
                             "--max-target-positions")
        return F.embedding(positions, self.table)


class RotaryPositions(nn.Module):
    """Rotary position embedding (Su et al. 2021) on per-head queries or keys.

    ``standard``: dimension m is rotated together with dimension m + d_head/2 by the angle
    position * theta^(-2m/d_head) -- a true rotation, so q.k depends only on the offset.
    ``authors``: the authors' code paired the interleaved angle table (theta_0, theta_0,
    theta_1, theta_1, ...) with the half-split rotation; it is not a rotation and scores change
    with absolute position.  Kept only to reproduce their numbers.

    ``forward(x [B, H, T, d_head], positions [B, T]) -> [B, H, T, d_head]``; with
    ``heads_first``, x and the result are ``[H, B, T, d_head]``.
    """

    def __init__(self, head_dim: int, theta: float = 10000.0, variant: str = "standard"):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head dimension, got {head_dim}")
        if variant not in ROPE_VARIANTS:
            raise ValueError(f"unknown RoPE variant {variant!r}; expected one of {ROPE_VARIANTS}")
        self.variant = variant
        inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def angles(self, positions: Tensor) -> Tensor:
        """Angle table [B, T, d_head] for the chosen variant."""
        ang = positions.float().unsqueeze(-1) * self.inv_freq  # [B, T, d/2]
        if self.variant == "standard":
            return torch.cat([ang, ang], dim=-1)
        return torch.repeat_interleave(ang, 2, dim=-1)

    def forward(self, x: Tensor, positions: Tensor, heads_first: bool = False) -> Tensor:
        ang = self.angles(positions).to(x.dtype)  # [B, T, d]
        ang = ang if heads_first else ang.unsqueeze(1)  # x [H, B, T, d] or [B, H, T, d]
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * ang.cos() + rotated * ang.sin()


#: initialisations of the relative-position table (:class:`RelativePositions`)
RELATIVE_TABLE_INITS = ("std0.02", "xavier")


def relative_bucket(rel: Tensor, bucket_size: int, max_position: int) -> Tensor:
    """Log-bucketed relative distance (DeBERTa v2; ``positions.md``), shifted to be >= 0.

    Distances with |r| <= mid (mid = bucket_size // 2) keep their own bucket; longer ones map
    to sign(r) * (mid + ceil(log(|r|/mid) / log((L-1)/mid) * (mid-1))), clamped to
    [-(B-1), B-1]; the result is shifted by B-1 into [0, 2B-2].

    Args:
        rel: LongTensor of relative distances i - j (any shape).
        bucket_size: B (>= 2).
        max_position: L, the largest distance the log scale is spread over (> mid + 1).
    """
    mid = bucket_size // 2
    if mid < 1:
        raise ValueError(f"bucket size must be >= 2, got {bucket_size}")
    sign = torch.sign(rel)
    abs_pos = rel.abs()
    safe = abs_pos.clamp(min=max(mid, 1)).float()
    denom = math.log(max((max_position - 1) / mid, 1 + 1e-6))
    log_pos = torch.ceil(torch.log(safe / mid) / denom * (mid - 1)).long() + mid
    bucket = torch.where(abs_pos <= mid, rel, log_pos * sign)
    return bucket.clamp(-(bucket_size - 1), bucket_size - 1) + bucket_size - 1


class RelativePositions(nn.Module):
    """One stack's table of relative-position vectors for disentangled attention.

    Args:
        bucket_size: B; the table has 2B-1 rows of size d, layer-normalised before use.
        max_position: L of :func:`relative_bucket`.
        dim: model dimension d.
        init: ``"std0.02"``: the table is drawn from N(0, 0.02^2); ``"xavier"``: from
            N(0, 2 / (d + 2B - 1)) cut at 2 std (Glorot's normal for a [2B-1, d] matrix, as
            the authors' code draws it). The layer norm makes the forward pass nearly
            independent of the scale (its eps, 1e-5, shrinks a 0.02-std row by 1.2%), but
            not the training: Adam's steps have a fixed size, so a smaller table turns
            faster.
        dropout: dropout probability on the normalised table, a fresh mask at every call
            (the authors' code: the attention's dropout, before the query and key maps).

    ``forward() -> [2B-1, d]`` (normalised table, after dropout in training);
    ``bucket(q_pos [B, Tq], k_pos [B, Tk])`` gives row indices [B, Tq, Tk].

    Raises:
        ValueError: an unknown ``init``.
    """

    def __init__(self, bucket_size: int, max_position: int, dim: int, init: str = "std0.02",
                 dropout: float = 0.0):
        super().__init__()
        if init not in RELATIVE_TABLE_INITS:
            raise ValueError(f"unknown relative table init {init!r}; expected one of "
                             f"{RELATIVE_TABLE_INITS}")
        self.bucket_size = bucket_size
        self.max_position = max_position
        self.table = nn.Parameter(torch.empty(2 * bucket_size - 1, dim))
        if init == "xavier":
            std = math.sqrt(2.0 / (dim + 2 * bucket_size - 1))
            nn.init.trunc_normal_(self.table, std=std, a=-2 * std, b=2 * std)
        else:
            nn.init.trunc_normal_(self.table, std=0.02)
        self.norm = nn.LayerNorm(dim)
        self.dropout = dropout_or_identity(dropout)

    def forward(self) -> Tensor:
        return self.dropout(self.norm(self.table))

    def bucket(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        rel = q_pos.unsqueeze(-1) - k_pos.unsqueeze(-2)
        return relative_bucket(rel, self.bucket_size, self.max_position)
