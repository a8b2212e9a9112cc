# ruff: noqa: E402, E501, E741  (a diagnostic script: imports the authors' code after putting it on sys.path)
"""One batch forward through the authors' Transformer and this plugin's scan_transformer_paper
with the same weights (theirs copied into ours), in eval mode; and the initial loss of each
implementation's own initialisation over the same commands."""

import json
import sys
import torch

sys.path[:0] = [
    "/work/runs/authors",
    "/work/runs/authors/systematicity_entropy",
    "/work/runs/authors/stub",
]
from systematicity_entropy.models.transformer import Transformer as Theirs
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

torch.manual_seed(0)
DATA = "/work/runs/tf2/bin_high20"
ctoi = json.load(open("/work/runs/authors/static/scan_tokenizer.json"))
theirs = Theirs(len(ctoi), len(ctoi), 3, 128, 0.1, ctoi["[PAD]"], 1000, 64, 4).eval()
parser = options.get_training_parser()
ns = options.parse_args_and_arch(
    parser,
    [
        DATA,
        "--user-dir",
        "/work/main/fairseq_entropy",
        "--task",
        "systematicity",
        "--source-lang",
        "in",
        "--target-lang",
        "out",
        "--arch",
        "scan_transformer_paper",
        "--cpu",
    ]
    + sys.argv[1:],
)
cfg = convert_namespace_to_omegaconf(ns)
task = tasks.setup_task(cfg.task)
ours = task.build_model(cfg.model).eval()
sd, td = task.source_dictionary, task.target_dictionary


def their_id(d, i, start=False):
    w = d[i]
    if i == d.eos():
        return ctoi["[BOS]" if start else "[EOS]"]
    return ctoi.get(w)


with torch.no_grad():
    E, D = ours.encoder.stack, ours.decoder.stack
    for i in range(len(sd)):
        j = their_id(sd, i)
        if j is not None:
            E.embed_tokens.weight[i] = theirs.input_embedding.weight[j]
    for i in range(len(td)):
        j = their_id(td, i, start=True)
        if j is not None:
            D.embed_tokens.weight[i] = theirs.output_embedding.weight[j]
        j = their_id(td, i)
        if j is not None:
            ours.decoder.output_projection.weight[i] = theirs.projection.weight[j]
            ours.decoder.output_projection.bias[i] = theirs.projection.bias[j]

    def lin(dst, src):
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)

    def norm(dst, src):
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)

    def attn(dst, src):
        lin(dst.q_proj, src.query)
        lin(dst.k_proj, src.key)
        lin(dst.v_proj, src.value)
        lin(dst.out_proj, src.output)

    def ffn(
        dst, src
    ):  # theirs: x, gate = chunk; x * gelu(gate).  ours: a, gate = chunk; gelu(a) * gate
        w, b = src.linear_1.weight, src.linear_1.bias
        h = w.shape[0] // 2
        dst.proj_in.weight.copy_(torch.cat([w[h:], w[:h]]))
        dst.proj_in.bias.copy_(torch.cat([b[h:], b[:h]]))
        lin(dst.proj_out, src.linear_2)

    for lo, lt in zip(E.layers, theirs.encoder.layers):
        norm(lo.self_norm, lt.norm_1)
        attn(lo.self_attn, lt.self_attention)
        norm(lo.ffn_norm, lt.norm_2)
        ffn(lo.ffn, lt.feed_forward)
    norm(E.final_norm, theirs.encoder.output_norm)
    for lo, lt in zip(D.layers, theirs.decoder.layers):
        norm(lo.self_norm, lt.norm_1)
        attn(lo.self_attn, lt.self_attention)
        norm(lo.cross_norm, lt.norm_2)
        attn(lo.cross_attn, lt.cross_attention)
        norm(lo.ffn_norm, lt.norm_3)
        ffn(lo.ffn, lt.feed_forward)
    norm(D.final_norm, theirs.decoder.output_norm)

