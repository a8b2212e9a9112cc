"""``scan_transformer``: the Transformer of Wold et al. (arXiv 2505.13089, Sec. 4.1).

Faithful to the authors' model rather than fairseq's stock ``transformer`` (which does not
reproduce their 3-bit result): encoder-decoder, pre-layer-norm with a final norm, GEGLU
feed-forward (inner 4d), heads of size 64, separate source/target embeddings and an output
projection (bias 0), token embedding entering twice (``2 E[w] + PE``, no sqrt(d) scale),
embeddings and output projection initialised U(-0.1, 0.1), attention and feed-forward weights
truncated normal (std sqrt(2/(5d)), cut at 2 std), dropout on the attention probabilities and
on each residual branch's output only (none on the embeddings or inside the feed-forward).

The position scheme is one separate piece (``--position-encoding``, see
:mod:`fairseq_entropy.modules.positions`): sinusoidal (the paper's default), learned,
relative (DeBERTa disentangled attention) or rope.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch.nn as nn
import torch.nn.functional as F
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import (FairseqEncoder, FairseqEncoderDecoderModel,
                            FairseqIncrementalDecoder, register_model,
                            register_model_architecture)
from fairseq.utils import safe_getattr
from omegaconf import II
from torch import Tensor

from ..modules.attention import MultiheadAttention, truncated_normal_
from ..modules.dropout import UniformMaskDropout, dropout_or_identity
from ..modules.real_tokens import pack_rows, real_rows, unpack_rows
from ..modules.positions import (POSITION_ENCODINGS, RELATIVE_TABLE_INITS, ROPE_VARIANTS,
                                 AbsolutePositions, RelativePositions, RotaryPositions,
                                 token_positions)
from .defaults import fill_defaults

DEFAULT_MAX_POSITIONS = 256


@dataclass
class AuthorsBlockConfig(FairseqDataclass):
    """Options of the authors' Transformer block shared by the encoder-decoder
    (:class:`ScanTransformerConfig`) and the decoder-only model (``ScanTransformerLmConfig``):
    width, heads, dropouts, embedding scale and the position scheme."""

    embed_dim: int = field(default=128, metadata={"help": "model dimension d"})
    attention_heads: Optional[int] = field(
        default=None, metadata={"help": "heads per attention (default: d/64, i.e. heads of "
                                        "size 64, at least 1)"})
    dropout: float = field(default=0.1, metadata={"help": "dropout probability on the attention "
                                                          "probabilities and on each residual "
                                                          "branch's output"})
    embedding_dropout: float = field(
        default=0.0, metadata={"help": "dropout on the summed token and position embeddings "
                                       "(the authors' models: none)"})
    activation_dropout: float = field(
        default=0.0, metadata={"help": "dropout on the GEGLU's inner activations, before its "
                                       "output projection (the authors' models: none)"})
    embed_scale: float = field(
        default=2.0, metadata={"help": "token embeddings are multiplied by S (authors: 2, i.e. "
                                       "the embedding enters twice)"})
    position_encoding: ChoiceEnum(POSITION_ENCODINGS) = field(
        default="sinusoidal", metadata={"help": "position scheme"})
    max_relative_positions: int = field(
        default=512, metadata={"help": "relative scheme: distance the log buckets extend to "
                                       "(the authors' code: 1024)"})
    relative_table_init: ChoiceEnum(RELATIVE_TABLE_INITS) = field(
        default="std0.02", metadata={"help": "relative scheme: initialisation of the "
                                             "relative-position tables, N(0, 0.02^2), or "
                                             "xavier as in the authors' code"})
    relative_dropout: float = field(
        default=0.0, metadata={"help": "relative scheme: dropout on the normalised "
                                       "relative-position table before the query and key maps "
                                       "(the authors' code: the attention dropout)"})
    rope_theta: float = field(default=1000.0, metadata={"help": "RoPE base"})
    rope_variant: ChoiceEnum(ROPE_VARIANTS) = field(
        default="standard", metadata={"help": "standard RoPE, or the authors' (non-rotation) "
                                              "variant"})


@dataclass
class ScanTransformerConfig(AuthorsBlockConfig):
    """Options of :class:`ScanTransformerModel`; the defaults are the paper's Experiment 1
    model (``scan_transformer_paper``)."""

    encoder_layers: int = field(default=3, metadata={"help": "number of encoder layers"})
    decoder_layers: int = field(default=3, metadata={"help": "number of decoder layers"})
    source_position_buckets: int = field(
        default=64, metadata={"help": "relative scheme: bucket size of the source side"})
    target_position_buckets: int = field(
        default=4, metadata={"help": "relative scheme: bucket size of the target side"})
    # the task's options (fairseq's translation task documents them)
    max_source_positions: Optional[int] = II("task.max_source_positions")
    max_target_positions: Optional[int] = II("task.max_target_positions")


class GEGLU(nn.Module):
    """GELU-gated feed-forward (Shazeer 2020): ``W2 (gelu(x W) * (x V))``, inner size ``ffn_dim``.

    ``forward([..., d]) -> [..., d]``.
    """

    def __init__(self, dim: int, ffn_dim: int, dropout: float):
        super().__init__()
        self.proj_in = nn.Linear(dim, 2 * ffn_dim)
        self.proj_out = nn.Linear(ffn_dim, dim)
        self.dropout = dropout_or_identity(dropout)
        for lin in (self.proj_in, self.proj_out):
            truncated_normal_(lin.weight, dim)
            nn.init.zeros_(lin.bias)

    def forward(self, x: Tensor) -> Tensor:
        a, gate = self.proj_in(x).chunk(2, dim=-1)
        return self.proj_out(self.dropout(F.gelu(a) * gate))


class Layer(nn.Module):
    """One pre-layer-norm Transformer layer: self-attention, optional cross-attention, GEGLU."""

    def __init__(self, dim: int, heads: int, dropout: float, cross: bool,
                 activation_dropout: float = 0.0):
        super().__init__()
        self.self_norm = nn.LayerNorm(dim)
        self.self_attn = MultiheadAttention(dim, heads, dropout, self_attention=True)
        self.cross_norm = nn.LayerNorm(dim) if cross else None
        self.cross_attn = MultiheadAttention(dim, heads, dropout, self_attention=False) \
            if cross else None
        self.ffn_norm = nn.LayerNorm(dim)
        self.ffn = GEGLU(dim, 4 * dim, activation_dropout)
        self.dropout = UniformMaskDropout(dropout)


class _Stack(nn.Module):
    """Shared pieces of encoder and decoder: embedding, position scheme, layers, final norm."""

    def __init__(self, args, dictionary, num_layers: int, bucket_size: int,
                 max_positions: int, cross: bool):
        super().__init__()
        dim = args.embed_dim
        self.padding_idx = dictionary.pad()
        self.embed_tokens = nn.Embedding(len(dictionary), dim, padding_idx=self.padding_idx)
        nn.init.uniform_(self.embed_tokens.weight, -0.1, 0.1)
        self.embed_scale = args.embed_scale
        self.scheme = str(args.position_encoding)
        self.absolute = AbsolutePositions(self.scheme, max_positions, dim) \
            if self.scheme in ("sinusoidal", "learned") else None
        self.relative = RelativePositions(
            bucket_size, args.max_relative_positions, dim, str(args.relative_table_init),
            args.relative_dropout) if self.scheme == "relative" else None
        self.rope = RotaryPositions(dim // args.attention_heads, args.rope_theta,
                                    str(args.rope_variant)) if self.scheme == "rope" else None
        self.dropout = dropout_or_identity(args.embedding_dropout)
        self.layers = nn.ModuleList(
            Layer(dim, args.attention_heads, args.dropout, cross, args.activation_dropout)
            for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(dim)

    def embed(self, tokens: Tensor, positions: Tensor) -> Tensor:
        x = self.embed_scale * self.embed_tokens(tokens)
        if self.absolute is not None:
            x = x + self.absolute(positions)
        return self.dropout(x)


class ScanTransformerEncoder(FairseqEncoder):
    """Encoder: ``forward(src_tokens [B, S], src_lengths [B]) -> dict`` with
    ``encoder_out`` [[B, S, d]] (zero at padding), ``encoder_padding_mask`` [[B, S]] and
    ``src_positions`` [[B, S]]."""

    def __init__(self, args, dictionary):
        super().__init__(dictionary)
        self.stack = _Stack(args, dictionary, args.encoder_layers,
                            args.source_position_buckets, args.max_source_positions, cross=False)
        self.max_source_positions = args.max_source_positions

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **kwargs):
        """Encode ``src_tokens [B, S]``.  The position-wise layers (embedding, projections,
        feed-forward, norms, dropout) run on the ``[n, d]`` stack of the n real source tokens
        and only self-attention on the padded ``[B, S]`` layout, where ``key_padding_mask``
        hides the pads; ``encoder_out`` is zero at padding and equals the padded computation
        at every real position."""
        s = self.stack
        pad_mask = src_tokens.eq(s.padding_idx)
        pos = token_positions(src_tokens, s.padding_idx)
        rows = real_rows(src_tokens, s.padding_idx)
        x = s.embed(pack_rows(src_tokens, rows), pack_rows(pos, rows))
        x = unpack_rows(self._layers(x, pos, pad_mask, rows), rows, tuple(src_tokens.shape))
        return {"encoder_out": [x], "encoder_padding_mask": [pad_mask], "src_positions": [pos]}

    def _layers(self, x: Tensor, pos: Tensor, pad_mask: Tensor,
                rows: Optional[Tensor] = None) -> Tensor:
        """The layers and final norm on embedded tokens: ``x [n, d]`` (the real tokens
        ``rows [n]``) or, without ``rows``, the padded ``x [B, S, d]``; ``pos [B, S]``."""
        s = self.stack
        for layer in s.layers:
            h = layer.self_norm(x)
            x = x + layer.dropout(layer.self_attn(
                h, key_padding_mask=pad_mask, q_pos=pos, rope=s.rope,
                rel_q=s.relative, rel_k=s.relative, rows=rows))
            x = x + layer.dropout(layer.ffn(layer.ffn_norm(x)))
        return s.final_norm(x)

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        return {key: [t.index_select(0, new_order) for t in val]
                for key, val in encoder_out.items()}

    def max_positions(self):
        return self.max_source_positions


class ScanTransformerDecoder(FairseqIncrementalDecoder):
    """Decoder: ``forward(prev_output_tokens [B, T], encoder_out, incremental_state)
    -> (logits [B, T, V], {"attn": [None]})``; with ``incremental_state`` only the last
    position is computed, reusing cached keys and values.  The teacher-forced pass computes
    the real (right-padded) target tokens only and returns zero logits at padding."""

    def __init__(self, args, dictionary, encoder: ScanTransformerEncoder):
        super().__init__(dictionary)
        self.stack = _Stack(args, dictionary, args.decoder_layers,
                            args.target_position_buckets, args.max_target_positions, cross=True)
        self.source_relative = encoder.stack.relative
        self.output_projection = nn.Linear(args.embed_dim, len(dictionary))
        nn.init.uniform_(self.output_projection.weight, -0.1, 0.1)
        nn.init.zeros_(self.output_projection.bias)
        self.max_target_positions = args.max_target_positions

    def forward(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                features_only: bool = False, **kwargs):
        if incremental_state is not None:
            x = self._step(prev_output_tokens, encoder_out, incremental_state)
            return (x if features_only else self.output_layer(x)), {"attn": [None]}
        rows, x = self._packed_features(prev_output_tokens, encoder_out)
        if not features_only:
            x = self.output_layer(x)
        return unpack_rows(x, rows, prev_output_tokens.shape), {"attn": [None]}

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         **kwargs) -> Tensor:
        """Decoder features ``[B, T, d]`` after the final norm (zero at padding); with
        ``incremental_state``, ``[B, 1, d]`` of the last position."""
        if incremental_state is not None:
            return self._step(prev_output_tokens, encoder_out, incremental_state)
        rows, x = self._packed_features(prev_output_tokens, encoder_out)
        return unpack_rows(x, rows, prev_output_tokens.shape)

    def _layers(self, x: Tensor, pos: Tensor, encoder_out, incremental_state=None,
                rows: Optional[Tensor] = None) -> Tensor:
        s = self.stack
        enc = encoder_out["encoder_out"][0]
        enc_mask = encoder_out["encoder_padding_mask"][0]
        src_pos = encoder_out["src_positions"][0]
        for layer in s.layers:
            h = layer.self_norm(x)
            x = x + layer.dropout(layer.self_attn(
                h, causal=True, q_pos=pos, rope=s.rope, rel_q=s.relative, rel_k=s.relative,
                incremental_state=incremental_state, rows=rows))
            h = layer.cross_norm(x)
            x = x + layer.dropout(layer.cross_attn(
                h, enc, key_padding_mask=enc_mask, q_pos=pos, k_pos=src_pos, rope=s.rope,
                rel_q=s.relative, rel_k=self.source_relative,
                incremental_state=incremental_state, rows=rows))
            x = x + layer.dropout(layer.ffn(layer.ffn_norm(x)))
        return s.final_norm(x)

    def _packed_features(self, prev_output_tokens: Tensor, encoder_out) -> Tuple[Tensor, Tensor]:
        """The teacher-forced pass over every position, computed on the real tokens only.

        The batch's n real target tokens (right-padded, as fairseq batches targets) are
        stacked into ``[n, d]`` rows, so padding costs no embedding, projection, feed-forward,
        norm, dropout or classifier work; only the attention scores and weighted sums run on
        the padded ``[B, T]`` layout, where the causal mask keeps every real query away from
        the pad keys after it.  The result equals the padded computation at every real
        position.

        Returns ``rows [n]`` (indices of the real tokens in the flattened ``[B * T]`` batch) and
        features ``[n, d]``.
        """
        s = self.stack
        pos = token_positions(prev_output_tokens, s.padding_idx)
        rows = real_rows(prev_output_tokens, s.padding_idx)
        x = s.embed(pack_rows(prev_output_tokens, rows), pack_rows(pos, rows))
        return rows, self._layers(x, pos, encoder_out, rows=rows)

    def _step(self, prev_output_tokens: Tensor, encoder_out, incremental_state) -> Tensor:
        """One incremental decoding step: features ``[B, 1, d]`` of the last position,
        reusing the cached keys and values."""
        s = self.stack
        pos = token_positions(prev_output_tokens, s.padding_idx)[:, -1:]
        x = s.embed(prev_output_tokens[:, -1:], pos)
        return self._layers(x, pos, encoder_out, incremental_state)

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(features)

    def max_positions(self):
        return self.max_target_positions


@register_model("scan_transformer", dataclass=ScanTransformerConfig)
class ScanTransformerModel(FairseqEncoderDecoderModel):
    """The paper's Transformer as a fairseq model (see module docstring).

    Architectures: ``scan_transformer`` (= ``scan_transformer_paper``: 3+3 layers, d=128, dropout
    0.1, sinusoidal), ``scan_transformer_relative`` (buckets 64/4), ``scan_transformer_rope``
    (theta 1000), ``scan_transformer_learned`` (beyond the paper: see its docstring) and the
    Experiment 2 models ``scan_transformer_exp2_l2`` / ``_l3`` (d=256).  Options:
    :class:`ScanTransformerConfig`.
    """

    @classmethod
    def build_model(cls, args, task):
        """Build the model from a :class:`ScanTransformerConfig` (or the ``argparse.Namespace``
        stored in checkpoints written before the model had a dataclass config).

        Raises:
            ValueError: ``--rope-variant authors`` with a position scheme other than rope (the
                option would otherwise be ignored without a word).
        """
        base_architecture(args)
        if str(args.position_encoding) != "rope" and str(args.rope_variant) != "standard":
            raise ValueError(f"--rope-variant {args.rope_variant} applies only to "
                             f"--position-encoding rope, not {args.position_encoding}. Fix: use "
                             "--arch scan_transformer_rope (or --position-encoding rope)")
        if safe_getattr(args, "max_source_positions", None) is None:
            args.max_source_positions = DEFAULT_MAX_POSITIONS
        if safe_getattr(args, "max_target_positions", None) is None:
            args.max_target_positions = DEFAULT_MAX_POSITIONS
        encoder = ScanTransformerEncoder(args, task.source_dictionary)
        decoder = ScanTransformerDecoder(args, task.target_dictionary, encoder)
        return cls(encoder, decoder)

    def max_positions(self):
        return (self.encoder.max_source_positions, self.decoder.max_target_positions)


def base_architecture(args):
    """Fill every option still unset with the defaults of :class:`ScanTransformerConfig` (the
    paper's Experiment 1 Transformer: 3+3 layers, d=128, dropout 0.1, sinusoidal positions) and
    an unset or None ``attention_heads`` with d/64 (heads of size 64, at least 1); an explicit
    value, 0 or False included, is kept."""
    fill_defaults(args, ScanTransformerConfig)
    heads = safe_getattr(args, "attention_heads", None)  # None also when stored as None
    args.attention_heads = max(1, args.embed_dim // 64) if heads is None else heads


@register_model_architecture("scan_transformer", "scan_transformer_paper")
def scan_transformer_paper(args):
    """Experiment 1, sinusoidal positions (paper Fig. 2): 3+3 layers, d=128, dropout 0.1 (the
    defaults of :class:`ScanTransformerConfig`)."""
    base_architecture(args)


@register_model_architecture("scan_transformer", "scan_transformer_relative")
def scan_transformer_relative(args):
    """Experiment 1, relative positions: DeBERTa attention, buckets 64 (source) / 4 (target)
    (the config's defaults)."""
    args.position_encoding = "relative"
    base_architecture(args)


@register_model_architecture("scan_transformer", "scan_transformer_rope")
def scan_transformer_rope(args):
    """Experiment 1, rotary positions with theta = 1000, the config's default (standard RoPE by
    default; ``--rope-variant authors`` reproduces the authors' variant)."""
    args.position_encoding = "rope"
    base_architecture(args)


@register_model_architecture("scan_transformer", "scan_transformer_learned")
def scan_transformer_learned(args):
    """Learned absolute positions -- beyond the paper.  The authors' "learned" variant added one
    vector chosen by sentence length to every token (no position information) and the paper
    reports no result for it; this architecture uses a proper trainable table per position."""
    args.position_encoding = "learned"
    base_architecture(args)


@register_model_architecture("scan_transformer", "scan_transformer_exp2_l2")
def scan_transformer_exp2_l2(args):
    """Experiment 2 Transformer: 2+2 layers, d=256 (4 heads)."""
    args.embed_dim = safe_getattr(args, "embed_dim", 256)
    args.encoder_layers = safe_getattr(args, "encoder_layers", 2)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 2)
    base_architecture(args)


@register_model_architecture("scan_transformer", "scan_transformer_exp2_l3")
def scan_transformer_exp2_l3(args):
    """Experiment 2 Transformer: 3+3 layers, d=256 (4 heads)."""
    args.embed_dim = safe_getattr(args, "embed_dim", 256)
    base_architecture(args)
