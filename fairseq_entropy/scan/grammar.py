"""SCAN-style grammar, interpreter and enumeration of the command space.

The grammar is the one of Lake and Baroni (2018, SCAN) as extended by Wold et al.
(arXiv 2505.13089, Sec. 3) to eight verbs::

    command := clause | clause "and" clause | clause "after" clause
    clause  := phrase | phrase "twice" | phrase "thrice"
    phrase  := verb | verb dir | verb "opposite" dir | verb "around" dir
               | "turn" dir | "turn" "opposite" dir | "turn" "around" dir   (SCAN only)
    dir     := "left" | "right"

Semantics: ``verb`` -> its action; ``x left`` -> LTURN x; ``x opposite left`` -> LTURN LTURN x;
``x around left`` -> (LTURN x) x 4; ``turn`` contributes no action of its own; ``c twice`` /
``c thrice`` repeat; ``a and b`` -> a b; ``a after b`` -> b a.

Slots are defined by execution order: in "X and Y" X is executed first, in "X after Y" Y is
executed first.  The *first slot* of a command is the clause executed first.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from ..errors import UserError

PAPER_VERBS: Tuple[str, ...] = (
    "walk", "run", "look", "jump", "sprint", "crawl", "squat", "lunge",
)
SCAN_VERBS: Tuple[str, ...] = ("walk", "run", "look", "jump")
DIRECTIONS: Tuple[str, ...] = ("left", "right")
MODIFIERS: Tuple[str, ...] = ("opposite", "around")
REPETITIONS: Tuple[str, ...] = ("twice", "thrice")
CONJUNCTIONS: Tuple[str, ...] = ("and", "after")
TURN = "turn"
REPEAT_COUNT = {"twice": 2, "thrice": 3}


class GrammarError(UserError, ValueError):
    """A command or action sequence that the grammar does not accept."""


@dataclass(frozen=True)
class Clause:
    """One clause ``verb [modifier] [direction] [repetition]``.

    Attributes:
        verb: the verb word, or ``"turn"`` (SCAN grammar only).
        modifier: ``None``, ``"opposite"`` or ``"around"`` (requires a direction).
        direction: ``None``, ``"left"`` or ``"right"``.
        repetition: ``None``, ``"twice"`` or ``"thrice"``.
    """

    verb: str
    modifier: Optional[str] = None
    direction: Optional[str] = None
    repetition: Optional[str] = None

    @property
    def words(self) -> List[str]:
        """The clause's words in surface order."""
        out = [self.verb]
        if self.modifier:
            out.append(self.modifier)
        if self.direction:
            out.append(self.direction)
        if self.repetition:
            out.append(self.repetition)
        return out

    def __str__(self) -> str:
        return " ".join(self.words)


@dataclass(frozen=True)
class Command:
    """A parsed command: one clause, or two clauses joined by ``and``/``after``.

    ``left`` and ``right`` are the clauses in surface order (``right`` is ``None`` for a
    one-clause command).  ``first``/``second`` give them in *execution* order.
    """

    left: Clause
    conjunction: Optional[str] = None
    right: Optional[Clause] = None

    @property
    def first(self) -> Clause:
        """The clause executed first (first slot)."""
        return self.right if self.conjunction == "after" else self.left

    @property
    def second(self) -> Optional[Clause]:
        """The clause executed second (second slot); ``None`` for one-clause commands."""
        if self.conjunction is None:
            return None
        return self.left if self.conjunction == "after" else self.right

    @property
    def words(self) -> List[str]:
        """The command's words in surface order."""
        out = list(self.left.words)
        if self.conjunction:
            out.append(self.conjunction)
            out.extend(self.right.words)
        return out

    def __str__(self) -> str:
        return " ".join(self.words)


