# ruff: noqa: E402  (imports the authors' code after putting it on sys.path)
"""The authors' Transformer (ltgoslo/systematicity-entropy, checked out at /work/runs/authors)
and the copy of its weights into this plugin's scan_transformer_paper, shared by
same_weights.py and theirs_to_fairseq.py."""

import json
import sys

import torch

sys.path[:0] = [
    "/work/runs/authors",
    "/work/runs/authors/systematicity_entropy",
    "/work/runs/authors/stub",
]
from systematicity_entropy.models.transformer import Transformer

#: the authors' token -> id map (one vocabulary for commands and actions)
CTOI = json.load(open("/work/runs/authors/static/scan_tokenizer.json"))


def build_theirs() -> torch.nn.Module:
    """The authors' Experiment 1 Transformer: 3+3 layers, d = 128, dropout 0.1."""
    return Transformer(len(CTOI), len(CTOI), 3, 128, 0.1, CTOI["[PAD]"], 1000, 64, 4)


def their_id(d, i, start=False):
    """The authors' id of token ``i`` of fairseq dictionary ``d`` (None if they lack it);
    fairseq's eos is their [BOS] as the decoder's start token, else their [EOS]."""
    if i == d.eos():
        return CTOI["[BOS]" if start else "[EOS]"]
    return CTOI.get(d[i])


@torch.no_grad()
def copy_weights(theirs, ours, sd, td):
    """Copy the authors' model ``theirs`` into ``ours`` (scan_transformer_paper with source and
    target dictionaries ``sd``, ``td``).  Target tokens the authors lack (bos, pad, unk) get an
    output row of weight 0 and bias -1e9, so that greedy decoding never emits them."""
    E, D, P = ours.encoder.stack, ours.decoder.stack, ours.decoder.output_projection
    for i in range(len(sd)):
        j = their_id(sd, i)
        if j is not None:
            E.embed_tokens.weight[i] = theirs.input_embedding.weight[j]
    for i in range(len(td)):
        j = their_id(td, i, start=True)
        if j is not None:
            D.embed_tokens.weight[i] = theirs.output_embedding.weight[j]
        j = their_id(td, i)
        if j is None:
            P.weight[i] = 0
            P.bias[i] = -1e9
        else:
            P.weight[i] = theirs.projection.weight[j]
            P.bias[i] = theirs.projection.bias[j]

    def cp(dst, src):  # a Linear or a LayerNorm
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)

    def attn(dst, src):
        cp(dst.q_proj, src.query)
        cp(dst.k_proj, src.key)
        cp(dst.v_proj, src.value)
        cp(dst.out_proj, src.output)

    def ffn(dst, src):  # theirs: x, gate = chunk; x * gelu(gate).  ours: gelu(a) * gate
        w, b = src.linear_1.weight, src.linear_1.bias
        h = w.shape[0] // 2
        dst.proj_in.weight.copy_(torch.cat([w[h:], w[:h]]))
        dst.proj_in.bias.copy_(torch.cat([b[h:], b[:h]]))
        cp(dst.proj_out, src.linear_2)

    for lo, lt in zip(E.layers, theirs.encoder.layers):
        cp(lo.self_norm, lt.norm_1)
        attn(lo.self_attn, lt.self_attention)
        cp(lo.ffn_norm, lt.norm_2)
        ffn(lo.ffn, lt.feed_forward)
    cp(E.final_norm, theirs.encoder.output_norm)
    for lo, lt in zip(D.layers, theirs.decoder.layers):
        cp(lo.self_norm, lt.norm_1)
        attn(lo.self_attn, lt.self_attention)
        cp(lo.cross_norm, lt.norm_2)
        attn(lo.cross_attn, lt.cross_attention)
        cp(lo.ffn_norm, lt.norm_3)
        ffn(lo.ffn, lt.feed_forward)
    cp(D.final_norm, theirs.decoder.output_norm)
