"""``scan_cnn``: the authors' convolutional seq2seq of Wold et al. (arXiv 2505.13089, Sec. 4.1).

A Gehring et al. (2017) style encoder-decoder as the paper's authors built it (their
``systematicity_entropy/models/cnn.py``), which differs from fairseq's ``fconv``
(:mod:`fairseq_entropy.models.cnn_archs`):

* fixed sinusoidal positions (Vaswani et al. 2017) added to the token embeddings, counted from
  the first real token, instead of learned ones;
* one hidden size H everywhere: embeddings, ``in_proj`` / ``out_proj`` (H x H) around the
  stacks, convolutions of H -> 2H channels halved by a GLU (Dauphin et al. 2017);
* residual connections scaled by sqrt(0.5); layer 0 adds its input unchanged (the encoder's
  first residual is the embedding itself, before ``in_proj``), deeper layers add a linear
  projection of their input;
* attention per decoder layer with query ``(W a + g) sqrt(0.5)`` (a: GLU output, g: target
  embedding), keys ``out_proj`` of the encoder's last layer, values ``in_proj`` of the source
  embeddings (``fconv`` uses ``encoder output + embedding``), context scaled by sqrt(|source|)
  and added to ``a`` with scale sqrt(0.5);
* the decoder's ``out_proj`` output goes through dropout and a linear classifier (optionally
  tied to the target embedding);
* the authors' initialisation: embeddings N(0, 0.1^2); convolutions N(0, 4(1-p)/(kH));
  ``in_proj``, decoder ``out_proj`` and classifier N(0, (1-p)/H); encoder ``out_proj``, residual
  projections and attention projections N(0, 1/H); every bias 0 (p: dropout, k: kernel width);
* the gradient into the attention keys is scaled by 1 / (2 x decoder layers).

Two deliberate differences make the model independent of batching, so that a padded batch gives
each sentence the result it has alone: padding positions are zeroed before every encoder
convolution (the authors convolved over learned ``[PAD]`` embeddings), and the context scale
uses each sentence's own length instead of the padded batch length.  Both agree with the
authors' computation for a sentence of the batch's full length.

Architectures: ``scan_cnn`` (dataclass defaults) and ``scan_cnn_paper`` (the paper's 3 + 3
layers, H = 64, kernel 5, dropout 0.1 for Experiments 1 and 2).
"""

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.models import (FairseqEncoder, FairseqEncoderDecoderModel,
                            FairseqIncrementalDecoder, register_model,
                            register_model_architecture)
from fairseq.modules import GradMultiply
from torch import Tensor

from ..modules.real_tokens import in_all_rows, pack_rows, real_rows, unpack_rows
from ..modules.positions import AbsolutePositions, token_positions
from .defaults import fill_defaults

SQRT_HALF = math.sqrt(0.5)


@dataclass
class ScanCNNConfig(FairseqDataclass):
    """Options of :class:`ScanCNNModel`."""

    embed_dim: int = field(default=64, metadata={
        "help": "hidden size H of embeddings, projections, convolution outputs (after the GLU) "
                "and attention"})
    encoder_layers: int = field(default=3, metadata={"help": "number of encoder convolutions"})
    decoder_layers: int = field(default=3, metadata={
        "help": "number of decoder convolutions, each followed by its own attention"})
    kernel_size: int = field(default=5, metadata={
        "help": "width k of every convolution (encoder: centred; decoder: causal, the k-1 "
                "previous positions and the current one)"})
    dropout: float = field(default=0.1, metadata={
        "help": "dropout p on embeddings, convolution inputs and the classifier input; also "
                "sets the initial weight scales (1-p)"})
    share_decoder_input_output_embed: bool = field(default=False, metadata={
        "help": "tie the classifier weight to the target embedding (the authors' "
                "share_weights; off in their runs)"})
    max_source_positions: int = field(default=1024, metadata={
        "help": "rows of the source sinusoidal table (longest source, end-of-sentence included)"})
    max_target_positions: int = field(default=1024, metadata={
        "help": "rows of the target sinusoidal table (longest output + 1)"})


