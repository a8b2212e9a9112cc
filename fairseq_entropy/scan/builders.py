"""Entropy-controlled data sets of Wold et al. (arXiv 2505.13089, Sec. 3-4).

Experiment 1 (*mixing*, :func:`build_exp1`): a restricted verb v* (default ``jump``) is never
executed first in training.  The second slot's verb distribution mixes "always v*" with the
uniform distribution; integer verb counts are chosen so that the measured entropy of the written
training set is the requested one (within 0.01 bits).  Test: every command with v* executed
first.

Experiment 2 (*support*, :func:`build_exp2`): v* (default ``lunge``) is never executed second.
The first slot is uniform over a support of k verbs containing v* (H = log2 k bits); the second
slot is uniform over the other verbs.  Test: every command with v* executed second.

All randomness comes from ``numpy.random.Generator`` seeded by (seed, level), so the same seed
gives byte-identical files and a level does not depend on which other levels are built.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import UserError
from ..files import atomic_directory, atomic_write_text, make_parent_dirs, read_json
from ..version import __version__
from .datafiles import Example, write_pair, write_scan_file
from .entropy import (COMPONENT_VALUES, ComponentStatistics, SlotStatistics,
                      clause_component, entropy_bits)
from .grammar import CONJUNCTIONS, Clause, Command, Grammar, two_clause

ENTROPY_TOLERANCE_BITS = 0.01
DEFAULT_LEVELS: Tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
AUTHORS_SUPPORT_ORDER: Tuple[str, ...] = (
    "lunge", "squat", "crawl", "sprint", "walk", "run", "look", "jump")
SPLITS: Tuple[str, ...] = ("train", "valid", "test")


class BuildError(UserError, ValueError):
    """An impossible or inconsistent build request; the message says how to fix it."""


# ----------------------------------------------------------------------------- helpers
def spread(total: int, k: int) -> List[int]:
    """``k`` non-negative integers summing to ``total`` that differ by at most 1 (larger first)."""
    if k <= 0:
        raise BuildError("cannot spread counts over zero verbs")
    q, r = divmod(total, k)
    return [q + 1 if i < r else q for i in range(k)]


def largest_remainder(total: int, weights: Sequence[float]) -> List[int]:
    """Integer apportionment of ``total`` proportional to ``weights`` (Hamilton's method).

    Ties in the remainders go to the earlier index, so the result is deterministic.
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


def level_name(experiment: str, value: float | int) -> str:
    """Directory name of a level: ``entropy_0.5`` (exp1) or ``support_3`` (exp2)."""
    if experiment == "exp2":
        return f"support_{int(value)}"
    text = f"{float(value):.3f}".rstrip("0")
    return "entropy_" + (text + "0" if text.endswith(".") else text)


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
        raise BuildError(f"target entropy {target_bits} bits is outside [0, {h_max:g}] for "
                         f"{k} verbs. Fix: choose levels between 0 and log2({k})")
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
        cap_of: number of distinct commands per conjunction in a (first, second) cell.
        fix: the "Fix:" text of the error for a cell asking more than ``2 * cap`` commands.

    Raises:
        BuildError: an unreachable target, or a cell asking for more commands than exist.
    """
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


def _rng(seed: int, experiment: str, key: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(
        [int(seed), zlib.crc32(experiment.encode()), zlib.crc32(key.encode())]))


def _examples(grammar: Grammar, commands: Sequence[Command]) -> List[Example]:
    return [Example(str(c), " ".join(grammar.interpret(c))) for c in commands]


# ----------------------------------------------------------------------------- levels
@dataclass
class Level:
    """One generated level: its splits and what it was built to be.

    Attributes:
        name: directory name (``entropy_1.5``, ``support_3``).
        experiment: ``"exp1"`` or ``"exp2"``.
        controlled_slot: the slot whose entropy the level controls (where v* was seen).
        target_bits: requested entropy of that slot, in bits.
        splits: ``{"train": [...], "valid": [...], "test": [...]}`` lists of commands.
        extra: builder-specific manifest fields (e.g. the support).
    """

    name: str
    experiment: str
    controlled_slot: str
    target_bits: float
    splits: Dict[str, List[Command]]
    extra: dict = field(default_factory=dict)
    component: str = "verb"

    def manifest(self, grammar: Grammar) -> dict:
        """The level's manifest: target and measured entropy (bits), slot verb counts and
        entropies of every split, sizes, and builder extras."""
        stats = {s: SlotStatistics.of(cmds, grammar.verbs) for s, cmds in self.splits.items()}
        measured = stats["train"].entropy[self.controlled_slot]
        extra = dict(self.extra)
        if self.component != "verb":
            comp = {s: ComponentStatistics.of(cmds, grammar.verbs, [self.component])
                    for s, cmds in self.splits.items()}
            measured = comp["train"].entropy[self.component][self.controlled_slot]
            extra["component"] = self.component
            extra["component_slots"] = {s: c.as_dict()["components"][self.component]
                                        for s, c in comp.items()}
        return {
            "level": self.name,
            "experiment": self.experiment,
            "controlled_slot": self.controlled_slot,
            "target_entropy_bits": self.target_bits,
            "entropy_bits": round(measured, 6),
            "sizes": {s: len(c) for s, c in self.splits.items()},
            "slots": {s: st.as_dict() for s, st in stats.items()},
            **extra,
        }


def _draw_cells(grammar: Grammar, rng: np.random.Generator,
                cells: Dict[Tuple[str, str, str], Tuple[int, int]],
                pool: Optional[Callable[[str], List[Clause]]] = None
                ) -> Tuple[List[Command], List[Command]]:
    """Draw (train, valid) commands uniformly without replacement within each cell.

    ``cells`` maps (first value, second value, conjunction) -> (n_train, n_valid); ``pool``
    gives the clauses of a value (default: a verb's clauses, ``grammar.clauses``).
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


def _shuffled(rng: np.random.Generator, cmds: List[Command]) -> List[Command]:
    return [cmds[i] for i in rng.permutation(len(cmds))]


def test_commands(grammar: Grammar, restricted: str, slot: str) -> List[Command]:
    """Every two-clause command with ``restricted`` executed in ``slot`` (fixed order).

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


def check_valid_fraction(valid_fraction: float) -> None:
    """Raise :class:`BuildError` unless ``0 < valid_fraction < 1``."""
    if not 0.0 < float(valid_fraction) < 1.0:
        raise BuildError(f"validation fraction {valid_fraction} is outside (0, 1). Fix: pass "
                         "--valid-fraction between 0 and 1, e.g. 0.05")


def check_nonempty_splits(level: "Level", fix: str) -> None:
    """Raise :class:`BuildError` if a split of ``level`` is empty (fairseq cannot train on,
    validate with or decode an empty split); ``fix`` says what to change."""
    empty = [s for s in SPLITS if not level.splits.get(s)]
    if empty:
        sizes = ", ".join(f"{s} {len(level.splits.get(s, []))}" for s in SPLITS)
        raise BuildError(f"level {level.name}: the {' and '.join(empty)} split would be empty "
                         f"({sizes}). Fix: {fix}")


def _check_restricted(grammar: Grammar, restricted: str) -> None:
    if restricted not in grammar.verbs:
        raise BuildError(f"restricted verb {restricted!r} is not in the verb list "
                         f"({' '.join(grammar.verbs)}). Fix: pick one of them")


def build_exp1(grammar: Grammar, levels: Sequence[float] = DEFAULT_LEVELS, n: int = 6000,
               restricted: str = "jump", seed: int = 1, valid_fraction: float = 0.05
               ) -> List[Level]:
    """Experiment 1 (mixing) levels.

    Args:
        grammar: the paper's grammar (no ``turn``).
        levels: target second-slot entropies in bits.
        n: training commands per level (the paper: 6000; 3000/4000 for the ablation).
        restricted: v*, never executed first in train/valid.
        seed: random seed.
        valid_fraction: validation size as a fraction of ``n``, capped by what the pool of
            commands still has in each (first verb, second verb, conjunction) cell.

    Returns:
        one :class:`Level` per target.

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
        rng = _rng(seed, "exp1", name)
        train, valid = _draw_cells(grammar, rng, cells)
        level = Level(name, "exp1", "second", target,
                      {"train": _shuffled(rng, train), "valid": _shuffled(rng, valid),
                       "test": test})
        check_nonempty_splits(level, f"raise --n (now {n}) or --valid-fraction (now "
                                     f"{valid_fraction}) so that N x fraction >= 1")
        out.append(level)
    return out


def build_exp2(grammar: Grammar, supports: Sequence[int] = tuple(range(1, 9)),
               restricted: str = "lunge", seed: int = 1,
               support_order: Sequence[str] = AUTHORS_SUPPORT_ORDER,
               valid_fraction: float = 0.05) -> List[Level]:
    """Experiment 2 (support) levels.

    The support of size k is ``restricted`` followed by the first k-1 other verbs of
    ``support_order``.  The pool is every command whose first-slot verb is in the support and
    whose second-slot verb is not ``restricted`` (21 k x 147 x 2 = 6174 k commands for the
    paper's grammar); ``valid_fraction`` of each (first verb, second verb, conjunction) cell is
    held out for validation and the rest is the training set.

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
                         f"({' '.join(grammar.verbs)}) exactly once. Fix: pass --support-order")
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
        rng = _rng(seed, "exp2", name)
        train, valid = _draw_cells(grammar, rng, cells)
        level = Level(name, "exp2", "first", math.log2(k),
                      {"train": _shuffled(rng, train), "valid": _shuffled(rng, valid),
                       "test": test}, extra={"support": support})
        check_nonempty_splits(level, f"raise --valid-fraction (now {valid_fraction})")
        out.append(level)
    return out


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
    entropy is the target within 0.01 bits (:func:`mixing_counts`); the first slot is uniform
    over the other values.  Within each (first value, second value, conjunction) cell the
    clauses are drawn uniformly without replacement from every clause of every verb that has
    that value, so verbs, and the other classes, are spread at random.  Test: every command
    with the restricted value executed first.

    Args:
        component: ``direction``, ``modifier`` or ``repetition``.
        restricted: a value of that class.
        levels: target entropies of the second slot, in bits, in [0, log2 |values|].

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
        # the largest 4-decimal level that can be built (log2 3 = 1.58496 prints as 1.5850)
        h_top = math.floor(h_max * 1e4) / 1e4
        raise BuildError(f"level(s) {', '.join(f'{t:g}' for t in too_high)} bits exceed the "
                         f"maximum entropy of the {component} class, log2({len(values)}) = "
                         f"{h_max:.5f} bits over {', '.join(values)}. Fix: choose levels in "
                         f"[0, {h_top:.4f}]")
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
        rng = _rng(seed, f"exp1-{component}", name)
        train, valid = _draw_cells(grammar, rng, cells, pool=clauses.__getitem__)
        level = Level(name, "exp1", "second", target,
                      {"train": _shuffled(rng, train), "valid": _shuffled(rng, valid),
                       "test": test}, extra={"restricted_value": restricted},
                      component=component)
        check_nonempty_splits(level, f"raise --n (now {n}) or --valid-fraction (now "
                                     f"{valid_fraction}) so that N x fraction >= 1")
        out.append(level)
    return out


# ----------------------------------------------------------------------------- writing
BUILD_MANIFEST = "manifest.json"


def _json(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"


def write_build(out_dir: str | os.PathLike, grammar: Grammar, levels: Sequence[Level],
                params: dict, force: bool = False) -> Path:
    """Write ``levels`` under ``out_dir`` with a build-level and a per-level ``manifest.json``.

    Each level is written into a temporary directory that is renamed into place once complete.

    Args:
        params: the build request (builder, seed, restricted verb, N, ...) recorded in the
            manifest; an existing build in ``out_dir`` with different params is refused.
        force: replace a different existing build.

    Raises:
        BuildError: ``out_dir`` holds a different build (or unrelated files) and not ``force``.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise BuildError(f"{out} is a file. Fix: --out names the directory to write the build "
                         "into")
    manifest_path = out / BUILD_MANIFEST
    record = {"package": "fairseq-entropy", "package_version": __version__,
              "grammar": grammar.name, "verbs": list(grammar.verbs), **params}
    if out.exists() and any(not p.name.startswith(".") for p in out.iterdir()):
        if manifest_path.exists():
            old = read_json(manifest_path)
            same = {k: v for k, v in old.items() if k not in ("levels", "package_version")} == \
                {k: v for k, v in record.items() if k not in ("levels", "package_version")}
            if not same and not force:
                raise BuildError(f"{out} already holds a different build ({manifest_path}). "
                                 "Fix: choose another --out, or pass --force to replace it")
            if not same:
                shutil.rmtree(out)
        elif not force:
            raise BuildError(f"{out} is not empty and holds no {BUILD_MANIFEST}. Fix: choose "
                             "an empty or new --out, or pass --force to replace it")
        else:
            shutil.rmtree(out)
    make_parent_dirs(manifest_path)
    old_levels = []
    if manifest_path.exists():
        old_levels = [n for n in read_json(manifest_path).get("levels", [])
                      if (out / n).is_dir()]

    def write_manifest(names):
        atomic_write_text(manifest_path, _json({**record, "levels": names}))

    # the manifest comes first, so that an interrupted build is recognised when re-run
    write_manifest(old_levels)
    names = list(old_levels)
    for level in levels:
        with atomic_directory(out / level.name) as tmp:
            for split in SPLITS:
                write_pair(tmp / split, _examples(grammar, level.splits[split]))
            (tmp / BUILD_MANIFEST).write_text(_json({**record, **level.manifest(grammar)}))
        names = [n for n in names if n != level.name] + [level.name]
        write_manifest(names)
    return out


def write_scan_language(path: str | os.PathLike, actions: str = "scan") -> int:
    """Write the whole original SCAN language (20,910 pairs) as an ``IN: ... OUT: ...`` file.

    Returns:
        the number of pairs written.
    """
    grammar = Grammar.scan(actions)
    examples = _examples(grammar, list(grammar.commands()))
    write_scan_file(path, examples)
    return len(examples)
