"""Atom and compound divergence between two command sets (Keysers et al., ICLR 2020).

Keysers et al., *Measuring Compositional Generalization: A Comprehensive Method on Realistic
Data* (ICLR 2020, Sec. 2.1) compare the train and test distributions of *atoms* (primitive
elements) and *compounds* (combinations of atoms) with the Chernoff coefficient

    C_alpha(P || Q) = sum_k p_k^alpha q_k^(1 - alpha)        (0 <= C <= 1)

and define the divergences ``D_A = 1 - C_0.5(F_A(train) || F_A(test))`` and
``D_C = 1 - C_0.1(F_C(train) || F_C(test))``, where F are normalised frequencies.  0 means
identical distributions and 1 disjoint supports.  alpha = 0.1 for compounds makes D_C small
as soon as the test compounds occur in training at all, whatever their training frequency.

Atoms and compounds of a SCAN-family command are read off its parse, with clauses in
*execution* order (the slot convention of Wold et al., arXiv 2505.13089)::

    command = conj(first clause, second clause)
    clause  = repetition(phrase)
    phrase  = verb [modifier] [direction]

* **Atoms**: every word of the command, i.e. every terminal rule application (verbs, ``turn``,
  directions, modifiers, repetitions, conjunctions), one count per occurrence.
* **Compounds**: the connected sub-trees of that parse with two or more atoms, of five kinds:

  - ``phrase``: verb with its modifier and direction (``jump around left``), for phrases with a
    direction;
  - ``clause``: a phrase with its repetition (``jump around left twice``), for repeated clauses;
  - ``slot``: a verb in an execution slot of a two-clause command (``first:jump``), the
    compound whose absence Experiment 1 / 2 and SCAN's add-primitive split test;
  - ``slot_clause``: a whole clause in an execution slot (``second:walk left twice``);
  - ``verb_pair``: the conjunction with the verbs of both slots (``and:walk>jump``).

  Every occurrence weighs 1.  Keysers et al. additionally down-weight a compound that occurs
  only inside one larger compound; on these depth-3 parses each compound kind above is a
  distinct rule combination, so the weighting is left out and the per-kind divergences are
  reported beside the pooled one (:func:`compound_counts` with ``kinds``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple

from ..errors import UserError
from .grammar import Clause, Command

COMPOUND_KINDS: Tuple[str, ...] = ("phrase", "clause", "slot", "slot_clause", "verb_pair")
ATOM_ALPHA = 0.5
COMPOUND_ALPHA = 0.1


class DivergenceError(UserError, ValueError):
    """A divergence asked of a training or test set without commands."""


def chernoff_coefficient(p: Mapping[str, float], q: Mapping[str, float], alpha: float) -> float:
    """Chernoff coefficient ``C_alpha(P || Q) = sum_k p_k^alpha q_k^(1 - alpha)``.

    Args:
        p, q: non-negative weights (counts or probabilities) per key; each is normalised to sum 1.
            Keys missing from one side have weight 0 there.
        alpha: in [0, 1] (Keysers et al. use 0.5 for atoms and 0.1 for compounds).

    Returns:
        C in [0, 1]: 1 for identical distributions, 0 for disjoint supports.

    Raises:
        ValueError: alpha outside [0, 1], a negative weight, or an empty distribution.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    p_total = _total(p, "P")
    q_total = _total(q, "Q")
    c = 0.0
    for key in p.keys() & q.keys():
        pk, qk = p[key] / p_total, q[key] / q_total
        if pk > 0 and qk > 0:
            c += pk ** alpha * qk ** (1.0 - alpha)
    return min(c, 1.0)


def _total(weights: Mapping[str, float], name: str) -> float:
    if any(w < 0 for w in weights.values()):
        raise ValueError(f"negative weight in distribution {name}")
    total = float(sum(weights.values()))
    if total <= 0:
        raise ValueError(f"distribution {name} is empty: no atoms or compounds to compare")
    return total


def divergence(p: Mapping[str, float], q: Mapping[str, float], alpha: float) -> float:
    """``1 - C_alpha(P || Q)`` (Keysers et al. 2020, Eq. 1-2); 0 identical, 1 disjoint."""
    return 1.0 - chernoff_coefficient(p, q, alpha)