def two_clause(first: Clause, second: Clause, conjunction: str) -> Command:
    """Build the command that executes ``first`` then ``second`` with ``conjunction``.

    ``and`` gives "first and second"; ``after`` gives "second after first".
    """
    if conjunction == "and":
        return Command(first, "and", second)
    if conjunction == "after":
        return Command(second, "after", first)
    raise GrammarError(f"unknown conjunction {conjunction!r}; expected 'and' or 'after'")


@dataclass(frozen=True)
class Grammar:
    """A SCAN-style grammar: verbs, their actions, turn actions, and whether ``turn`` exists.

    Attributes:
        verbs: the verb words, in a fixed order (the paper's order by default).
        actions: action token per verb, same order as ``verbs``.
        left_action / right_action: the turn actions.
        has_turn: whether ``turn left`` etc. are commands (original SCAN).
        name: ``"paper"``, ``"scan"`` or ``"custom"``.
    """

    verbs: Tuple[str, ...]
    actions: Tuple[str, ...]
    left_action: str
    right_action: str
    has_turn: bool = False
    name: str = "custom"
    _action_of: Dict[str, str] = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if len(self.verbs) != len(self.actions):
            raise GrammarError("verbs and actions must have the same length")
        if len(set(self.verbs)) != len(self.verbs):
            raise GrammarError(f"duplicate verbs in {self.verbs}")
        reserved = set(DIRECTIONS + MODIFIERS + REPETITIONS + CONJUNCTIONS + (TURN,))
        clash = reserved.intersection(self.verbs)
        if clash:
            raise GrammarError(f"verbs {sorted(clash)} clash with grammar function words")
        object.__setattr__(self, "_action_of", dict(zip(self.verbs, self.actions)))

    @classmethod
    def paper(cls, verbs: Sequence[str] = PAPER_VERBS) -> "Grammar":
        """The paper's grammar: ``verbs`` (default 8), actions ``VERB`` upper-cased, LTURN/RTURN."""
        verbs = tuple(verbs)
        return cls(verbs, tuple(v.upper() for v in verbs), "LTURN", "RTURN", False, "paper")

    @classmethod
    def scan(cls, actions: str = "scan") -> "Grammar":
        """The original SCAN grammar (4 verbs plus ``turn``).

        Args:
            actions: ``"scan"`` for the original I_WALK ... I_TURN_LEFT vocabulary,
                ``"paper"`` for WALK ... LTURN.
        """
        if actions == "scan":
            return cls(SCAN_VERBS, tuple("I_" + v.upper() for v in SCAN_VERBS),
                       "I_TURN_LEFT", "I_TURN_RIGHT", True, "scan")
        if actions == "paper":
            return cls(SCAN_VERBS, tuple(v.upper() for v in SCAN_VERBS),
                       "LTURN", "RTURN", True, "scan-paper-actions")
        raise GrammarError(f"unknown action vocabulary {actions!r}; expected 'scan' or 'paper'")

    @classmethod
    def by_name(cls, name: str) -> "Grammar":
        """``"paper"`` or ``"scan"`` (see :meth:`paper`, :meth:`scan`)."""
        if name == "paper":
            return cls.paper()
        if name == "scan":
            return cls.scan()
        raise GrammarError(f"unknown grammar {name!r}; expected 'paper' or 'scan'")

    # ---------------------------------------------------------------- vocabulary
    def action_of(self, verb: str) -> str:
        """The action token of ``verb``; raises :class:`GrammarError` for unknown verbs."""
        try:
            return self._action_of[verb]
        except KeyError:
            raise GrammarError(f"unknown verb {verb!r}; known verbs: {' '.join(self.verbs)}")

    @property
    def command_words(self) -> List[str]:
        """Every word a command may contain, in a fixed order."""
        words = list(self.verbs) + ([TURN] if self.has_turn else [])
        return words + list(DIRECTIONS + MODIFIERS + REPETITIONS + CONJUNCTIONS)

    @property
    def action_words(self) -> List[str]:
        """Every action token, in a fixed order."""
        return list(self.actions) + [self.left_action, self.right_action]

    # ---------------------------------------------------------------- parsing
    def parse_clause(self, words: Sequence[str]) -> Clause:
        """Parse one clause; raises :class:`GrammarError` naming the offending word."""
        if not words:
            raise GrammarError("empty clause")
        verb = words[0]
        if verb not in self._action_of and not (self.has_turn and verb == TURN):
            raise GrammarError(f"unknown word {verb!r} where a verb was expected")
        rest = list(words[1:])
        repetition = None
        if rest and rest[-1] in REPETITIONS:
            repetition = rest.pop()
        modifier = direction = None
        if rest and rest[0] in MODIFIERS:
            modifier = rest.pop(0)
        if rest and rest[0] in DIRECTIONS:
            direction = rest.pop(0)
        if rest:
            raise GrammarError(f"unexpected word {rest[0]!r} in clause {' '.join(words)!r}")
        if modifier and not direction:
            raise GrammarError(f"{modifier!r} must be followed by left or right")
        if verb == TURN and not direction:
            raise GrammarError("'turn' must be followed by a direction")
        return Clause(verb, modifier, direction, repetition)

    def parse(self, command: str | Sequence[str]) -> Command:
        """Parse a command string (or word list) into a :class:`Command`.

        Raises:
            GrammarError: unknown word, misplaced word, or more than one conjunction.
        """
        words = command.split() if isinstance(command, str) else list(command)
        conj_positions = [i for i, w in enumerate(words) if w in CONJUNCTIONS]
        if len(conj_positions) > 1:
            raise GrammarError(f"more than one conjunction in {' '.join(words)!r}")
        if not conj_positions:
            return Command(self.parse_clause(words))
        i = conj_positions[0]
        return Command(self.parse_clause(words[:i]), words[i], self.parse_clause(words[i + 1:]))

    # ---------------------------------------------------------------- semantics
    def clause_actions(self, clause: Clause) -> List[str]:
        """The action sequence of one clause (SCAN semantics)."""
        base = [] if clause.verb == TURN else [self.action_of(clause.verb)]
        if clause.direction is None:
            unit = base
        else:
            turn = self.left_action if clause.direction == "left" else self.right_action
            if clause.modifier == "opposite":
                unit = [turn, turn] + base
            elif clause.modifier == "around":
                unit = ([turn] + base) * 4
            else:
                unit = [turn] + base
        return unit * REPEAT_COUNT.get(clause.repetition, 1)

    def interpret(self, command: str | Sequence[str] | Command) -> List[str]:
        """The action sequence of a command.  ``"jump twice after walk left"`` ->
        ``["LTURN", "WALK", "JUMP", "JUMP"]`` under the paper's grammar."""
        cmd = command if isinstance(command, Command) else self.parse(command)
        out = self.clause_actions(cmd.first)
        if cmd.second is not None:
            out += self.clause_actions(cmd.second)
        return out

    # ---------------------------------------------------------------- enumeration
    def clauses(self, verb: Optional[str] = None) -> List[Clause]:
        """Every clause, in a fixed order; only those of ``verb`` when given.

        Per verb there are 7 phrases x 3 repetitions = 21 clauses; ``turn`` has 6 x 3 = 18.
        """
        verbs = [verb] if verb is not None else list(self.verbs) + (
            [TURN] if self.has_turn else [])
        out = []
        for v in verbs:
            phrases = [] if v == TURN else [(None, None)]
            phrases += [(None, d) for d in DIRECTIONS]
            phrases += [(m, d) for m in MODIFIERS for d in DIRECTIONS]
            for (m, d), r in itertools.product(phrases, (None,) + REPETITIONS):
                out.append(Clause(v, m, d, r))
        return out

    def commands(self, one_clause: bool = True) -> Iterator[Command]:
        """Every command of the language (one- and two-clause), in a fixed order."""
        clauses = self.clauses()
        if one_clause:
            for c in clauses:
                yield Command(c)
        for conj in CONJUNCTIONS:
            for a, b in itertools.product(clauses, clauses):
                yield Command(a, conj, b)

