"""Seeded draws of the commands of a level: stratified sampling without replacement.

Every level has its own ``numpy.random.Generator``, seeded by (seed, experiment, level name)
(:func:`level_rng`), so the same seed gives byte-identical files and a level does not depend
on which other levels are built.  Within each (first value, second value, conjunction) cell the
commands are drawn uniformly without replacement from every pair of clauses of the cell
(:func:`draw_cells`); the splits are then shuffled with the same generator (:func:`shuffled`).
"""

from __future__ import annotations

import zlib
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from .grammar import Clause, Command, Grammar, two_clause
from .levels import BuildError


def level_rng(seed: int, experiment: str, key: str) -> np.random.Generator:
    """The generator of one level: PCG64 seeded by ``SeedSequence([seed, crc32(experiment),
    crc32(key)])`` (``key`` is the level's name)."""
    return np.random.default_rng(np.random.SeedSequence(
        [int(seed), zlib.crc32(experiment.encode()), zlib.crc32(key.encode())]))


def draw_cells(grammar: Grammar, rng: np.random.Generator,
               cells: Dict[Tuple[str, str, str], Tuple[int, int]],
               pool: Optional[Callable[[str], List[Clause]]] = None
               ) -> Tuple[List[Command], List[Command]]:
    """Draw (train, valid) commands uniformly without replacement within each cell.

    Cells are visited in sorted order; a cell's ``n_train + n_valid`` commands are one draw of
    distinct indices into its ``len(a) x len(b)`` clause pairs, the first ``n_train`` of them
    for training.

    Args:
        cells: (first value, second value, conjunction) -> (n_train, n_valid).
        pool: the clauses of a value (default: a verb's clauses, ``grammar.clauses``).

    Returns:
        (train, valid) commands, cell by cell in draw order.

    Raises:
        BuildError: a cell asking for more commands than it holds (the builders check this
            before drawing).
    """
    pool = pool or grammar.clauses
    train, valid = [], []
    clause_cache: Dict[str, list] = {}
    for (v1, v2, conj) in sorted(cells):
        n_train, n_valid = cells[(v1, v2, conj)]
        if n_train + n_valid == 0:
            continue
        a = clause_cache.setdefault(v1, pool(v1))
        b = clause_cache.setdefault(v2, pool(v2))
        size = len(a) * len(b)
        if n_train + n_valid > size:  # guarded by callers; keep the invariant explicit
            raise BuildError(f"cell ({v1}, {v2}, {conj}) holds {size} commands, "
                             f"{n_train + n_valid} requested")
        idx = rng.choice(size, size=n_train + n_valid, replace=False)
        cmds = [two_clause(a[i // len(b)], b[i % len(b)], conj) for i in idx]
        train += cmds[:n_train]
        valid += cmds[n_train:]
    return train, valid


def shuffled(rng: np.random.Generator, cmds: List[Command]) -> List[Command]:
    """``cmds`` in the order of one ``rng.permutation``."""
    return [cmds[i] for i in rng.permutation(len(cmds))]