def atom_counts(commands: Iterable[Command]) -> Counter:
    """Atom counts: every word of every command, one count per occurrence."""
    counts: Counter = Counter()
    for cmd in commands:
        counts.update(cmd.words)
    return counts


def _phrase(clause: Clause) -> str:
    return " ".join(w for w in (clause.verb, clause.modifier, clause.direction) if w)


def command_compounds(cmd: Command) -> Iterable[str]:
    """The compounds of one command as ``"kind|text"`` strings (see the module docstring)."""
    clauses = [cmd.first] + ([cmd.second] if cmd.second is not None else [])
    for clause in clauses:
        if clause.direction:
            yield f"phrase|{_phrase(clause)}"
        if clause.repetition:
            yield f"clause|{clause}"
    if cmd.second is not None:
        for slot, clause in (("first", cmd.first), ("second", cmd.second)):
            yield f"slot|{slot}:{clause.verb}"
            yield f"slot_clause|{slot}:{clause}"
        yield f"verb_pair|{cmd.conjunction}:{cmd.first.verb}>{cmd.second.verb}"


def compound_counts(commands: Iterable[Command],
                    kinds: Optional[Sequence[str]] = None) -> Counter:
    """Compound counts over ``commands``, restricted to ``kinds`` (default: all five).

    Raises:
        ValueError: an unknown kind.
    """
    wanted = set(COMPOUND_KINDS if kinds is None else kinds)
    unknown = wanted - set(COMPOUND_KINDS)
    if unknown:
        raise ValueError(f"unknown compound kind(s) {sorted(unknown)}; "
                         f"known: {', '.join(COMPOUND_KINDS)}")
    counts: Counter = Counter()
    for cmd in commands:
        counts.update(c for c in command_compounds(cmd) if c.split("|", 1)[0] in wanted)
    return counts


@dataclass
class Divergences:
    """Atom and compound divergence of a test set from a training set.

    Attributes:
        atom: D_A = 1 - C_0.5 over atoms.
        compound: D_C = 1 - C_0.1 over all compounds pooled.
        by_kind: D_C restricted to each compound kind (``None`` where the test set has none).
    """

    atom: float
    compound: float
    by_kind: Dict[str, Optional[float]]

    def as_dict(self) -> dict:
        """JSON-ready form, rounded to 6 decimals."""
        return {"atom_divergence": round(self.atom, 6),
                "compound_divergence": round(self.compound, 6),
                "compound_divergence_by_kind": {
                    k: (None if v is None else round(v, 6)) for k, v in self.by_kind.items()}}


def divergences(train: Sequence[Command], test: Sequence[Command]) -> Divergences:
    """Atom and compound divergence of ``test`` from ``train`` (Keysers et al. 2020).

    Returns:
        :class:`Divergences` (atom, pooled compound and per-kind compound divergence, each in
        [0, 1]).

    Raises:
        DivergenceError: either set is empty, or has no compound at all (every command is
            one clause without direction or repetition, e.g. ``walk``), so that D_C is
            undefined.
    """
    if not train or not test:
        raise DivergenceError(f"divergence needs a non-empty training and test set (train has "
                              f"{len(train)} commands, test {len(test)}). Fix: pass files "
                              "that hold at least one command each")
    train_compounds, test_compounds = compound_counts(train), compound_counts(test)
    for name, compounds in (("training", train_compounds), ("test", test_compounds)):
        if not compounds:
            raise DivergenceError(f"the {name} set has no compounds (each of its commands is "
                                  "one clause without direction or repetition), so the "
                                  "compound divergence is undefined. Fix: compare sets with "
                                  "two-clause commands or clauses with a direction or "
                                  "repetition")
    by_kind: Dict[str, Optional[float]] = {}
    for kind in COMPOUND_KINDS:
        p, q = compound_counts(train, [kind]), compound_counts(test, [kind])
        if not q:  # the test set has no compound of this kind: nothing to compare
            by_kind[kind] = None
        else:  # a kind absent from training is disjoint from the test set: 1.0
            by_kind[kind] = divergence(p, q, COMPOUND_ALPHA) if p else 1.0
    return Divergences(atom=divergence(atom_counts(train), atom_counts(test), ATOM_ALPHA),
                       compound=divergence(train_compounds, test_compounds, COMPOUND_ALPHA),
                       by_kind=by_kind)
