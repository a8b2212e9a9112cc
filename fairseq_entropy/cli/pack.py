"""``fairseq-entropy pack PACK_DIR --run DATA SEED RUN_DIR [MAX_UPDATE] ...``: write a pack
description (``pack.json``) for ``fairseq-train PACK_DIR --task packed_systematicity``
(:func:`fairseq_entropy.tasks.packed_runs.write_pack`)."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    """Add the ``pack`` subcommand to the subparsers ``sub``."""
    p = sub.add_parser("pack", help="write PACK_DIR/pack.json listing the runs that one "
                                    "fairseq-train --task packed_systematicity trains")
    p.add_argument("pack_dir", metavar="PACK_DIR", help="directory of the pack description "
                                                        "(fairseq-train's data argument)")
    p.add_argument("--run", nargs="+", action="append", required=True,
                   metavar=("DATA SEED RUN_DIR", "MAX_UPDATE"),
                   help="one run: its data-bin directory, training seed and run directory "
                        "(its checkpoints go to RUN_DIR/checkpoints), and optionally its own "
                        "number of updates (fairseq-train's --max-update is then the largest "
                        "of the runs'; docs/packing.md, runs of their own length); repeat "
                        "per run")
    p.add_argument("--force", action="store_true",
                   help="replace a PACK_DIR/pack.json that lists other runs (a packed "
                        "checkpoint in the pack's save directory then no longer matches it)")


def run(args) -> None:
    """``pack``: check the runs and write the description; print its path."""
    from ..files import check_fairseq_path
    from ..tasks.packed_runs import (PACK_FILE, PackError, read_description, read_pack,
                                     write_pack)

    check_fairseq_path(args.pack_dir, "PACK_DIR")  # fairseq-train's data argument
    if Path(args.pack_dir).exists() and not Path(args.pack_dir).is_dir():
        raise PackError(f"PACK_DIR {args.pack_dir} is a file. Fix: give a directory (created "
                        "if missing)")
    runs = []
    for values in args.run:
        if len(values) not in (3, 4):
            raise PackError(f"--run {' '.join(values)}: {len(values)} values. Fix: give DATA "
                            "SEED RUN_DIR and optionally MAX_UPDATE")
        data, seed, run_dir = values[:3]
        limit = values[3] if len(values) == 4 else None
        if limit is not None and (not limit.isdigit() or int(limit) < 1):
            raise PackError(f"--run {' '.join(values)}: MAX_UPDATE {limit!r} is not an "
                            "integer >= 1. Fix: give the run's number of updates, or leave it "
                            "out (fairseq-train's --max-update)")
        if not seed.isdigit():
            raise PackError(f"--run {data} {seed} {run_dir}: the seed {seed!r} is not an "
                            "integer >= 0. Fix: give one, as fairseq-train --seed takes")
        if not run_dir.strip() or Path(run_dir).is_file():
            raise PackError(f"--run {data} {seed} {run_dir!r}: RUN_DIR is "
                            + ("empty" if not run_dir.strip() else "a file")
                            + ". Fix: give the run's directory (created if missing)")
        if Path(run_dir).resolve() == Path(args.pack_dir).resolve():
            raise PackError(f"--run {data} {seed} {run_dir}: RUN_DIR is PACK_DIR, so the "
                            "run's checkpoints would go where the pack's are. Fix: give the "
                            "run a directory of its own")
        # each run's task loads its data as fairseq-train would its data argument
        check_fairseq_path(Path(data).resolve(), f"--run {data} {seed} {run_dir}: DATA")
        if not Path(data).is_dir():
            raise PackError(f"--run {data}: no such directory. Fix: give the binarized level "
                            "(fairseq-entropy binarize --out)")
        if not (Path(data) / "dict.in.txt").is_file():
            raise PackError(f"--run {data}: no dict.in.txt there, not a data-bin directory. "
                            "Fix: give the binarized level (fairseq-entropy binarize --out)")
        runs.append({"data": str(Path(data).resolve()), "seed": int(seed),
                     "run_dir": str(Path(run_dir).resolve()),
                     **({"max_update": int(limit)} if limit is not None else {})})
    same = [(r["data"], r["seed"]) for r in runs]
    repeated = sorted({x for x in same if same.count(x) > 1})
    if repeated:
        raise PackError(f"--run: two runs train {repeated[0][0]} with seed {repeated[0][1]}: "
                        "the same run twice. Fix: give them different seeds or data")
    dirs = [r["run_dir"] for r in runs]
    twice = sorted({d for d in dirs if dirs.count(d) > 1})
    if twice:  # checked before anything is written
        raise PackError(f"--run: two runs share the run directory {twice[0]}. Fix: give every "
                        "run its own RUN_DIR")
    old = Path(args.pack_dir) / PACK_FILE
    if old.is_file() and not args.force:
        def key(rs):
            return [(r["data"], r["seed"], r["run_dir"], r.get("max_update")) for r in rs]

        try:
            same = key(read_description(args.pack_dir)["runs"]) == key(runs)
        except PackError:  # unreadable: not the same runs
            same = False
        if not same:
            raise PackError(f"{old} already lists other runs (a packed checkpoint trained on "
                            "it would no longer match). Fix: give a new PACK_DIR, or --force "
                            "to replace it")
    path = write_pack(args.pack_dir, runs)
    read_pack(args.pack_dir)  # the description reads back (distinct run dirs)
    print(path)