def _linear(dim_in: int, dim_out: int, std: float) -> nn.Linear:
    """``nn.Linear`` with weight N(0, std^2) and bias 0."""
    lin = nn.Linear(dim_in, dim_out)
    nn.init.normal_(lin.weight, 0.0, std)
    nn.init.zeros_(lin.bias)
    return lin


def _embedding(num: int, dim: int) -> nn.Embedding:
    """Token embedding N(0, 0.1^2) for every row (the padding row is never read unmasked)."""
    emb = nn.Embedding(num, dim)
    nn.init.normal_(emb.weight, 0.0, 0.1)
    return emb


class GatedConvLayer(nn.Module):
    """Dropout, convolution H -> 2H of width k, GLU, and the layer's residual branch.

    Args:
        dim: H.
        kernel_size: k.
        dropout: p (input dropout; initial std sqrt(4(1-p)/(kH)) of the convolution weight).
        causal: True for the decoder (k-1 positions before the input: zeros, or the incremental
            buffer), False for the encoder (centred as PyTorch's 'same' padding).
        project_residual: False for layer 0 (residual added as is), True otherwise (residual
            through a Linear H x H with weight N(0, 1/H)).

    ``gate(pad(x [B, T, H])) -> [B, T, H]``; ``residual(r [B, T, H]) -> [B, T, H]``.
    """

    def __init__(self, dim: int, kernel_size: int, dropout: float, causal: bool,
                 project_residual: bool):
        super().__init__()
        self.kernel_size = kernel_size
        # positions added before / after the input: causal k-1 / 0; centred as 'same' padding
        self.pad_before = kernel_size - 1 if causal else (kernel_size - 1) // 2
        self.pad_after = kernel_size - 1 - self.pad_before
        self.dropout = nn.Dropout(dropout)
        self.conv = nn.Conv1d(dim, 2 * dim, kernel_size)
        nn.init.normal_(self.conv.weight, 0.0, math.sqrt(4 * (1.0 - dropout) / (kernel_size * dim)))
        nn.init.zeros_(self.conv.bias)
        self.projection = _linear(dim, dim, math.sqrt(1.0 / dim)) if project_residual else None

    def pad(self, x: Tensor) -> Tensor:
        """Zero-pad ``x [B, T, H]`` in time to ``[B, T + k - 1, H]`` for :meth:`gate`."""
        return F.pad(x, (0, 0, self.pad_before, self.pad_after))

    def gate(self, window: Tensor) -> Tensor:
        """GLU of the convolution over every k consecutive rows of ``window [B, T + k - 1, H]``
        -> ``[B, T, H]``: :meth:`gate_rows` of the unfolded windows."""
        bsz, length, dim = window.shape
        out_len = length - self.kernel_size + 1
        windows = window.unfold(1, self.kernel_size, 1).transpose(2, 3)  # [B, T, k, H]
        out = self.gate_rows(windows.reshape(bsz * out_len, self.kernel_size, dim))
        return out.view(bsz, out_len, dim)

    def gate_rows(self, windows: Tensor) -> Tensor:
        """GLU of the convolution over windows ``[n, k, H]`` (slot j: the input at offset j of
        the window, oldest first, as the Conv1d weight reads them) -> ``[n, H]``; computed as
        one matrix product over the flattened windows (faster than ``conv1d`` on a CPU, same
        weights)."""
        n, width, dim = windows.shape
        weight = self.conv.weight.permute(0, 2, 1).reshape(self.conv.out_channels, -1)
        out = F.linear(windows.reshape(n, width * dim), weight, self.conv.bias)
        return F.glu(out, dim=-1)

    def residual(self, r: Tensor) -> Tensor:
        return r if self.projection is None else self.projection(r)


