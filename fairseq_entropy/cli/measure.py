"""``fairseq-entropy measure``: verb counts and entropy (bits) of each slot of any data set,
and with ``--train`` the unseen (verb, slot) pairs and the atom and compound divergences."""

from __future__ import annotations

import json

from ..errors import UserError
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


def _guess_grammar(examples):
    from ..scan.grammar import Grammar

    words = {w for e in examples for w in e.command.split()}
    return Grammar.scan() if "turn" in words or any(
        e.actions.startswith("I_") for e in examples[:50]) else Grammar.paper()


def run(args) -> None:
    """``measure``: verb counts and entropy of each slot, the same for every component class,
    unseen (component, slot) pairs and, with ``--train``, atom and compound divergence."""
    from ..scan.datafiles import read_any
    from ..scan.divergence import divergences
    from ..scan.entropy import (COMPONENT_CLASSES, SLOTS, ComponentStatistics, SlotStatistics,
                               unseen_component_pairs, unseen_pairs)
    from ..scan.grammar import Grammar

    components = args.components or list(COMPONENT_CLASSES)
    unknown = [c for c in components if c not in COMPONENT_CLASSES]
    if unknown:
        raise UserError(f"unknown component class(es) {', '.join(unknown)}. Fix: --components "
                        f"takes {', '.join(COMPONENT_CLASSES)}")

    def load(path):
        ex = read_any(path)
        g = Grammar.by_name(args.grammar) if args.grammar else _guess_grammar(ex)
        cmds = [g.parse(e.command) for e in read_any(path, g)]
        return (cmds, SlotStatistics.of(cmds, g.verbs),
                ComponentStatistics.of(cmds, g.verbs, components, args.slot_order))

    report = {}
    train = load(args.train) if args.train else None
    for f in args.files:
        cmds, st, comp = load(f)
        rec = st.as_dict()
        rec.update({k: v for k, v in comp.as_dict().items() if k != "n_commands"})
        if train is not None:
            rec["unseen_in_train"] = [list(p) for p in unseen_pairs(train[1], st)]
            rec["unseen_components_in_train"] = [
                list(p) for p in unseen_component_pairs(train[2], comp)]
            rec.update(divergences(train[0], cmds).as_dict())
        report[f] = rec
    if args.json:
        print(json.dumps(report, indent=2))
        return
    if args.tsv:
        print(measure_tsv(report), end="")
        return
    for f, rec in report.items():
        print(f"{f}: {rec['n_commands']} commands")
        for slot in SLOTS:
            h = rec["entropy_bits"][slot]
            counts = " ".join(f"{v}={n}" for v, n in rec["verb_counts"][slot].items())
            print(f"  {slot:<6} slot  H = {'n/a' if h is None else f'{h:.4f}'} bits  {counts}")
        print(f"  component classes, slots by {rec['slot_order']} order:")
        for component, slots in rec["components"].items():
            for slot, val in slots.items():
                h = val["entropy_bits"]
                counts = " ".join(f"{v}={n}" for v, n in val["counts"].items())
                print(f"    {component:<11} {slot:<14} H = "
                      f"{'n/a' if h is None else f'{h:.4f}'} bits  {counts}")
        if "unseen_in_train" in rec:
            pairs = ", ".join(f"({v}, {s})" for v, s in rec["unseen_in_train"]) or "none"
            print(f"  (verb, slot) pairs absent from {args.train}: {pairs}")
            triples = ", ".join(f"({c} {v}, {s})" for c, v, s in
                                rec["unseen_components_in_train"]) or "none"
            print(f"  (component, slot) pairs absent from {args.train}: {triples}")
            kinds = " ".join(f"{k}={'n/a' if v is None else f'{v:.4f}'}"
                             for k, v in rec["compound_divergence_by_kind"].items())
            print(f"  divergence from {args.train} (Keysers et al. 2020): atom "
                  f"{rec['atom_divergence']:.4f}, compound {rec['compound_divergence']:.4f} "
                  f"({kinds})")


def measure_tsv(report: dict) -> str:
    """``measure --tsv``: a header and one row per file of the ``measure --json`` report.

    Columns: file, n_commands, ``H_<class>_<slot>`` (bits, 4 decimals) for every measured
    (class, slot), and with a training file ``unseen_pairs`` (the unseen (class, value, slot)
    triples, ``class:value@slot`` separated by spaces), ``atom_divergence``,
    ``compound_divergence`` and ``compound_divergence_<kind>``.
    """
    rows = []
    for f, rec in report.items():
        row = {"file": f, "n_commands": rec["n_commands"]}
        for component, slots in rec["components"].items():
            for slot, val in slots.items():
                h = val["entropy_bits"]
                row[f"H_{component}_{slot}"] = "" if h is None else f"{h:.4f}"
        if "atom_divergence" in rec:
            row["unseen_pairs"] = " ".join(f"{c}:{v}@{s}"
                                           for c, v, s in rec["unseen_components_in_train"])
            row["atom_divergence"] = f"{rec['atom_divergence']:.4f}"
            row["compound_divergence"] = f"{rec['compound_divergence']:.4f}"
            for kind, d in rec["compound_divergence_by_kind"].items():
                row[f"compound_divergence_{kind}"] = "" if d is None else f"{d:.4f}"
        rows.append(row)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["\t".join(columns)] + ["\t".join(str(r.get(c, "")) for c in columns) for r in rows]
    return "\n".join(lines) + "\n"
