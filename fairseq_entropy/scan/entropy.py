"""Slot entropy of a data set (Wold et al., arXiv 2505.13089, Sec. 3, Eq. 1).

For one slot (the clause executed first, or second) of a set of two-clause commands, the
empirical verb distribution p(v) = count(v) / N gives the entropy
``H = -sum_v p(v) log2 p(v)`` in bits (0 log 0 = 0).  With 8 verbs H lies in [0, 3].
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from .grammar import Command

SLOTS: Tuple[str, str] = ("first", "second")


def entropy_bits(counts: Mapping[str, int] | Sequence[int]) -> float:
    """Shannon entropy in bits of the distribution given by non-negative ``counts``.

    Args:
        counts: a mapping verb -> count or a sequence of counts; zeros are allowed.

    Returns:
        H = -sum p log2 p with p = count / total, in bits; 0.0 for a single non-zero count.

    Raises:
        ValueError: a negative count, or all counts zero.
    """
    values = list(counts.values()) if isinstance(counts, Mapping) else list(counts)
    if any(c < 0 for c in values):
        raise ValueError(f"negative count in {values}")
    total = sum(values)
    if total <= 0:
        raise ValueError("entropy of an empty distribution is undefined (all counts are 0)")
    h = 0.0
    for c in values:
        if c:
            p = c / total
            h -= p * math.log2(p)
    return abs(h)  # avoid -0.0


def slot_verb_counts(commands: Iterable[Command]) -> Dict[str, Counter]:
    """Verb counts of each slot (by execution order) over the two-clause ``commands``.

    One-clause commands count towards the first slot only.

    Returns:
        ``{"first": Counter(verb -> n), "second": Counter(verb -> n)}``.
    """
    counts = {slot: Counter() for slot in SLOTS}
    for cmd in commands:
        counts["first"][cmd.first.verb] += 1
        if cmd.second is not None:
            counts["second"][cmd.second.verb] += 1
    return counts


@dataclass
class SlotStatistics:
    """Verb counts and entropy (bits) of both slots of a data set."""

    counts: Dict[str, Dict[str, int]]
    entropy: Dict[str, Optional[float]]
    n_commands: int

    @classmethod
    def of(cls, commands: Sequence[Command], verbs: Sequence[str]) -> "SlotStatistics":
        """Statistics of ``commands``; ``verbs`` fixes the order (and lists zero counts)."""
        raw = slot_verb_counts(commands)
        counts = {}
        entropy = {}
        for slot in SLOTS:
            ordered = {v: raw[slot].get(v, 0) for v in verbs}
            for v, n in raw[slot].items():  # e.g. "turn"
                ordered.setdefault(v, n)
            counts[slot] = ordered
            entropy[slot] = entropy_bits(ordered) if sum(ordered.values()) else None
        return cls(counts, entropy, len(commands))

    def pairs(self) -> Set[Tuple[str, str]]:
        """The (verb, slot) pairs that occur at least once."""
        return {(v, s) for s in SLOTS for v, n in self.counts[s].items() if n}

    def as_dict(self) -> dict:
        """JSON-ready form: ``n_commands``, ``entropy_bits`` per slot, ``verb_counts`` per slot."""
        return {"n_commands": self.n_commands,
                "entropy_bits": {s: (None if h is None else round(h, 6))
                                 for s, h in self.entropy.items()},
                "verb_counts": self.counts}


def unseen_pairs(train: SlotStatistics, test: SlotStatistics) -> List[Tuple[str, str]]:
    """(verb, slot) pairs present in ``test`` and absent from ``train``, sorted."""
    return sorted(test.pairs() - train.pairs(), key=lambda p: (SLOTS.index(p[1]), p[0]))
