"""``scan_transformer_lm``: the authors' Transformer block as a decoder-only language model.

The block of :mod:`~fairseq_entropy.models.scan_transformer` (pre-layer-norm with a final
norm, GEGLU feed-forward of inner size 4d, heads of size 64, token embedding times 2 plus the
position vector, U(-0.1, 0.1) embeddings and output projection, truncated-normal attention
and feed-forward weights, dropout on attention probabilities and residual branches), built
from the same modules (``_Stack``, ``Layer``, :class:`~fairseq_entropy.modules.attention.
MultiheadAttention`) with causal self-attention and no cross-attention.  All four position
schemes (sinusoidal, learned, relative, rope); incremental decoding through fairseq's
``incremental_state``.

Parameter count.  With V symbols, d = 128, a layer of self-attention and GEGLU has
16 d^2 + 17 d parameters and the encoder-decoder's decoder layer (with cross-attention)
20 d^2 + 23 d, so ``scan_transformer_paper`` (3 + 3 layers, two embedding tables, an output
projection) has 108 d^2 + O(d V); 7 decoder-only layers (112 d^2, one embedding table) come
closest: ``scan_transformer_lm_paper``.  On the paper grammar's dictionary (30 symbols, 31
with ``<sep>``): 1,858,463 parameters against 1,796,894 (+3.4%; 6 layers would give -10.5%).
Experiment 2 (d = 256): 7 layers against ``scan_transformer_exp2_l3``, 7,386,911 against
7,132,702 (+3.6%); 5 layers against ``scan_transformer_exp2_l2`` (2 + 2, 72 d^2), 5,281,055
against 4,763,166 (+10.9%; 4 layers: -11.2%).
"""

from dataclasses import dataclass, field
from typing import Optional

import torch.nn as nn
from fairseq.models import (FairseqIncrementalDecoder, FairseqLanguageModel, register_model,
                            register_model_architecture)
from fairseq.utils import safe_getattr
from omegaconf import II
from torch import Tensor

from ..modules.real_tokens import pack_rows, real_rows, unpack_rows
from ..modules.positions import token_positions
from .defaults import fill_defaults
from .scan_transformer import DEFAULT_MAX_POSITIONS, AuthorsBlockConfig, _Stack


@dataclass
class ScanTransformerLmConfig(AuthorsBlockConfig):
    """Options of :class:`ScanTransformerLmModel`: the block's options
    (:class:`~fairseq_entropy.models.scan_transformer.AuthorsBlockConfig`) plus the depth and
    the relative scheme's bucket size; the defaults are ``scan_transformer_lm_paper`` (7 layers,
    d=128: the parameter count of the paper's 3 + 3-layer Transformer)."""

    decoder_layers: int = field(default=7, metadata={"help": "number of layers"})
    position_buckets: int = field(
        default=64, metadata={"help": "relative scheme: bucket size (the line holds the "
                                      "command, so the encoder's 64)"})
    max_target_positions: Optional[int] = II("task.max_target_positions")


class ScanTransformerLmDecoder(FairseqIncrementalDecoder):
    """``forward(src_tokens [B, T], incremental_state=None) -> (logits [B, T, V],
    {"attn": [None]})``.  Without ``incremental_state`` every position is computed on the
    real tokens only (right- or left-padded rows; zero logits at padding); with it, only
    the last position, reusing the cached keys and values (pad keys of a left-padded
    prefix are masked)."""

    def __init__(self, args, dictionary):
        super().__init__(dictionary)
        self.stack = _Stack(args, dictionary, args.decoder_layers, args.position_buckets,
                            args.max_target_positions, cross=False)
        self.output_projection = nn.Linear(args.embed_dim, len(dictionary))
        nn.init.uniform_(self.output_projection.weight, -0.1, 0.1)
        nn.init.zeros_(self.output_projection.bias)
        self.max_target_positions = args.max_target_positions

    def forward(self, src_tokens: Tensor, incremental_state=None, features_only: bool = False,
                **kwargs):
        x = self.extract_features(src_tokens, incremental_state)
        return (x if features_only else self.output_layer(x)), {"attn": [None]}

    def extract_features(self, src_tokens: Tensor, incremental_state=None, **kwargs) -> Tensor:
        """Features ``[B, T, d]`` after the final norm (zero at padding); with
        ``incremental_state``, ``[B, 1, d]`` of the last position."""
        s = self.stack
        pad_mask = src_tokens.eq(s.padding_idx)
        pad_mask = pad_mask if bool(pad_mask.any()) else None
        pos = token_positions(src_tokens, s.padding_idx)
        if incremental_state is not None:
            x = s.embed(src_tokens[:, -1:], pos[:, -1:])
            return self._layers(x, pos[:, -1:], pad_mask, incremental_state)
        rows = real_rows(src_tokens, s.padding_idx)
        x = s.embed(pack_rows(src_tokens, rows), pack_rows(pos, rows))
        x = self._layers(x, pos, pad_mask, rows=rows)
        return unpack_rows(x, rows, tuple(src_tokens.shape))

    def _layers(self, x: Tensor, pos: Tensor, pad_mask: Optional[Tensor],
                incremental_state=None, rows: Optional[Tensor] = None) -> Tensor:
        """Causal self-attention and GEGLU layers, then the final norm: ``x [n, d]`` (the
        real tokens ``rows``) or ``[B, 1, d]`` (an incremental step); ``pos`` [B, Tq]."""
        s = self.stack
        for layer in s.layers:
            h = layer.self_norm(x)
            x = x + layer.dropout(layer.self_attn(
                h, key_padding_mask=pad_mask, causal=True, q_pos=pos, rope=s.rope,
                rel_q=s.relative, rel_k=s.relative, incremental_state=incremental_state,
                rows=rows))
            x = x + layer.dropout(layer.ffn(layer.ffn_norm(x)))
        return s.final_norm(x)

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(features)

    def max_positions(self):
        return self.max_target_positions


