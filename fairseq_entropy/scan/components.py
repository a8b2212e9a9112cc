"""Component-controlled levels: Experiment 1's mixing construction (Wold et al.,
arXiv 2505.13089, Sec. 4.1) applied to a component class other than verbs.

The class is ``direction``, ``modifier`` or ``repetition``, with the values of
:data:`~fairseq_entropy.scan.entropy.COMPONENT_VALUES` (``none``: the clause has no such word).
A restricted value (e.g. ``left``) is never in the clause executed first in training and
validation; the second slot's entropy over the class's values is the level's target, in bits
(Eq. 1 applied to the class).
"""

from __future__ import annotations

import math
from typing import List, Sequence

from .entropy import COMPONENT_VALUES, clause_component
from .grammar import CONJUNCTIONS, Clause, Grammar, two_clause
from .levels import BuildError, Level, check_nonempty_splits, check_valid_fraction, level_name
from .mixing import mixing_cells
from .sampling import draw_cells, level_rng, shuffled


def component_clauses(grammar: Grammar, component: str, value: str) -> List[Clause]:
    """Every clause (of every verb) whose ``component`` has ``value``, in a fixed order."""
    return [c for v in grammar.verbs for c in grammar.clauses(v)
            if clause_component(c, component) == value]


def build_exp1_component(grammar: Grammar, component: str, restricted: str,
                         levels: Sequence[float], n: int = 6000, seed: int = 1,
                         valid_fraction: float = 0.05) -> List[Level]:
    """Experiment 1's mixing construction applied to a component class other than verbs.

    The restricted value (e.g. ``left`` of the ``direction`` class) is never in the clause
    executed first in train/valid.  The second slot's distribution over the class's values
    (:data:`~fairseq_entropy.scan.entropy.COMPONENT_VALUES`, where ``none`` is a clause without
    such a word) mixes "always the restricted value" with uniform, with integer counts whose
    entropy is the target within 0.01 bits (:func:`~fairseq_entropy.scan.mixing.mixing_counts`);
    the first slot is uniform over the other values.  Within each (first value, second value,
    conjunction) cell the clauses are drawn uniformly without replacement from every clause of
    every verb that has that value, so verbs, and the other classes, are spread at random.
    Test: every command with the restricted value executed first.

    Args:
        component: ``direction``, ``modifier`` or ``repetition``.
        restricted: a value of that class.
        levels: target entropies of the second slot, in bits, in [0, log2 |values|].
        n: training commands per level.
        seed: random seed (each level draws from its own generator, seeded by the seed, the
            class and the level, :func:`~fairseq_entropy.scan.sampling.level_rng`).
        valid_fraction: validation size as a fraction of ``n``, capped by what each cell
            still has.

    Returns:
        one :class:`~fairseq_entropy.scan.levels.Level` per target, with
        ``component=component`` and ``extra={"restricted_value": restricted}``.

    Raises:
        BuildError: an unknown class or value, a level above the class's maximum entropy,
            ``n`` not positive, ``valid_fraction`` outside (0, 1), a cell asking for more
            commands than exist, or an empty split.
    """
    if component not in ("direction", "modifier", "repetition"):
        raise BuildError(f"component-controlled builds take direction, modifier or repetition, "
                         f"got {component!r}. Fix: use --component direction|modifier|"
                         "repetition, or build exp1 without --component for verbs")
    values = list(COMPONENT_VALUES[component])
    if restricted not in values:
        raise BuildError(f"restricted value {restricted!r} is not a {component} value "
                         f"({', '.join(values)}). Fix: pass --restricted with one of them")
    h_max = math.log2(len(values))
    too_high = [t for t in levels if float(t) > h_max + 1e-9]
    if too_high:
        # the largest level with 3 decimals (a level's name has 3) that can be built
        h_top = math.floor(h_max * 1e3 + 1e-9) / 1e3
        raise BuildError(f"level(s) {', '.join(f'{t:g}' for t in too_high)} bits exceed the "
                         f"maximum entropy of the {component} class, log2({len(values)}) = "
                         f"{h_max:.5f} bits over {', '.join(values)}. Fix: choose levels in "
                         f"[0, {h_top:.3f}]")
    if n <= 0:
        raise BuildError(f"N must be positive, got {n}. Fix: pass --n 6000 (the paper's size)")
    check_valid_fraction(valid_fraction)
    clauses = {v: component_clauses(grammar, component, v) for v in values}
    first_values = [v for v in values if v != restricted]
    mine = clauses[restricted]
    every = [c for v in grammar.verbs for c in grammar.clauses(v)]
    test = [two_clause(a, b, conj) for conj in CONJUNCTIONS for a in mine for b in every]
    out = []
    for target in levels:
        target = float(target)
        name = level_name("exp1", target)
        cells = mixing_cells(name, n, values, restricted, target, first_values,
                             lambda v1, v2: len(clauses[v1]) * len(clauses[v2]), valid_fraction,
                             lambda cap: "use a smaller N")
        rng = level_rng(seed, f"exp1-{component}", name)
        train, valid = draw_cells(grammar, rng, cells, pool=clauses.__getitem__)
        level = Level(name, "exp1", "second", target,
                      {"train": shuffled(rng, train), "valid": shuffled(rng, valid),
                       "test": test}, extra={"restricted_value": restricted},
                      component=component)
        check_nonempty_splits(level, f"raise --n (now {n}) or --valid-fraction (now "
                                     f"{valid_fraction}) so that N x fraction >= 1")
        out.append(level)
    return out