lines = open("/work/runs/tf2/high_20.txt").read().split("\n")[:16]
pairs = [(l.split("OUT:")[0].replace("IN:", "").strip(), l.split("OUT:")[1].strip()) for l in lines]


def pad(seqs, p):
    n = max(map(len, seqs))
    return torch.tensor([s + [p] * (n - len(s)) for s in seqs])


# theirs
src_t = pad([[ctoi[w] for w in a.split()] + [ctoi["[EOS]"]] for a, _ in pairs], ctoi["[PAD]"])
tgt_t = pad(
    [[ctoi["[BOS]"]] + [ctoi[w] for w in b.split()] + [ctoi["[EOS]"]] for _, b in pairs],
    ctoi["[PAD]"],
)
# ours (fairseq: right-padded source here; prev_output_tokens = eos + target)
src_o = pad([[sd.index(w) for w in a.split()] + [sd.eos()] for a, _ in pairs], sd.pad())
tgt_o = pad([[td.index(w) for w in b.split()] + [td.eos()] for _, b in pairs], td.pad())
prev_o = pad([[td.eos()] + [td.index(w) for w in b.split()] for _, b in pairs], td.pad())
ids = torch.tensor(
    [
        ctoi[td[i]] if i != td.eos() else ctoi["[EOS]"]
        for i in range(4, len(td))
        if td[i] in ctoi or i == td.eos()
    ]
)
common = [i for i in range(len(td)) if i == td.eos() or td[i] in ctoi]
cmap = torch.tensor([ctoi["[EOS]"] if i == td.eos() else ctoi[td[i]] for i in common])
with torch.no_grad():
    lt = theirs(src_t, src_t == ctoi["[PAD]"], tgt_t[:, :-1], tgt_t[:, :-1] == ctoi["[PAD]"])
    lo, _ = ours(src_o, torch.full((len(pairs),), src_o.shape[1]), prev_o)
    mask = tgt_o != td.pad()
    a, b = lo[..., common][mask], lt[..., cmap][mask]
    print(
        f"logits at {int(mask.sum())} real target positions, {len(common)} shared tokens: "
        f"max |ours - theirs| = {float((a - b).abs().max()):.3e} (max |logit| {float(b.abs().max()):.2f})"
    )
    ce_t = torch.nn.functional.cross_entropy(
        lt.transpose(1, 2), tgt_t[:, 1:], ignore_index=ctoi["[PAD]"]
    )
    print(
        f"loss of the same weights: theirs {float(ce_t):.6f} nats (their vocabulary of {len(ctoi)})"
    )


# initial loss of each implementation's own initialisation, 5 inits each, the same 16 commands
def init_loss_theirs(seed):
    torch.manual_seed(seed)
    m = Theirs(len(ctoi), len(ctoi), 3, 128, 0.1, ctoi["[PAD]"], 1000, 64, 4).eval()
    with torch.no_grad():
        l = m(src_t, src_t == ctoi["[PAD]"], tgt_t[:, :-1], tgt_t[:, :-1] == ctoi["[PAD]"])
        return float(
            torch.nn.functional.cross_entropy(
                l.transpose(1, 2), tgt_t[:, 1:], ignore_index=ctoi["[PAD]"]
            )
        )


def init_loss_ours(seed):
    torch.manual_seed(seed)
    m = task.build_model(cfg.model).eval()
    with torch.no_grad():
        l, _ = m(src_o, None, prev_o)
        return float(torch.nn.functional.cross_entropy(l[mask], tgt_o[mask]))


print(
    "initial loss, 5 inits (nats): theirs",
    [round(init_loss_theirs(s), 3) for s in range(5)],
    f"(vocabulary {len(ctoi)}: ln = {torch.log(torch.tensor(float(len(ctoi)))):.3f})",
)
print(
    "initial loss, 5 inits (nats): ours  ",
    [round(init_loss_ours(s), 3) for s in range(5)],
    f"(vocabulary {len(td)}: ln = {torch.log(torch.tensor(float(len(td)))):.3f})",
)
