"""Slot entropy of COGS per generalization case: the report of
``fairseq-entropy measure --format cogs``.

For the training set, every slot (:mod:`~fairseq_entropy.cogs.slots`) gets its word counts
and the entropy (bits) of its word distribution, ``H = -sum_w p(w) log2 p(w)`` with
``p(w) = count(w) / N`` (:func:`~fairseq_entropy.scan.entropy.entropy_bits`; the quantity of
Wold et al., arXiv 2505.13089, Eq. 1, over nouns or verbs instead of SCAN verbs).

For every case of an evaluated file (COGS's 21 generalization cases in ``gen.tsv``), the
*held-out pair* is the (word, slot) pair absent from training that the most of the case's
sentences hold (each sentence counted once), when at least half of them
(:data:`HELD_OUT_SHARE`) hold it.  The report gives its share of the case's sentences, the
word's training contexts (how often it occurs in training and in which slots), the entropy of
the slot where the word was seen most in training, and the entropy of the slot it is tested
in (None when training has no such slot).  A case without such a pair (COGS's structural
cases: no one word is held out) has no held-out pair; the report lists its commonest pairs
absent from training and the slots its sentences have and training lacks
(``pp_noun@subject`` for a PP modifying a subject).
"""

from __future__ import annotations

import io
from collections import Counter, defaultdict
from typing import Dict, List, Mapping, Sequence

from ..scan.entropy import entropy_bits
from .data import CogsExample, case_type
from .slots import occurrences

#: the least share of a case's sentences that its held-out pair is in
HELD_OUT_SHARE = 0.5
#: the columns of :func:`cogs_tsv`, in order
TSV_COLUMNS = ("case", "type", "n", "word", "held_out_slot", "held_out_share",
               "train_count", "train_slots", "seen_slot", "seen_slot_entropy_bits",
               "seen_slot_train_n", "tested_slot_entropy_bits", "tested_slot_train_n",
               "unseen_slots")


def slot_word_counts(examples: Sequence[CogsExample]) -> Dict[str, Counter]:
    """slot -> Counter(word -> occurrences) over ``examples``.

    Raises:
        DataFormatError: a logical form that cannot be read (names file:line).
    """
    counts: Dict[str, Counter] = defaultdict(Counter)
    for e in examples:
        for word, slot in occurrences(e):
            counts[slot][word] += 1
    return dict(counts)


def slot_table(counts: Mapping[str, Counter]) -> Dict[str, dict]:
    """slot -> ``{"n": occurrences, "words": distinct words, "entropy_bits": H}``, slots
    sorted by name (H rounded to 6 decimals)."""
    return {slot: {"n": sum(c.values()), "words": len(c),
                   "entropy_bits": round(entropy_bits(c), 6)}
            for slot, c in sorted(counts.items())}


def measure_cogs(train: Sequence[CogsExample], evaluated: Sequence[CogsExample],
                 train_name: str = "train") -> dict:
    """The report: the training slots and one record per case of ``evaluated``.

    Args:
        train: the training examples.
        evaluated: the examples whose cases are reported (e.g. ``gen.tsv``), in file order.
        train_name: the training file, recorded in the report.

    Returns:
        ``{"train": {"path", "n", "slots": slot_table}, "cases": [record, ...]}``; a record
        has ``case``, ``type`` (lexical, structural or in_distribution), ``n`` (sentences),
        ``held_out`` (``{"word", "slot", "sentences", "share"}`` or None), ``other_unseen``
        (the other commonest pairs absent from training, at most 3, as ``[word, slot,
        sentences]``), ``unseen_slots`` (slots of the case that training lacks, as ``[slot,
        sentences]``),
        ``train_contexts`` (``{"count", "slots": {slot: count}}``), ``seen_slot``,
        ``seen_slot_entropy_bits``, ``seen_slot_train_n``, ``tested_slot_entropy_bits`` and
        ``tested_slot_train_n`` (None where undefined).  Cases in order of first appearance.

    Raises:
        DataFormatError: a logical form that cannot be read (names file:line).
    """
    counts = slot_word_counts(train)
    table = slot_table(counts)
    word_slots: Dict[str, Counter] = defaultdict(Counter)
    for slot, c in counts.items():
        for word, n in c.items():
            word_slots[word][slot] += n
    by_case: Dict[str, List[CogsExample]] = defaultdict(list)
    for e in evaluated:
        by_case[e.case].append(e)
    cases = []
    for case, examples in by_case.items():
        unseen: Counter = Counter()
        new_slots: Counter = Counter()
        for e in examples:
            occ = occurrences(e)
            unseen.update({(w, s) for w, s in occ if not counts.get(s, {}).get(w)})
            new_slots.update({s for _, s in occ if s not in counts})
        ranked = sorted(unseen.items(), key=lambda kv: (-kv[1], kv[0]))
        if ranked and ranked[0][1] < HELD_OUT_SHARE * len(examples):
            ranked.insert(0, None)  # no pair is held out: list the commonest as others
        rec = {"case": case, "type": case_type(case), "n": len(examples), "held_out": None,
               "other_unseen": [[w, s, n] for (w, s), n in ranked[1:4]],
               "unseen_slots": [[s, n] for s, n in sorted(new_slots.items(),
                                                          key=lambda kv: (-kv[1], kv[0]))],
               "train_contexts": None, "seen_slot": None, "seen_slot_entropy_bits": None,
               "seen_slot_train_n": None, "tested_slot_entropy_bits": None,
               "tested_slot_train_n": None}
        if ranked and ranked[0] is not None:
            (word, slot), n = ranked[0]
            rec["held_out"] = {"word": word, "slot": slot, "sentences": n,
                               "share": round(n / len(examples), 6)}
            seen = word_slots.get(word, Counter())
            rec["train_contexts"] = {"count": sum(seen.values()),
                                     "slots": dict(sorted(seen.items(),
                                                          key=lambda kv: (-kv[1], kv[0])))}
            if seen:
                top = min(seen, key=lambda s: (-seen[s], s))
                rec["seen_slot"] = top
                rec["seen_slot_entropy_bits"] = table[top]["entropy_bits"]
                rec["seen_slot_train_n"] = table[top]["n"]
            if slot in table:
                rec["tested_slot_entropy_bits"] = table[slot]["entropy_bits"]
                rec["tested_slot_train_n"] = table[slot]["n"]
        cases.append(rec)
    return {"train": {"path": train_name, "n": len(train), "slots": table}, "cases": cases}


