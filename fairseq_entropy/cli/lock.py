"""``fairseq-entropy lock``: run a command while holding a run directory's lock."""

from __future__ import annotations

import argparse

from ..errors import UserError


def add_parser(sub) -> None:
    """Add the ``lock`` subcommand to the subparsers ``sub``."""
    lk = sub.add_parser("lock", help="run a command while holding RUN_DIR/.lock (exit 75 "
                                     "when another process holds it)")
    lk.add_argument("run_dir", help="the run directory whose RUN_DIR/.lock is held")
    lk.add_argument("lock_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                    help="the command and its arguments")


def run(args) -> int:
    """``lock``: run a command while holding the run directory's lock."""
    from ..experiments.locks import run_locked

    command = args.lock_command
    command = command[1:] if command[:1] == ["--"] else command
    if not command:
        raise UserError("no command given. Fix: fairseq-entropy lock RUN_DIR -- COMMAND ...")
    from pathlib import Path

    if Path(args.run_dir).exists() and not Path(args.run_dir).is_dir():
        raise UserError(f"RUN_DIR {args.run_dir} is a file. Fix: pass the run directory whose "
                        "lock to hold (new or existing), or move the file away")
    return run_locked(args.run_dir, command)
