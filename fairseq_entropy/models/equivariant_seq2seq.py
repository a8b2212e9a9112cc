"""Permutation-equivariant recurrent seq2seq with attention (Gordon et al., ICLR 2020).

The built-in-prior control of the entropy paper: a model equivariant to permutations of the
verbs (default: the cyclic group over the verbs of the data and, in parallel, their actions),
so whatever it learns for one verb holds for every verb.  Hidden states are functions on the
group, ``[B, |G|, H]``; the layers live in :mod:`fairseq_entropy.modules.equivariant`.

Encoder: G-embedding, (bidirectional) G-RNN/GRU/LSTM layers.  Decoder, per step: G-embedding
of the previous action, invariant-score attention from the previous state, ``tanh`` of a
G-convolution of ``[embedding; context]``, G-recurrent layers, equivariant output layer with
orbit-tied biases.  So ``log p(g . z | g . x, g . y_<t) = log p(z | x, y_<t)`` for every g.

Architectures: ``equivariant_seq2seq`` (dataclass defaults), ``equivariant_seq2seq_small`` (the
CPU-sized configuration of the presets) and ``equivariant_seq2seq_gordon`` (close to Gordon et
al.'s command).  The group comes from the shared dictionary unless ``--equivariant-words`` /
``--equivariant-actions`` name it (see :func:`~fairseq_entropy.modules.equivariant.verb_orbits`).
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.utils import safe_getattr

from ..modules.equivariant import (
    CELLS,
    CyclicGroup,
    GAttention,
    GConv,
    GEmbedding,
    GOutputLayer,
    GRecurrentCell,
    VocabularyAction,
    dictionary_action,
    verb_orbits,
)
from .defaults import fill_defaults


@dataclass
class EquivariantSeq2SeqConfig(FairseqDataclass):
    """Options of :class:`EquivariantSeq2SeqModel` (sizes are per group element)."""

    cell: ChoiceEnum(CELLS) = field(default="gru",
                                    metadata={"help": "recurrent cell: rnn, gru or lstm"})
    embed_dim: int = field(default=64, metadata={"help": "K: size of psi, per group element"})
    hidden_dim: int = field(default=64,
                            metadata={"help": "H: recurrent state size, per group element"})
    encoder_layers: int = field(default=1,
                                metadata={"help": "number of encoder G-recurrent layers"})
    decoder_layers: int = field(default=1,
                                metadata={"help": "number of decoder G-recurrent layers"})
    encoder_bidirectional: bool = field(default=False, metadata={"help": "bidirectional encoder"})
    dropout: float = field(default=0.1, metadata={"help": "dropout on embeddings and states"})
    decoder_input: ChoiceEnum(["equivariant", "invariant"]) = field(
        default="equivariant",
        metadata={"help": "decoder input: the G-embedding of the previous token (Gordon et al.), "
                          "or its mean over G (invariant: the decoder then cannot compare the "
                          "identity of its previous output with the source verbs)"},
    )
    share_decoder_input_output_embed: bool = field(
        default=False,
        metadata={"help": "tie the decoder's input and output G-embeddings (needs K == H)"}
    )
    equivariant_words: Optional[str] = field(
        default=None,
        metadata={"help": "comma-separated equivalent source words in group order "
                          "(default: every word w with action W or I_W in the dictionary, sorted)"},
    )
    equivariant_actions: Optional[str] = field(
        default=None,
        metadata={"help": "comma-separated actions of --equivariant-words, same order "
                          "(default: W or I_W for each word)"},
    )
    max_source_positions: int = field(default=1024, metadata={"help": "max source length"})
    max_target_positions: int = field(default=1024, metadata={"help": "max target length"})


def _split(option: Optional[str]) -> Optional[List[str]]:
    if option is None or str(option).strip() == "":
        return None
    return [t.strip() for t in str(option).split(",") if t.strip()]


def _run_layer(cell: GRecurrentCell, x: Tensor, keep: Tensor,
               reverse: bool) -> Tuple[Tensor, Tensor]:
    """Run one G-recurrent layer over ``x [B, S, |G|, K]``; returns outputs and final h.

    ``keep [B, S]`` is False at padding: there the state is carried over unchanged, so
    left or right padding does not change any state at a real token.
    """
    bsz, seqlen = x.shape[:2]
    x_proj = cell.project_input(x).unbind(1)  # unbind once: per-step slicing is slow in backward
    hidden_matrix = cell.hidden_map.matrix()
    zeros = x.new_zeros(bsz, x.shape[2], cell.hidden_size)
    state = cell.initial_state(zeros)
    outputs: List[Optional[Tensor]] = [None] * seqlen
    steps = range(seqlen - 1, -1, -1) if reverse else range(seqlen)
    for t in steps:
        new = cell.step(x_proj[t], state, hidden_matrix)
        m = keep[:, t].view(bsz, 1, 1)
        state = tuple(torch.where(m, a, b) for a, b in zip(new, state))
        outputs[t] = state[0]
    return torch.stack(outputs, dim=1), state[0]


class EquivariantEncoder(FairseqEncoder):
    """G-embedding then (bidirectional) G-recurrent layers (Gordon et al.).

    Shapes:
        ``src_tokens [B, S]`` -> dict of lists (fairseq convention):
        ``encoder_out [B, S, |G|, H]`` (attention keys/values), ``encoder_padding_mask [B, S]``,
        ``encoder_final [B, |G|, H]`` (initial decoder state).
    """

    def __init__(self, cfg, dictionary, action: VocabularyAction):
        super().__init__(dictionary)
        group = action.group
        self.padding_idx = dictionary.pad()
        self.dropout = cfg.dropout
        self.bidirectional = cfg.encoder_bidirectional
        self.embed_tokens = GEmbedding(action, cfg.embed_dim, padding_idx=self.padding_idx)
        dirs = 2 if self.bidirectional else 1
        self.forward_cells = torch.nn.ModuleList()
        self.backward_cells = torch.nn.ModuleList()
        for layer in range(cfg.encoder_layers):
            in_dim = cfg.embed_dim if layer == 0 else dirs * cfg.hidden_dim
            self.forward_cells.append(GRecurrentCell(group, in_dim, cfg.hidden_dim, cfg.cell))
            if self.bidirectional:
                self.backward_cells.append(GRecurrentCell(group, in_dim, cfg.hidden_dim, cfg.cell))
        if self.bidirectional:
            self.output_map = GConv(group, 2 * cfg.hidden_dim, cfg.hidden_dim)
            self.final_map = GConv(group, 2 * cfg.hidden_dim, cfg.hidden_dim)
        self.max_source_positions = cfg.max_source_positions

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **kwargs):
        padding_mask = src_tokens.eq(self.padding_idx)
        keep = ~padding_mask
        x = F.dropout(self.embed_tokens(src_tokens), p=self.dropout, training=self.training)
        final = None
        for layer, fwd in enumerate(self.forward_cells):
            out_f, fin_f = _run_layer(fwd, x, keep, reverse=False)
            if self.bidirectional:
                out_b, fin_b = _run_layer(self.backward_cells[layer], x, keep, reverse=True)
                x = torch.cat([out_f, out_b], dim=-1)
                final = torch.cat([fin_f, fin_b], dim=-1)
            else:
                x, final = out_f, fin_f
            if layer + 1 < len(self.forward_cells):
                x = F.dropout(x, p=self.dropout, training=self.training)
        if self.bidirectional:
            x = torch.tanh(self.output_map(x))
            final = torch.tanh(self.final_map(final))
        return {
            "encoder_out": [x],
            "encoder_padding_mask": [padding_mask],
            "encoder_final": [final],
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Select ``new_order`` along the batch dimension (beam search)."""
        return {k: [t.index_select(0, new_order) for t in v] for k, v in encoder_out.items()}

    def max_positions(self) -> int:
        return self.max_source_positions


