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

from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .builders import AUTHORS_SUPPORT_ORDER, RESTRICTED_VERB, build_exp1, build_exp2
from .components import build_exp1_component
from .grammar import PAPER_VERBS, Grammar
from .levels import BuildError, Level, level_name, named_exactly

#: the value never executed first in training when ``--restricted`` is not given, per class
DEFAULT_RESTRICTED_VALUE = {"direction": "left", "modifier": "around", "repetition": "twice"}

#: a wrapper around the iterable of levels to build (e.g. a progress bar); identity by default
Each = Callable[[Iterable], Iterable]


def check_verbs(verbs: Sequence[str], option: str = "--verbs") -> Tuple[str, ...]:
    """The verbs of a build, checked: each a verb of the paper's grammar (its fixed dictionary,
    which ``binarize`` uses, has no other) and each named once.

    Returns:
        ``verbs`` as a tuple, in the given order.

    Raises:
        BuildError: an unknown or repeated verb; names ``option``, the verb, the grammar's
            verbs and the fix.
    """
    given = ",".join(verbs)
    unknown = [v for v in verbs if v not in PAPER_VERBS]
    if unknown:
        raise BuildError(f"{option} {given}: unknown verb(s) {', '.join(map(repr, unknown))}; "
                         f"the paper's grammar has {','.join(PAPER_VERBS)}. Fix: choose verbs "
                         "among these (lower case, one word each)")
    twice = sorted({v for v in verbs if list(verbs).count(v) > 1})
    if twice:
        raise BuildError(f"{option} {given}: {', '.join(twice)} given more than once. Fix: "
                         "name each verb once")
    return tuple(verbs)


def check_build_args(pairs: Sequence[Tuple[str, str]]) -> None:
    """Check ``fairseq-entropy build exp1`` option-value pairs (a grid's ``build_args``) with
    the checks ``build`` applies: each option once, ``--verbs`` by :func:`check_verbs`,
    ``--valid-fraction`` a number in (0, 1), ``--component`` a class, ``--restricted`` a value
    of it and ``--restricted-verb`` one of the verbs.

    Raises:
        BuildError: the first bad pair; names the option, the value and the fix.
    """
    from .entropy import COMPONENT_VALUES
    from .levels import check_valid_fraction

    opts: Dict[str, str] = {}
    for k, v in pairs:
        if k in opts:
            raise BuildError(f"{k} is given twice ({opts[k]!r} and {v!r}). Fix: give it once")
        opts[k] = v
    verbs = check_verbs([x.strip() for x in opts.get("--verbs", ",".join(PAPER_VERBS))
                         .split(",") if x.strip()])
    if "--valid-fraction" in opts:
        try:
            fraction = float(opts["--valid-fraction"])
        except ValueError:
            raise BuildError(f"--valid-fraction {opts['--valid-fraction']!r} is not a number. "
                             "Fix: e.g. 0.05") from None
        check_valid_fraction(fraction)
    component = opts.get("--component", "verb")
    if component != "verb" and component not in DEFAULT_RESTRICTED_VALUE:
        raise BuildError(f"--component {component}: unknown class. Fix: use verb, "
                         f"{', '.join(DEFAULT_RESTRICTED_VALUE)}")
    if "--restricted" in opts and (component == "verb" or opts["--restricted"]
                                   not in COMPONENT_VALUES[component]):
        fix = ("use --restricted-verb for verbs" if component == "verb" else
               f"use one of {', '.join(COMPONENT_VALUES[component])}")
        raise BuildError(f"--restricted {opts['--restricted']} is not a value of --component "
                         f"{component}. Fix: {fix}")
    check_restricted_class(component, opts.get("--restricted-verb"))
    restricted_verb = opts.get("--restricted-verb", RESTRICTED_VERB["exp1"])
    if restricted_verb not in verbs:
        raise BuildError(f"--restricted-verb {restricted_verb}: not in "
                         f"the verbs {','.join(verbs)}. Fix: pick one of them")


