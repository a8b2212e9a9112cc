"""The measure report of data sets: slot entropy, unseen pairs and divergences.

For each data set (a list of (command, actions) examples) the report gives the verb counts
and entropy (bits) of both execution slots (Wold et al., arXiv 2505.13089, Sec. 3, Eq. 1),
the same for every component class (:data:`~fairseq_entropy.scan.entropy.COMPONENT_CLASSES`,
with slots in execution or surface order), and, against a training set, the (verb, slot) and
(class, value, slot) pairs the data set has and the training set lacks, and the atom and
compound divergences of Keysers et al. (ICLR 2020, Sec. 2.1).  Every data set is parsed with
the grammar named, or the one its words suggest (:func:`guess_grammar`).

:func:`measure` builds the report; :func:`measure_tsv` and :func:`measure_text` print it.
"""

from __future__ import annotations

import os
from typing import List, Mapping, Optional, Sequence

from ..errors import UserError
from .datafiles import Example, read_any
from .divergence import DivergenceError, divergences
from .entropy import (COMPONENT_CLASSES, SLOTS, ComponentStatistics, SlotStatistics,
                      unseen_component_pairs, unseen_pairs)
from .grammar import Grammar


class MeasureError(UserError, ValueError):
    """A measure request that cannot be met (unknown component class, empty data set); the
    message says how to fix it."""


def guess_grammar(examples: Sequence[Example]) -> Grammar:
    """The original SCAN grammar (:meth:`Grammar.scan`) if a command of ``examples`` has the
    word ``turn`` or one of the first 50 action sequences starts with ``I_``; else the
    paper's (:meth:`Grammar.paper`)."""
    words = {w for e in examples for w in e.command.split()}
    return Grammar.scan() if "turn" in words or any(
        e.actions.startswith("I_") for e in examples[:50]) else Grammar.paper()


def read_data_set(path: str | os.PathLike, grammar: Optional[str] = None) -> List[Example]:
    """Read a data set to measure: a SCAN-format file or an ``.in``/``.out`` pair
    (:func:`~fairseq_entropy.scan.datafiles.read_any`), every line validated against the
    grammar named ``grammar`` (``"paper"`` or ``"scan"``), or, without a name, the one
    :func:`guess_grammar` picks from the file's examples.

    Raises:
        DataFormatError: the file cannot be read, or a line the grammar rejects (names
            file:line and the fix).
        GrammarError: an unknown grammar name.
        MeasureError: the data set holds no commands (an empty file, or an empty pair).
    """
    examples = read_any(path)
    if not examples:
        raise MeasureError(f"{path} holds no commands; an empty data set has no counts or "
                           "entropy to measure. Fix: pass a non-empty file")
    g = Grammar.by_name(grammar) if grammar else guess_grammar(examples)
    return read_any(path, g)


def check_components(components: Optional[Sequence[str]] = None) -> List[str]:
    """The component classes to measure: ``components``, or every class of
    :data:`~fairseq_entropy.scan.entropy.COMPONENT_CLASSES` when ``None`` or empty.

    Raises:
        MeasureError: a name that is not a component class (lists the valid ones).
    """
    components = list(components or COMPONENT_CLASSES)
    unknown = [c for c in components if c not in COMPONENT_CLASSES]
    if unknown:
        raise MeasureError(f"unknown component class(es) {', '.join(unknown)}. Fix: "
                           f"--components takes {', '.join(COMPONENT_CLASSES)}")
    return components


