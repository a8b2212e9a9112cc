"""Argument types and helpers shared by the subcommands of ``fairseq-entropy``."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import List

from ..errors import UserError
from ..experiments.preset_values import MAX_EPOCHS, MAX_UPDATE_LIMIT


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Help that ends each option's text with ``(default: X)``, unless the text already names
    its default or there is none to name (None, or an on/off flag)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("default" in text or action.default is None or isinstance(action.default, bool)
                or action.default == argparse.SUPPRESS or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """The parser class of every (sub)command: help shows defaults
    (:class:`DefaultsHelpFormatter`); ``add_subparsers`` makes subparsers of this class too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        """As argparse's, and an empty value given to an option that takes a name or a path
        (``--out ''``) is refused."""
        ns, rest = super().parse_known_args(args, namespace)
        for a in self._actions:
            value = getattr(ns, a.dest, None)
            values = value if isinstance(value, list) else [value]
            if a.type is None and a.nargs != argparse.REMAINDER and "" in values:
                name = "/".join(a.option_strings) or a.metavar or a.dest
                self.error(f"argument {name}: an empty value. Fix: give a name or a path")
        return ns, rest

    def error(self, message: str):
        """Print one ``PROG: error:`` line that ends with a fix (as every other error of the
        command line), and exit 2."""
        if "Fix:" not in message:
            message = f"{message.rstrip('.')}. Fix: see '{self.prog} --help'"
        self.exit(2, f"{self.prog}: error: {message}\n")


def _not_empty(values: list, text: str, example: str) -> list:
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r} selects nothing. Fix: give at least one "
                                         f"value, e.g. {example}")
    return values


def floats(text: str) -> List[float]:
    """Comma-separated numbers, e.g. ``0,0.5,1`` (argparse type)."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}. Fix: "
                                         "e.g. 0,1.5,3") from None
    if not all(math.isfinite(x) for x in values):
        raise argparse.ArgumentTypeError(f"expected finite numbers, got {text!r}. Fix: e.g. "
                                         "0,1.5,3")
    return _not_empty(values, text, "0,1.5,3")


def entropies(text: str) -> List[float]:
    """Comma-separated entropies in bits, each >= 0, e.g. ``0,0.5,1`` (argparse type)."""
    values = floats(text)
    if min(values) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} holds {min(values):g}, but an entropy is "
                                         ">= 0 bits. Fix: e.g. 0,1.5,3")
    return values


#: the most values a range ``A..B`` of :func:`ints` may hold
MAX_RANGE = 1000


def ints(text: str) -> List[int]:
    """Comma-separated integers and inclusive ranges, e.g. ``1,2,4`` or ``1..8`` (argparse
    type); an empty list or a range with nothing in it (``3..1``) is refused."""
    out = []
    try:
        for part in text.split(","):
            part = part.strip()
            if ".." in part:
                a, b = part.split("..")
                if int(b) - int(a) >= MAX_RANGE:
                    raise argparse.ArgumentTypeError(
                        f"the range {part!r} holds more than {MAX_RANGE} values, more than any "
                        f"option takes (the most is one per verb or level). Fix: give a range "
                        f"of the values you mean, e.g. 1..8")
                if int(b) < int(a):
                    raise argparse.ArgumentTypeError(
                        f"the range {part!r} holds nothing (it runs down). Fix: write it low to "
                        f"high, e.g. {b.strip()}..{a.strip()}")
                out += list(range(int(a), int(b) + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 1,2,4 or 1..8, got {text!r}. "
                                         "Fix: e.g. 1,2,4 or 1..8") from None
    return _not_empty(out, text, "1,2,4 or 1..8")


def number(kind, low=None, high=None, low_open=False, high_open=False, what="a number"):
    """An argparse type: ``kind(text)`` within [low, high] (open where asked); the bounds are
    kept as ``parse.bounds`` = (kind, low, high, low_open, high_open)."""
    def parse(text: str):
        try:
            x = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}. Fix: pass "
                                             f"{what}") from None
        if not math.isfinite(x) or (low is not None and (x < low or (low_open and x == low))) \
                or (high is not None and (x > high or (high_open and x == high))):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}. Fix: pass {what}")
        return x
    parse.bounds = (kind, low, high, low_open, high_open)
    return parse


fraction = number(float, 0.0, 1.0, True, True, "a fraction strictly between 0 and 1")
positive_int = number(int, 1, what="a positive integer")
positive_float = number(float, 0.0, low_open=True, what="a positive number")
seed = number(int, 0, 2 ** 32 - 1, what="a seed between 0 and 2**32-1")
count = number(int, 0, what="an integer >= 0")
any_float = number(float, what="a number")
#: a schedule's updates and epochs, bounded as presets and grids bound them
max_update = number(int, 1, MAX_UPDATE_LIMIT,
                    what=f"an integer number of updates in 1..{MAX_UPDATE_LIMIT}")
epochs = number(float, 0.0, MAX_EPOCHS, low_open=True,
                what=f"a number of epochs in (0, {MAX_EPOCHS}]")


#: CPU cores of this machine: the most worker processes an option may start
CPU_CORES = os.cpu_count() or 1
#: a count of worker processes, 1 .. :data:`CPU_CORES`
processes = number(int, 1, CPU_CORES,
                   what=f"1 to {CPU_CORES} processes (the CPU cores here: each process holds "
                        "its own fairseq in memory, and more than one per core is no faster)")


def names(text: str) -> List[str]:
    """Comma-separated names (verbs, component classes), blanks dropped; an empty list is
    refused (argparse type)."""
    return _not_empty([v.strip() for v in text.split(",") if v.strip()], text,
                      "walk,jump for verbs, verb,direction for component classes")


def progress(items, desc: str, unit: str, total=None):
    """``items`` wrapped in a tqdm bar on stderr, shown only when stderr is a terminal."""
    from tqdm import tqdm

    # mininterval 0: every level is drawn, however fast (a handful of updates per command)
    return tqdm(items, desc=desc, unit=unit, disable=None, leave=False, file=sys.stderr,
                mininterval=0, total=total)


def check_one_schedule(args) -> None:
    """Refuse ``--epochs`` together with ``--max-update`` (the schedule would take
    ``--max-update`` and drop ``--epochs``).

    Raises:
        UserError: naming both and the fix.
    """
    if getattr(args, "epochs", None) is not None and getattr(args, "max_update", None):
        raise UserError(f"--epochs {args.epochs:g} and --max-update {args.max_update}: a "
                        "schedule is one of them. Fix: give one (--max-update counts updates, "
                        "--epochs passes over the training set)")


def check_one_format(args) -> None:
    """Refuse ``--json`` together with ``--tsv``.

    Raises:
        UserError: naming both and the fix.
    """
    if getattr(args, "json", False) and getattr(args, "tsv", False):
        raise UserError("--json and --tsv: one output format at a time. Fix: give one of them")


# ------------------------------------------------------- options shared by several commands
#: the end of ``--presets``'s help where the command has nothing more to say of the file
PRESETS_EXTEND = "its presets may extend packaged ones by name"


def add_presets_option(p, when: str = PRESETS_EXTEND) -> None:
    """Declare ``--presets FILE`` on the parser ``p``: the user's presets file, added to the
    packaged ``presets.json`` (``when`` ends the help: what the file is needed for)."""
    p.add_argument("--presets", help=f"your presets file, added to the packaged presets.json "
                                     f"({when})")


def add_schedule_options(p) -> None:
    """Declare ``--epochs`` and ``--max-update`` on the parser ``p``: a schedule overriding the
    preset's (:func:`check_one_schedule` refuses both at once)."""
    p.add_argument("--epochs", type=epochs,
                   help="epochs, overriding the preset's schedule (default: the preset's)")
    p.add_argument("--max-update", type=max_update,
                   help="updates, overriding the preset's schedule (default: the preset's)")


