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
  loss nor gradient;
- the loss is summed over steps and rows; ``sample_size`` is the run's number of sentences
  with ``--sentence-avg``, else its number of target tokens in the loss.

Each run computes only its own steps.  The encoder's loops take the runs sorted by their
longest source and the decoder's by their longest target, longest first, so that the runs
still computing at step ``t`` are the first ``n_t`` of the sorted stack: a step multiplies
those by their own weights (the first ``n_t`` of a sorted copy of the stacked weights) and
the decoder attends over the longest source among them.  The decoder leaves a run after its
target's last step or, with ``--stop-at-predicted-eos``, once its runs sorted after it have
ended too and each of its rows has predicted end-of-sentence or reached its target's end; the
loop ends when no run is left.  The loops and their gradients are written out by hand
(:mod:`.packed_rnn_loops`): autograd's bookkeeping would cost as much as the arithmetic of a
batch-1 step on a CPU.

Runs may have different numbers of rows and different source and target lengths: sources are
right-padded to a common length (positions past a row's length come after its real tokens in
both encoder directions, so they never reach a real position, and attention masks them),
missing rows are dummy rows outside every loss.  Dropout draws its masks for all runs at once
(over a whole ``(K, ...)`` tensor, or a block of decoder steps), so the masks of different runs
are independent.