def measure(data_sets: Mapping[str, Sequence[Example]],
            train: Optional[Sequence[Example]] = None, grammar: Optional[str] = None,
            components: Optional[Sequence[str]] = None, slot_order: str = "execution",
            train_name: str = "the training set") -> dict:
    """The measure report of ``data_sets``, and with ``train`` their relation to it.

    Args:
        data_sets: name (e.g. the file path) -> examples, in report order; validated against
            their grammar already (:func:`read_data_set`).
        train: the training set's examples, or ``None``.
        grammar: ``"paper"`` or ``"scan"`` for every set; ``None``: each set's grammar is
            :func:`guess_grammar` of its examples.  The grammar's verb order orders the
            counts.
        components: component classes to measure (:func:`check_components`; default all).
        slot_order: ``"execution"`` (slots ``first``/``second``, the paper's) or
            ``"surface"`` (``surface_first``/``surface_second``) for the component classes;
            the verb slots of ``entropy_bits`` and ``verb_counts`` are always by execution.
        train_name: how the errors name the training set (e.g. its path).

    Returns:
        ``{name: record}`` in the order of ``data_sets``; each record has

        * ``n_commands``: number of commands;
        * ``entropy_bits``: ``{"first": H, "second": H}`` of the verb slots, in bits
          (6 decimals; ``None`` for a slot without commands);
        * ``verb_counts``: ``{slot: {verb: count}}``, every verb of the grammar listed;
        * ``slot_order`` and ``components``: ``{class: {slot: {"entropy_bits": H,
          "counts": {value: count}}}}``
          (:meth:`~fairseq_entropy.scan.entropy.ComponentStatistics.as_dict`);

        and with ``train``:

        * ``unseen_in_train``: ``[[verb, slot], ...]`` present in the set, absent from
          ``train`` (:func:`~fairseq_entropy.scan.entropy.unseen_pairs`);
        * ``unseen_components_in_train``: ``[[class, value, slot], ...]`` likewise
          (:func:`~fairseq_entropy.scan.entropy.unseen_component_pairs`);
        * ``atom_divergence``, ``compound_divergence`` (in [0, 1], 6 decimals) and
          ``compound_divergence_by_kind`` (``{kind: D or None}``) of the set from ``train``
          (:func:`~fairseq_entropy.scan.divergence.divergences`).

    Raises:
        MeasureError: an unknown component class, or, with ``train``, a training set or data
            set without commands or without compounds (the divergences are undefined).
        GrammarError: an unknown grammar name, or a command the grammar does not parse.
        ValueError: an unknown ``slot_order``.
    """
    components = check_components(components)

    def statistics(examples):
        g = Grammar.by_name(grammar) if grammar else guess_grammar(examples)
        cmds = [g.parse(e.command) for e in examples]
        return (cmds, SlotStatistics.of(cmds, g.verbs),
                ComponentStatistics.of(cmds, g.verbs, components, slot_order))

    trained = statistics(train) if train is not None else None
    if trained is not None and not trained[0]:
        raise MeasureError(f"{train_name} holds no commands; the unseen pairs and divergences "
                           "are measured against it. Fix: pass a non-empty training file")
    report = {}
    for name, examples in data_sets.items():
        cmds, st, comp = statistics(examples)
        rec = st.as_dict()
        rec.update({k: v for k, v in comp.as_dict().items() if k != "n_commands"})
        if trained is not None:
            if not cmds:
                raise MeasureError(f"{name} holds no commands; its divergence from "
                                   f"{train_name} is undefined. Fix: pass a non-empty file, "
                                   "or measure it without --train")
            rec["unseen_in_train"] = [list(p) for p in unseen_pairs(trained[1], st)]
            rec["unseen_components_in_train"] = [
                list(p) for p in unseen_component_pairs(trained[2], comp)]
            try:
                rec.update(divergences(trained[0], cmds).as_dict())
            except DivergenceError as e:  # the message names neither file
                raise MeasureError(f"{name} against {train_name}: {e}") from e
        report[name] = rec
    return report


def measure_tsv(report: dict) -> str:
    """``measure --tsv``: a header and one row per file of the :func:`measure` report.

    Columns: file, n_commands, ``H_<class>_<slot>`` (bits, 4 decimals) for every measured
    (class, slot), and with a training file ``unseen_pairs`` (the unseen (class, value, slot)
    triples, ``class:value@slot`` separated by spaces), ``atom_divergence``,
    ``compound_divergence`` and ``compound_divergence_<kind>``.  An undefined value is an
    empty cell; a column that only some rows have is empty in the others.

    Returns:
        the table, tab-separated, one ``"\\n"``-terminated line per row.
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


def measure_text(report: dict, train_name: Optional[str] = None) -> str:
    """``measure`` without ``--json``/``--tsv``: the :func:`measure` report for a reader.

    Per file: the number of commands; the entropy (bits, 4 decimals, ``n/a`` for an empty
    slot) and verb counts of both verb slots; the same for every (component class, slot); and,
    where the report has them, the unseen (verb, slot) and (component, slot) pairs and the
    divergences from the training set, named ``train_name``.

    Returns:
        the text, one ``"\\n"``-terminated line each.
    """
    lines = []
    for f, rec in report.items():
        lines.append(f"{f}: {rec['n_commands']} commands")
        for slot in SLOTS:
            h = rec["entropy_bits"][slot]
            counts = " ".join(f"{v}={n}" for v, n in rec["verb_counts"][slot].items())
            lines.append(f"  {slot:<6} slot  H = {'n/a' if h is None else f'{h:.4f}'} bits  "
                         f"{counts}")
        lines.append(f"  component classes, slots by {rec['slot_order']} order:")
        for component, slots in rec["components"].items():
            for slot, val in slots.items():
                h = val["entropy_bits"]
                counts = " ".join(f"{v}={n}" for v, n in val["counts"].items())
                lines.append(f"    {component:<11} {slot:<14} H = "
                             f"{'n/a' if h is None else f'{h:.4f}'} bits  {counts}")
        if "unseen_in_train" in rec:
            pairs = ", ".join(f"({v}, {s})" for v, s in rec["unseen_in_train"]) or "none"
            lines.append(f"  (verb, slot) pairs absent from {train_name}: {pairs}")
            triples = ", ".join(f"({c} {v}, {s})" for c, v, s in
                                rec["unseen_components_in_train"]) or "none"
            lines.append(f"  (component, slot) pairs absent from {train_name}: {triples}")
            kinds = " ".join(f"{k}={'n/a' if v is None else f'{v:.4f}'}"
                             for k, v in rec["compound_divergence_by_kind"].items())
            lines.append(f"  divergence from {train_name} (Keysers et al. 2020): atom "
                         f"{rec['atom_divergence']:.4f}, compound "
                         f"{rec['compound_divergence']:.4f} ({kinds})")
    return "".join(line + "\n" for line in lines)