@register_model("scan_transformer_lm", dataclass=ScanTransformerLmConfig)
class ScanTransformerLmModel(FairseqLanguageModel):
    """The authors' block as a decoder-only model (see module docstring).

    Architectures: ``scan_transformer_lm`` (= ``scan_transformer_lm_paper``: 7 layers, d=128,
    sinusoidal), ``scan_transformer_lm_relative``, ``_rope``, ``_learned``, and the
    Experiment 2 sizes ``scan_transformer_lm_exp2_l2`` (5 layers) / ``_l3`` (7 layers), d=256.
    """

    @classmethod
    def build_model(cls, args, task):
        """Build from a :class:`ScanTransformerLmConfig`.

        Raises:
            ValueError: ``--rope-variant authors`` without the rope scheme.
        """
        base_architecture(args)
        if str(args.position_encoding) != "rope" and str(args.rope_variant) != "standard":
            raise ValueError(f"--rope-variant {args.rope_variant} applies only to "
                             f"--position-encoding rope, not {args.position_encoding}. Fix: use "
                             "--arch scan_transformer_lm_rope")
        if safe_getattr(args, "max_target_positions", None) is None:
            args.max_target_positions = DEFAULT_MAX_POSITIONS
        return cls(ScanTransformerLmDecoder(args, task.target_dictionary))


def base_architecture(args):
    """Fill unset options with the defaults of :class:`ScanTransformerLmConfig` and an unset
    ``attention_heads`` with d/64 (at least 1)."""
    fill_defaults(args, ScanTransformerLmConfig)
    heads = safe_getattr(args, "attention_heads", None)
    args.attention_heads = max(1, args.embed_dim // 64) if heads is None else heads


@register_model_architecture("scan_transformer_lm", "scan_transformer_lm_paper")
def scan_transformer_lm_paper(args):
    """7 layers, d=128, sinusoidal: the parameter count of ``scan_transformer_paper``."""
    base_architecture(args)


@register_model_architecture("scan_transformer_lm", "scan_transformer_lm_relative")
def scan_transformer_lm_relative(args):
    """``scan_transformer_lm_paper`` with DeBERTa relative positions (buckets 64)."""
    args.position_encoding = "relative"
    base_architecture(args)


@register_model_architecture("scan_transformer_lm", "scan_transformer_lm_rope")
def scan_transformer_lm_rope(args):
    """``scan_transformer_lm_paper`` with rotary positions (theta 1000)."""
    args.position_encoding = "rope"
    base_architecture(args)


@register_model_architecture("scan_transformer_lm", "scan_transformer_lm_learned")
def scan_transformer_lm_learned(args):
    """``scan_transformer_lm_paper`` with a learned table per position."""
    args.position_encoding = "learned"
    base_architecture(args)


@register_model_architecture("scan_transformer_lm", "scan_transformer_lm_exp2_l2")
def scan_transformer_lm_exp2_l2(args):
    """Experiment 2, beside ``scan_transformer_exp2_l2`` (2 + 2 layers, d=256, 72 d^2): 5
    layers, d=256 (80 d^2)."""
    args.embed_dim = safe_getattr(args, "embed_dim", 256)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 5)
    base_architecture(args)


@register_model_architecture("scan_transformer_lm", "scan_transformer_lm_exp2_l3")
def scan_transformer_lm_exp2_l3(args):
    """Experiment 2, beside ``scan_transformer_exp2_l3`` (3 + 3 layers, d=256): 7 layers,
    d=256."""
    args.embed_dim = safe_getattr(args, "embed_dim", 256)
    base_architecture(args)
