"""In-process fairseq-train runs for the packed-run tests: tiny levels of the paper grammar,
a pack of them, and the trainings (alone and packed) as fairseq-train's own main()."""

import json
import os
from pathlib import Path

import torch

import fairseq_entropy
from fairseq_entropy.scan.dictionary import write_dictionary
from fairseq_entropy.scan.grammar import Grammar

from _toy import first_commands  # noqa: E402

USER_DIR = os.path.dirname(fairseq_entropy.__file__)


def write_levels(root: Path, n: int, count: int, sizes=None):
    """``count`` levels of ``n`` two-clause commands each (``sizes``: level i has
    ``sizes[i]``; disjoint slices of the paper grammar's commands, so that the levels' data
    differ), binarized in this process with the grammar's fixed dictionary (as
    ``fairseq-entropy binarize`` does, without its fairseq-preprocess subprocesses), each with
    a small manifest; returns their dirs."""
    from fairseq.data import indexed_dataset

    from fairseq_entropy.data import SymbolDictionary

    grammar = Grammar.paper()
    sizes = list(sizes) if sizes is not None else [n] * count
    pairs = first_commands(grammar, sum(sizes))
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    out = []
    for i, (start, n) in enumerate(zip(starts, sizes)):
        dest = root / f"bin{i}"
        dest.mkdir(parents=True)
        for side in ("in", "out"):
            write_dictionary(dest / f"dict.{side}.txt", grammar)
        d = SymbolDictionary.load(str(dest / "dict.in.txt"))
        part = pairs[start:start + n]
        for split in ("train", "valid", "test"):
            for side, field in (("in", "command"), ("out", "actions")):
                prefix = str(dest / f"{split}.in-out.{side}")
                builder = indexed_dataset.make_builder(prefix + ".bin", "mmap",
                                                       vocab_size=len(d))
                for example in part:
                    builder.add_item(d.encode_line(getattr(example, field),
                                                   add_if_not_exist=False))
                builder.finalize(prefix + ".idx")
        (dest / "manifest.json").write_text(json.dumps(
            {"experiment": "exp1", "level": f"level{i}", "seed": i,
             "sizes": {"train": n}}))
        out.append(dest)
    return out


def write_pack_dir(root: Path, datas, seeds, max_updates=None) -> Path:
    pack = root / "pack"
    pack.mkdir(parents=True, exist_ok=True)
    runs = [{"data": str(d), "seed": s, "run_dir": str(root / f"run{i}")}
            for i, (d, s) in enumerate(zip(datas, seeds))]
    for run, limit in zip(runs, max_updates or []):
        run["max_update"] = limit
    (pack / "pack.json").write_text(json.dumps({"runs": runs}))
    return pack


def fairseq_train(args) -> None:
    """fairseq-train's main() on ``args`` in this process, which starts, as a new process
    does, without a best validation value (fairseq keeps it on ``save_checkpoint.best``)."""
    from fairseq import checkpoint_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train

    parser = options.get_training_parser()
    ns = options.parse_args_and_arch(parser, [str(a) for a in args])
    if hasattr(checkpoint_utils.save_checkpoint, "best"):
        del checkpoint_utils.save_checkpoint.best
    train.main(convert_namespace_to_omegaconf(ns))


def fairseq_train_process(args) -> None:
    """fairseq-train on ``args`` in a process of its own: nothing that earlier trainings of
    this process left behind (registries, patched functions, random state) reaches it.  One
    thread: with several, a CPU's scatter-add (the embedding's gradient) sums in the order its
    threads reach it, which a loaded machine changes, so two trainings would differ in the
    last bits."""
    import os
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "fairseq_cli.train", *[str(a) for a in args]],
                   check=True, capture_output=True, text=True,
                   env=dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"))


def common_args(save_dir, updates: int, batch: int):
    return ["--user-dir", USER_DIR, "--source-lang", "in", "--target-lang", "out",
            "--batch-size", str(batch), "--max-update", str(updates), "--save-dir", save_dir,
            "--no-epoch-checkpoints", "--cpu", "--num-workers", "0", "--log-format", "none",
            "--no-progress-bar"]


def load_model(path):
    from fairseq_entropy.checkpoint import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()
    return torch.load(path, map_location="cpu", weights_only=True)
