"""The recurrent loops of the packed RNN (:mod:`.packed_rnn`), with hand-written backward passes.

``K`` runs of the model of :mod:`.rnn_seq2seq` step together, their parameters stacked on a
leading run dimension.  For a loop the runs are sorted, longest first, so that the runs still
computing at step ``t`` are the first ``n_t``; the step multiplies them by the first ``n_t``
of the sorted weights only, and attends over the longest source among them: the work per
step is proportional to the runs still active.

Each loop is one autograd function: its forward pass records no graph, and its backward pass
walks the steps in reverse with the gradient formulas written out (the cells', the
attention's, the softmaxes').  A batch-1 step is a few dozen small operations, and on a CPU
the bookkeeping of autograd (a node per operation, each slice's gradient a full-size zero
tensor) costs as much as the arithmetic.  A weight's gradient is summed once after the loop,
one grouped product per block of runs of similar lengths (autograd would form an outer
product per step); the sums are autograd's in another order.  The sorted copies of the
weights live in a :class:`.packed_rnn_ops.Workspace` reused by every forward pass.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .packed_rnn_ops import (StepDropout, Workspace, blocked_gradient, grouped_gradient,
                             gru_cell, gru_cell_backward, lstm_cell, lstm_cell_backward,
                             run_blocks, sort_stacked, unsort_stacked)

_aten = torch.ops.aten


@dataclass
class DecoderSpec:
    """What :class:`DecoderLoop` needs besides the differentiable tensors.

    ``order`` ``(K,)``: the runs sorted longest target first (sorted position -> run);
    ``gold`` ``(K, B, T)``: gold decoder inputs (first column end-of-sentence); ``needed``
    ``(K, B, T)``: target steps that are not padding; ``mask_bias`` ``(K, B, S)``: 0, or
    minus infinity at source padding; ``sorted_len``: each run's target length (the last
    step a row needs), non-increasing; ``longest_src[n - 1]``: the longest source among runs
    ``[:n]``; ``no_pad`` ``(V,)``: minus infinity at padding (greedy choices never pick it);
    all in sorted order.  After the forward pass ``counts`` holds ``n_t`` of every step.
    """

    kind: str
    order: Tensor
    gold: Tensor
    needed: Tensor
    mask_bias: Tensor
    sorted_len: List[int]
    longest_src: List[int]
    no_pad: Tensor
    eos: int
    ratio: float
    stop: bool
    dropout: float
    keep_for_backward: bool
    work: Workspace
    counts: List[int] = field(default_factory=list)


def _decoder_weights(kind: str, order: Tensor, params: Sequence[Tensor],
                     work: Optional[Workspace]) -> Dict[str, Optional[Tensor]]:
    """The decoder's weights sorted by ``order``: ``qh`` the query and hidden-to-hidden
    weights concatenated ``(K, A + G, H)`` with bias ``b_qh`` (0 on the query; ``b_hh``,
    plus ``b_ih`` except for GRU), ``ih`` ``(K, G, E + W)`` (with ``b_ih`` for GRU), ``v``,
    ``out``, ``b_out``; the large ones in ``work`` (new tensors if None)."""
    w_q, w_hh, b_ih, b_hh, w_ih, v, w_out, b_out = params
    runs = order.numel()

    def sort(name: str, parts: Sequence[Tensor]) -> Tensor:
        shape = (runs, sum(p.size(1) for p in parts), parts[0].size(2))
        return sort_stacked(parts, order, None if work is None else work.get(name, shape, w_q))

    gru = kind == "gru"
    gate_bias = (b_hh if gru else b_ih + b_hh).index_select(0, order)
    return {"qh": sort("qh", [w_q, w_hh]),
            "b_qh": torch.cat([gate_bias.new_zeros(runs, w_q.size(1)), gate_bias], dim=1),
            "ih": sort("ih", [w_ih]), "b_ih": b_ih.index_select(0, order) if gru else None,
            "v": v.index_select(0, order), "out": sort("out", [w_out]),
            "b_out": b_out.index_select(0, order)}


class DecoderLoop(torch.autograd.Function):
    """The attentional decoder of the ``K`` runs, step ``t`` computing the first ``n_t``
    runs in ``spec.order``: those with a target step ``t`` (with ``spec.stop``: up to the last
    one with a row that needs step ``t`` and has not predicted end-of-sentence).

    Inputs: ``spec`` (:class:`DecoderSpec`); sorted by ``spec.order``: ``enc``
    ``(K, B, S, W)`` encoder outputs (attention values), ``keys`` ``(K, B, S, A)`` projected
    keys, ``h0`` ``(K, B, H)`` and ``c0`` (LSTM, else None); in the runs' own order, the
    stacked parameters of the ordinary decoder: ``table`` ``(K, V, E)`` embeddings, ``w_q``
    ``(K, A, H)`` query projection, ``w_hh`` ``(K, G, H)``, ``b_ih``, ``b_hh`` ``(K, G)``,
    ``w_ih`` ``(K, G, E + W)`` (``G`` = gates x H), ``v`` ``(K, 1, A)``, ``w_out``
    ``(K, V, H + W)``, ``b_out`` ``(K, V)``.  Output: the log-probabilities of every step,
    rows ``(t, sorted run, row)`` of the steps' active runs, ``(sum_t n_t B, V)``.
    """

    @staticmethod
    def forward(ctx, spec: DecoderSpec, enc, keys, h0, c0, table, w_q, w_hh, b_ih, b_hh, w_ih,
                v, w_out, b_out):
        runs, rows, _, width = enc.shape
        attention, embed_dim, size = keys.size(-1), table.size(-1), h0.size(-1)
        gold, steps = spec.gold, spec.gold.size(2)
        ctx.generation = spec.work.claim("decoder")
        params = (w_q, w_hh, b_ih, b_hh, w_ih, v, w_out, b_out)
        sw = _decoder_weights(spec.kind, spec.order, params, spec.work)
        w_qh, b_qh, w_ih_s, b_ih_s = sw["qh"], sw["b_qh"], sw["ih"], sw["b_ih"]
        v_s, w_out_s, b_out_s = sw["v"], sw["out"], sw["b_out"]
        flat_table = table.flatten(0, 1)
        offsets = (spec.order * table.size(1)).view(runs, 1)  # rows of each run's table
        dropout = StepDropout(spec.dropout, embed_dim + size + width, enc)
        alive = torch.ones(runs, rows, dtype=torch.bool, device=enc.device)
        n = max(1, sum(1 for x in spec.sorted_len if x > 0))
        h, c, tokens = h0, c0, gold[:n, :, 0]
        saved: List[Dict[str, object]] = []
        outputs, counts = [], []
        for t in range(steps):
            if h.size(0) != n:
                h, c = h[:n], None if c is None else c[:n]
            source = spec.longest_src[n - 1]
            mask = dropout.next(n, rows, steps - t)
            ids = tokens + offsets[:n]
            embedded = F.embedding(ids, flat_table)
            if mask is not None:
                embedded.mul_(mask[..., :embed_dim])
            qg = torch.baddbmm(b_qh[:n].unsqueeze(1), h, w_qh[:n].transpose(1, 2))
            query, gh = qg[..., :attention], qg[..., attention:]
            hidden = (keys[:n, :, :source] + query.unsqueeze(2)).tanh_()
            scores = torch.baddbmm(spec.mask_bias[:n, :, :source].reshape(n, -1, 1),
                                   hidden.view(n, -1, attention), v_s[:n].transpose(1, 2))
            weights = torch.softmax(scores.view(n * rows, 1, source), dim=-1)
            context = torch.bmm(weights, enc[:n, :, :source].flatten(0, 1)).view(n, rows, width)
            x = torch.cat([embedded, context], dim=-1)
            w = w_ih_s[:n].transpose(1, 2)
            if spec.kind == "gru":
                h_new, cell = gru_cell(torch.baddbmm(b_ih_s[:n].unsqueeze(1), x, w), gh, h)
            elif spec.kind == "lstm":
                h_new, c, cell = lstm_cell(torch.baddbmm(gh, x, w), c)
            else:
                h_new, cell = torch.baddbmm(gh, x, w).tanh_(), {}
            features = torch.cat([h_new, context], dim=-1)
            if mask is not None:
                features.mul_(mask[..., embed_dim:])
            lprobs = torch.log_softmax(torch.baddbmm(
                b_out_s[:n].unsqueeze(1), features, w_out_s[:n].transpose(1, 2)), dim=-1)
            outputs.append(lprobs.flatten(0, 1))
            counts.append(n)
            if spec.keep_for_backward:
                saved.append({"n": n, "source": source, "mask": mask, "ids": ids, "h": h,
                              "hidden": hidden, "weights": weights, "x": x, "h_new": h_new,
                              "cell": cell, "features": features, "lprobs": lprobs})
            h = h_new
            if t + 1 == steps:
                break
            predicted = (lprobs + spec.no_pad).argmax(dim=-1)
            if spec.stop:
                alive[:n] &= predicted.ne(spec.eos)
                active = (alive[:n] & spec.needed[:n, :, t + 1]).any(dim=1)
                n = int(active.nonzero().max()) + 1 if bool(active.any()) else 0
            else:
                n = sum(1 for x in spec.sorted_len if x > t + 1)
            if n == 0:
                break
            if spec.ratio >= 1.0:
                tokens = gold[:n, :, t + 1]
            elif spec.ratio <= 0.0:
                tokens = predicted[:n]
            else:
                coin = torch.rand(n, rows, device=enc.device) < spec.ratio
                tokens = torch.where(coin, gold[:n, :, t + 1], predicted[:n])
        spec.counts[:] = counts
        ctx.spec, ctx.saved, ctx.sorted = spec, saved, sw
        ctx.save_for_backward(enc, keys, h0, c0, table, *params)
        return torch.cat(outputs)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        enc, keys, h0, c0, table, *params = ctx.saved_tensors
        w_q, w_hh, b_ih, b_hh, w_ih, v, w_out, b_out = params
        spec = ctx.spec
        kind, rows, order, work = spec.kind, enc.size(1), spec.order, spec.work
        sw = ctx.sorted
        if not work.holds("decoder", ctx.generation):  # a later forward pass rewrote it
            sw = _decoder_weights(kind, order, params, None)
        w_qh, w_ih_s, v_s, w_out_s = sw["qh"], sw["ih"], sw["v"], sw["out"]
        attention, embed_dim, size = keys.size(-1), table.size(-1), h0.size(-1)
        grad_out = grad_out.contiguous()
        d_enc, d_keys = torch.zeros_like(enc), torch.zeros_like(keys)
        rec_qh, rec_ih, rec_v, rec_out, rec_table = [], [], [], [], []
        dh_next = dc_next = None
        end = grad_out.size(0)
        for step in reversed(ctx.saved):
            n, source, mask = step["n"], step["source"], step["mask"]
            start = end - n * rows
            dlprobs = grad_out[start:end].view(n, rows, -1)
            end = start
            dlogits = _aten._log_softmax_backward_data(dlprobs, step["lprobs"], -1,
                                                       dlprobs.dtype)
            rec_out.append((step["features"], dlogits))
            dfeatures = torch.bmm(dlogits, w_out_s[:n])
            if mask is not None:
                dfeatures.mul_(mask[..., embed_dim:])
            dh, dcontext = dfeatures[..., :size], dfeatures[..., size:]
            if dh_next is not None:
                dh[:dh_next.size(0)] += dh_next
            direct = None
            if kind == "gru":
                dgi, dgh, direct = gru_cell_backward(dh, step["cell"])
            elif kind == "lstm":
                dgi, dc_next = lstm_cell_backward(dh, dc_next, step["cell"])
                dgh = dgi
            else:
                dgi = dgh = _aten.tanh_backward(dh, step["h_new"])
            rec_ih.append((step["x"], dgi))
            dx = torch.bmm(dgi, w_ih_s[:n])
            dembedded = dx[..., :embed_dim]
            if mask is not None:
                dembedded = dembedded * mask[..., :embed_dim]
            rec_table.append((step["ids"], dembedded))
            dcontext = (dcontext + dx[..., embed_dim:]).view(n * rows, 1, -1)
            values = enc[:n, :, :source].flatten(0, 1)
            dweights = torch.bmm(dcontext, values.transpose(1, 2))
            weights = step["weights"]
            d_enc[:n, :, :source].addcmul_(weights.view(n, rows, source, 1),
                                           dcontext.view(n, rows, 1, -1))
            dscores = _aten._softmax_backward_data(dweights, weights, -1, dweights.dtype)
            hidden = step["hidden"]
            rec_v.append((hidden.view(n, -1, attention), dscores.view(n, -1, 1)))
            dpre = _aten.tanh_backward(
                dscores.view(n, rows, source, 1) * v_s[:n].unsqueeze(1), hidden)
            d_keys[:n, :, :source] += dpre
            dqg = torch.cat([dpre.sum(dim=2), dgh], dim=-1)
            rec_qh.append((step["h"], dqg))
            dh_next = torch.bmm(dqg, w_qh[:n])
            if direct is not None:
                dh_next += direct
        dh0 = torch.zeros_like(h0)
        dh0[:dh_next.size(0)] = dh_next
        dc0 = None
        if c0 is not None:
            dc0 = torch.zeros_like(c0)
            dc0[:dc_next.size(0)] = dc_next
        d_table = torch.zeros_like(table).flatten(0, 1).index_add_(
            0, torch.cat([i.reshape(-1) for i, _ in rec_table]),
            torch.cat([g.reshape(-1, embed_dim) for _, g in rec_table])).view(table.shape)
        blocks = run_blocks(spec.counts, rows, enc.device)
        inverse = torch.argsort(order)

        def unsort(grad: Tensor) -> Tensor:
            return grad.index_select(0, inverse)

        d_qh = work.get("d_qh", w_qh.shape, w_qh)
        d_bqh = w_qh.new_empty(w_qh.shape[:2])
        blocked_gradient(rec_qh, blocks, d_qh, d_bqh)
        d_q, d_hh = unsort_stacked(d_qh, order, [w_q, w_hh])
        d_b_hh = unsort(d_bqh[:, w_q.size(1):])
        d_ih = work.get("d_ih", w_ih_s.shape, w_ih_s)
        d_bih = w_ih_s.new_empty(w_ih_s.shape[:2]) if kind == "gru" else None
        blocked_gradient(rec_ih, blocks, d_ih, d_bih)
        d_b_ih = unsort(d_bih) if kind == "gru" else d_b_hh.clone()
        d_out = work.get("d_out", w_out_s.shape, w_out_s)
        d_bout = w_out_s.new_empty(w_out_s.shape[:2])
        blocked_gradient(rec_out, blocks, d_out, d_bout)
        ctx.saved = ctx.sorted = None
        return (None, d_enc, d_keys, dh0, dc0, d_table, d_q, d_hh, d_b_ih, d_b_hh,
                unsort(d_ih), unsort(grouped_gradient(rec_v, v_s)), unsort(d_out), unsort(d_bout))


class EncoderLayer(torch.autograd.Function):
    """One bidirectional encoder layer of the ``K`` runs: the input projection and the
    recurrence of both directions, ``2K`` groups, group ``2i + d`` direction ``d`` (0
    forward, 1 backward) of run ``order[i]``, step ``t`` computing the first ``counts[t]``.

    Inputs: ``kind`` (``rnn``, ``gru``, ``lstm``), ``counts``, ``order``, ``work``
    (:class:`Workspace`), ``name`` (the layer's workspace key), ``keep`` (keep what the
    backward pass needs), ``inputs`` ``(2K, B, S, in)`` (the backward direction's reversed),
    and the stacked parameters of the ordinary layer in the runs' own order: ``w_ih`` and
    ``w_ih_reverse`` ``(K, G, in)``, ``w_hh`` and ``w_hh_reverse`` ``(K, G, H)``, the four
    biases ``(K, G)``.  The state starts at zero.  Output: the states of every step, rows
    ``(t, group, row)`` of the steps' active groups, ``(sum_t n_t B, H)``, and for LSTM the
    cell states likewise.
    """

    @staticmethod
    def forward(ctx, kind: str, counts: List[int], order: Tensor, work: Workspace, name: str,
                keep: bool, inputs: Tensor, w_ih, w_ih_r, w_hh, w_hh_r, b_ih, b_ih_r, b_hh,
                b_hh_r):
        groups, rows, length, width = inputs.shape
        runs, gates, size = w_hh.shape
        w_ih_s = sort_stacked([w_ih.unsqueeze(1), w_ih_r.unsqueeze(1)], order,
                              work.get(name + "ih", (runs, 2, gates, width), w_ih))
        w_hh_s = sort_stacked([w_hh.unsqueeze(1), w_hh_r.unsqueeze(1)], order,
                              work.get(name + "hh", (runs, 2, gates, size), w_hh))
        w_ih_s, w_hh_s = w_ih_s.flatten(0, 1), w_hh_s.flatten(0, 1)
        b_hh_s = torch.stack([b_hh, b_hh_r], dim=1).index_select(0, order).flatten(0, 1)
        b_in = torch.stack([b_ih, b_ih_r], dim=1).index_select(0, order).flatten(0, 1)
        if kind != "gru":
            b_in = b_in + b_hh_s
        projected = torch.baddbmm(b_in.unsqueeze(1), inputs.view(groups, rows * length, width),
                                  w_ih_s.transpose(1, 2)).view(groups, rows, length, gates)
        h = projected.new_zeros(groups, rows, size)
        c = h if kind == "lstm" else None
        states, cells, saved = [], [], []
        for t, n in enumerate(counts):
            if h.size(0) != n:
                h, c = h[:n], None if c is None else c[:n]
            gi = projected[:n, :, t]
            w = w_hh_s[:n].transpose(1, 2)
            if kind == "gru":
                h_new, cell = gru_cell(gi, torch.baddbmm(b_hh_s[:n].unsqueeze(1), h, w), h)
            elif kind == "lstm":
                h_new, c, cell = lstm_cell(torch.baddbmm(gi, h, w), c)
                cells.append(c.reshape(-1, size))
            else:
                h_new, cell = torch.baddbmm(gi, h, w).tanh_(), {}
            if keep:
                saved.append((h, h_new, cell))
            states.append(h_new.reshape(-1, size))
            h = h_new
        ctx.kind, ctx.counts, ctx.order, ctx.work, ctx.name = kind, counts, order, work, name
        ctx.saved, ctx.generation, ctx.sorted = saved, work.claim(name), (w_ih_s, w_hh_s)
        ctx.save_for_backward(inputs, w_ih, w_ih_r, w_hh, w_hh_r, b_ih)
        if kind == "lstm":
            return torch.cat(states), torch.cat(cells)
        return torch.cat(states)

    @staticmethod
    def backward(ctx, grad_states: Tensor, grad_cells: Optional[Tensor] = None):
        inputs, w_ih, w_ih_r, w_hh, w_hh_r, b_like = ctx.saved_tensors
        kind, order, rows = ctx.kind, ctx.order, inputs.size(1)
        w_ih_s, w_hh_s = ctx.sorted
        if not ctx.work.holds(ctx.name, ctx.generation):  # a later forward pass rewrote it
            w_ih_s = sort_stacked([w_ih.unsqueeze(1), w_ih_r.unsqueeze(1)], order).flatten(0, 1)
            w_hh_s = sort_stacked([w_hh.unsqueeze(1), w_hh_r.unsqueeze(1)], order).flatten(0, 1)
        grad_states = grad_states.contiguous()
        groups, _, length, width = inputs.shape
        d_projected = inputs.new_zeros(groups, rows, length, w_hh.size(1))
        records = []
        dh_next = dc_next = None
        end = grad_states.size(0)
        for t in range(len(ctx.counts) - 1, -1, -1):
            h, h_new, cell = ctx.saved[t]
            n = h.size(0)
            start = end - n * rows
            dh = grad_states[start:end].view(n, rows, -1).clone()
            dc = None if grad_cells is None else grad_cells[start:end].view(n, rows, -1)
            end = start
            if dh_next is not None:
                dh[:dh_next.size(0)] += dh_next
            direct = None
            if kind == "gru":
                dgi, dgh, direct = gru_cell_backward(dh, cell)
            elif kind == "lstm":
                if dc is None:
                    dc = dc_next
                elif dc_next is not None:
                    dc = dc.clone()
                    dc[:dc_next.size(0)] += dc_next
                dgi, dc_next = lstm_cell_backward(dh, dc, cell)
                dgh = dgi
            else:
                dgi = dgh = _aten.tanh_backward(dh, h_new)
            d_projected[:n, :, t] = dgi
            records.append((h, dgh))
            if t == 0:  # the initial state is a constant zero
                break
            dh_next = torch.bmm(dgh, w_hh_s[:n])
            if direct is not None:
                dh_next += direct
        flat = d_projected.view(groups, rows * length, -1)
        d_inputs = torch.bmm(flat, w_ih_s).view(inputs.shape)
        runs = order.numel()
        d_ih = ctx.work.get(ctx.name + "d_ih", w_ih_s.shape, w_ih_s)
        torch.bmm(flat.transpose(1, 2), inputs.view(groups, rows * length, width), out=d_ih)
        d_hh = ctx.work.get(ctx.name + "d_hh", w_hh_s.shape, w_hh_s)
        d_b_hh = w_hh_s.new_empty(w_hh_s.shape[:2]) if kind == "gru" else None
        blocked_gradient(records, run_blocks(ctx.counts, rows, inputs.device), d_hh, d_b_hh)

        def unsort(grad: Tensor, like: Tensor) -> List[Tensor]:  # both directions
            parts = [like.unsqueeze(1), like.unsqueeze(1)]
            grads = unsort_stacked(grad.view(runs, 2, *grad.shape[1:]), order, parts)
            return [g.squeeze(1) for g in grads]

        d_b_in = unsort(flat.sum(dim=1), b_like)
        d_b_hh = unsort(d_b_hh, b_like) if kind == "gru" else [d.clone() for d in d_b_in]
        ctx.saved = ctx.sorted = None
        return (None, None, None, None, None, None, d_inputs, *unsort(d_ih, w_ih),
                *unsort(d_hh, w_hh), *d_b_in, *d_b_hh)
