"""Entropy-controlled data sets of Wold et al. (arXiv 2505.13089, Sec. 3-4), and the original
SCAN language (Lake and Baroni 2018).

Experiment 1 (*mixing*, :func:`build_exp1`): a restricted verb v* (default ``jump``) is never
executed first in training.  The second slot's verb distribution mixes "always v*" with the
uniform distribution; integer verb counts are chosen so that the measured entropy of the written
training set is the requested one (within 0.01 bits, :mod:`~fairseq_entropy.scan.mixing`).
Test: every command with v* executed first.

Experiment 2 (*support*, :func:`build_exp2`): v* (default ``lunge``) is never executed second.
The first slot is uniform over a support of k verbs containing v* (H = log2 k bits); the second
slot is uniform over the other verbs.  Test: every command with v* executed second.

All randomness comes from ``numpy.random.Generator`` seeded by (seed, level)
(:mod:`~fairseq_entropy.scan.sampling`), so the same seed gives byte-identical files and a level
does not depend on which other levels are built.  The same mixing applied to directions,
modifiers or repetitions is in :mod:`~fairseq_entropy.scan.components`; writing a build to disk
in :mod:`~fairseq_entropy.scan.manifests`.
"""

from __future__ import annotations

import math
import os
from typing import List, Sequence, Tuple

from .datafiles import command_examples, write_scan_file
from .grammar import CONJUNCTIONS, Command, Grammar, two_clause
from .levels import BuildError, Level, check_nonempty_splits, check_valid_fraction, level_name
from .mixing import mixing_cells
from .sampling import draw_cells, level_rng, shuffled

DEFAULT_LEVELS: Tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
AUTHORS_SUPPORT_ORDER: Tuple[str, ...] = (
    "lunge", "squat", "crawl", "sprint", "walk", "run", "look", "jump")
#: the paper's restricted verb of each experiment: never executed first in Experiment 1's
#: training set, never executed second in Experiment 2's
RESTRICTED_VERB = {"exp1": "jump", "exp2": "lunge"}


def test_commands(grammar: Grammar, restricted: str, slot: str) -> List[Command]:
    """Every two-clause command with ``restricted`` executed in ``slot`` (fixed order): the
    test set of Experiment 1 (``slot="first"``) and Experiment 2 (``slot="second"``).

    For 8 verbs: 21 clauses x 168 clauses x 2 conjunctions = 7056 commands.
    """
    mine = grammar.clauses(restricted)
    every = [c for v in grammar.verbs for c in grammar.clauses(v)]
    out = []
    for conj in CONJUNCTIONS:
        for a in mine:
            for b in every:
                out.append(two_clause(a, b, conj) if slot == "first" else two_clause(b, a, conj))
    return out


def _check_restricted(grammar: Grammar, restricted: str) -> None:
    if restricted not in grammar.verbs:
        raise BuildError(f"--restricted-verb {restricted}: not in the verb list (--verbs "
                         f"{','.join(grammar.verbs)}). Fix: pick one of them, or add it to "
                         "--verbs")


def build_exp1(grammar: Grammar, levels: Sequence[float] = DEFAULT_LEVELS, n: int = 6000,
               restricted: str = RESTRICTED_VERB["exp1"], seed: int = 1,
               valid_fraction: float = 0.05) -> List[Level]:
    """Experiment 1 (mixing) levels.

    Args:
        grammar: the paper's grammar (no ``turn``).
        levels: target second-slot entropies in bits.
        n: training commands per level (the paper: 6000; 3000/4000 for the ablation).
        restricted: v*, never executed first in train/valid.
        seed: random seed (each level draws from its own generator,
            :func:`~fairseq_entropy.scan.sampling.level_rng`).
        valid_fraction: validation size as a fraction of ``n``, capped by what the pool of
            commands still has in each (first verb, second verb, conjunction) cell.

    Returns:
        one :class:`~fairseq_entropy.scan.levels.Level` per target, named
        ``entropy_<target>``, controlled slot ``second``.

    Raises:
        BuildError: unknown restricted verb, ``n`` not positive, ``valid_fraction`` outside
            (0, 1), unreachable target, ``n`` larger than the commands available at a level,
            or an empty split (too small ``n * valid_fraction``).
    """
    _check_restricted(grammar, restricted)
    if n <= 0:
        raise BuildError(f"N must be positive, got {n}. Fix: pass --n 6000 (the paper's size)")
    check_valid_fraction(valid_fraction)
    first_verbs = [v for v in grammar.verbs if v != restricted]
    per_cell = {v: len(grammar.clauses(v)) for v in grammar.verbs}
    test = test_commands(grammar, restricted, "first")
    out = []
    for target in levels:
        target = float(target)
        name = level_name("exp1", target)
        cells = mixing_cells(name, n, grammar.verbs, restricted, target, first_verbs,
                             lambda v1, v2: per_cell[v1] * per_cell[v2], valid_fraction,
                             lambda cap: f"use N <= {2 * cap * len(first_verbs)} at this "
                                         "entropy")
        rng = level_rng(seed, "exp1", name)
        train, valid = draw_cells(grammar, rng, cells)
        level = Level(name, "exp1", "second", target,
                      {"train": shuffled(rng, train), "valid": shuffled(rng, valid),
                       "test": test})
        check_nonempty_splits(level, f"raise --n (now {n}) or --valid-fraction (now "
                                     f"{valid_fraction}) so that N x fraction >= 1")
        out.append(level)
    return out


