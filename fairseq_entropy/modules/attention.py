"""Multi-head attention with pluggable position schemes and fairseq incremental decoding.

Scores (``shared/design/positions.md``)::

    s(i, j) = [q_i . k_j  (+ q_i . k_rel(b_k(i, j)) + q_rel(b_q(i, j)) . k_j)] / sqrt(d_head)

where the bracketed terms are DeBERTa's content-to-position and position-to-content terms
(relative scheme only), and for RoPE q and k are rotated by their positions first.
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor

from .dropout import UniformMaskDropout
from .real_tokens import in_all_rows
from .positions import RelativePositions, RotaryPositions


def truncated_normal_(weight: Tensor, dim: int) -> Tensor:
    """The authors' init: truncated normal with std sqrt(2 / (5 d)), cut at 2 std."""
    std = math.sqrt(2.0 / (5.0 * dim))
    return nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)


@with_incremental_state
class MultiheadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017) on batch-first tensors.

    Args:
        dim: model dimension d; heads = ``num_heads`` (d / 64 in the paper's models).
        num_heads: number of heads; d must be divisible by it.
        dropout: dropout on the attention probabilities.
        self_attention: key/value come from the query sequence (cached step by step when
            decoding incrementally); otherwise they come from the encoder and are computed once.

    ``forward(query [B, Tq, d], key_value [B, Tk, d] or None, key_padding_mask [B, Tk] bool
    (True = pad) or None, causal, q_pos [B, Tq], k_pos [B, Tk], rope, rel_q, rel_k,
    incremental_state) -> [B, Tq, d]``.

    With ``rows [n]`` (:func:`~fairseq_entropy.modules.real_tokens.real_rows` of the queries'
    ``[B, Tq]`` batch), ``query`` is the ``[n, d]`` stack of the real query tokens and the
    result is ``[n, d]``: the projections run on the real tokens only and just the scores
    and weighted sums on the padded layout (the queries' pad rows are zero there and are
    dropped; ``q_pos`` stays ``[B, Tq]``), there with the heads leading the batch
    (:meth:`_forward_packed`).  Self-attention computes its query, key and value
    projections as one product (cross-attention its key and value), with the three weight
    matrices stacked: the same outputs as three ``nn.Linear`` calls, in fewer operations.

    The softmax and weighted sum run in ``torch.nn.functional.scaled_dot_product_attention``
    (dropout ``dropout`` on the probabilities while training), except in training on the CPU,
    where they are written out (:meth:`_attend_with_dropout`) so that the dropout mask is drawn
    as every other dropout of the model, from uniform numbers, which is cheaper there than the
    kernel's ``bernoulli_``.  The relative scheme's terms enter the scores as an additive bias.
    """

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0,
                 self_attention: bool = True):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"model dimension {dim} is not divisible by {num_heads} heads")
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.self_attention = self_attention
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)
        self.dropout = UniformMaskDropout(dropout)
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            truncated_normal_(lin.weight, dim)
            nn.init.zeros_(lin.bias)

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    @staticmethod
    def _linear(x: Tensor, lins) -> Tensor:
        """``x [..., d]`` through the projections ``lins`` as one product, their weights
        stacked: ``[..., len(lins) * d]``, each part equal to its own ``nn.Linear``."""
        if len(lins) == 1:
            return lins[0](x)
        return F.linear(x, torch.cat([lin.weight for lin in lins]),
                        torch.cat([lin.bias for lin in lins]))

    def _project(self, x: Tensor, lins):
        """``x [B, T, d]`` through ``lins`` (:meth:`_linear`); one ``[B, H, T, d_head]``
        tensor per projection."""
        return [self._heads(part) for part in self._linear(x, lins).chunk(len(lins), dim=-1)]

    def _table_heads(self, lin: nn.Linear, table: Tensor) -> Tensor:
        return lin(table).view(table.shape[0], self.num_heads, self.head_dim).transpose(0, 1)

    def forward(self, query: Tensor, key_value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None, causal: bool = False,
                q_pos: Optional[Tensor] = None, k_pos: Optional[Tensor] = None,
                rope: Optional[RotaryPositions] = None,
                rel_q: Optional[RelativePositions] = None,
                rel_k: Optional[RelativePositions] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                rows: Optional[Tensor] = None) -> Tensor:
        if rows is not None:
            if incremental_state is not None or q_pos is None:
                raise ValueError("packed rows need q_pos [B, Tq] and are for the "
                                 "teacher-forced pass, not for incremental decoding")
            return self._forward_packed(query, key_value, key_padding_mask, causal, q_pos,
                                        k_pos, rope, rel_q, rel_k, rows)
        bsz = query.shape[0]
        cache = self.get_incremental_state(incremental_state, "attn") \
            if incremental_state is not None else None
        if self.self_attention:
            q, k, v = self._project(query, (self.q_proj, self.k_proj, self.v_proj))
        else:
            (q,) = self._project(query, (self.q_proj,))
        if rope is not None:
            q = rope(q, q_pos)
        if self.self_attention:
            if rope is not None:
                k = rope(k, q_pos)
            k_pos = q_pos
            if cache is not None and cache.get("key") is not None:
                k = torch.cat([cache["key"], k], dim=2)
                v = torch.cat([cache["value"], v], dim=2)
                k_pos = torch.cat([cache["pos"], k_pos], dim=1)
            if incremental_state is not None:
                self.set_incremental_state(incremental_state, "attn",
                                           {"key": k, "value": v, "pos": k_pos})
        else:
            if cache is not None and cache.get("key") is not None:
                k, v, k_pos = cache["key"], cache["value"], cache["pos"]
            else:
                k, v = self._project(key_value, (self.k_proj, self.v_proj))
                if rope is not None:
                    k = rope(k, k_pos)
                if incremental_state is not None:
                    self.set_incremental_state(incremental_state, "attn",
                                               {"key": k, "value": v, "pos": k_pos})
        out = self._attend(q, k, v, q_pos, k_pos, key_padding_mask, causal, rel_q, rel_k)
        return self.out_proj(out.transpose(1, 2).reshape(bsz, q.shape[2], self.dim))

    def _forward_packed(self, query: Tensor, key_value: Optional[Tensor],
                        key_padding_mask: Optional[Tensor], causal: bool, q_pos: Tensor,
                        k_pos: Optional[Tensor], rope: Optional[RotaryPositions],
                        rel_q: Optional[RelativePositions], rel_k: Optional[RelativePositions],
                        rows: Tensor) -> Tensor:
        """The teacher-forced pass on packed queries ``query [n, d]`` (the real tokens
        ``rows [n]`` of the padded ``[B, Tq]`` layout of ``q_pos``); returns ``[n, d]``.

        Heads lead the batch here (``[H, B, T, d_head]``): scattering the projected rows to
        the padded layout then also moves the heads out of the feature dimension in the same
        copy, and the products get contiguous operands, where the ``[B, H, T, d_head]`` layout
        costs a transpose copy per operand.
        """
        bsz, tq = q_pos.shape
        heads, dh = self.num_heads, self.head_dim

        def scatter(y: Tensor, parts: int) -> Tensor:
            # [n, parts * d] -> [parts, H, B, Tq, d_head], zero at padding
            src = y.view(y.shape[0], parts, heads, dh).permute(1, 2, 0, 3)
            out = y.new_zeros(parts, heads, bsz * tq, dh).index_copy(2, rows, src)
            return out.view(parts, heads, bsz, tq, dh)

        if self.self_attention:
            q, k, v = scatter(self._linear(query, (self.q_proj, self.k_proj, self.v_proj)),
                              3).unbind(0)
            k_pos = q_pos
        else:
            q = scatter(self.q_proj(query), 1)[0]
            tk = key_value.shape[1]
            k, v = self._linear(key_value, (self.k_proj, self.v_proj)).view(
                bsz, tk, 2, heads, dh).permute(2, 3, 0, 1, 4).contiguous().unbind(0)
        if rope is not None:
            q = rope(q, q_pos, heads_first=True)
            k = rope(k, k_pos, heads_first=True)
        out = self._attend(q, k, v, q_pos, k_pos, key_padding_mask, causal, rel_q, rel_k,
                           heads_first=True)                         # [H, B, Tq, d_head]
        out = out.view(heads, bsz * tq, dh).permute(1, 0, 2).index_select(0, rows)
        return self.out_proj(out.view(rows.numel(), self.dim))

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, q_pos: Optional[Tensor],
                k_pos: Optional[Tensor], key_padding_mask: Optional[Tensor], causal: bool,
                rel_q: Optional[RelativePositions], rel_k: Optional[RelativePositions],
                heads_first: bool = False) -> Tensor:
        """Softmax attention of ``q`` over ``k``/``v`` with the masks and the relative scheme's
        bias: ``[B, H, T, d_head]`` tensors, or ``[H, B, T, d_head]`` with ``heads_first``;
        returns the weighted sums in the same layout."""
        tq, tk = q.shape[2], k.shape[2]
        # the relative scheme's extra terms enter the scores as an additive float bias; the
        # masks as -inf in it, or as a boolean mask (True = may attend) when there is no bias
        bias = None
        if rel_q is not None:
            bias = self._relative_scores(q, k, q_pos, k_pos, rel_q, rel_k, heads_first) / \
                math.sqrt(self.head_dim)
        blocked = None
        if causal and tq > 1:
            # queries are the last tq positions of the tk keys
            blocked = torch.ones(tq, tk, dtype=torch.bool, device=q.device).triu(tk - tq + 1)
        if key_padding_mask is not None:
            pads = key_padding_mask[None, :, None, :] if heads_first else \
                key_padding_mask[:, None, None, :]
            blocked = pads if blocked is None else blocked | pads
        dropout_p = self.dropout.p if self.training else 0.0
        if (dropout_p > 0 and q.device.type == "cpu") or in_all_rows():
            # (inside vmap also: the fused kernels' batching rules take no float mask
            # requiring a gradient)
            return self._attend_with_dropout(q, k, v, bias, blocked)
        # fused kernels (on an accelerator, also with dropout)
        if bias is not None and blocked is not None:
            mask = bias.masked_fill(blocked, float("-inf"))
        else:
            mask = bias if blocked is None else ~blocked
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)

    def _attend_with_dropout(self, q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
                             blocked: Optional[Tensor]) -> Tensor:
        """``softmax(q k^T / sqrt(d_head) + bias)`` with dropout on the probabilities, times
        ``v``: ``q [B, H, Tq, dh]``, ``k``/``v`` ``[B, H, Tk, dh]``; ``bias`` (float) and
        ``blocked`` (bool, True = may not attend) broadcastable to ``[B, H, Tq, Tk]``, or
        None; returns ``[B, H, Tq, dh]``.  Any leading batch dimensions work the same way
        (the packed pass uses ``[H, B, ...]``).

        The computation of ``scaled_dot_product_attention`` with ``dropout_p`` on this CPU,
        written out so that the dropout mask comes from uniform draws
        (:class:`~fairseq_entropy.modules.dropout.UniformMaskDropout`), as every other
        dropout of the model, instead of ``bernoulli_``.
        """
        scores = torch.matmul(q, k.transpose(-1, -2)).mul_(1.0 / math.sqrt(self.head_dim))
        if bias is not None:
            scores = scores + bias
        if blocked is not None:
            scores.masked_fill_(blocked, float("-inf"))
        return torch.matmul(self.dropout(torch.softmax(scores, dim=-1)), v)

    def _relative_scores(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor,
                         rel_q: RelativePositions, rel_k: RelativePositions,
                         heads_first: bool = False) -> Tensor:
        """Content-to-position + position-to-content terms [B, H, Tq, Tk] (unscaled; with
        ``heads_first``, q, k and the result are [H, B, ...])."""
        tq, tk = q.shape[2], k.shape[2]
        lead = "hb" if heads_first else "bh"
        shape = tuple(q.shape[:2]) + (tq, tk)

        def buckets(rel: RelativePositions) -> Tensor:
            idx = rel.bucket(q_pos, k_pos)                                # [B, Tq, Tk]
            return (idx.unsqueeze(0) if heads_first else idx.unsqueeze(1)).expand(shape)

        # c2p: q_i . k_rel(b_k(i, j)) with the key side's table and buckets
        k_rel = self._table_heads(self.k_proj, rel_k())                  # [H, R_k, dh]
        c2p_all = torch.einsum(f"{lead}qd,hrd->{lead}qr", q, k_rel)       # [., ., Tq, R_k]
        c2p = torch.gather(c2p_all, 3, buckets(rel_k))
        # p2c: q_rel(b_q(i, j)) . k_j with the query side's table and buckets
        q_rel = self._table_heads(self.q_proj, rel_q())                  # [H, R_q, dh]
        p2c_all = torch.einsum(f"{lead}kd,hrd->{lead}rk", k, q_rel)       # [., ., R_q, Tk]
        p2c = torch.gather(p2c_all, 2, buckets(rel_q))
        return c2p + p2c

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        cache = self.get_incremental_state(incremental_state, "attn")
        if cache is not None and cache.get("key") is not None:
            n = cache["key"].shape[0]
            if new_order.numel() == n and torch.equal(
                    new_order, torch.arange(n, device=new_order.device)):
                return incremental_state  # identity: nothing to move
            cache = {key: (val.index_select(0, new_order) if val is not None else None)
                     for key, val in cache.items()}
            self.set_incremental_state(incremental_state, "attn", cache)
        return incremental_state
