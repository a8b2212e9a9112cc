"""Recurrent encoder-decoder with attention: the RNN of Wold, Charpentier and Simon (2025).

The recurrent model of *Systematic Generalization in Language Models Scales with Information
Entropy* (ACL Findings 2025) is a bidirectional multi-layer encoder and a one-layer decoder whose
width is twice the encoder's hidden size, so the decoder starts from the concatenated final
forward and backward states of the encoder's top layer.  The decoder attends over the encoder
outputs with additive (Bahdanau) attention computed from its previous state.

Training regime of the authors (recorded in ``fairseq_entropy/experiments/presets.json``): one
example per update, a constant learning rate of 1e-4, no gradient clipping, no teacher forcing (the
decoder consumes its own greedy predictions and the loss stops at the first predicted
end-of-sentence; see the ``teacher_forcing_cross_entropy`` criterion). The authors used two AdamW
optimisers, one for the encoder and one for the decoder, at the same learning rate and
hyper-parameters. AdamW's update is element-wise, so two instances with identical hyper-parameters
stepping together are exactly one AdamW over all parameters: the recipes use fairseq's single
``--optimizer adam`` (fairseq's Adam is AdamW: decoupled weight decay).

Architectures registered here (``--arch``):

- ``rnn_seq2seq``: the base model (plain tanh RNN cell, 2 encoder layers, hidden 64; the
  defaults of :class:`RNNSeq2SeqConfig`).
- ``rnn_seq2seq_exp1_rnn_h64`` / ``rnn_seq2seq_exp1_rnn_h128``: Experiment 1, plain RNN,
  2 encoder layers, hidden 64 / 128.
- ``rnn_seq2seq_exp2_gru_l2_h64``: Experiment 2, GRU, 2 encoder layers, hidden 64.
- ``rnn_seq2seq_exp2_rnn_l1_h64``: Experiment 2, plain RNN, 1 encoder layer, hidden 64.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.utils import safe_getattr
from omegaconf import II
from torch import Tensor

from .defaults import fill_defaults

CELLS = ("rnn", "gru", "lstm")
DEFAULT_MAX_POSITIONS = 1024


@dataclass
class RNNSeq2SeqConfig(FairseqDataclass):
    """Options of :class:`RNNSeq2SeqModel`; the defaults are the ``rnn_seq2seq`` model."""

    cell: ChoiceEnum(CELLS) = field(default="rnn", metadata={
        "help": "recurrent cell of encoder and decoder (rnn = tanh RNN)"})
    encoder_layers: int = field(default=2, metadata={
        "help": "number of bidirectional encoder layers"})
    encoder_hidden_size: int = field(default=64, metadata={
        "help": "hidden units per direction; the decoder has twice as many"})
    encoder_embed_dim: Optional[int] = field(default=None, metadata={
        "help": "source embedding width (default: encoder hidden size)"})
    decoder_embed_dim: Optional[int] = field(default=None, metadata={
        "help": "target embedding width (default: decoder width)"})
    dropout: float = field(default=0.1, metadata={
        "help": "dropout on embeddings, between encoder layers and on the outputs"})
    # the task's options (fairseq's translation task documents them)
    max_source_positions: Optional[int] = II("task.max_source_positions")
    max_target_positions: Optional[int] = II("task.max_target_positions")


def rotate_padding(x: Tensor, shift: Tensor) -> Tensor:
    """Roll each row of ``x`` left by its own ``shift`` along dimension 1.

    Moving a left-padded row (``shift`` = its number of pads) to right padding is a roll left by
    the pad count; the inverse is ``rotate_padding(x, -shift)``.

    Args:
        x: ``(batch, length, ...)`` tensor.
        shift: ``(batch,)`` integer tensor.
    Returns:
        a tensor of the same shape as ``x``.
    """
    length = x.size(1)
    index = torch.arange(length, device=x.device).unsqueeze(0) + shift.unsqueeze(1)
    index = torch.remainder(index, length)
    if x.dim() > 2:
        index = index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, index)


class RNNSeq2SeqEncoder(FairseqEncoder):
    """Bidirectional multi-layer recurrent encoder.

    Accepts left- or right-padded sources: rows are rotated to right padding and packed so
    that each sentence is encoded exactly as if it were alone, and the outputs are rotated
    back so that position ``j`` of the output corresponds to ``src_tokens[:, j]``.

    Args:
        dictionary: source dictionary.
        cell: one of ``rnn`` (tanh), ``gru``, ``lstm``.
        embed_dim, hidden_size, num_layers: sizes; each direction has ``hidden_size`` units.
        dropout: dropout on the embeddings, between layers and on the outputs.
    """

    def __init__(self, dictionary, cell: str, embed_dim: int, hidden_size: int,
                 num_layers: int, dropout: float, max_positions: int = DEFAULT_MAX_POSITIONS):
        super().__init__(dictionary)
        if cell not in CELLS:
            raise ValueError(f"--cell must be one of {CELLS}, got {cell!r}")
        self.cell = cell
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.padding_idx = dictionary.pad()
        self.max_source_positions = max_positions
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=self.padding_idx)
        rnn_class = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}[cell]
        self.rnn = rnn_class(
            input_size=embed_dim,
            hidden_size=hidden_size,
            num_layers=num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
            bidirectional=True,
            batch_first=True,
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **unused):
        """Encode a batch.

        Args:
            src_tokens: ``(batch, src_len)`` token ids, left- or right-padded.
            src_lengths: ``(batch,)``; recomputed from the padding if absent.
        Returns:
            dict with ``encoder_out`` ``[(batch, src_len, 2*hidden)]`` (zeros at pads),
            ``encoder_padding_mask`` ``[(batch, src_len)]`` (True at pads),
            ``encoder_hidden`` ``[(batch, 2*hidden)]`` (final forward and backward states of the
            top layer, concatenated) and, for LSTM, ``encoder_cell`` ``[(batch, 2*hidden)]``.
        """
        pad_mask = src_tokens.eq(self.padding_idx)
        lengths = (~pad_mask).long().sum(dim=1)
        # left padding: the pads are the first tokens of the row
        shift = torch.where(pad_mask[:, 0], src_tokens.size(1) - lengths, torch.zeros_like(lengths))
        right_padded = rotate_padding(src_tokens, shift)

        x = self.dropout(self.embed_tokens(right_padded))
        packed = nn.utils.rnn.pack_padded_sequence(
            x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False
        )
        packed_out, state = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(
            packed_out, batch_first=True, total_length=src_tokens.size(1), padding_value=0.0
        )
        out = self.dropout(out)
        out = rotate_padding(out, -shift)

        def top_layer(s: Tensor) -> Tensor:  # (layers*2, batch, hidden) -> (batch, 2*hidden)
            s = s.view(self.num_layers, 2, s.size(1), self.hidden_size)[-1]
            return torch.cat([s[0], s[1]], dim=-1)

        result = {
            "encoder_out": [out],
            "encoder_padding_mask": [pad_mask],
            "src_lengths": [lengths],
        }
        if self.cell == "lstm":
            result["encoder_hidden"] = [top_layer(state[0])]
            result["encoder_cell"] = [top_layer(state[1])]
        else:
            result["encoder_hidden"] = [top_layer(state)]
        return result

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Select batch rows ``new_order`` of every tensor (beam search)."""
        return {k: [t.index_select(0, new_order) for t in v] for k, v in encoder_out.items()}

    def max_positions(self):
        return self.max_source_positions