def build_exp2(grammar: Grammar, supports: Sequence[int] = tuple(range(1, 9)),
               restricted: str = RESTRICTED_VERB["exp2"], seed: int = 1,
               support_order: Sequence[str] = AUTHORS_SUPPORT_ORDER,
               valid_fraction: float = 0.05) -> List[Level]:
    """Experiment 2 (support) levels.

    The support of size k is ``restricted`` followed by the first k-1 other verbs of
    ``support_order``.  The pool is every command whose first-slot verb is in the support and
    whose second-slot verb is not ``restricted`` (21 k x 147 x 2 = 6174 k commands for the
    paper's grammar); ``valid_fraction`` of each (first verb, second verb, conjunction) cell is
    held out for validation and the rest is the training set.

    Args:
        grammar: the paper's grammar (no ``turn``).
        supports: support sizes k, each in 1..|V|.
        restricted: v*, never executed second in train/valid.
        seed: random seed (each level draws from its own generator,
            :func:`~fairseq_entropy.scan.sampling.level_rng`).
        support_order: every verb once; the order in which verbs join the support after v*
            (default: the authors' order).
        valid_fraction: fraction of each cell held out for validation.

    Returns:
        one :class:`~fairseq_entropy.scan.levels.Level` per size k, named ``support_<k>``,
        controlled slot ``first``, target log2 k bits, ``extra={"support": [...]}``.

    Raises:
        BuildError: unknown restricted verb, a support order that does not list every verb
            once, a support size outside 1..|V|, ``valid_fraction`` outside (0, 1), or an
            empty validation split (too small ``valid_fraction``).
    """
    _check_restricted(grammar, restricted)
    check_valid_fraction(valid_fraction)
    order = [v for v in support_order]
    if sorted(order) != sorted(grammar.verbs):
        raise BuildError(f"support order {' '.join(order)} must list every verb of the grammar "
                         f"({' '.join(grammar.verbs)}) exactly once. Fix: pass "
                         f"--support-order with all {len(grammar.verbs)} verbs, "
                         f"comma-separated, e.g. {','.join(grammar.verbs)}")
    order = [restricted] + [v for v in order if v != restricted]
    second_verbs = [v for v in grammar.verbs if v != restricted]
    test = test_commands(grammar, restricted, "second")
    out = []
    for k in supports:
        k = int(k)
        if not 1 <= k <= len(order):
            raise BuildError(f"support size {k} outside 1..{len(order)}. Fix: pass --support "
                             f"with sizes between 1 and {len(order)}, e.g. 1..{len(order)}")
        support = order[:k]
        cells = {}
        for v1 in support:
            for v2 in second_verbs:
                size = len(grammar.clauses(v1)) * len(grammar.clauses(v2))
                n_valid = int(round(valid_fraction * size))
                for conj in CONJUNCTIONS:
                    cells[(v1, v2, conj)] = (size - n_valid, n_valid)
        name = level_name("exp2", k)
        rng = level_rng(seed, "exp2", name)
        train, valid = draw_cells(grammar, rng, cells)
        level = Level(name, "exp2", "first", math.log2(k),
                      {"train": shuffled(rng, train), "valid": shuffled(rng, valid),
                       "test": test}, extra={"support": support})
        check_nonempty_splits(level, f"raise --valid-fraction (now {valid_fraction})")
        out.append(level)
    return out


def write_scan_language(path: str | os.PathLike, actions: str = "scan") -> int:
    """Write the whole original SCAN language (20,910 pairs) as an ``IN: ... OUT: ...`` file.

    Args:
        actions: the action vocabulary, ``"scan"`` (I_WALK ... I_TURN_LEFT) or ``"paper"``
            (WALK ... LTURN), see :meth:`~fairseq_entropy.scan.grammar.Grammar.scan`.

    Returns:
        the number of pairs written.

    Raises:
        GrammarError: an unknown action vocabulary.
        DataFormatError: ``path`` is a directory, or a file stands where a parent directory
            is needed.
    """
    grammar = Grammar.scan(actions)
    examples = command_examples(grammar, list(grammar.commands()))
    write_scan_file(path, examples)
    return len(examples)
