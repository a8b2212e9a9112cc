# ruff: noqa: E402, E501, E741  (a diagnostic script: imports the authors' code after putting it on sys.path)
"""Copy the authors' trained Transformer (final_model.pt) into a fairseq checkpoint of
scan_transformer_paper, so that fairseq-generate decodes it greedily and fairseq-entropy score
scores it (by conjunction too).  The forward equality of the two models with the same weights
is checked by same_weights.py.  Tokens the authors' vocabulary lacks (bos, pad, unk) get bias
-1e9 in the output projection, so greedy decoding never emits them.

usage: theirs_to_fairseq.py THEIR_final_model.pt TEMPLATE_checkpoint.pt OUT.pt [SEED]"""

import json
import sys
import torch

sys.path[:0] = [
    "/work/runs/authors",
    "/work/runs/authors/systematicity_entropy",
    "/work/runs/authors/stub",
]
from systematicity_entropy.models.transformer import Transformer as Theirs
from fairseq import checkpoint_utils, tasks
import fairseq_entropy  # noqa: F401  (registers the task and model)

theirs_path, template, out = sys.argv[1:4]
ctoi = json.load(open("/work/runs/authors/static/scan_tokenizer.json"))
theirs = Theirs(len(ctoi), len(ctoi), 3, 128, 0.1, ctoi["[PAD]"], 1000, 64, 4)
theirs.load_state_dict(torch.load(theirs_path, map_location="cpu"))
state = checkpoint_utils.load_checkpoint_to_cpu(template)
cfg = state["cfg"]
task = tasks.setup_task(cfg.task)
ours = task.build_model(cfg.model)
sd, td = task.source_dictionary, task.target_dictionary


def their_id(d, i, start=False):
    if i == d.eos():
        return ctoi["[BOS]" if start else "[EOS]"]
    return ctoi.get(d[i])


with torch.no_grad():
    E, D = ours.encoder.stack, ours.decoder.stack
    for i in range(len(sd)):
        j = their_id(sd, i)
        if j is not None:
            E.embed_tokens.weight[i] = theirs.input_embedding.weight[j]
    P = ours.decoder.output_projection
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

    def cp(dst, src):
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)

    def attn(dst, src):
        cp(dst.q_proj, src.query)
        cp(dst.k_proj, src.key)
        cp(dst.v_proj, src.value)
        cp(dst.out_proj, src.output)

    def ffn(dst, src):
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
state["model"] = ours.state_dict()
state["last_optimizer_state"] = None
from omegaconf import OmegaConf

state["cfg"] = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
if len(sys.argv) > 4:  # the seed the authors' model was trained with
    state["cfg"]["common"]["seed"] = int(sys.argv[4])
torch.save(state, out)
print("wrote", out)
