"""``fairseq-entropy measure``: verb counts and entropy (bits) of each slot of any data set,
and with ``--train`` the unseen (verb, slot) pairs and the atom and compound divergences."""

from __future__ import annotations

import json

from . import options


def add_parser(sub) -> None:
    """Add the ``measure`` subcommand to the subparsers ``sub``."""
    m = sub.add_parser("measure", help="verb counts and entropy of each slot")
    m.add_argument("files", nargs="+", help="SCAN-format files or .in/.out pairs (either file); "
                   "with --format cogs, COGS TSV files (e.g. gen.tsv)")
    m.add_argument("--format", choices=["scan", "cogs"], default="scan",
                   help="scan (SCAN-family data) or cogs (COGS TSV files: sentence, logical "
                        "form, case; needs --train; reports per case the held-out (word, "
                        "slot) pair, the word's training contexts and the entropy (bits) of "
                        "the slot it was seen in and of the slot it is tested in)")
    m.add_argument("--train", help="training file: list (verb, slot) pairs the files have "
                                   "and it lacks")
    m.add_argument("--grammar", choices=["paper", "scan"], default=None,
                   help="grammar to validate with (default: guessed from the words)")
    m.add_argument("--json", action="store_true", help="print JSON")
    m.add_argument("--tsv", action="store_true",
                   help="print one tab-separated row per file: sizes, the entropy (bits) of "
                        "every (component class, slot), unseen pairs and, with --train, the "
                        "atom and compound divergences")
    m.add_argument("--components", type=options.names, default=None,
                   help="comma-separated component classes to measure besides the verb slots: "
                        "verb, direction, modifier, repetition, conjunction (default: all)")
    m.add_argument("--slot-order", choices=["execution", "surface"], default="execution",
                   help="slots of the component classes: by execution order (the paper's) or "
                        "by surface position")


def run(args) -> None:
    """``measure``: verb counts and entropy of each slot, the same for every component class,
    unseen (component, slot) pairs and, with ``--train``, atom and compound divergence
    (:func:`fairseq_entropy.scan.measure.measure`)."""
    options.check_one_format(args)
    if args.format == "cogs":
        return run_cogs(args)
    from ..scan.measure import check_components, measure, measure_text, measure_tsv, read_data_set

    components = check_components(args.components)
    train = read_data_set(args.train, args.grammar) if args.train else None
    data_sets = {f: read_data_set(f, args.grammar) for f in args.files}
    report = measure(data_sets, train, args.grammar, components, args.slot_order,
                     train_name=args.train or "the training set")
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.tsv:
        print(measure_tsv(report), end="")
    else:
        print(measure_text(report, args.train), end="")


def run_cogs(args) -> None:
    """``measure --format cogs``: slot entropy per COGS case
    (:func:`fairseq_entropy.cogs.measure.measure_cogs`), as text, ``--json`` or ``--tsv``
    (one row per case of every file)."""
    from ..cogs.data import read_cogs_tsv
    from ..cogs.measure import cogs_text, cogs_tsv, measure_cogs
    from ..errors import UserError

    given = [o for o, v in (("--grammar", args.grammar), ("--components", args.components))
             if v] + (["--slot-order"] if args.slot_order != "execution" else [])
    if not args.train or given:
        raise UserError("--format cogs measures COGS files against a training file"
                        f"{' and takes no ' + ', '.join(given) if given else ''}. Fix: "
                        "fairseq-entropy measure --format cogs --train train.tsv gen.tsv")
    train = read_cogs_tsv(args.train)
    reports = {f: measure_cogs(train, read_cogs_tsv(f), args.train) for f in args.files}
    if args.json:
        print(json.dumps(reports if len(reports) > 1 else next(iter(reports.values())),
                         indent=2))
    elif args.tsv:
        for i, (f, report) in enumerate(reports.items()):
            text = cogs_tsv(report)
            print(text if i == 0 else text.split("\n", 1)[1], end="")
    else:
        for f, report in reports.items():
            print(f"{f}:")
            print(cogs_text(report), end="")
