# ruff: noqa: E501, E741  (a diagnostic script)
"""One batch forward through the authors' Transformer and this plugin's scan_transformer_paper
with the same weights (theirs copied into ours), in eval mode; and the initial loss of each
implementation's own initialisation over the same commands."""

import sys
from pathlib import Path

import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from authors_model import CTOI as ctoi
from authors_model import build_theirs, copy_weights

torch.manual_seed(0)
DATA = "/work/runs/tf2/bin_high20"
#: the plugin in this repository (this script lives in studies/<study>/)
USER_DIR = str(Path(__file__).resolve().parents[2] / "fairseq_entropy")
theirs = build_theirs().eval()
parser = options.get_training_parser()
ns = options.parse_args_and_arch(
    parser,
    [
        DATA,
        "--user-dir",
        USER_DIR,
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


copy_weights(theirs, ours, sd, td)

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
    m = build_theirs().eval()
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
