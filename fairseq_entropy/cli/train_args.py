"""``fairseq-entropy train-args``: the fairseq-train arguments of a preset
(:mod:`fairseq_entropy.experiments.presets`)."""

from __future__ import annotations

import json
import re
import shlex

from ..errors import UserError
from . import options


def preset_line(name: str, preset: dict, width: int = 100) -> str:
    """``name  experiment  model  arch  notes`` (tab-separated) of one preset, a line of
    ``train-args --list``: the notes' first sentence, cut at a word to ``width`` characters
    (``train-args NAME --field notes`` prints them whole)."""
    notes = " ".join(str(preset.get("notes", "")).split())
    first = re.split(r"(?<!\bal)\.\s+(?=[A-Z(])", notes)[0].rstrip(".")
    if len(first) > width:
        first = first[:width].rsplit(" ", 1)[0].rstrip(",;:") + " ..."
    return "\t".join([name, str(preset.get("experiment", "")), str(preset.get("model", name)),
                      str(preset.get("arch", "")), first])


def add_parser(sub) -> None:
    """Add the ``train-args`` subcommand to the subparsers ``sub``."""
    t = sub.add_parser("train-args", help="print fairseq-train arguments of a preset, or list "
                                          "the presets (--list)")
    t.add_argument("preset", nargs="?", help="preset name (an unknown name lists the known "
                                             "ones); not with --list")
    t.add_argument("--list", action="store_true",
                   help="list the presets (packaged, and those of --presets), one a line: name, "
                        "experiment, model (the paper's name), arch and the start of their "
                        "notes, tab-separated")
    t.add_argument("--data", help="binarized level directory (needed for the arguments, "
                                  "whose schedule depends on the training-set size)")
    options.add_presets_option(t, f"in fairseq_entropy/experiments; {options.PRESETS_EXTEND}")
    options.add_schedule_options(t)
    t.add_argument("--field", help="print one field of the preset instead (e.g. model): a "
                   "list field (model_args...) as shell words, epochs_by_train_size as JSON, "
                   "a field the preset does not set as an empty line")
    t.add_argument("--user-dir", help="your --user-dir package, imported to check that the "
                                      "preset's arch is registered (needed for an arch of "
                                      "your own; default: fairseq's and this plugin's)")


def run(args) -> None:
    """``train-args``: print the fairseq-train arguments of a preset."""
    from ..experiments.archs import check_arch
    from ..experiments.presets import (KNOWN_KEYS, PresetError, check_preset,
                                       load_presets, train_args)
    from ..experiments.run import check_user_dir
    from ..files import check_fairseq_path

    options.check_one_schedule(args)
    if args.field and (args.epochs is not None or args.max_update):
        raise UserError(f"--field {args.field} prints a field of the preset; --epochs and "
                        "--max-update apply to the arguments. Fix: drop them, or drop --field")
    presets = load_presets(args.presets)
    if args.list:
        if args.preset or args.field or args.data:
            raise UserError("--list lists every preset; a preset, --field and --data are for "
                            "one preset's arguments. Fix: pass --list alone (with --presets)")
        for name in sorted(presets):
            print(preset_line(name, presets[name]))
        return
    if not args.preset:
        raise UserError("no preset given. Fix: pass a preset name (fairseq-entropy train-args "
                        "--list lists them)")
    preset = check_preset(presets, args.preset)
    fields = sorted(KNOWN_KEYS - {"extends"})  # extends is resolved when presets load
    if args.field and args.field not in fields:
        raise PresetError(f"--field {args.field}: not a field of a loaded preset. Fix: one of "
                          f"{', '.join(fields)}")
    if args.field:
        value = preset.get(args.field, args.preset if args.field == "model" else None)
        print("" if value is None else shlex.join(value) if isinstance(value, list)
              else json.dumps(value, sort_keys=True) if isinstance(value, dict) else value)
        return
    if not args.data:
        raise UserError(f"train-args {args.preset} needs --data: the schedule in updates "
                        "depends on the level's training-set size. Fix: pass --data "
                        "LEVEL_DATABIN (or --field NAME for one field of the preset)")
    check_fairseq_path(args.data, "--data", ":")
    user_dir = check_user_dir(args.user_dir) if args.user_dir is not None else None
    args_list = train_args(preset, args.data, args.epochs, args.max_update)
    check_arch(args.preset, preset, user_dir)
    # every token is checked free of spaces, quotes and globs: plain joining makes the line
    # usable both as an unquoted $(...) and with shlex.split / read -a
    print(" ".join(args_list))