class EquivariantDecoder(FairseqIncrementalDecoder):
    """Attentional G-recurrent decoder with an equivariant output layer.

    Step t: ``e = G-emb(y_{t-1})`` (or its mean over G with ``--decoder-input invariant``);
    ``context = attend(h_{t-1}, encoder_out)``;
    ``x = tanh([e; context] * W_c)``; G-recurrent layers; ``logits = out(h_t)``.
    Incremental decoding keeps every layer's state in ``incremental_state``.

    Shapes:
        ``prev_output_tokens [B, T]`` -> ``(logits [B, T, V], {"attn": [[B, T, S]]})``; with
        ``incremental_state`` only the last token is read and ``T = 1``.
    """

    def __init__(self, cfg, dictionary, action: VocabularyAction):
        super().__init__(dictionary)
        group = action.group
        self.dropout = cfg.dropout
        self.cell_type = cfg.cell
        self.hidden_dim = cfg.hidden_dim
        self.embed_tokens = GEmbedding(action, cfg.embed_dim, padding_idx=dictionary.pad())
        self.invariant_input = cfg.decoder_input == "invariant"
        self.attention = GAttention(group, cfg.hidden_dim, cfg.hidden_dim)
        self.combine = GConv(group, cfg.embed_dim + cfg.hidden_dim, cfg.hidden_dim)
        self.cells = torch.nn.ModuleList(
            GRecurrentCell(group, cfg.hidden_dim, cfg.hidden_dim, cfg.cell)
            for _ in range(cfg.decoder_layers)
        )
        if cfg.share_decoder_input_output_embed:
            if cfg.embed_dim != cfg.hidden_dim:
                raise ValueError("--share-decoder-input-output-embed needs "
                                 "--embed-dim == --hidden-dim")
            out_embed = self.embed_tokens
        else:
            out_embed = GEmbedding(action, cfg.hidden_dim)
        self.output_projection = GOutputLayer(action, out_embed)
        self.max_target_positions = cfg.max_target_positions

    # -- state -------------------------------------------------------------------------
    def _initial_states(self, encoder_out) -> List[Tuple[Tensor, ...]]:
        h0 = encoder_out["encoder_final"][0]
        return [cell.initial_state(h0) for cell in self.cells]

    def _pack(self, states: List[Tuple[Tensor, ...]]) -> Dict[str, Optional[Tensor]]:
        packed: Dict[str, Optional[Tensor]] = {"h": torch.stack([s[0] for s in states])}
        if self.cell_type == "lstm":
            packed["c"] = torch.stack([s[1] for s in states])
        return packed

    def _unpack(self, packed: Dict[str, Optional[Tensor]]) -> List[Tuple[Tensor, ...]]:
        h = packed["h"]
        assert h is not None
        if self.cell_type == "lstm":
            c = packed["c"]
            assert c is not None
            return [(h[i], c[i]) for i in range(h.shape[0])]
        return [(h[i],) for i in range(h.shape[0])]

    # -- forward -----------------------------------------------------------------------
    def forward(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                features_only: bool = False, **kwargs):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, prev_output_tokens: Tensor, encoder_out=None,
                         incremental_state=None, **kwargs):
        """Decoder states ``[B, T, |G|, H]`` and ``{"attn": [alpha [B, T, S]]}``."""
        if encoder_out is None:
            raise ValueError("the equivariant decoder needs encoder_out")
        keys = encoder_out["encoder_out"][0]
        padding_mask = encoder_out["encoder_padding_mask"][0]
        cached = None
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            cached = self.get_incremental_state(incremental_state, "cached_state")
        states = self._unpack(cached) if cached is not None else self._initial_states(encoder_out)

        emb = self.embed_tokens(prev_output_tokens)
        if self.invariant_input:
            emb = emb.mean(dim=-2, keepdim=True).expand_as(emb)
        emb = F.dropout(emb, p=self.dropout, training=self.training).unbind(1)
        query_matrix = self.attention.query_map.matrix()
        combine_matrix = self.combine.matrix()
        cell_mats = [(cell, cell.input_map.matrix(), cell.hidden_map.matrix())
                     for cell in self.cells]
        outs, attns = [], []
        for emb_t in emb:
            context, alpha = self.attention(states[-1][0], keys, padding_mask, query_matrix)
            x = torch.tanh(self.combine.apply_matrix(torch.cat([emb_t, context], dim=-1),
                                                     combine_matrix))
            new_states = []
            for i, (cell, in_mat, hid_mat) in enumerate(cell_mats):
                if i > 0:
                    x = F.dropout(x, p=self.dropout, training=self.training)
                state = cell.step(cell.input_map.apply_matrix(x, in_mat), states[i], hid_mat)
                new_states.append(state)
                x = state[0]
            states = new_states
            outs.append(x)
            attns.append(alpha)
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "cached_state", self._pack(states))
        x = torch.stack(outs, dim=1)
        x = F.dropout(x, p=self.dropout, training=self.training)
        return x, {"attn": [torch.stack(attns, dim=1)], "inner_states": None}

    def output_layer(self, features: Tensor) -> Tensor:
        """Logits ``[B, T, V]`` from states ``[B, T, |G|, H]``."""
        return self.output_projection(features)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is None:
            return
        reordered = {k: (v.index_select(1, new_order) if v is not None else None)
                     for k, v in cached.items()}
        self.set_incremental_state(incremental_state, "cached_state", reordered)

    def max_positions(self) -> int:
        return self.max_target_positions


