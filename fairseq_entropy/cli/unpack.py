"""``fairseq-entropy unpack PACK_DIR``: every run of a pack as ordinary checkpoints
(:func:`fairseq_entropy.tasks.packed_runs.unpack`)."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    """Add the ``unpack`` subcommand to the subparsers ``sub``."""
    p = sub.add_parser(
        "unpack", help="write each run of a packed fairseq-train (--task packed_systematicity) "
                       "as ordinary checkpoint_last.pt / checkpoint_best.pt in its run_dir")
    p.add_argument("pack", metavar="PACK", help="the pack's save directory (holding its packed "
                                                "checkpoint_last.pt) or that checkpoint file")


def run(args) -> None:
    """``unpack``: write the runs' checkpoints and print their paths."""
    from ..tasks.packed_runs import PackError, unpack

    path = Path(args.pack)
    if path.is_dir():
        path = path / "checkpoint_last.pt"
    if not path.is_file():
        inner = Path(args.pack) / "checkpoints" / "checkpoint_last.pt"
        hint = f"{inner.parent}, where this pack's checkpoints are" if inner.is_file() else \
            "the --save-dir of the packed fairseq-train run (after its first checkpoint)"
        raise PackError(f"{path}: no packed checkpoint. Fix: give {hint}, or the file")
    for written in unpack(str(path)):
        print(written)
