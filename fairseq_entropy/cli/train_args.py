"""``fairseq-entropy train-args``: the fairseq-train arguments of a preset
(:mod:`fairseq_entropy.experiments.presets`)."""

from __future__ import annotations

import json
import shlex

from . import options


def add_parser(sub) -> None:
    """Add the ``train-args`` subcommand to the subparsers ``sub``."""
    t = sub.add_parser("train-args", help="print fairseq-train arguments of a preset")
    t.add_argument("preset", help="preset name (an unknown name lists the known ones)")
    t.add_argument("--data", required=True, help="binarized level directory")
    t.add_argument("--presets", help="your presets file, added to the packaged presets.json "
                                     "(in fairseq_entropy/experiments; your presets may "
                                     "extend packaged ones by name)")
    t.add_argument("--epochs", type=options.epochs,
                   help="epochs, overriding the preset's schedule")
    t.add_argument("--max-update", type=options.max_update,
                   help="updates, overriding the preset's schedule")
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

    presets = load_presets(args.presets)
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
    check_fairseq_path(args.data, "--data", ":")
    user_dir = check_user_dir(args.user_dir) if args.user_dir is not None else None
    args_list = train_args(preset, args.data, args.epochs, args.max_update)
    check_arch(args.preset, preset, user_dir)
    # every token is checked free of spaces, quotes and globs: plain joining makes the line
    # usable both as an unquoted $(...) and with shlex.split / read -a
    print(" ".join(args_list))
