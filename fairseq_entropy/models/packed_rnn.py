"""K runs of the RNN (``rnn_seq2seq``) trained side by side with grouped matrix products.

``torch.func.vmap`` has no batching rule for ``aten::gru`` or the recurrent cells, so this
module writes the model of :mod:`.rnn_seq2seq` with its parameters stacked along a leading run
dimension ``K`` and every product grouped over runs (``torch.baddbmm`` / ``torch.bmm``: run
``k`` multiplies only by its own weights).  Each run computes exactly the loss of the
``teacher_forcing_cross_entropy`` criterion on its own sample:

- the decoder runs step by step; with teacher-forcing ratio 0 each row consumes its own
  greedy prediction (end-of-sentence allowed, padding never chosen), with ratio 1 the gold
  token, in between a coin per step and row;
- with ``--stop-at-predicted-eos`` a row's loss stops at (and includes) its first predicted
  end-of-sentence; the steps after a row's end are outside its loss, so they give it neither
  loss nor gradient, and the loop stops once every row of every run has ended;
- the loss is summed over steps and rows; ``sample_size`` is the run's number of sentences
  with ``--sentence-avg``, else its number of target tokens in the loss.

Runs may have different numbers of rows and different source and target lengths: sources are
right-padded to a common length (positions past a row's length come after its real tokens in
both encoder directions, so they never reach a real position, and attention masks them),
missing rows are dummy rows outside every loss.  Dropout draws one mask over the whole
``(K, ...)`` tensor, so the masks of different runs are independent.

The arithmetic is the ordinary model's in float32 with sums grouped differently, so a run's
loss and gradients equal the ordinary model's to float rounding, not bit for bit.
"""

from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..errors import UserError
from .packed_registry import register_packed
from ..modules.deferred_grad import Deferred, defer, deferred_baddbmm, deferred_embedding
from .rnn_seq2seq import RNNSeq2SeqModel, rotate_padding

#: criterion attributes the packed RNN reads (those of ``teacher_forcing_cross_entropy``)
CRITERION_FIELDS = ("teacher_forcing_ratio", "valid_teacher_forcing_ratio",
                    "stop_at_predicted_eos", "sentence_avg", "mean_over_target_length")


class PackedRNNError(UserError, ValueError):
    """A pack of RNNs that cannot be trained together (different architectures, a criterion
    other than ``teacher_forcing_cross_entropy``)."""


def _key(name: str) -> str:
    """A parameter name as a ``ParameterDict`` key (dots are not allowed there)."""
    return name.replace(".", "__")