def _cell(value) -> str:
    if value is None:
        return ""
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def cogs_tsv(report: dict) -> str:
    """One tab-separated row per case (:data:`TSV_COLUMNS`, empty cells where undefined;
    ``train_slots`` as ``slot:count`` joined by ``;``)."""
    buf = io.StringIO()
    buf.write("\t".join(TSV_COLUMNS) + "\n")
    for r in report["cases"]:
        h = r["held_out"] or {}
        ctx = r["train_contexts"] or {}
        slots = ";".join(f"{s}:{n}" for s, n in ctx.get("slots", {}).items())
        row = [r["case"], r["type"], r["n"], h.get("word"), h.get("slot"), h.get("share"),
               ctx.get("count"), slots, r["seen_slot"], r["seen_slot_entropy_bits"],
               r["seen_slot_train_n"], r["tested_slot_entropy_bits"],
               r["tested_slot_train_n"], ";".join(f"{s}:{n}" for s, n in r["unseen_slots"])]
        buf.write("\t".join(_cell(v) for v in row) + "\n")
    return buf.getvalue()


def cogs_text(report: dict) -> str:
    """The report for a person: the training slots, then one block per case."""
    t = report["train"]
    lines = [f"training set {t['path']}: {t['n']} sentences",
             f"  {'slot':<48} {'n':>6} {'words':>6} {'H (bits)':>9}"]
    for slot, s in t["slots"].items():
        lines.append(f"  {slot:<48} {s['n']:>6} {s['words']:>6} {s['entropy_bits']:>9.3f}")
    for r in report["cases"]:
        lines.append(f"{r['case']} ({r['type']}, {r['n']} sentences)")
        h = r["held_out"]
        if r["unseen_slots"]:
            lines.append("  slots absent from training: " + ", ".join(
                f"{s} ({n} sentences)" for s, n in r["unseen_slots"]))
        if h is None:
            others = ", ".join(f"{w} in {s} ({n})" for w, s, n in r["other_unseen"])
            lines.append(f"  no held-out (word, slot) pair (in {HELD_OUT_SHARE:.0%} of the "
                         "sentences or more)" + (f"; commonest absent from training: {others}"
                                                 if others else ""))
            continue
        ctx = r["train_contexts"]
        seen = ", ".join(f"{s} {n}" for s, n in ctx["slots"].items()) or "never"
        tested = r["tested_slot_entropy_bits"]
        lines.append(f"  held out: {h['word']} in {h['slot']} ({h['sentences']} sentences, "
                     f"{h['share']:.1%})")
        lines.append(f"  in training: {ctx['count']} times ({seen})")
        if r["seen_slot"] is not None:
            lines.append(f"  H(seen slot {r['seen_slot']}) = "
                         f"{r['seen_slot_entropy_bits']:.3f} bits; H(tested slot) = "
                         + ("undefined (not in training)" if tested is None
                            else f"{tested:.3f} bits"))
    return "\n".join(lines) + "\n"
