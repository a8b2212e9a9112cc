"""Copy the authors' trained Transformer (final_model.pt) into a fairseq checkpoint of
scan_transformer_paper, so that fairseq-generate decodes it greedily and fairseq-entropy score
scores it (by conjunction too).  The forward equality of the two models with the same weights
is checked by same_weights.py.  Tokens the authors' vocabulary lacks (bos, pad, unk) get bias
-1e9 in the output projection, so greedy decoding never emits them.

usage: theirs_to_fairseq.py THEIR_final_model.pt TEMPLATE_checkpoint.pt OUT.pt [SEED]"""

import sys

import torch
from fairseq import checkpoint_utils, tasks
from omegaconf import OmegaConf

import fairseq_entropy  # noqa: F401  (registers the task and model)
from authors_model import build_theirs, copy_weights

theirs_path, template, out = sys.argv[1:4]
theirs = build_theirs()
theirs.load_state_dict(torch.load(theirs_path, map_location="cpu"))
state = checkpoint_utils.load_checkpoint_to_cpu(template)
cfg = state["cfg"]
task = tasks.setup_task(cfg.task)
ours = task.build_model(cfg.model)
sd, td = task.source_dictionary, task.target_dictionary

copy_weights(theirs, ours, sd, td)
state["model"] = ours.state_dict()
state["last_optimizer_state"] = None
state["cfg"] = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
if len(sys.argv) > 4:  # the seed the authors' model was trained with
    state["cfg"]["common"]["seed"] = int(sys.argv[4])
torch.save(state, out)
print("wrote", out)
