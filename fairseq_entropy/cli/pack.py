"""``fairseq-entropy pack PACK_DIR --run DATA SEED RUN_DIR ...``: write a pack description
(``pack.json``) for ``fairseq-train PACK_DIR --task packed_systematicity``
(:func:`fairseq_entropy.tasks.packed_runs.write_pack`)."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    """Add the ``pack`` subcommand to the subparsers ``sub``."""
    p = sub.add_parser("pack", help="write PACK_DIR/pack.json listing the runs that one "
                                    "fairseq-train --task packed_systematicity trains")
    p.add_argument("pack_dir", metavar="PACK_DIR", help="directory of the pack description "
                                                        "(fairseq-train's data argument)")
    p.add_argument("--run", nargs=3, action="append", required=True,
                   metavar=("DATA", "SEED", "RUN_DIR"),
                   help="one run: its data-bin directory, training seed and run directory "
                        "(its checkpoints go to RUN_DIR/checkpoints); repeat per run")


def run(args) -> None:
    """``pack``: check the runs and write the description; print its path."""
    from ..tasks.packed_runs import PackError, read_pack, write_pack

    runs = []
    for data, seed, run_dir in args.run:
        if not seed.lstrip("-").isdigit():
            raise PackError(f"--run {data} {seed} {run_dir}: the seed {seed!r} is not an int. "
                            "Fix: give an integer seed")
        if not (Path(data) / "dict.in.txt").is_file():
            raise PackError(f"--run {data}: no dict.in.txt there, not a data-bin directory. "
                            "Fix: give the binarized level (fairseq-entropy binarize --out)")
        runs.append({"data": str(Path(data).resolve()), "seed": int(seed),
                     "run_dir": str(Path(run_dir).resolve())})
    dirs = [r["run_dir"] for r in runs]
    twice = sorted({d for d in dirs if dirs.count(d) > 1})
    if twice:  # checked before anything is written
        raise PackError(f"--run: two runs share the run directory {twice[0]}. Fix: give every "
                        "run its own RUN_DIR")
    path = write_pack(args.pack_dir, runs)
    read_pack(args.pack_dir)  # the description reads back (distinct run dirs)
    print(path)
