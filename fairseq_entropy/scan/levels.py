"""A level: one generated data set of an experiment (Wold et al., arXiv 2505.13089, Sec. 4).

A level has three splits of two-clause commands (``train``, ``valid``, ``test``), a name that
is its directory name (:func:`level_name`), and a manifest that records what it was built to
be (target entropy of the controlled slot, in bits) beside what it is (the measured entropy
and the verb counts of every split, Eq. 1 of the paper).  :class:`BuildError` is the error of
every builder; :func:`check_valid_fraction` and :func:`check_nonempty_splits` are the checks
the builders share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from ..errors import UserError
from .entropy import ComponentStatistics, SlotStatistics
from .grammar import Command, Grammar

SPLITS: Tuple[str, ...] = ("train", "valid", "test")


class BuildError(UserError, ValueError):
    """An impossible or inconsistent build request; the message says how to fix it."""


def level_name(experiment: str, value: float | int) -> str:
    """Directory name of a level: ``entropy_0.5`` (exp1) or ``support_3`` (exp2).

    Args:
        experiment: ``"exp2"`` names a level by its support size ``value`` (an integer);
            any other experiment by its target entropy ``value`` in bits, printed with up to
            3 decimals and at least one (``0`` -> ``entropy_0.0``, ``1.585`` ->
            ``entropy_1.585``).
    """
    if experiment == "exp2":
        return f"support_{int(value)}"
    text = f"{float(value):.3f}".rstrip("0")
    return "entropy_" + (text + "0" if text.endswith(".") else text)


def named_exactly(experiment: str, value: float | int) -> bool:
    """Whether :func:`level_name` states ``value`` exactly: an Experiment 1 target with at
    most 3 decimals (``1.5004`` would be named ``entropy_1.5``, and share that directory with
    ``1.5``), an Experiment 2 support size that is an integer."""
    if experiment == "exp2":
        return float(value) == int(value)
    return float(level_name(experiment, value)[len("entropy_"):]) == float(value)


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
        component: the component class whose entropy is controlled (``"verb"`` for the
            paper's experiments).
    """

    name: str
    experiment: str
    controlled_slot: str
    target_bits: float
    splits: Dict[str, List[Command]]
    extra: dict = field(default_factory=dict)
    component: str = "verb"

    def manifest(self, grammar: Grammar) -> dict:
        """The level's manifest: target and measured entropy (bits, 6 decimals) of the
        controlled slot, slot verb counts and entropies of every split, split sizes, and the
        builder's extras.  For a component class other than ``verb``, the measured entropy is
        that class's in the controlled slot, and ``component`` and ``component_slots`` (the
        class's counts and entropy per slot of every split) are added.

        Raises:
            KeyError: ``splits`` has no ``train`` split.
        """
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


def check_valid_fraction(valid_fraction: float) -> None:
    """Raise :class:`BuildError` unless ``0 < valid_fraction < 1``."""
    if not 0.0 < float(valid_fraction) < 1.0:
        raise BuildError(f"validation fraction {valid_fraction} is outside (0, 1). Fix: pass "
                         "--valid-fraction between 0 and 1, e.g. 0.05")


def check_nonempty_splits(level: Level, fix: str) -> None:
    """Raise :class:`BuildError` if a split of ``level`` is empty (fairseq cannot train on,
    validate with or decode an empty split); ``fix`` says what to change."""
    empty = [s for s in SPLITS if not level.splits.get(s)]
    if empty:
        sizes = ", ".join(f"{s} {len(level.splits.get(s, []))}" for s in SPLITS)
        raise BuildError(f"level {level.name}: the {' and '.join(empty)} split would be empty "
                         f"({sizes}). Fix: {fix}")