class AdditiveAttention(nn.Module):
    """Bahdanau attention: ``score_j = v . tanh(W_q s + W_k h_j)``, pads masked out.

    Args:
        query_dim: width of the decoder state ``s``.
        key_dim: width of the encoder outputs ``h``.
        attention_dim: width of the hidden layer of the score.
    """

    def __init__(self, query_dim: int, key_dim: int, attention_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, attention_dim)
        self.v = nn.Linear(attention_dim, 1, bias=False)

    def forward(self, query: Tensor, keys: Tensor, values: Tensor,
                padding_mask: Tensor) -> Tuple[Tensor, Tensor]:
        """Attend.

        Args:
            query: ``(batch, query_dim)``.
            keys: ``(batch, src_len, attention_dim)``, already projected by ``key_proj``.
            values: ``(batch, src_len, key_dim)``.
            padding_mask: ``(batch, src_len)``, True at pads.
        Returns:
            context ``(batch, key_dim)`` and weights ``(batch, src_len)``.
        """
        scores = self.v(torch.tanh(keys + self.query_proj(query).unsqueeze(1))).squeeze(-1)
        scores = scores.masked_fill(padding_mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        context = torch.bmm(weights.unsqueeze(1), values).squeeze(1)
        return context, weights


class RNNSeq2SeqDecoder(FairseqIncrementalDecoder):
    """One-layer attentional recurrent decoder of width ``2 * encoder hidden``.

    One step: attend with the previous state, feed ``[embed(y_{t-1}); context]`` to the cell,
    and predict from ``[state; context]``.  With ``incremental_state`` only the last token of
    ``prev_output_tokens`` is consumed and the recurrent state is cached, so greedy or beam
    decoding costs one step per token.  The cache keeps the autograd graph, so step-by-step
    training (the ``teacher_forcing_cross_entropy`` criterion) back-propagates through it.

    Args:
        dictionary: target dictionary.
        cell: ``rnn``, ``gru`` or ``lstm`` (same as the encoder).
        embed_dim: target embedding width.
        hidden_size: decoder width; must equal the encoder output width (2 x encoder hidden).
        dropout: on embeddings and before the output projection.
    """

    def __init__(self, dictionary, cell: str, embed_dim: int, hidden_size: int,
                 dropout: float, max_positions: int = DEFAULT_MAX_POSITIONS):
        super().__init__(dictionary)
        if cell not in CELLS:
            raise ValueError(f"--cell must be one of {CELLS}, got {cell!r}")
        self.cell_type = cell
        self.hidden_size = hidden_size
        self.max_target_positions = max_positions
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=dictionary.pad())
        cell_class = {"rnn": nn.RNNCell, "gru": nn.GRUCell, "lstm": nn.LSTMCell}[cell]
        self.cell = cell_class(embed_dim + hidden_size, hidden_size)
        self.attention = AdditiveAttention(hidden_size, hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.output_projection = nn.Linear(2 * hidden_size, len(dictionary))

    def forward(self, prev_output_tokens: Tensor, encoder_out: Dict[str, List[Tensor]],
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                features_only: bool = False, **unused):
        """Run the decoder.

        Args:
            prev_output_tokens: ``(batch, tgt_len)``, beginning with end-of-sentence (fairseq's
                convention); with ``incremental_state`` only the last column is read.
            encoder_out: output of :class:`RNNSeq2SeqEncoder`.
            incremental_state: cache dictionary for step-by-step decoding, or None.
            features_only: return ``[state; context]`` features instead of logits.
        Returns:
            ``(logits (batch, steps, vocab), {"attn": [(batch, steps, src_len)]})`` where
            ``steps`` is ``tgt_len``, or 1 with ``incremental_state``.
        """
        enc = encoder_out["encoder_out"][0]
        pad_mask = encoder_out["encoder_padding_mask"][0]
        cached = self._get_state(incremental_state)
        if cached is not None:
            keys = cached["keys"]
            hidden = cached["hidden"]
            cell = cached.get("cell")
        else:
            keys = self.attention.key_proj(enc)
            hidden = encoder_out["encoder_hidden"][0]
            cell = encoder_out["encoder_cell"][0] if self.cell_type == "lstm" else None
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]

        embedded = self.dropout(self.embed_tokens(prev_output_tokens))
        features, attns = [], []
        for t in range(prev_output_tokens.size(1)):
            context, weights = self.attention(hidden, keys, enc, pad_mask)
            step_input = torch.cat([embedded[:, t], context], dim=-1)
            if self.cell_type == "lstm":
                hidden, cell = self.cell(step_input, (hidden, cell))
            else:
                hidden = self.cell(step_input, hidden)
            features.append(torch.cat([hidden, context], dim=-1))
            attns.append(weights)
        x = self.dropout(torch.stack(features, dim=1))
        attn = torch.stack(attns, dim=1)

        if incremental_state is not None:
            state = {"keys": keys, "hidden": hidden}
            if cell is not None:
                state["cell"] = cell
            self.set_incremental_state(incremental_state, "rnn_state", state)
        if not features_only:
            x = self.output_projection(x)
        return x, {"attn": [attn]}

    def _get_state(self, incremental_state) -> Optional[Dict[str, Optional[Tensor]]]:
        if incremental_state is None:
            return None
        return self.get_incremental_state(incremental_state, "rnn_state")

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(features)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Select batch rows ``new_order`` of the cached state (beam search)."""
        state = self._get_state(incremental_state)
        if state is None:
            return
        state = {k: v.index_select(0, new_order) for k, v in state.items() if v is not None}
        self.set_incremental_state(incremental_state, "rnn_state", state)

    def max_positions(self):
        return self.max_target_positions


@register_model("rnn_seq2seq", dataclass=RNNSeq2SeqConfig)
class RNNSeq2SeqModel(FairseqEncoderDecoderModel):
    """The paper's RNN: bidirectional encoder, attention, one decoder layer of width 2 x hidden.

    Options: :class:`RNNSeq2SeqConfig`.
    """

    @classmethod
    def build_model(cls, args, task):
        """Build the model from a :class:`RNNSeq2SeqConfig` (or the ``argparse.Namespace``
        stored in checkpoints written before the model had a dataclass config).

        Raises:
            ValueError: unknown ``--cell``.
        """
        base_architecture(args)
        max_src = safe_getattr(args, "max_source_positions", None) or DEFAULT_MAX_POSITIONS
        max_tgt = safe_getattr(args, "max_target_positions", None) or DEFAULT_MAX_POSITIONS
        decoder_width = 2 * args.encoder_hidden_size
        cell = str(args.cell)
        encoder = RNNSeq2SeqEncoder(
            task.source_dictionary,
            cell=cell,
            embed_dim=_or(args.encoder_embed_dim, args.encoder_hidden_size),
            hidden_size=args.encoder_hidden_size,
            num_layers=args.encoder_layers,
            dropout=args.dropout,
            max_positions=max_src,
        )
        decoder = RNNSeq2SeqDecoder(
            task.target_dictionary,
            cell=cell,
            embed_dim=_or(args.decoder_embed_dim, decoder_width),
            hidden_size=decoder_width,
            dropout=args.dropout,
            max_positions=max_tgt,
        )
        return cls(encoder, decoder)


def _or(value, default):
    """``value``, or ``default`` when ``value`` is None (an explicit 0 is kept)."""
    return default if value is None else value


def base_architecture(args):
    """Fill every option still unset with the defaults of :class:`RNNSeq2SeqConfig` (plain RNN
    cell, 2 encoder layers, hidden 64, dropout 0.1); an explicit value, 0 included, is kept."""
    fill_defaults(args, RNNSeq2SeqConfig)


def _paper_rnn(args, cell: str, encoder_layers: int, encoder_hidden_size: int) -> None:
    """Defaults of one of the paper's RNN configurations; options given on the command line win."""
    args.cell = safe_getattr(args, "cell", cell)
    args.encoder_layers = safe_getattr(args, "encoder_layers", encoder_layers)
    args.encoder_hidden_size = safe_getattr(args, "encoder_hidden_size", encoder_hidden_size)
    base_architecture(args)


