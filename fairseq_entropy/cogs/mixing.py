"""Word counts of one COGS slot whose entropy is a requested value: the mixing of Wold et al.
(arXiv 2505.13089, Sec. 4.1; :mod:`fairseq_entropy.scan.mixing` for SCAN) under the limits of
a fixed corpus.

The slot's training words are counted as ``base[w] + c[w]``: ``base`` is the fixed part (the
slot's words in sentences every level keeps), ``c`` the part chosen per level, ``n`` sentences
in all, at most ``available[w]`` of them with word ``w`` (COGS has no more such sentences).
Two count vectors bound what ``c`` can be:

* :func:`peaked_counts`, the most concentrated: the word with the most sentences takes as many
  as it has, then the next (one word dominant; a single word when ``n`` is at most its
  sentences);
* :func:`flat_counts`, the most even: water-filling, every word's total raised to a common
  level as far as its sentences allow (the most entropy any ``c`` gives).

A level mixes them, ``(1 - alpha) * peaked + alpha * flat``, rounded to integers by Hamilton's
method (:func:`~fairseq_entropy.scan.mixing.largest_remainder`, which keeps every count within
its limits), with ``alpha`` found by bisection so that the entropy (Eq. 1, bits) of
``base + c`` is the target within :data:`~fairseq_entropy.scan.mixing.ENTROPY_TOLERANCE_BITS`
(:func:`hit_counts`).  The entropy of the mixture is concave in ``alpha`` with its maximum at
``alpha = 1``, so it rises from the peaked to the flat vector: the reachable range is
``[H(base + peaked), H(base + flat)]`` (:func:`reachable_range`).  Where rounding leaves the
entropy further than the tolerance from the target (few sentences), single sentences are moved
between words while that brings it closer.  No randomness enters the counts.
"""

from __future__ import annotations

import math
from typing import Dict, List, Mapping, Tuple

from ..scan.entropy import entropy_bits
from ..scan.levels import BuildError
from ..scan.mixing import ENTROPY_TOLERANCE_BITS, largest_remainder

#: bisection steps on the mixing weight (2**-60: far below one sentence's share)
BISECTION_STEPS = 60
#: the most single-sentence moves tried after the bisection
MAX_MOVES = 200


def _words(available: Mapping[str, int], base: Mapping[str, int]) -> List[str]:
    return sorted(set(available) | {w for w, b in base.items() if b})


def _check(available: Mapping[str, int], n: int) -> None:
    if n < 0 or any(a < 0 for a in available.values()):
        raise BuildError(f"negative sentence counts ({n}). Fix: pass counts >= 0")
    if n > sum(available.values()):
        raise BuildError(f"{n} slot sentences asked, but only {sum(available.values())} exist. "
                         "Fix: ask for at most that many (--slot-sentences)")


def peaked_counts(available: Mapping[str, int], base: Mapping[str, int], n: int
                  ) -> Dict[str, int]:
    """The most concentrated choice: words by decreasing ``base + available`` (ties by word)
    take all their sentences until ``n`` are taken.

    Args:
        available: word -> sentences that can be chosen (>= 0).
        base: word -> fixed occurrences in the slot.
        n: sentences to choose, at most ``sum(available)``.

    Returns:
        word -> chosen sentences (every word of ``available`` and ``base``), summing to ``n``.

    Raises:
        BuildError: ``n`` larger than the sentences available, or a negative count.
    """
    _check(available, n)
    out = {w: 0 for w in _words(available, base)}
    left = n
    for w in sorted(out, key=lambda w: (-(available.get(w, 0) + base.get(w, 0)), w)):
        out[w] = min(available.get(w, 0), left)
        left -= out[w]
    return out


