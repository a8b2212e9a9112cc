"""``fairseq-entropy measure``: verb counts and entropy (bits) of each slot of any data set,
and with ``--train`` the unseen (verb, slot) pairs and the atom and compound divergences."""

from __future__ import annotations

import json

from . import options


def add_parser(sub) -> None:
    """Add the ``measure`` subcommand to the subparsers ``sub``."""
    m = sub.add_parser("measure", help="verb counts and entropy of each slot")
    m.add_argument("files", nargs="+", help="SCAN-format files or .in/.out pairs (either file)")
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