@register_model("equivariant_seq2seq", dataclass=EquivariantSeq2SeqConfig)
class EquivariantSeq2SeqModel(FairseqEncoderDecoderModel):
    """Permutation-equivariant seq2seq of Gordon et al. (ICLR 2020), verb equivariance.

    The group is cyclic over the equivalent words (see :func:`verb_orbits`) and acts on the
    source and target dictionaries through the words and their actions.

    Raises:
        ValueError: (in :meth:`build_model`) if the group cannot be derived from the
            dictionaries or the options are inconsistent.
    """

    def __init__(self, encoder, decoder, words: List[str], actions: List[str]):
        super().__init__(encoder, decoder)
        self.equivariant_words = list(words)
        self.equivariant_actions = list(actions)

    @classmethod
    def build_model(cls, cfg, task):
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        words, actions = verb_orbits(src_dict, _split(cfg.equivariant_words),
                                     _split(cfg.equivariant_actions))
        group = CyclicGroup(len(words))
        src_action = dictionary_action(group, src_dict, words, actions)
        tgt_action = dictionary_action(group, tgt_dict, words, actions)
        encoder = EquivariantEncoder(cfg, src_dict, src_action)
        decoder = EquivariantDecoder(cfg, tgt_dict, tgt_action)
        return cls(encoder, decoder, words, actions)

    def max_positions(self):
        return (self.encoder.max_positions(), self.decoder.max_positions())


