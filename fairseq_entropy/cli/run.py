"""``fairseq-entropy run``: train one preset on one binarized level, decode and score it
(:func:`fairseq_entropy.experiments.run.run_level`)."""

from __future__ import annotations

import argparse
import sys

from . import options

USAGE = ("fairseq-entropy run PRESET LEVEL_DATABIN RUN_DIR [options] "
         "[-- extra fairseq-train args]")


def _add_options(p) -> None:
    p.add_argument("--seed", type=options.seed, default=1, help="training seed")
    options.add_schedule_options(p)
    p.add_argument("--device", choices=["cpu", "gpu"],
                   help="where to train and decode (default: gpu when torch sees one)")
    options.add_run_options(p, "the run's")


def add_parser(sub) -> None:
    """Add the ``run`` subcommand to the subparsers ``sub``."""
    r = sub.add_parser("run", usage=USAGE,
                       help="train, decode and score one run (exit 75 when another process "
                            "holds RUN_DIR/.lock)",
                       description="Train PRESET on LEVEL_DATABIN in RUN_DIR (resuming from "
                                   "its checkpoint_last.pt), decode the test split with the "
                                   "last and the best checkpoints and score both; a run whose "
                                   "RUN_DIR/last/score.json (the last checkpoint on the whole "
                                   "test split, at the schedule asked now) exists is skipped.")
    r.add_argument("preset", help="preset name (fairseq-entropy train-args --list lists them)")
    r.add_argument("databin", metavar="LEVEL_DATABIN", help="binarized level directory")
    r.add_argument("run_dir", metavar="RUN_DIR", help="run directory (created)")
    _add_options(r)
    r.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def _split_rest(args) -> list:
    """Options given after the positionals are parsed here (argparse leaves them in the
    remainder); what follows ``--`` (split off by :func:`~fairseq_entropy.cli.main` as
    ``args.fairseq_extra``) is returned as the extra fairseq-train arguments."""
    rest = list(args.rest)
    before, extra = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest \
        else (rest, [])
    if getattr(args, "fairseq_extra", None) is not None:
        extra = list(args.fairseq_extra)
    if before:
        p = options.Parser(prog="fairseq-entropy run", usage=USAGE, add_help=False)
        _add_options(p)
        p.parse_args(before, namespace=args)
    return extra


def run(args) -> int:
    """``run``: one run; exit 0 (done or skipped), 75 (locked), 1 (a step failed) or
    128 + the signal that stopped it."""
    from ..experiments.locks import LOCKED_EXIT
    from ..experiments.run import RunFailed, RunStopped, run_level

    extra = _split_rest(args)
    options.check_one_schedule(args)
    try:
        result = run_level(args.preset, args.databin, args.run_dir, seed=args.seed,
                           epochs=args.epochs, max_update=args.max_update, device=args.device,
                           gen_batch=args.gen_batch, valid_batch=args.valid_batch,
                           score_best=args.score_best, select=args.select, extra_args=extra,
                           presets=args.presets, user_dir=args.user_dir,
                           decode_sample=args.decode_sample)
    except RunFailed as e:
        print(str(e), file=sys.stderr, flush=True)
        return 1
    except RunStopped as e:
        print(f"fairseq-entropy run: {args.run_dir}: {e}; its processes were stopped and the "
              "lock is free. Fix: run the same command again to resume from "
              "checkpoint_last.pt", file=sys.stderr, flush=True)
        return 128 + e.signal
    if result.status == "locked":
        print(f"fairseq-entropy run: {result.reason}", file=sys.stderr, flush=True)
        return LOCKED_EXIT
    return 0