class EmbeddingAttention(nn.Module):
    """The authors' per-layer decoder attention over the source (Gehring et al. 2017, Sec. 3.3).

    ``forward(a [B, T, H], target_embed [B, T, H], keys [B, S, H], values [B, S, H],
    padding_mask [B, S] (True at padding), scale [B, 1, 1])`` returns
    ``((context + a) sqrt(0.5) [B, T, H], weights [B, T, S])`` with
    query ``(W a + b + target_embed) sqrt(0.5)``, weights ``softmax(query . keys)`` over the real
    source positions and ``context = scale * weights @ values``.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.query_proj = _linear(dim, dim, math.sqrt(1.0 / dim))

    def forward(self, a: Tensor, target_embed: Tensor, keys: Tensor, values: Tensor,
                padding_mask: Tensor, scale: Tensor) -> Tuple[Tensor, Tensor]:
        query = (self.query_proj(a) + target_embed) * SQRT_HALF
        scores = torch.bmm(query, keys.transpose(1, 2))
        scores = scores.masked_fill(padding_mask.unsqueeze(1), float("-inf"))
        weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        context = torch.bmm(weights, values) * scale
        return (context + a) * SQRT_HALF, weights


class ScanCNNEncoder(FairseqEncoder):
    """Convolutional encoder.

    ``forward(src_tokens [B, S], src_lengths [B])`` returns a dict of one-element lists:
    ``encoder_out`` (attention keys [B, S, H]), ``encoder_values`` (projected source embeddings
    [B, S, H]) and ``encoder_padding_mask`` ([B, S], True at padding).  Padding may be on either
    side.
    """

    def __init__(self, cfg, dictionary, num_decoder_layers: int):
        super().__init__(dictionary)
        dim, p = cfg.embed_dim, cfg.dropout
        self.padding_idx = dictionary.pad()
        self.max_source_positions = cfg.max_source_positions
        self.embed_tokens = _embedding(len(dictionary), dim)
        self.positions = AbsolutePositions("sinusoidal", cfg.max_source_positions, dim)
        self.dropout = nn.Dropout(p)
        self.in_proj = _linear(dim, dim, math.sqrt((1.0 - p) / dim))
        self.out_proj = _linear(dim, dim, math.sqrt(1.0 / dim))
        self.layers = nn.ModuleList(
            GatedConvLayer(dim, cfg.kernel_size, p, causal=False, project_residual=i > 0)
            for i in range(cfg.encoder_layers))
        self.key_grad_scale = 1.0 / (2.0 * num_decoder_layers)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **kwargs):
        pad = src_tokens.eq(self.padding_idx)
        keep = (~pad).unsqueeze(-1).type_as(self.in_proj.weight)
        pos = token_positions(src_tokens, self.padding_idx)
        embed = self.dropout(self.embed_tokens(src_tokens) + self.positions(pos)) * keep
        values = self.in_proj(embed)
        h, residual = values, embed
        for layer in self.layers:
            conv_in = layer.dropout(h) * keep  # 'same' padding then sees zeros beyond the text
            h = (layer.gate(layer.pad(conv_in)) + layer.residual(residual)) * SQRT_HALF
            residual = h
        keys = self.out_proj(h)
        if in_all_rows():  # vmap: no old-style autograd.Function; same value and gradient
            keys = keys.detach() + (keys - keys.detach()) * self.key_grad_scale
        else:
            keys = GradMultiply.apply(keys, self.key_grad_scale)
        return {"encoder_out": [keys], "encoder_values": [values],
                "encoder_padding_mask": [pad]}

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        return {key: [t.index_select(0, new_order) for t in val]
                for key, val in encoder_out.items()}

    def max_positions(self):
        return self.max_source_positions


class ScanCNNDecoder(FairseqIncrementalDecoder):
    """Causal convolutional decoder with one attention per layer.

    ``forward(prev_output_tokens [B, T], encoder_out, incremental_state)`` returns
    ``(logits [B, T, V], {"attn": [weights averaged over layers, [B, T, S]]})``.  With
    ``incremental_state`` only the last position is computed: each layer keeps the inputs of its
    k-1 previous positions, so the result equals the full forward pass (in eval mode).
    """

    def __init__(self, cfg, dictionary):
        super().__init__(dictionary)
        dim, p = cfg.embed_dim, cfg.dropout
        self.padding_idx = dictionary.pad()
        self.kernel_size = cfg.kernel_size
        self.max_target_positions = cfg.max_target_positions
        self.embed_tokens = _embedding(len(dictionary), dim)
        self.positions = AbsolutePositions("sinusoidal", cfg.max_target_positions, dim)
        self.dropout = nn.Dropout(p)
        self.in_proj = _linear(dim, dim, math.sqrt((1.0 - p) / dim))
        self.out_proj = _linear(dim, dim, math.sqrt((1.0 - p) / dim))
        self.layers = nn.ModuleList(
            GatedConvLayer(dim, cfg.kernel_size, p, causal=True, project_residual=i > 0)
            for i in range(cfg.decoder_layers))
        self.attention = nn.ModuleList(EmbeddingAttention(dim) for _ in range(cfg.decoder_layers))
        self.output_dropout = nn.Dropout(p)
        self.output_projection = _linear(dim, len(dictionary), math.sqrt((1.0 - p) / dim))
        if cfg.share_decoder_input_output_embed:
            self.output_projection.weight = self.embed_tokens.weight

    def forward(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                features_only: bool = False, **kwargs):
        if incremental_state is not None:
            x, attn = self._step(prev_output_tokens, encoder_out, incremental_state)
            return (x if features_only else self.output_layer(x)), {"attn": [attn]}
        rows, x, attn = self._packed_features(prev_output_tokens, encoder_out)
        if not features_only:
            x = self.output_layer(x)
        return unpack_rows(x, rows, prev_output_tokens.shape), {"attn": [attn]}

    def extract_features(self, prev_output_tokens: Tensor, encoder_out=None,
                         incremental_state=None, **kwargs) -> Tuple[Tensor, Tensor]:
        """Decoder features ``[B, T, H]`` (before the classifier's dropout; zero at padding) and
        the attention weights averaged over layers ``[B, T, S]``."""
        if incremental_state is not None:
            return self._step(prev_output_tokens, encoder_out, incremental_state)
        rows, x, attn = self._packed_features(prev_output_tokens, encoder_out)
        return unpack_rows(x, rows, prev_output_tokens.shape), attn

    @staticmethod
    def _source(encoder_out) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """Attention keys and values ``[B, S, H]``, source padding mask ``[B, S]`` and the
        context scale sqrt(|source|) ``[B, 1, 1]`` from the encoder's output."""
        keys = encoder_out["encoder_out"][0]
        src_pad = encoder_out["encoder_padding_mask"][0]
        scale = (~src_pad).sum(dim=1).type_as(keys).sqrt().view(-1, 1, 1)
        return keys, encoder_out["encoder_values"][0], src_pad, scale

    def _packed_features(self, prev_output_tokens: Tensor, encoder_out
                         ) -> Tuple[Tensor, Tensor, Tensor]:
        """The teacher-forced pass over every position, computed on the real tokens only.

        The batch's n real target tokens are stacked into ``[n, H]`` rows (sentence by
        sentence, in order), so padding costs no convolution, projection, dropout or
        classifier work; each causal window gathers the k-1 previous rows of its own sentence
        (zeros before the sentence's first token), which is the padded computation without the
        padded positions.  Only the attention, whose keys differ per sentence, runs on the
        padded ``[B, T, H]`` layout.

        Returns ``rows [n]`` (indices of the real tokens in the flattened ``[B * T]`` batch),
        features ``[n, H]`` and the attention weights averaged over layers ``[B, T, S]``.
        """
        bsz, tgt_len = prev_output_tokens.shape
        pos = token_positions(prev_output_tokens, self.padding_idx)
        rows = real_rows(prev_output_tokens, self.padding_idx)
        tokens = pack_rows(prev_output_tokens, rows)
        rank = pack_rows(pos, rows)
        # window slot j of row r reads row r - (k-1) + j of the same sentence, or the zero row
        # (index 0 of the [1 + n, H] table below) before the sentence's first token
        back = torch.arange(self.kernel_size - 1, -1, -1, device=rows.device)
        arange = torch.arange(rows.numel(), device=rows.device).unsqueeze(1)
        windows = torch.where(rank.unsqueeze(1) >= back, arange - back + 1, 0)

        keys, values, src_pad, scale = self._source(encoder_out)
        target_embed = self.dropout(self.embed_tokens(tokens) + self.positions(rank))
        h = self.in_proj(target_embed)
        padded_embed = unpack_rows(target_embed, rows, (bsz, tgt_len))
        attn_sum = None
        for layer, attention in zip(self.layers, self.attention):
            residual = layer.residual(h)
            conv_in = layer.dropout(h)
            table = torch.cat([conv_in.new_zeros(1, conv_in.size(1)), conv_in])
            a = layer.gate_rows(table[windows])
            mixed, weights = attention(unpack_rows(a, rows, (bsz, tgt_len)), padded_embed, keys,
                                       values, src_pad, scale)
            a = pack_rows(mixed, rows)
            h = (a + residual) * SQRT_HALF
            attn_sum = weights if attn_sum is None else attn_sum + weights
        return rows, self.out_proj(h), attn_sum / len(self.layers)

    def _step(self, prev_output_tokens: Tensor, encoder_out, incremental_state
              ) -> Tuple[Tensor, Tensor]:
        """One incremental step: features ``[B, 1, H]`` and attention ``[B, 1, S]`` of the last
        position; each layer keeps the inputs of its k-1 previous positions."""
        pos = token_positions(prev_output_tokens, self.padding_idx)[:, -1:]
        target_embed = self.dropout(self.embed_tokens(prev_output_tokens[:, -1:])
                                    + self.positions(pos))
        keys, values, src_pad, scale = self._source(encoder_out)
        buffers = self.get_incremental_state(incremental_state, "conv_inputs") or {}
        h = self.in_proj(target_embed)
        attn_sum = None
        for i, (layer, attention) in enumerate(zip(self.layers, self.attention)):
            residual = layer.residual(h)
            conv_in = layer.dropout(h)
            previous = buffers.get(str(i))
            if previous is None:
                previous = conv_in.new_zeros(conv_in.size(0), self.kernel_size - 1,
                                             conv_in.size(2))
            window = torch.cat([previous, conv_in], dim=1)
            buffers[str(i)] = window[:, 1:]
            a, weights = attention(layer.gate(window), target_embed, keys, values, src_pad, scale)
            h = (a + residual) * SQRT_HALF
            attn_sum = weights if attn_sum is None else attn_sum + weights
        self.set_incremental_state(incremental_state, "conv_inputs", buffers)
        return self.out_proj(h), attn_sum / len(self.layers)

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(self.output_dropout(features))

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        buffers = self.get_incremental_state(incremental_state, "conv_inputs")
        if buffers is None:
            return
        reordered = {k: v.index_select(0, new_order) for k, v in buffers.items()}
        self.set_incremental_state(incremental_state, "conv_inputs", reordered)

    def max_positions(self):
        return self.max_target_positions


@register_model("scan_cnn", dataclass=ScanCNNConfig)
class ScanCNNModel(FairseqEncoderDecoderModel):
    """The authors' CNN as a fairseq model (see the module docstring).

    Raises:
        ValueError: (in :meth:`build_model`) ``embed_dim``, a layer count or ``kernel_size`` is
            below 1.
    """

    @classmethod
    def build_model(cls, cfg, task):
        base_architecture(cfg)
        for name in ("embed_dim", "encoder_layers", "decoder_layers", "kernel_size"):
            if int(getattr(cfg, name)) < 1:
                raise ValueError(f"scan_cnn: --{name.replace('_', '-')} is {getattr(cfg, name)}; "
                                 "it must be at least 1. Fix: pass a positive value (the paper: "
                                 "--embed-dim 64 --encoder-layers 3 --decoder-layers 3 "
                                 "--kernel-size 5)")
        encoder = ScanCNNEncoder(cfg, task.source_dictionary, cfg.decoder_layers)
        decoder = ScanCNNDecoder(cfg, task.target_dictionary)
        return cls(encoder, decoder)

    def max_positions(self):
        return (self.encoder.max_source_positions, self.decoder.max_target_positions)


def base_architecture(args):
    """Fill the options ``args`` lacks with the defaults of :class:`ScanCNNConfig` (the arch
    ``scan_cnn``, registered by ``register_model``); given values, even 0, are kept."""
    fill_defaults(args, ScanCNNConfig)


@register_model_architecture("scan_cnn", "scan_cnn_paper")
def scan_cnn_paper(args):
    """The paper's CNN (Experiments 1 and 2): 3 + 3 layers, H = 64, kernel 5, dropout 0.1,
    untied classifier (the authors' ``--layers 3 --hidden_size 64 --kernel_size 5
    --dropout 0.1``); these are the defaults of :class:`ScanCNNConfig`."""
    base_architecture(args)