@register_model_architecture("rnn_seq2seq", "rnn_seq2seq_exp1_rnn_h64")
def rnn_seq2seq_exp1_rnn_h64(args):
    """Experiment 1: plain RNN, 2 bidirectional encoder layers, hidden 64 (decoder 128)."""
    _paper_rnn(args, "rnn", 2, 64)


@register_model_architecture("rnn_seq2seq", "rnn_seq2seq_exp1_rnn_h128")
def rnn_seq2seq_exp1_rnn_h128(args):
    """Experiment 1: plain RNN, 2 bidirectional encoder layers, hidden 128 (decoder 256)."""
    _paper_rnn(args, "rnn", 2, 128)


@register_model_architecture("rnn_seq2seq", "rnn_seq2seq_exp2_gru_l2_h64")
def rnn_seq2seq_exp2_gru_l2_h64(args):
    """Experiment 2: GRU, 2 bidirectional encoder layers, hidden 64 (decoder 128)."""
    _paper_rnn(args, "gru", 2, 64)


@register_model_architecture("rnn_seq2seq", "rnn_seq2seq_exp2_rnn_l1_h64")
def rnn_seq2seq_exp2_rnn_l1_h64(args):
    """Experiment 2: plain RNN, 1 bidirectional encoder layer, hidden 64 (decoder 128)."""
    _paper_rnn(args, "rnn", 1, 64)