def add_run_options(p, whose: str, sample_note: str = "", grid: bool = False) -> None:
    """Declare on the parser ``p`` the options of how a run is checkpointed, decoded and
    scored, as ``fairseq-entropy run`` takes them and a sweep hands them to each of its cells:
    ``--select``, ``--no-score-best`` (dest ``score_best``), ``--gen-batch``,
    ``--valid-batch``, ``--decode-sample``, ``--presets`` and ``--user-dir``.

    Args:
        p: the (sub)command's parser.
        whose: the runs the help speaks of, e.g. ``"the run's"`` or ``"each cell's"``.
        sample_note: words added to ``--decode-sample``'s help (where the command limits it).
        grid: the command reads a grid file, whose ``presets_file`` and ``user_dir`` are the
            defaults of ``--presets`` and ``--user-dir``.
    """
    from ..analysis.checkpoint_labels import SELECTIONS

    p.add_argument("--select", choices=list(SELECTIONS), default="valid",
                   help=f"how {whose} best checkpoint is chosen: valid, the highest validation "
                        "seq_acc (scored as 'best'); test-loss, the lowest test loss, the paper "
                        "authors' selection (scored as 'test-loss', a diagnostic; not with "
                        "packs)")
    p.add_argument("--no-score-best", dest="score_best", action="store_false",
                   help=f"decode and score only {whose} last checkpoint")
    p.add_argument("--gen-batch", type=positive_int, default=512, metavar="N",
                   help="sentences per fairseq-generate batch")
    p.add_argument("--valid-batch", type=positive_int, default=512, metavar="N",
                   help="sentences per validation batch (the outputs do not depend on it)")
    p.add_argument("--decode-sample", type=positive_int, metavar="N",
                   help=f"a smoke test: {whose} last checkpoint decodes about N test sentences "
                        "(spread over the lengths) into RUN_DIR/sample/score.json, marked "
                        "test_sample; the run stays unscored, so a later call without "
                        f"--decode-sample finishes it{sample_note} (default: the whole test split)")
    add_presets_option(p, PRESETS_EXTEND +
                       ("; default: the grid's presets_file, if any" if grid else ""))
    p.add_argument("--user-dir", help="your --user-dir package (its __init__.py imports "
                                      "fairseq_entropy), given to fairseq-train and "
                                      "fairseq-generate instead of this plugin" +
                                      (" (default: the grid's user_dir, if any)" if grid
                                       else ""))