def base_architecture(args):
    """Fill the options ``args`` lacks with the defaults of :class:`EquivariantSeq2SeqConfig`
    (G-GRU, K = H = 64, one unidirectional encoder and one decoder layer, dropout 0.1); given
    values, even 0 or False, are kept."""
    fill_defaults(args, EquivariantSeq2SeqConfig)


@register_model_architecture("equivariant_seq2seq", "equivariant_seq2seq_gordon")
def equivariant_seq2seq_gordon(args):
    """Close to Gordon et al.'s SCAN command: G-RNN cells, attention, bidirectional encoder,
    no dropout; K = H = 64 and one layer each, the config's defaults.

    (Their hidden size was 256 per group element and training ran with batch size 1; this
    architecture keeps 64 so that it trains on a CPU.)
    """
    args.cell = safe_getattr(args, "cell", "rnn")
    args.encoder_bidirectional = safe_getattr(args, "encoder_bidirectional", True)
    args.dropout = safe_getattr(args, "dropout", 0.0)
    base_architecture(args)


@register_model_architecture("equivariant_seq2seq", "equivariant_seq2seq_small")
def equivariant_seq2seq_small(args):
    """The configuration of our CPU runs: G-GRU, bidirectional, K = H = 32 per group element
    (one layer each and dropout 0.1: the config's defaults)."""
    args.embed_dim = safe_getattr(args, "embed_dim", 32)
    args.hidden_dim = safe_getattr(args, "hidden_dim", 32)
    args.encoder_bidirectional = safe_getattr(args, "encoder_bidirectional", True)
    base_architecture(args)