def check_restricted_class(component: str, restricted_verb: Optional[str]) -> None:
    """Refuse ``--restricted-verb`` with a ``--component`` other than ``verb``, where the
    restricted value is ``--restricted``'s and the verb would be ignored.

    Raises:
        BuildError: naming both options and the fix.
    """
    if restricted_verb is not None and component != "verb":
        raise BuildError(f"--restricted-verb {restricted_verb} with --component {component}: "
                         "the restricted verb applies to the verbs' class only. Fix: drop "
                         f"--restricted-verb (--restricted names the {component} value never "
                         "executed first)")


def check_once(values: Sequence, option: str) -> None:
    """Refuse a level asked for twice (``--levels 3,3``), which would be built once under one
    name though the request counts two, and a target that its name would misstate
    (``--levels 1.5004``, named ``entropy_1.5``; :func:`~.levels.named_exactly`).

    Raises:
        BuildError: naming the option, the repeated values and the fix.
    """
    given = ','.join(f'{v:g}' for v in values)
    twice = sorted({v for v in values if list(values).count(v) > 1})
    if twice:
        raise BuildError(f"{option} {given}: {', '.join(f'{v:g}' for v in twice)} given more "
                         "than once. Fix: name each level once")
    experiment = "exp2" if option == "--support" else "exp1"
    for v in values:
        if not named_exactly(experiment, v):
            raise BuildError(f"{option} {given}: {v:g} has more than 3 decimals, but a level "
                             f"is named by its target with 3 ({level_name(experiment, v)}), "
                             "which would misstate it and could hold another level too. "
                             f"Fix: round it to 3 decimals ({round(v, 3):g})")


def _identity(items: Iterable) -> Iterable:
    return items


def request_exp1(grammar: Grammar, levels: Sequence[float], n: int, seed: int,
                 valid_fraction: float, restricted_verb: str = RESTRICTED_VERB["exp1"],
                 component: str = "verb",
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
        BuildError: a target given twice, ``restricted`` given with ``component="verb"``, or
            as
            :func:`~fairseq_entropy.scan.builders.build_exp1` and
            :func:`~fairseq_entropy.scan.components.build_exp1_component`.
        KeyError: ``component`` is not ``verb`` nor a key of :data:`DEFAULT_RESTRICTED_VALUE`
            while ``restricted`` is ``None``.
    """
    check_once(levels, "--levels")
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
                 restricted_verb: str = RESTRICTED_VERB["exp2"],
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
        BuildError: a size given twice, or as :func:`~fairseq_entropy.scan.builders.build_exp2`.
    """
    check_once(supports, "--support")
    built = [lv for k in each(supports)
             for lv in build_exp2(grammar, [k], restricted_verb, seed, support_order,
                                  valid_fraction)]
    return built, {"builder": "exp2-support", "seed": seed, "restricted_verb": restricted_verb,
                   "support_order": support_order, "valid_fraction": valid_fraction}


def level_summary(level: Level, grammar: Grammar, valid_asked: Optional[int] = None) -> str:
    """One line on a built level: its target and measured entropy (bits, of the controlled
    slot, Eq. 1) and its split sizes, from :meth:`Level.manifest
    <fairseq_entropy.scan.levels.Level.manifest>`.  ``valid_asked``: the validation size the
    request asked for (Experiment 1: the fraction of N); a smaller one (a cell's distinct
    commands ran out, e.g. at 0 bits) is said on the line."""
    man = level.manifest(grammar)
    valid = man["sizes"]["valid"]
    short = "" if valid_asked is None or valid >= valid_asked else (
        f" (of {valid_asked} asked: the cells' distinct commands left after the training set "
        "ran out)")
    return (f"{level.name}: target {level.target_bits:.3f} bits, measured "
            f"{man['entropy_bits']:.4f} bits ({level.controlled_slot} slot); train "
            f"{man['sizes']['train']}, valid {valid}{short}, test {man['sizes']['test']}")
