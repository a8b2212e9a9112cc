"""The mixing design of Experiment 1 (Wold et al., arXiv 2505.13089, Sec. 4.1): integer
command counts per cell whose second-slot entropy is a requested value.

The second slot's distribution mixes "always the restricted value v*" with the uniform
distribution over all values: v* gets c commands and the other values share the rest evenly
(:func:`mixing_counts`), with c chosen so that the entropy (Eq. 1, in bits) is the target within
:data:`ENTROPY_TOLERANCE_BITS`.  The first slot cycles through the values other than v*
(:func:`round_robin_cells`), the validation counts follow the same shares (Hamilton's method,
:func:`largest_remainder`), and every (first, second) cell is split evenly between ``and`` and
``after`` (:func:`mixing_cells`).  Everything is deterministic: no randomness enters the counts.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .entropy import entropy_bits
from .grammar import CONJUNCTIONS
from .levels import BuildError

ENTROPY_TOLERANCE_BITS = 0.01


def spread(total: int, k: int) -> List[int]:
    """``k`` non-negative integers summing to ``total`` that differ by at most 1 (larger first).

    Raises:
        BuildError: ``k`` is not positive.
    """
    if k <= 0:
        raise BuildError("cannot spread counts over zero verbs")
    q, r = divmod(total, k)
    return [q + 1 if i < r else q for i in range(k)]


def largest_remainder(total: int, weights: Sequence[float]) -> List[int]:
    """Integer apportionment of ``total`` proportional to ``weights`` (Hamilton's method).

    Each index gets the floor of its exact share ``total * w / sum(weights)``; the units left
    over go to the largest remainders, ties to the earlier index, so the result is
    deterministic.

    Returns:
        one non-negative count per weight, summing to ``total`` (all zeros when ``total`` is 0
        or the weights sum to 0 or less).
    """
    s = float(sum(weights))
    if total == 0 or s <= 0:
        return [0] * len(weights)
    exact = [total * w / s for w in weights]
    base = [int(math.floor(x)) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - base[i]), i))
    for i in order[: total - sum(base)]:
        base[i] += 1
    return base


def mixing_counts(n: int, verbs: Sequence[str], restricted: str, target_bits: float,
                  tolerance: float = ENTROPY_TOLERANCE_BITS) -> Dict[str, int]:
    """Second-slot verb counts of Experiment 1 whose entropy is ``target_bits``.

    The family mixes "always ``restricted``" with uniform: ``restricted`` gets c counts and the
    other verbs share ``n - c`` evenly (within 1), for c = ceil(n/|V|) .. n.  Among these the
    count vector whose entropy is closest to the target is returned.

    Args:
        n: number of training commands.
        verbs: all verbs (|V| of them), in the order used for the even split.
        restricted: the restricted verb v*.
        target_bits: requested entropy, in bits, in [0, log2 |V|].

    Returns:
        verb -> count, summing to ``n``.

    Raises:
        BuildError: target outside [0, log2 |V|], or no count vector within ``tolerance``
            bits (the message names the nearest achievable entropy).
    """
    k = len(verbs)
    h_max = math.log2(k)
    if not (0.0 <= target_bits <= h_max + 1e-12):
        raise BuildError(f"--levels: target entropy {target_bits} bits is outside "
                         f"[0, {h_max:g}] for {k} verbs. Fix: choose levels between 0 and "
                         f"log2({k})")
    others = [v for v in verbs if v != restricted]
    best: Optional[Tuple[float, int]] = None
    for c in range(n, -(-n // k) - 1, -1):
        h = entropy_bits([c] + spread(n - c, len(others)))
        if best is None or abs(h - target_bits) < abs(best[0] - target_bits) - 1e-12:
            best = (h, c)
    h, c = best
    if abs(h - target_bits) > tolerance:
        raise BuildError(f"target entropy {target_bits} bits is not reachable with N={n} "
                         f"training commands (nearest achievable: {h:.4f} bits). Fix: use a "
                         f"target within {tolerance} bits of an achievable value or a larger N")
    counts = {restricted: c}
    counts.update(zip(others, spread(n - c, len(others))))
    return {v: counts[v] for v in verbs}


def round_robin_cells(second_counts: Dict[str, int], first_verbs: Sequence[str]
                      ) -> Dict[Tuple[str, str], int]:
    """Joint (first verb, second verb) counts with the given second-slot counts.

    Commands are laid out second verb by second verb; the first verb cycles through
    ``first_verbs``, so the first slot is uniform (counts within 1) and every
    (first, second) cell gets its second verb's count split evenly (within 1).
    """
    cells: Dict[Tuple[str, str], int] = {}
    i = 0
    for v2, c in second_counts.items():
        for j, m in enumerate(spread(c, len(first_verbs))):
            v1 = first_verbs[(i + j) % len(first_verbs)]
            cells[(v1, v2)] = cells.get((v1, v2), 0) + m
        i = (i + c) % len(first_verbs)
    return cells


class _ConjunctionBalancer:
    """Splits cell counts between ``and``/``after`` so the global split stays within 1."""

    def __init__(self):
        self.extra_to_and = True

    def split(self, n: int) -> Dict[str, int]:
        """Split ``n`` commands of one cell into ``{"and": a, "after": b}`` with |a - b| <= 1."""
        half, odd = divmod(n, 2)
        if odd:
            first = "and" if self.extra_to_and else "after"
            self.extra_to_and = not self.extra_to_and
            return {c: half + (1 if c == first else 0) for c in CONJUNCTIONS}
        return {c: half for c in CONJUNCTIONS}


def mixing_cells(name: str, n: int, values: Sequence[str], restricted: str, target: float,
                 first_values: Sequence[str], cap_of: Callable[[str, str], int],
                 valid_fraction: float, fix: Callable[[int], str]
                 ) -> Dict[Tuple[str, str, str], Tuple[int, int]]:
    """(train, valid) counts per (first value, second value, conjunction) of one mixing level.

    The second slot's counts are :func:`mixing_counts` (entropy ``target`` bits), the first slot
    cycles through ``first_values`` (:func:`round_robin_cells`), the validation counts follow
    the same shares (``valid_fraction`` of ``n``, capped by what each cell has left), and each
    cell is split evenly between ``and`` and ``after``.

    Args:
        name: the level's name, for the error message.
        cap_of: number of distinct commands per conjunction in a (first, second) cell.
        fix: the "Fix:" text of the error for a cell asking more than ``2 * cap`` commands.

    Raises:
        BuildError: an unreachable target, or a cell asking for more commands than exist
            (at once, without counting up to ``n``, when ``n`` exceeds every cell together).
    """
    pool = sum(2 * cap_of(v1, v2) for v1 in first_values for v2 in values)
    if n > pool:
        # no count vector fits (counting up to n would take as long as n); the fix is that of
        # a request as large as the pool, which fails unless every cell fills exactly
        fix_text = f"use N <= {pool}"
        try:
            mixing_cells(name, pool, values, restricted, target, first_values, cap_of,
                         valid_fraction, fix)
        except BuildError as e:
            fix_text = str(e).split("Fix: ")[-1]
        raise BuildError(f"level {name}: N={n} needs more commands than the {pool} that exist "
                         f"in all its cells. Fix: {fix_text}")
    second = mixing_counts(n, values, restricted, target)
    train_cells = round_robin_cells(second, first_values)
    n_valid = int(round(valid_fraction * n))
    valid_second = dict(zip(second, largest_remainder(n_valid, list(second.values()))))
    valid_cells = round_robin_cells(valid_second, first_values)
    bal_t, bal_v = _ConjunctionBalancer(), _ConjunctionBalancer()
    cells = {}
    for (v1, v2), m in sorted(train_cells.items()):
        cap = cap_of(v1, v2)
        if m > 2 * cap:
            raise BuildError(f"level {name}: N={n} needs {m} commands with ({v1} first, {v2} "
                             f"second) but only {2 * cap} exist. Fix: {fix(cap)}")
        t = bal_t.split(m)
        v = bal_v.split(valid_cells.get((v1, v2), 0))
        for conj in CONJUNCTIONS:
            cells[(v1, v2, conj)] = (t[conj], min(v[conj], cap - t[conj]))
    return cells
