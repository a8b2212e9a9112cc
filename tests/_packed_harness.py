"""In-process fairseq-train runs for the packed-run tests: tiny levels of the paper grammar,
a pack of them, and the trainings (alone and packed) as fairseq-train's own main()."""

import json
import os
from pathlib import Path

import torch

import fairseq_entropy
from fairseq_entropy.scan.binarize import binarize_level
from fairseq_entropy.scan.datafiles import Example, write_pair
from fairseq_entropy.scan.grammar import Grammar

USER_DIR = os.path.dirname(fairseq_entropy.__file__)


def write_levels(root: Path, n: int, count: int):
    """``count`` levels of ``n`` two-clause commands each (disjoint slices of the paper
    grammar's commands, so that the levels' data differ), binarized; returns their dirs."""
    grammar = Grammar.paper()
    commands = []
    for c in grammar.commands(one_clause=False):
        commands.append(Example(str(c), " ".join(grammar.interpret(c))))
        if len(commands) == n * count:
            break
    out = []
    for i in range(count):
        raw = root / f"raw{i}"
        raw.mkdir(parents=True)
        part = commands[i * n:(i + 1) * n]
        for split in ("train", "valid", "test"):
            write_pair(raw / split, part)
        out.append(binarize_level(raw, root / f"bin{i}", grammar))
    return out


def write_pack_dir(root: Path, datas, seeds) -> Path:
    pack = root / "pack"
    pack.mkdir(parents=True, exist_ok=True)
    runs = [{"data": str(d), "seed": s, "run_dir": str(root / f"run{i}")}
            for i, (d, s) in enumerate(zip(datas, seeds))]
    (pack / "pack.json").write_text(json.dumps({"runs": runs}))
    return pack


def fairseq_train(args) -> None:
    """fairseq-train's main() on ``args`` in this process."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train

    parser = options.get_training_parser()
    ns = options.parse_args_and_arch(parser, [str(a) for a in args])
    train.main(convert_namespace_to_omegaconf(ns))


def common_args(save_dir, updates: int, batch: int):
    return ["--user-dir", USER_DIR, "--source-lang", "in", "--target-lang", "out",
            "--batch-size", str(batch), "--max-update", str(updates), "--save-dir", save_dir,
            "--no-epoch-checkpoints", "--cpu", "--num-workers", "0", "--log-format", "none",
            "--no-progress-bar"]


def load_model(path):
    from fairseq_entropy.checkpoint import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()
    return torch.load(path, map_location="cpu", weights_only=True)