def flat_counts(available: Mapping[str, int], base: Mapping[str, int], n: int
                ) -> Dict[str, int]:
    """The most even choice (water-filling): the largest level L such that raising every
    word's total ``base + c`` to L (within its sentences) takes at most ``n`` sentences; the
    sentences left raise words at L to L + 1, in word order.  ``base + c`` is then the
    maximum-entropy vector of all choices.

    Args and Returns: as :func:`peaked_counts`.

    Raises:
        BuildError: as :func:`peaked_counts`.
    """
    _check(available, n)
    words = _words(available, base)

    def fill(level: int) -> Dict[str, int]:
        return {w: min(max(level - base.get(w, 0), 0), available.get(w, 0)) for w in words}

    lo, hi = 0, max((available.get(w, 0) + base.get(w, 0) for w in words), default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(fill(mid).values()) <= n:
            lo = mid
        else:
            hi = mid - 1
    out = fill(lo)
    left = n - sum(out.values())
    for w in words:
        if left == 0:
            break
        if base.get(w, 0) + out[w] == lo and out[w] < available.get(w, 0):
            out[w] += 1
            left -= 1
    return out


def _entropy(base: Mapping[str, int], c: Mapping[str, int]) -> float:
    return entropy_bits([base.get(w, 0) + k for w, k in c.items()])


def reachable_range(available: Mapping[str, int], base: Mapping[str, int], n: int
                    ) -> Tuple[float, float]:
    """(lowest, highest) entropy in bits of ``base + c`` over the mixing family: that of the
    peaked and of the flat choice (module docstring).

    Raises:
        BuildError: as :func:`peaked_counts`; ValueError: ``n`` and ``base`` both empty.
    """
    return (_entropy(base, peaked_counts(available, base, n)),
            _entropy(base, flat_counts(available, base, n)))


def _mix(peak: Dict[str, int], flat: Dict[str, int], n: int, alpha: float) -> Dict[str, int]:
    weights = [(1 - alpha) * peak[w] + alpha * flat[w] for w in peak]
    return dict(zip(peak, largest_remainder(n, weights)))


def _moved(c: Dict[str, int], available: Mapping[str, int], base: Mapping[str, int],
           target: float) -> Dict[str, int]:
    """``c`` after single-sentence moves between words (within their sentences), each the one
    that brings the entropy closest to ``target``, while one does."""
    c = dict(c)
    total = sum(base.get(w, 0) + k for w, k in c.items())

    def f(x: int) -> float:
        return x * math.log2(x) if x > 0 else 0.0

    for _ in range(MAX_MOVES):
        t = {w: base.get(w, 0) + k for w, k in c.items()}
        s = sum(f(x) for x in t.values())
        h = math.log2(total) - s / total
        best, move = abs(h - target), None
        give = [w for w in c if c[w] > 0]
        take = [w for w in c if c[w] < available.get(w, 0)]
        for a in give:
            for b in take:
                if a != b:
                    s2 = s - f(t[a]) + f(t[a] - 1) - f(t[b]) + f(t[b] + 1)
                    gap = abs(math.log2(total) - s2 / total - target)
                    if gap < best - 1e-12:
                        best, move = gap, (a, b)
        if move is None:
            break
        c[move[0]] -= 1
        c[move[1]] += 1
    return c


def hit_counts(available: Mapping[str, int], base: Mapping[str, int], n: int,
               target_bits: float, what: str = "the slot",
               tolerance: float = ENTROPY_TOLERANCE_BITS) -> Tuple[Dict[str, int], float]:
    """Chosen sentences per word such that the entropy of ``base + c`` is ``target_bits``.

    Args:
        available, base, n: as :func:`peaked_counts`.
        target_bits: the requested entropy, bits.
        what: the slot and data, named in the error messages.
        tolerance: the largest accepted distance to the target, bits.

    Returns:
        ``(c, alpha)``: word -> chosen sentences (summing to ``n``, each within
        ``available``), and the mixing weight of the flat vector (module docstring).

    Raises:
        BuildError: a target outside the reachable range (names the range), or one inside it
            that no integer counts reach within ``tolerance`` (names the nearest entropy).
    """
    peak, flat = peaked_counts(available, base, n), flat_counts(available, base, n)
    low, high = _entropy(base, peak), _entropy(base, flat)
    if not low - tolerance <= target_bits <= high + tolerance:
        first, last = math.ceil(low * 1000) / 1000, math.floor(high * 1000) / 1000
        raise BuildError(f"--levels: target entropy {target_bits:g} bits is outside the "
                         f"reachable range [{low:.3f}, {high:.3f}] bits of {what}. Fix: choose "
                         f"levels between {first:g} and {last:g} (the range depends on "
                         "--slot-sentences: fewer sentences lower its bottom)")
    lo, hi = 0.0, 1.0
    best = (abs(low - target_bits), peak, 0.0)
    for _ in range(BISECTION_STEPS):
        alpha = (lo + hi) / 2
        c = _mix(peak, flat, n, alpha)
        h = _entropy(base, c)
        if abs(h - target_bits) < best[0]:
            best = (abs(h - target_bits), c, alpha)
        if h < target_bits:
            lo = alpha
        else:
            hi = alpha
    if abs(high - target_bits) < best[0]:
        best = (abs(high - target_bits), flat, 1.0)
    gap, c, alpha = best
    if gap > tolerance:
        c = _moved(c, available, base, target_bits)
    h = _entropy(base, c)
    if abs(h - target_bits) > tolerance:
        raise BuildError(f"--levels: target entropy {target_bits:g} bits of {what} is not "
                         f"reachable within {tolerance} bits with {n} slot sentences (nearest: "
                         f"{h:.4f} bits). Fix: choose a target nearer an achievable value, or "
                         "more --slot-sentences")
    return c, alpha
