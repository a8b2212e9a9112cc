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


# ---------------------------------------------------------------- any component class
COMPONENT_VALUES: Dict[str, Tuple[str, ...]] = {
    "direction": ("left", "right", "none"),
    "modifier": ("around", "opposite", "none"),
    "repetition": ("twice", "thrice", "none"),
    "conjunction": ("and", "after", "none"),
}
"""Values of the non-verb component classes of the SCAN family; ``none`` = the word is absent."""

COMPONENT_CLASSES: Tuple[str, ...] = ("verb",) + tuple(COMPONENT_VALUES)
SLOT_ORDERS: Dict[str, Tuple[str, ...]] = {
    "execution": SLOTS,                                # clause executed first / second
    "surface": ("surface_first", "surface_second"),    # clause written first / second
}
COMMAND_SLOT = "command"
"""The one slot of the ``conjunction`` class: a command has at most one conjunction."""


def clause_component(clause, component: str) -> str:
    """The value of ``component`` (a class of :data:`COMPONENT_CLASSES` other than
    ``conjunction``) in one clause; ``"none"`` where the clause has no such word.

    Raises:
        ValueError: an unknown class.
    """
    if component == "verb":
        return clause.verb
    if component in ("direction", "modifier", "repetition"):
        return getattr(clause, component) or "none"
    raise ValueError(f"unknown clause component {component!r}; expected one of "
                     f"verb, direction, modifier, repetition")


def component_slot_counts(commands: Iterable[Command], component: str,
                          order: str = "execution") -> Dict[str, Counter]:
    """Counts of ``component``'s values in each slot of ``commands``.

    Args:
        commands: parsed commands.  One-clause commands count towards the first slot only,
            as in :func:`slot_verb_counts`.
        component: a class of :data:`COMPONENT_CLASSES`.  ``conjunction`` has the single slot
            ``"command"`` (``none`` for one-clause commands).
        order: ``"execution"`` (slots ``first``/``second``, the paper's convention) or
            ``"surface"`` (``surface_first``/``surface_second``: the clause written first/second).

    Returns:
        ``{slot: Counter(value -> n)}``.

    Raises:
        ValueError: an unknown class or slot order.
    """
    if component not in COMPONENT_CLASSES:
        raise ValueError(f"unknown component class {component!r}; expected one of "
                         f"{', '.join(COMPONENT_CLASSES)}")
    if order not in SLOT_ORDERS:
        raise ValueError(f"unknown slot order {order!r}; expected 'execution' or 'surface'")
    if component == "conjunction":
        counts = {COMMAND_SLOT: Counter()}
        for cmd in commands:
            counts[COMMAND_SLOT][cmd.conjunction or "none"] += 1
        return counts
    one, two = SLOT_ORDERS[order]
    counts = {one: Counter(), two: Counter()}
    for cmd in commands:
        a, b = (cmd.first, cmd.second) if order == "execution" else (cmd.left, cmd.right)
        counts[one][clause_component(a, component)] += 1
        if b is not None:
            counts[two][clause_component(b, component)] += 1
    return counts


def component_values(component: str, verbs: Sequence[str]) -> Tuple[str, ...]:
    """The values of ``component`` in a fixed order (``verbs`` for the verb class)."""
    return tuple(verbs) if component == "verb" else COMPONENT_VALUES[component]


@dataclass
class ComponentStatistics:
    """Counts and entropy (bits) of every (component class, slot) of a data set.

    ``counts[component][slot][value]`` and ``entropy[component][slot]`` (``None`` for an empty
    slot); the entropy is Eq. 1 of Wold et al. (arXiv 2505.13089) applied to any class.
    """

    counts: Dict[str, Dict[str, Dict[str, int]]]
    entropy: Dict[str, Dict[str, Optional[float]]]
    n_commands: int
    order: str

    @classmethod
    def of(cls, commands: Sequence[Command], verbs: Sequence[str],
           components: Sequence[str] = COMPONENT_CLASSES,
           order: str = "execution") -> "ComponentStatistics":
        """Statistics of ``commands`` for ``components`` with slots in ``order``."""
        counts: Dict[str, Dict[str, Dict[str, int]]] = {}
        entropy: Dict[str, Dict[str, Optional[float]]] = {}
        for component in components:
            raw = component_slot_counts(commands, component, order)
            counts[component], entropy[component] = {}, {}
            for slot, counter in raw.items():
                ordered = {v: counter.get(v, 0) for v in component_values(component, verbs)}
                for v, n in counter.items():  # e.g. "turn" in original SCAN
                    ordered.setdefault(v, n)
                counts[component][slot] = ordered
                entropy[component][slot] = entropy_bits(ordered) if sum(ordered.values()) \
                    else None
        return cls(counts, entropy, len(commands), order)

    def pairs(self) -> Set[Tuple[str, str, str]]:
        """The (component class, value, slot) triples that occur at least once."""
        return {(c, v, s) for c, slots in self.counts.items() for s, vals in slots.items()
                for v, n in vals.items() if n}

    def as_dict(self) -> dict:
        """JSON-ready form: per class and slot, ``entropy_bits`` and ``counts``."""
        return {"n_commands": self.n_commands, "slot_order": self.order,
                "components": {c: {s: {"entropy_bits": (None if self.entropy[c][s] is None
                                                        else round(self.entropy[c][s], 6)),
                                       "counts": self.counts[c][s]}
                                   for s in self.counts[c]}
                               for c in self.counts}}


def unseen_component_pairs(train: ComponentStatistics,
                           test: ComponentStatistics) -> List[Tuple[str, str, str]]:
    """(component class, value, slot) triples present in ``test`` and absent from ``train``."""
    return sorted(test.pairs() - train.pairs())
