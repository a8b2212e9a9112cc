"""``fairseq-entropy``: build, measure, binarize, train, score, aggregate and sweep.

Subcommands, one module each in this package (``add_parser(sub)`` declares the options,
``run(args)`` does the work by calling the stages below the command line)::

    fairseq-entropy build exp1 --out DIR [--levels 0,0.5,...] [--n N] [--restricted-verb jump]
                               [--component direction --restricted left]
    fairseq-entropy build exp2 --out DIR [--support 1..8] [--restricted-verb lunge]
    fairseq-entropy build scan --out FILE [--actions scan|paper]
    fairseq-entropy measure FILE... [--train FILE] [--components C,...] [--slot-order O]
    fairseq-entropy binarize BUILD_DIR --out DATABIN
    fairseq-entropy binarize --train F [--valid F | --valid-fraction P] --test F --out DIR
    fairseq-entropy score GENERATE_OUTPUT --out DIR [--data LEVEL_DIR] [--preset P] [--seed S]
                          [--checkpoint last|best] [--path CHECKPOINT] [--force]
    fairseq-entropy aggregate RUNS_DIR... --out DIR
    fairseq-entropy predict RESULTS_TSV... [--split NAME [--split-measures TSV] | --entropy BITS]
                            [--measured-accuracy RUN_DIR|score.json|results.tsv] [--preset P]
                            [--checkpoint last|best|test-loss] [--plot PNG] [--json|--tsv]
    fairseq-entropy train-args PRESET --data LEVEL_DATABIN [--epochs E]
    fairseq-entropy run PRESET LEVEL_DATABIN RUN_DIR [--seed S] [-- fairseq-train args...]
    fairseq-entropy run PRESET LEVEL_DATABIN RUN_DIR [--seed S] [--epochs E] [--max-update U]
                        [--device cpu|gpu] [--gen-batch N] [--valid-batch N]
                        [--no-score-best] [--select valid|test-loss] [-- FAIRSEQ_TRAIN_ARGS]
    fairseq-entropy recipes-dir
    fairseq-entropy user-dir
    fairseq-entropy sweep GRID [--root DIR] [--jobs N] [--dry-run] [--executor local|slurm]
    fairseq-entropy lock RUN_DIR -- COMMAND...
    fairseq-entropy pack PACK_DIR --run DATA SEED RUN_DIR [--run ...]
    fairseq-entropy unpack PACK_SAVE_DIR

A :class:`~fairseq_entropy.errors.UserError` (every domain error extends it) or an
``OSError`` is printed as one line ``fairseq-entropy COMMAND: error: ...`` with exit status 2,
as a bad option is, and nothing is written; Ctrl-C (SIGINT) or SIGTERM stops the command
where it is (temporary files and worker processes go with it), prints one line and exits
128 + the signal; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Optional, Sequence

from ..errors import UserError
from ..version import __version__
from . import (aggregate, binarize, build, lock, measure, options, pack, predict, recipes_dir,
               run, score, sweep, train_args, unpack, user_dir)

#: subcommand name -> its module, in the order ``--help`` lists them
COMMANDS = {"build": build, "measure": measure, "binarize": binarize, "score": score,
            "aggregate": aggregate, "predict": predict, "train-args": train_args,
            "recipes-dir": recipes_dir,
            "user-dir": user_dir, "run": run, "sweep": sweep, "lock": lock, "pack": pack,
            "unpack": unpack}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    p = options.Parser(
        prog="fairseq-entropy",
        description="entropy-controlled systematic-generalization experiments with fairseq")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        module.add_parser(sub)
    return p


def quiet_libraries() -> None:
    """Keep the output to this command's own lines and library warnings.

    Importing fairseq runs ``logging.basicConfig(level=DEBUG)`` (in a wav2vec2 module), so every
    library's debug and info records would be printed, e.g. a block of ``DEBUG:matplotlib``
    lines when ``aggregate`` plots.  The root logger goes back to WARNING and matplotlib and
    PIL (its image writer) are held at WARNING; warnings and errors of every library, fairseq
    included, are still printed.  The tensorboardX notice is dropped in ``fairseq_entropy``.
    """
    logging.getLogger().setLevel(logging.WARNING)
    for name in ("matplotlib", "PIL"):
        logging.getLogger(name).setLevel(logging.WARNING)


class Stopped(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, so that it unwinds as Ctrl-C does: every
    temporary directory is removed and every worker process is stopped on the way out."""


def _raise_stopped(signum, frame):
    raise Stopped()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``fairseq-entropy``; returns the exit status (2 on a user error)."""
    quiet_libraries()
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # `run`'s extra fairseq-train arguments follow the first `--`; they are split off before
    # parsing, since argparse drops a `--` that directly follows the positionals
    extra = None
    if argv[:1] == ["run"] and "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    args = parser.parse_args(argv)
    args.fairseq_extra = extra
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        status = COMMANDS[args.command].run(args)
    except UserError as e:
        print(f"fairseq-entropy {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of stdout stopped early (`| head`): not an error
        devnull = os.open(os.devnull, os.O_WRONLY)  # nothing more reaches the closed pipe,
        os.dup2(devnull, sys.stdout.fileno())      # not even the flush at exit
        return 128 + signal.SIGPIPE  # what a shell reports for a tool killed by SIGPIPE
    except OSError as e:  # the path the system refused, its reason and a fix
        where = f"{e.filename}: " if e.filename else ""
        print(f"fairseq-entropy {args.command}: error: {where}{e.strerror or e}. Fix: choose "
              "a path that exists where an input is read and that you may write where an "
              "output goes", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # every write goes through a temporary name
        sig = signal.SIGTERM if isinstance(e, Stopped) else signal.SIGINT
        print(f"fairseq-entropy {args.command}: interrupted by {sig.name} and stopped; what it "
              "was writing was left as it was and its temporary files removed. Fix: run the "
              "same command again", file=sys.stderr)
        return 128 + sig
    return status or 0
