"""A build request: the options of ``fairseq-entropy build exp1|exp2`` turned into levels and
the ``params`` that :func:`~fairseq_entropy.scan.manifests.write_build` records in the build
manifest (and compares when the same ``--out`` is built again).

:func:`request_exp1` builds Experiment 1 (mixing, Wold et al., arXiv 2505.13089, Sec. 4.1) for
verbs (:func:`~fairseq_entropy.scan.builders.build_exp1`) or for another component class
(:func:`~fairseq_entropy.scan.components.build_exp1_component`); :func:`request_exp2` builds
Experiment 2 (support, Sec. 4.2, :func:`~fairseq_entropy.scan.builders.build_exp2`).  Each
level is built by its own call, so a progress bar can advance per level; the data are the
same as from one call with every level, since each level has its own seeded generator
(:func:`~fairseq_entropy.scan.sampling.level_rng`).  :func:`level_summary` is the line the
command prints per level.
"""

from __future__ import annotations

from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from .builders import AUTHORS_SUPPORT_ORDER, build_exp1, build_exp2
from .components import build_exp1_component
from .grammar import Grammar
from .levels import BuildError, Level

#: the value never executed first in training when ``--restricted`` is not given, per class
DEFAULT_RESTRICTED_VALUE = {"direction": "left", "modifier": "around", "repetition": "twice"}

#: a wrapper around the iterable of levels to build (e.g. a progress bar); identity by default
Each = Callable[[Iterable], Iterable]


def _identity(items: Iterable) -> Iterable:
    return items


def request_exp1(grammar: Grammar, levels: Sequence[float], n: int, seed: int,
                 valid_fraction: float, restricted_verb: str = "jump", component: str = "verb",
                 restricted: Optional[str] = None, each: Each = _identity
                 ) -> Tuple[List[Level], dict]:
    """Experiment 1 (mixing) levels and the build manifest's params.

    Args:
        grammar: the paper's grammar (no ``turn``).
        levels: target second-slot entropies, in bits.
        n: training commands per level.
        seed: data seed.
        valid_fraction: validation size as a fraction of ``n``, in (0, 1).
        restricted_verb: v*, never executed first in training (``component="verb"``).
        component: the class whose second-slot entropy is controlled: ``verb`` (the paper's),
            ``direction``, ``modifier`` or ``repetition``.
        restricted: with another class, the value never executed first in training (default
            :data:`DEFAULT_RESTRICTED_VALUE`); must be ``None`` for ``verb``.
        each: wraps the iterable of targets (one level built per item).

    Returns:
        (levels, params): one :class:`~fairseq_entropy.scan.levels.Level` per target, and
        ``{"builder": "exp1-mixing", "seed", "n_train", "restricted_verb",
        "valid_fraction"}`` for verbs, ``{"builder", "seed", "n_train", "component",
        "restricted_value", "valid_fraction"}`` for another class.

    Raises:
        BuildError: ``restricted`` given with ``component="verb"``, or as
            :func:`~fairseq_entropy.scan.builders.build_exp1` and
            :func:`~fairseq_entropy.scan.components.build_exp1_component`.
        KeyError: ``component`` is not ``verb`` nor a key of :data:`DEFAULT_RESTRICTED_VALUE`
            while ``restricted`` is ``None``.
    """
    if component != "verb":
        restricted = restricted or DEFAULT_RESTRICTED_VALUE[component]
        built = [lv for target in each(levels)
                 for lv in build_exp1_component(grammar, component, restricted, [target], n,
                                                seed, valid_fraction)]
        return built, {"builder": "exp1-mixing", "seed": seed, "n_train": n,
                       "component": component, "restricted_value": restricted,
                       "valid_fraction": valid_fraction}
    if restricted is not None:
        raise BuildError("--restricted applies to --component direction|modifier|repetition."
                         " Fix: use --restricted-verb for verbs")
    built = [lv for target in each(levels)
             for lv in build_exp1(grammar, [target], n, restricted_verb, seed, valid_fraction)]
    return built, {"builder": "exp1-mixing", "seed": seed, "n_train": n,
                   "restricted_verb": restricted_verb, "valid_fraction": valid_fraction}


def request_exp2(grammar: Grammar, supports: Sequence[int], seed: int, valid_fraction: float,
                 restricted_verb: str = "lunge",
                 support_order: Sequence[str] = AUTHORS_SUPPORT_ORDER, each: Each = _identity
                 ) -> Tuple[List[Level], dict]:
    """Experiment 2 (support) levels and the build manifest's params.

    Args:
        grammar: the paper's grammar (no ``turn``).
        supports: support sizes k (first-slot entropy log2 k bits).
        seed: data seed.
        valid_fraction: fraction of each cell held out for validation, in (0, 1).
        restricted_verb: v*, never executed second in training.
        support_order: every verb once, the order in which verbs join the support.
        each: wraps the iterable of sizes (one level built per item).

    Returns:
        (levels, params): one :class:`~fairseq_entropy.scan.levels.Level` per size, and
        ``{"builder": "exp2-support", "seed", "restricted_verb", "support_order",
        "valid_fraction"}``.

    Raises:
        BuildError: as :func:`~fairseq_entropy.scan.builders.build_exp2`.
    """
    built = [lv for k in each(supports)
             for lv in build_exp2(grammar, [k], restricted_verb, seed, support_order,
                                  valid_fraction)]
    return built, {"builder": "exp2-support", "seed": seed, "restricted_verb": restricted_verb,
                   "support_order": support_order, "valid_fraction": valid_fraction}


def level_summary(level: Level, grammar: Grammar) -> str:
    """One line on a built level: its target and measured entropy (bits, of the controlled
    slot, Eq. 1) and its split sizes, from :meth:`Level.manifest
    <fairseq_entropy.scan.levels.Level.manifest>`."""
    man = level.manifest(grammar)
    return (f"{level.name}: target {level.target_bits:.3f} bits, measured "
            f"{man['entropy_bits']:.4f} bits ({level.controlled_slot} slot); train "
            f"{man['sizes']['train']}, valid {man['sizes']['valid']}, test "
            f"{man['sizes']['test']}")