The arithmetic is the ordinary model's with sums grouped differently, so a run's loss and
gradients equal the ordinary model's to float rounding, not bit for bit.
"""

from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..errors import UserError
from .packed_registry import register_packed
from .packed_rnn_loops import DecoderLoop, DecoderSpec, EncoderLayer
from .packed_rnn_ops import Workspace, keep_freed_memory, padded_index, permute_runs
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


def _with_zero_row(rows: Tensor) -> Tensor:
    """``rows`` ``(N, H)`` and a row of zeros after them (read where a step did not compute
    a group, see :func:`.packed_rnn_ops.padded_index`)."""
    return torch.cat([rows, rows.new_zeros(1, rows.size(-1))])


@register_packed(RNNSeq2SeqModel)
class PackedRNNSeq2Seq(nn.Module):
    """``K`` :class:`~.rnn_seq2seq.RNNSeq2SeqModel` runs with stacked parameters.

    Constructing one sets ``malloc``'s thresholds for the whole process
    (:func:`.packed_rnn_ops.keep_freed_memory`), so that the pack's multi-megabyte tensors
    are recycled rather than paged in afresh at every update.

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
        self._workspace = Workspace()  # sorted weight copies, reused between updates
        keep_freed_memory()  # the pack's multi-megabyte tensors are recycled, not re-faulted
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
        """Bidirectional encoder of the ``K`` runs, one :class:`.packed_rnn_loops.EncoderLayer`
        per layer; step ``t`` computes only the runs whose longest source is longer than ``t``
        (runs sorted longest first, a prefix of them).

        Args:
            src: ``(K, B, S)`` right-padded tokens; ``src_len``: ``(K, B)``, at least 1.
        Returns:
            outputs ``(K, B, S, 2H)`` (meaningless at pads), final state ``(K, B, 2H)`` of the
            top layer (forward then backward) and, for LSTM, its final cell state; in the
            runs' own order.
        """
        runs, rows, length = src.shape
        longest = src_len.amax(dim=1)
        order = torch.argsort(longest, descending=True, stable=True)
        inverse = torch.argsort(order)
        sorted_longest = longest[order].tolist()
        # groups (forward and backward direction of each run) active at each step
        counts = [2 * sum(1 for n in sorted_longest if n > t) for t in range(length)]
        src, src_len = src.index_select(0, order), src_len.index_select(0, order)
        device = src.device
        offsets = (order * self.src_vocab).view(runs, 1, 1)  # rows of each run's table
        x = F.embedding(src + offsets, self.w("encoder.embed_tokens.weight").flatten(0, 1))
        x = F.dropout(x, self.p_embed, self.training)
        # per row, position t of the backward direction reads token L-1-t (t < L)
        steps = torch.arange(length, device=device).view(1, 1, length)
        last = (src_len - 1).unsqueeze(-1)
        rev_index = torch.where(steps <= last, last - steps, steps)

        def reverse(y: Tensor) -> Tensor:
            return y.gather(2, rev_index.unsqueeze(-1).expand_as(y))

        x_rev = reverse(x)
        kind = self.cell_type
        index = padded_index(counts, 2 * runs, rows, device)  # (2K, B, S) -> packed row
        final_index = index.gather(2, last.repeat_interleave(2, dim=0)).squeeze(2)
        for layer in range(self.num_layers):
            params = [self.w(f"encoder.rnn.{name}_l{layer}{suffix}")
                      for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
                      for suffix in ("", "_reverse")]
            inputs = torch.stack([x, x_rev], dim=1).flatten(0, 1)
            states = EncoderLayer.apply(kind, counts, order, self._workspace,
                                        f"encoder{layer}", torch.is_grad_enabled(), inputs,
                                        *params)
            states, cells = states if kind == "lstm" else (states, None)
            size = params[2].size(-1)
            packed = _with_zero_row(states)
            out = packed[index].view(runs, 2, rows, length, size)
            y = torch.cat([out[:, 0], reverse(out[:, 1])], dim=-1)
            if layer + 1 < self.num_layers:
                y = F.dropout(y, self.p_between, self.training)
                x, x_rev = y, reverse(y)

        def final(states: Tensor) -> Tensor:  # packed (N+1, H) -> (K, B, 2H) at L-1
            top = states[final_index].view(runs, 2, rows, size)
            return torch.cat([top[:, 0], top[:, 1]], dim=-1)

        hidden = permute_runs(final(packed), inverse, order)
        cell = None if cells is None else permute_runs(final(_with_zero_row(cells)), inverse,
                                                       order)
        y = permute_runs(F.dropout(y, self.p_embed, self.training), inverse, order)
        return y, hidden, cell

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
        decoded = self._decode(enc, batch, hidden, cell, ratio, stop)
        return self._losses(*decoded, batch, stop, bool(criterion.sentence_avg),
                            bool(criterion.mean_over_target_length))

    def _decode(self, enc: Tensor, batch: dict, h: Tensor, c: Optional[Tensor],
                ratio: float, stop: bool) -> Tuple[Tensor, List[int], Tensor]:
        """Unroll the attentional decoder (:class:`.packed_rnn_loops.DecoderLoop`), runs
        sorted by target length, longest first.

        Step ``t`` computes the first ``n_t`` sorted runs: those with a target step ``t``
        (with ``stop``: up to the last run with a row that still needs step ``t`` and has not
        predicted end-of-sentence), attending over the longest source among them.

        Returns:
            the log-probabilities of the steps' active runs ``(sum_t n_t B, V)`` (rows
            ``(t, sorted run, row)``), the counts ``n_t`` (the loop ends once no run is
            active, at most at the longest target) and the run order ``(K,)`` (sorted
            position -> run).
        """
        runs, rows, length, width = enc.shape
        device = enc.device
        needed = batch["target"].ne(self.pad)  # (K, B, T): steps a row may still need
        steps = needed.size(2)
        run_len = (needed * torch.arange(1, steps + 1, device=device)).amax(dim=(1, 2))
        order = torch.argsort(run_len, descending=True, stable=True)
        inverse = torch.argsort(order)
        src_len = batch["src_len"].index_select(0, order)
        keys = torch.baddbmm(self.w("decoder.attention.key_proj.bias").unsqueeze(1),
                             enc.view(runs, rows * length, width),
                             self.w("decoder.attention.key_proj.weight").transpose(1, 2))
        keys = permute_runs(keys.view(runs, rows, length, -1), order, inverse)
        enc, h = permute_runs(enc, order, inverse), permute_runs(h, order, inverse)
        c = None if c is None else permute_runs(c, order, inverse)
        src_steps = torch.arange(length, device=device).view(1, 1, length)
        spec = DecoderSpec(
            kind=self.cell_type, order=order, gold=batch["prev"].index_select(0, order),
            needed=needed.index_select(0, order),
            mask_bias=enc.new_zeros(runs, rows, length).masked_fill(
                src_steps >= src_len.unsqueeze(-1), float("-inf")),
            sorted_len=run_len[order].tolist(),
            longest_src=src_len.amax(dim=1).cummax(dim=0).values.tolist(),
            no_pad=self._no_pad(enc), eos=self.eos, ratio=ratio, stop=stop,
            dropout=self.p_decoder if self.training else 0.0,
            keep_for_backward=torch.is_grad_enabled(), work=self._workspace)
        params = [self.w(f"decoder.{name}") for name in (
            "embed_tokens.weight", "attention.query_proj.weight", "cell.weight_hh",
            "cell.bias_ih", "cell.bias_hh", "cell.weight_ih", "attention.v.weight",
            "output_projection.weight", "output_projection.bias")]
        lprobs = DecoderLoop.apply(spec, enc, keys, h, c, *params)
        return lprobs, spec.counts, order

    def _losses(self, lprobs: Tensor, counts: List[int], order: Tensor, batch: dict,
                stop: bool, sentence_avg: bool, mean_over_target_length: bool) -> List[dict]:
        """The criterion's loss and logging output of every run from the decoder's steps
        (``lprobs``, ``counts``, ``order`` from :meth:`_decode`); ``mean_over_target_length``:
        each sentence's loss divided by its gold target length, the criterion's
        ``--mean-over-target-length``."""
        target_full = batch["target"]
        runs, rows = target_full.shape[:2]
        steps = len(counts)
        total = lprobs.size(0)
        # (K, B, T') in the runs' own order -> packed row, or ``total`` where not computed
        index = padded_index(counts, runs, rows, lprobs.device).index_select(
            0, torch.argsort(order))
        target = target_full[:, :, :steps]
        gold_mask = target_full.ne(self.pad)
        mask = target.ne(self.pad)
        with torch.no_grad():
            flat_target = target.new_full((total + 1,), self.pad)
            flat_target[index.flatten()] = target.flatten()
            fill = lprobs.new_full((1,), self.pad, dtype=torch.long)
            best = torch.cat([lprobs.argmax(dim=-1), fill])[index]
            if stop:
                choice = torch.cat([(lprobs + self._no_pad(lprobs)).argmax(dim=-1), fill])
                is_eos = choice[index].eq(self.eos).long()
                mask = mask & ~((is_eos.cumsum(dim=-1) - is_eos) > 0)
        token = lprobs.gather(1, flat_target[:total].unsqueeze(1))
        token_lprobs = torch.cat([token.squeeze(1), token.new_zeros(1)])[index]
        sentence_loss = -token_lprobs.masked_fill(~mask, 0.0).sum(dim=2)
        if mean_over_target_length:
            sentence_loss = sentence_loss / gold_mask.sum(dim=2).clamp(min=1)
        loss = sentence_loss.sum(dim=1)
        with torch.no_grad():
            correct = best.eq(target) & mask
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