def _cell_step(kind: str, gi: Tensor, h: Tensor, c: Optional[Tensor],
               w_hh: Tuple[Tensor, Deferred], b_hh: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
    """One step of ``K`` groups of recurrent cells (PyTorch's gate equations and order).

    Args:
        kind: ``rnn`` (tanh), ``gru`` or ``lstm``.
        gi: ``(G, B, gates*H)`` input projection; it holds ``b_ih`` and, except for GRU
            (whose new gate multiplies ``W_hn h + b_hn`` by the reset gate), ``b_hh`` too.
        h: ``(G, B, H)`` previous state; ``c``: ``(G, B, H)`` LSTM cell state or None.
        w_hh: ``(G, H, gates*H)`` transposed hidden weights (from :func:`defer`);
            ``b_hh``: ``(G, 1, gates*H)``.
    Returns:
        the new ``(h, c)``.
    """
    if kind == "rnn":
        return torch.tanh(deferred_baddbmm(gi, h, w_hh)), None
    if kind == "gru":
        gh = deferred_baddbmm(b_hh, h, w_hh)
        size = h.size(-1)
        r, z = torch.sigmoid(gi[..., :2 * size] + gh[..., :2 * size]).chunk(2, dim=-1)
        n = torch.tanh(torch.addcmul(gi[..., 2 * size:], r, gh[..., 2 * size:]))
        return torch.lerp(n, h, z), None  # (1 - z) * n + z * h
    gates = deferred_baddbmm(gi, h, w_hh)
    i, f, g, o = gates.chunk(4, dim=-1)
    c = torch.addcmul(torch.sigmoid(f) * c, torch.sigmoid(i), torch.tanh(g))
    return torch.sigmoid(o) * torch.tanh(c), c


@register_packed(RNNSeq2SeqModel)
class PackedRNNSeq2Seq(nn.Module):
    """``K`` :class:`~.rnn_seq2seq.RNNSeq2SeqModel` runs with stacked parameters.

    Args:
        models: ``K >= 1`` ordinary models of one architecture (cell, layers, sizes,
            dictionary, dropout); their weights are copied, each run's at index ``k``.
    Raises:
        PackedRNNError: no models, or models of different architectures.
    """

    def __init__(self, models: List[nn.Module]):
        super().__init__()
        if not models:
            raise PackedRNNError("error: a pack needs at least one run. Fix: list runs.")
        first = models[0]
        enc, dec = first.encoder, first.decoder
        self.num_runs = len(models)
        self.cell_type = enc.cell
        self.num_layers = enc.num_layers
        self.pad = enc.padding_idx
        self.eos = dec.dictionary.eos()
        self.src_vocab = enc.embed_tokens.num_embeddings
        self.tgt_vocab = dec.embed_tokens.num_embeddings
        self.p_embed = enc.dropout.p
        self.p_between = enc.rnn.dropout
        self.p_decoder = dec.dropout.p
        signature = self._signature(first)
        for k, model in enumerate(models):
            if self._signature(model) != signature:
                raise PackedRNNError(
                    f"error: run {k} of the pack has another architecture than run 0 "
                    f"({self._signature(model)} vs {signature}). Fix: pack only runs of one "
                    "preset.")
        self._names = [name for name, _ in first.named_parameters()]
        self._state_keys = list(first.state_dict().keys())
        # state entries that are not parameters (none today), kept per run for unpacking
        self._extra_state = [{k: v.detach().clone() for k, v in m.state_dict().items()
                              if k not in self._names} for m in models]
        self.weights = nn.ParameterDict()
        for name in self._names:
            stacked = torch.stack([dict(m.named_parameters())[name].detach() for m in models])
            self.weights[_key(name)] = nn.Parameter(stacked.clone())

    @staticmethod
    def _signature(model) -> tuple:
        enc, dec = model.encoder, model.decoder
        shapes = tuple((n, tuple(p.shape)) for n, p in model.named_parameters())
        return (type(model).__name__, enc.cell, enc.num_layers, enc.padding_idx,
                dec.dictionary.eos(), enc.dropout.p, enc.rnn.dropout, dec.dropout.p, shapes)

    def w(self, name: str) -> Tensor:
        """The stacked parameter ``(K, *shape)`` of the ordinary parameter ``name``."""
        return self.weights[_key(name)]

    # ---------------------------------------------------------------- checkpoints
    def unpacked_state_dicts(self) -> List[Dict[str, Tensor]]:
        """One state dict per run, with the ordinary model's keys and order (copies)."""
        out = []
        for k in range(self.num_runs):
            state = {}
            for key in self._state_keys:
                if key in self._extra_state[k]:
                    state[key] = self._extra_state[k][key].clone()
                else:
                    state[key] = self.w(key)[k].detach().clone()
            out.append(state)
        return out

    def load_unpacked(self, k: int, state_dict: Dict[str, Tensor]) -> None:
        """Copy an ordinary model's ``state_dict`` into run ``k`` of the pack.

        Raises:
            KeyError: a parameter of the model is missing from ``state_dict``.
        """
        with torch.no_grad():
            for name in self._names:
                self.w(name)[k].copy_(state_dict[name])
        for key in self._extra_state[k]:
            self._extra_state[k][key] = state_dict[key].detach().clone()

    # ---------------------------------------------------------------- inputs
    def _assemble(self, samples: List[Optional[dict]]) -> dict:
        """Pad the runs' batches to one ``(K, B, ...)`` layout.

        Sources become right-padded; rows a run lacks (and an empty sample) become dummy
        rows whose source is one end-of-sentence and whose target is all padding.
        """
        pad, eos = self.pad, self.eos
        device = next(iter(self.weights.values())).device
        srcs, prevs, targets, sizes = [], [], [], []
        for sample in samples:
            if not sample or sample.get("nsentences", 1) == 0:
                one = torch.full((1, 1), eos, dtype=torch.long, device=device)
                srcs.append(one)
                prevs.append(one)
                targets.append(torch.full((1, 1), pad, dtype=torch.long, device=device))
                sizes.append(0)
                continue
            net = sample["net_input"]
            src = net["src_tokens"]
            if bool(src[:, 0].eq(pad).any()):  # left padding -> right padding
                lengths = src.ne(pad).long().sum(dim=1)
                shift = torch.where(src[:, 0].eq(pad), src.size(1) - lengths,
                                    torch.zeros_like(lengths))
                src = rotate_padding(src, shift)
            srcs.append(src)
            prevs.append(net["prev_output_tokens"])
            targets.append(sample["target"])
            sizes.append(sample["target"].size(0))
        rows = max(t.size(0) for t in srcs)

        def stack(tensors: List[Tensor]) -> Tensor:
            length = max(t.size(1) for t in tensors)
            return torch.stack([F.pad(t, (0, length - t.size(1), 0, rows - t.size(0)),
                                      value=pad) for t in tensors])

        src, prev, target = stack(srcs), stack(prevs), stack(targets)
        src_len = src.ne(pad).long().sum(dim=-1)
        # dummy rows: one end-of-sentence token, so that attention has a position to look at
        src[..., 0] = torch.where(src_len.eq(0), torch.full_like(src_len, eos), src[..., 0])
        prev[..., 0] = torch.where(prev[..., 0].eq(pad), torch.full_like(src_len, eos),
                                   prev[..., 0])
        return {"src": src, "src_len": src_len.clamp(min=1), "prev": prev,
                "target": target, "sizes": sizes}

    # ---------------------------------------------------------------- encoder
    def _encode(self, src: Tensor, src_len: Tensor) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """Bidirectional encoder of the ``K`` runs.

        Args:
            src: ``(K, B, S)`` right-padded tokens; ``src_len``: ``(K, B)``, at least 1.
        Returns:
            outputs ``(K, B, S, 2H)`` (meaningless at pads), final state ``(K, B, 2H)`` of the
            top layer (forward then backward) and, for LSTM, its final cell state.
        """
        runs, rows, length = src.shape
        table = self.w("encoder.embed_tokens.weight")
        device = src.device
        offsets = (torch.arange(runs, device=device) * self.src_vocab).view(runs, 1, 1)
        x = F.embedding(src + offsets, table.flatten(0, 1))
        x = F.dropout(x, self.p_embed, self.training)
        # per row, position t of the backward direction reads token L-1-t (t < L)
        steps = torch.arange(length, device=device).view(1, 1, length)
        last = (src_len - 1).unsqueeze(-1)
        rev_index = torch.where(steps <= last, last - steps, steps)

        def reverse(y: Tensor) -> Tensor:
            return y.gather(2, rev_index.unsqueeze(-1).expand_as(y))

        x_rev = reverse(x)
        kind = self.cell_type
        final_index = last.unsqueeze(-1)  # (K, B, 1, 1)
        for layer in range(self.num_layers):
            def both(name: str) -> Tensor:  # (2K, ...) forward then backward of each run
                fwd = self.w(f"encoder.rnn.{name}_l{layer}")
                bwd = self.w(f"encoder.rnn.{name}_l{layer}_reverse")
                return torch.stack([fwd, bwd], dim=1).flatten(0, 1)

            w_ih = both("weight_ih").transpose(1, 2)
            w_hh = defer(both("weight_hh").transpose(1, 2))
            b_ih, b_hh = both("bias_ih").unsqueeze(1), both("bias_hh").unsqueeze(1)
            bias_in = b_ih if kind == "gru" else b_ih + b_hh
            inputs = torch.stack([x, x_rev], dim=1).view(2 * runs, rows * length, -1)
            projected = torch.baddbmm(bias_in, inputs, w_ih).view(2 * runs, rows, length, -1)
            size = w_hh[0].size(1)
            h = projected.new_zeros(2 * runs, rows, size)
            c = h if kind == "lstm" else None
            hs, cs = [], []
            for gi in projected.unbind(2):
                h, c = _cell_step(kind, gi, h, c, w_hh, b_hh)
                hs.append(h)
                cs.append(c)
            out = torch.stack(hs, dim=2).view(runs, 2, rows, length, size)
            y = torch.cat([out[:, 0], reverse(out[:, 1])], dim=-1)
            if layer + 1 < self.num_layers:
                y = F.dropout(y, self.p_between, self.training)
                x, x_rev = y, reverse(y)

        def final(states: Tensor) -> Tensor:  # (K, 2, B, S, H) -> (K, B, 2H) at L-1
            index = final_index.unsqueeze(1).expand(runs, 2, rows, 1, size)
            top = states.gather(3, index).squeeze(3)
            return torch.cat([top[:, 0], top[:, 1]], dim=-1)

        hidden = final(out)
        cell = None
        if kind == "lstm":
            cell = final(torch.stack(cs, dim=2).view(runs, 2, rows, length, size))
        return F.dropout(y, self.p_embed, self.training), hidden, cell

    # ---------------------------------------------------------------- decoder + loss
    def run_losses(self, samples: List[Optional[dict]], criterion) -> List[dict]:
        """Each run's ``teacher_forcing_cross_entropy`` loss on its own sample.

        Args:
            samples: ``K`` fairseq translation batches (``net_input.src_tokens``,
                ``net_input.prev_output_tokens``, ``target``), one per run; None or ``{}``
                for a run without a batch this step (its loss is 0, its sample size 0).
            criterion: the ``teacher_forcing_cross_entropy`` criterion (its ratios,
                ``stop_at_predicted_eos`` and ``sentence_avg`` are read).
        Returns:
            per run ``{"loss": scalar tensor, "sample_size": int, "logging": dict}``, the
            values the criterion returns for the ordinary model; the losses are not
            normalised.
        Raises:
            PackedRNNError: a criterion without the teacher-forcing options, or not one
                sample per run.
        """
        missing = [f for f in CRITERION_FIELDS if not hasattr(criterion, f)]
        if missing:
            raise PackedRNNError(
                f"error: --criterion {type(criterion).__name__}: packed rnn_seq2seq runs "
                f"compute the teacher_forcing_cross_entropy loss only (no {missing[0]}). "
                "Fix: pass --criterion teacher_forcing_cross_entropy.")
        if len(samples) != self.num_runs:
            raise PackedRNNError(f"error: {len(samples)} samples for a pack of "
                                 f"{self.num_runs} runs. Fix: give one sample per run.")
        ratio = (criterion.teacher_forcing_ratio if self.training
                 else criterion.valid_teacher_forcing_ratio)
        stop = bool(criterion.stop_at_predicted_eos)
        batch = self._assemble(samples)
        enc, hidden, cell = self._encode(batch["src"], batch["src_len"])
        lprobs = self._decode(enc, batch, hidden, cell, ratio, stop)
        return self._losses(lprobs, batch, stop, bool(criterion.sentence_avg),
                            bool(criterion.mean_over_target_length))

    def _decode(self, enc: Tensor, batch: dict, h: Tensor, c: Optional[Tensor],
                ratio: float, stop: bool) -> Tensor:
        """Unroll the attentional decoder; returns log-probabilities ``(K, B, T', V)``,
        ``T'`` the steps until every row has ended (at most the longest target)."""
        runs, rows, length, width = enc.shape
        device = enc.device
        w = self.w
        keys = torch.baddbmm(w("decoder.attention.key_proj.bias").unsqueeze(1),
                             enc.view(runs, rows * length, width),
                             w("decoder.attention.key_proj.weight").transpose(1, 2))
        keys = keys.view(runs, rows, length, -1)
        attention = keys.size(-1)
        w_query = defer(w("decoder.attention.query_proj.weight").transpose(1, 2))
        w_score = w("decoder.attention.v.weight").transpose(1, 2)
        src_steps = torch.arange(length, device=device).view(1, 1, length)
        mask_bias = enc.new_zeros(runs, rows, length).masked_fill(
            src_steps >= batch["src_len"].unsqueeze(-1), float("-inf")).view(runs, -1, 1)
        values = enc.reshape(runs * rows, length, width)
        w_ih = defer(w("decoder.cell.weight_ih").transpose(1, 2))
        w_hh = defer(w("decoder.cell.weight_hh").transpose(1, 2))
        b_ih = w("decoder.cell.bias_ih").unsqueeze(1)
        b_hh = w("decoder.cell.bias_hh").unsqueeze(1)
        bias_in = b_ih if self.cell_type == "gru" else b_ih + b_hh
        w_out = defer(w("decoder.output_projection.weight").transpose(1, 2))
        b_out = w("decoder.output_projection.bias").unsqueeze(1)
        table = defer(w("decoder.embed_tokens.weight"), "embedding")
        no_query_bias = enc.new_zeros(1, 1, 1)
        offsets = (torch.arange(runs, device=device) * self.tgt_vocab).view(runs, 1)
        no_pad = self._no_pad(enc)

        gold = batch["prev"]
        steps = gold.size(2)
        needed = batch["target"].ne(self.pad)  # (K, B, T): steps a row may still need
        alive = torch.ones(runs, rows, dtype=torch.bool, device=device)
        tokens = gold[:, :, 0]
        outputs = []
        for t in range(steps):
            embedded = F.dropout(deferred_embedding(tokens + offsets, table), self.p_decoder,
                                 self.training)
            query = deferred_baddbmm(no_query_bias, h, w_query).unsqueeze(2)
            scores = torch.baddbmm(mask_bias, torch.tanh(keys + query).view(runs, -1, attention),
                                   w_score)
            weights = torch.softmax(scores.view(runs * rows, 1, length), dim=-1)
            context = torch.bmm(weights, values).view(runs, rows, width)
            gi = deferred_baddbmm(bias_in, torch.cat([embedded, context], dim=-1), w_ih)
            h, c = _cell_step(self.cell_type, gi, h, c, w_hh, b_hh)
            features = F.dropout(torch.cat([h, context], dim=-1), self.p_decoder, self.training)
            lprobs = torch.log_softmax(deferred_baddbmm(b_out, features, w_out), dim=-1)
            outputs.append(lprobs)
            if t + 1 == steps:
                break
            with torch.no_grad():
                predicted = (lprobs + no_pad).argmax(dim=-1)
                if stop:
                    alive &= predicted.ne(self.eos)
                    if not bool((alive & needed[:, :, t + 1]).any()):
                        break
                if ratio >= 1.0:
                    tokens = gold[:, :, t + 1]
                elif ratio <= 0.0:
                    tokens = predicted
                else:
                    coin = torch.rand(runs, rows, device=device) < ratio
                    tokens = torch.where(coin, gold[:, :, t + 1], predicted)
        return torch.stack(outputs, dim=2)

    def _losses(self, lprobs: Tensor, batch: dict, stop: bool, sentence_avg: bool,
                mean_over_target_length: bool) -> List[dict]:
        """The criterion's loss and logging output of every run from the decoder's
        log-probabilities ``(K, B, T', V)`` (``mean_over_target_length``: each sentence's loss
        divided by its gold target length, the criterion's ``--mean-over-target-length``)."""
        target_full = batch["target"]
        runs, rows, steps = lprobs.shape[:3]
        target = target_full[:, :, :steps]
        gold_mask = target_full.ne(self.pad)
        mask = target.ne(self.pad)
        with torch.no_grad():
            if stop:
                is_eos = (lprobs + self._no_pad(lprobs)).argmax(dim=-1).eq(self.eos).long()
                mask = mask & ~((is_eos.cumsum(dim=-1) - is_eos) > 0)
        token_lprobs = lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        sentence_loss = -token_lprobs.masked_fill(~mask, 0.0).sum(dim=2)
        if mean_over_target_length:
            sentence_loss = sentence_loss / gold_mask.sum(dim=2).clamp(min=1)
        loss = sentence_loss.sum(dim=1)
        with torch.no_grad():
            correct = lprobs.argmax(dim=-1).eq(target) & mask
            tail = (0, target_full.size(2) - steps)
            correct_full, mask_full = F.pad(correct, tail), F.pad(mask, tail)
            real_rows = torch.zeros(runs, rows, dtype=torch.bool, device=lprobs.device)
            for k, size in enumerate(batch["sizes"]):
                real_rows[k, :size] = True
            seq_correct = ((correct_full | ~gold_mask).all(dim=-1)
                           & (mask_full == gold_mask).all(dim=-1) & real_rows)
            counts = torch.stack([mask.sum(dim=(1, 2)), correct.sum(dim=(1, 2)),
                                  seq_correct.sum(dim=1)], dim=1).tolist()
        results = []
        for k, (ntokens, n_correct, n_seq) in enumerate(counts):
            size = batch["sizes"][k]
            sample_size = size if sentence_avg else ntokens
            results.append({"loss": loss[k], "sample_size": sample_size, "logging": {
                "loss": loss[k].data, "ntokens": ntokens, "nsentences": size,
                "sample_size": sample_size, "n_correct": n_correct, "n_seq_correct": n_seq}})
        return results

    def _no_pad(self, like: Tensor) -> Tensor:
        """``(V,)`` on ``like``'s device: 0, and minus infinity at padding (greedy choices
        never pick padding)."""
        no_pad = like.new_zeros(self.tgt_vocab)
        no_pad[self.pad] = float("-inf")
        return no_pad
