"""The (word, slot) occurrences of a COGS sentence, read from its logical form and the sentence.

A *slot* is a predicate role at a syntactic position, written ``role@position``:

* ``agent@subject``, ``theme@subject``, ``theme@object``, ``recipient@object``,
  ``recipient@to_object``, ``agent@by_object``, ...: a noun that is the ``agent``, ``theme``
  or ``recipient`` of a verb, before the verb (``subject``), after it (``object``), or after
  ``by`` / ``to`` (``by_object``, ``to_object``).  The word is the noun (a common noun's
  lemma or a proper name).
* ``verb@<frame>``: a verb (its lemma) in its frame, the voice (``active``, ``passive``: the
  verb follows ``was``; ``infinitive``: the complement of ``to``, an ``xcomp``), the roles it
  takes (``agent+theme``, ``theme``, ...) and, with a recipient, the dative (``do_dative``:
  double object; ``pp_dative``: ``to`` + recipient), e.g. ``verb@passive theme``,
  ``verb@active agent+recipient+theme do_dative``.
* ``pp_noun@<position>``: the noun of a prepositional phrase (``nmod``) modifying a noun at
  ``position`` (``subject``, ``object``, ..., or ``pp_noun`` for a PP inside a PP).
* ``word@primitive``: a one-word training example (a primitive: ``shark``, ``Paula``,
  ``crawl``).

The controller of an infinitive (``The boy needed to crawl``: the boy is the agent of both
verbs) is counted once, as the argument of the outer verb.

Both logical-form formats are read (:func:`~fairseq_entropy.cogs.data.lf_format`).  In the
original format, variables are token positions (``x _ 3`` is token 3, counted from 0), so the
verb and every common noun have their position; a proper name is found in the sentence.  The
variable-free format has no positions: nouns are found in the sentence in the order the LF
names them, and the verbs are the tokens left once nouns and function words are taken away,
in the order the LF nests them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..errors import DataFormatError
from .data import CogsExample, lf_format

ROLES = ("agent", "theme", "recipient")
DETERMINERS = {"a", "the"}
#: tokens of a COGS sentence that are neither nouns nor verbs (compared in lower case)
FUNCTION_WORDS = DETERMINERS | {"was", "by", "to", "that", "in", "on", "beside", "."}


@dataclass
class Predication:
    """A verb of the LF: its lemma, token position, role arguments and clause links."""

    verb: str
    index: Optional[int] = None
    #: role -> (word, token position or None while unknown)
    args: Dict[str, Tuple[str, Optional[int]]] = field(default_factory=dict)
    #: this verb is the infinitive (xcomp) of another
    infinitive: bool = False
    #: its agent is its controller, an argument of another verb (counted there)
    controlled: bool = False


@dataclass
class Modifier:
    """A PP modifier (``nmod``): the noun at ``head`` is modified by ``noun`` at ``index``."""

    head: Optional[int]
    prep: str
    noun: str
    index: Optional[int]


class _Parse:
    def __init__(self, example: CogsExample):
        self.example = example
        self.preds: List[Predication] = []
        self.mods: List[Modifier] = []

    def error(self, cause: str) -> DataFormatError:
        return DataFormatError(f"{self.example.where}: {cause}. Fix: give the line a COGS "
                               "logical form (original or variable-free) of its sentence")


def _var(tokens: List[str], i: int) -> Optional[int]:
    """The position of ``x _ N`` at ``tokens[i:]``, or None when it is not one."""
    if tokens[i:i + 2] == ["x", "_"] and i + 2 < len(tokens) and tokens[i + 2].isdigit():
        return int(tokens[i + 2])
    return None


def _parse_original(p: _Parse) -> None:
    lf = p.example.lf.replace(" ; ", " AND ")
    nouns: Dict[int, str] = {}
    preds: Dict[int, Predication] = {}
    links: List[Tuple[int, str, int]] = []
    nmods: List[Tuple[int, str, int]] = []
    for term in lf.split(" AND "):
        t = term.split()
        if t[:1] == ["*"]:
            t = t[1:]
        if "(" not in t or t[-1] != ")":
            raise p.error(f"cannot read the term {term!r}")
        head, inner = t[:t.index("(")], t[t.index("(") + 1:-1]
        if len(head) == 1:  # noun ( x _ i )
            i = _var(inner, 0)
            if i is None:
                raise p.error(f"cannot read the term {term!r}")
            nouns[i] = head[0]
            continue
        if "," not in inner:
            raise p.error(f"cannot read the term {term!r}")
        left, right = inner[:inner.index(",")], inner[inner.index(",") + 1:]
        a = _var(left, 0)
        b = _var(right, 0) if len(right) == 3 else None
        if a is None:
            raise p.error(f"cannot read the term {term!r}")
        if len(head) == 5 and head[1:4] == [".", "nmod", "."]:  # noun . nmod . prep ( a , b )
            nmods.append((a, head[4], b))
        elif len(head) == 3 and head[1] == ".":  # verb . role ( e , arg )
            pred = preds.setdefault(a, Predication(head[0], a))
            role = head[2]
            if role in ROLES:
                pred.args[role] = (right[0], None) if b is None else ("", b)
            elif role in ("ccomp", "xcomp") and b is not None:
                links.append((a, role, b))
        else:
            raise p.error(f"cannot read the term {term!r}")
    for _, role, child in links:
        if role == "xcomp" and child in preds:
            preds[child].infinitive = True
    for pred in preds.values():
        for role, (word, i) in list(pred.args.items()):
            if i is not None:
                if i not in nouns:
                    raise p.error(f"x _ {i} is an argument of {pred.verb} but no noun")
                pred.args[role] = (nouns[i], i)
    p.preds = [preds[i] for i in sorted(preds)]
    for head, prep, i in nmods:
        if i is None or i not in nouns:
            raise p.error(f"the PP modifier of x _ {head} has no noun")
        p.mods.append(Modifier(head, prep, nouns[i], i))


def _parse_variable_free(p: _Parse) -> None:
    t = p.example.lf.split()
    pos = 0
    nouns: List[Modifier] = []  # every noun, in LF order (a PP's noun after its head)
    arg_of: Dict[int, Modifier] = {}  # id of a predication's arg record -> the noun

    def word() -> str:
        nonlocal pos
        if pos < len(t) and t[pos] == "*":
            pos += 1
        if pos >= len(t) or t[pos] in ("(", ")", ",", "=", "."):
            raise p.error(f"expected a word at LF token {pos + 1}")
        pos += 1
        return t[pos - 1]

    def expect(tok: str) -> None:
        nonlocal pos
        if pos >= len(t) or t[pos] != tok:
            raise p.error(f"expected {tok!r} at LF token {pos + 1}")
        pos += 1

    def value(top: bool = False):
        """A noun with its PP modifiers (a :class:`Modifier` record) or a predication."""
        nonlocal pos
        w = word()
        if t[pos:pos + 1] != ["("]:
            if top and pos < len(t):
                raise p.error(f"expected '(' at LF token {pos + 1} after the predicate {w!r}")
            if top:
                raise p.error("the LF is one word but the sentence is not")
            noun = Modifier(None, "", w, None)
            nouns.append(noun)
            return noun
        pos += 1
        if t[pos:pos + 1] == ["nmod"]:
            noun = Modifier(None, "", w, None)
            nouns.append(noun)
            while True:
                expect("nmod")
                expect(".")
                prep = word()
                expect("=")
                inner = value()
                if not isinstance(inner, Modifier):
                    raise p.error("a PP modifier holds a clause")
                p.mods.append(Modifier(id(noun), prep, inner.noun, id(inner)))
                if t[pos:pos + 1] != [","]:
                    break
                pos += 1
            expect(")")
            return noun
        pred = Predication(w)
        p.preds.append(pred)
        while True:
            role = word()
            expect("=")
            arg = value()
            if isinstance(arg, Predication):
                arg.infinitive = arg.infinitive or role == "xcomp"
            elif role in ROLES:
                pred.args[role] = (arg.noun, id(arg))
                arg_of[id(arg)] = arg
            if t[pos:pos + 1] != [","]:
                break
            pos += 1
        expect(")")
        return pred

    value(top=True)
    if pos != len(t):
        raise p.error(f"unexpected {t[pos]!r} at LF token {pos + 1}")
    _align_variable_free(p, nouns)


def _align_variable_free(p: _Parse, nouns: List[Modifier]) -> None:
    """Give the nouns and verbs of a variable-free parse their token positions: each noun the
    first unused token that is its word, in LF order; an infinitive's agent the token of the
    noun before it with the same word (its controller); the verbs the tokens left."""
    tokens = p.example.sentence.split()
    controlled = {pred.args["agent"][1] for pred in p.preds
                  if pred.infinitive and "agent" in pred.args}
    head_of = {m.index: m.head for m in p.mods}  # a PP's noun -> the noun it modifies
    index: Dict[int, int] = {}
    reused = set()  # the controller's nouns named again in the infinitive
    used = set()
    for noun in nouns:
        if id(noun) in controlled or head_of.get(id(noun)) in reused:
            earlier = [index[id(m)] for m in nouns if id(m) in index and m.noun == noun.noun]
            if earlier:
                index[id(noun)] = earlier[-1]
                reused.add(id(noun))
                continue
        i = next((k for k, tok in enumerate(tokens)
                  if noun.noun in (tok, tok.lower()) and k not in used), None)
        if i is None:
            raise p.error(f"the noun {noun.noun!r} of the LF is not in the sentence")
        used.add(i)
        index[id(noun)] = i
    for pred in p.preds:
        pred.args = {role: (w, index[key]) for role, (w, key) in pred.args.items()}
    p.mods = [Modifier(index[m.head], m.prep, m.noun, index[m.index]) for m in p.mods
              if m.index not in reused]
    rest = [i for i, tok in enumerate(tokens)
            if i not in used and tok.lower() not in FUNCTION_WORDS]
    if len(rest) != len(p.preds):
        raise p.error(f"{len(p.preds)} verbs in the LF but {len(rest)} tokens left for them "
                      f"in the sentence ({' '.join(tokens[i] for i in rest) or 'none'})")
    for pred, i in zip(p.preds, rest):
        pred.index = i


def _mark_controlled(preds: List[Predication]) -> None:
    """Mark an infinitive whose agent is a token that another verb's argument already is
    (its controller): the agent is counted once, for the other verb."""
    for pred in preds:
        if pred.infinitive and "agent" in pred.args:
            i = pred.args["agent"][1]
            pred.controlled = any(i == j for q in preds if q is not pred
                                  for _, j in q.args.values())


def _np_position(tokens: List[str], verb: int, i: int) -> str:
    if i < verb:
        return "subject"
    k = i - 1
    while k > verb and tokens[k].lower() in DETERMINERS:
        k -= 1
    return {"by": "by_object", "to": "to_object"}.get(tokens[k], "object")


def parse(example: CogsExample) -> Tuple[List[Predication], List[Modifier]]:
    """The verbs (with their arguments) and PP modifiers of ``example``, with token positions.

    Raises:
        DataFormatError: an LF that cannot be read, or whose nouns and verbs cannot be found
            in the sentence (names file:line).
    """
    p = _Parse(example)
    if lf_format(example.lf) == "original":
        _parse_original(p)
    else:
        _parse_variable_free(p)
    tokens = example.sentence.split()
    for pred in p.preds:
        if pred.index is None or not 0 <= pred.index < len(tokens):
            raise p.error(f"the verb {pred.verb!r} has no position in the sentence")
        for role, (noun, i) in pred.args.items():
            if i is None:  # a proper name of the original format
                i = next((k for k, tok in enumerate(tokens) if tok == noun), None)
                if i is None:
                    raise p.error(f"the name {noun!r} of the LF is not in the sentence")
                pred.args[role] = (noun, i)
    _mark_controlled(p.preds)
    return p.preds, p.mods


def occurrences(example: CogsExample) -> List[Tuple[str, str]]:
    """The (word, slot) occurrences of ``example`` (slots: module docstring), in LF order.

    A one-token sentence is a primitive: ``[(word, "word@primitive")]``.

    Raises:
        DataFormatError: as :func:`parse`.
    """
    tokens = example.sentence.split()
    if len(tokens) == 1:
        return [(tokens[0], "word@primitive")]
    preds, mods = parse(example)
    out: List[Tuple[str, str]] = []
    position: Dict[int, str] = {}
    for pred in preds:
        v = pred.index
        roles = sorted(r for r in pred.args if r in ROLES)
        voice = "infinitive" if pred.infinitive else \
            "passive" if v > 0 and tokens[v - 1] == "was" else "active"
        frame = f"{voice} {'+'.join(roles) or 'none'}"
        if "recipient" in pred.args:
            r = pred.args["recipient"][1]
            frame += " pp_dative" if _np_position(tokens, v, r) == "to_object" else \
                " do_dative"
        out.append((pred.verb, f"verb@{frame}"))
        for role in ROLES:
            if role in pred.args and not (role == "agent" and pred.controlled):
                noun, i = pred.args[role]
                position[i] = _np_position(tokens, v, i)
                out.append((noun, f"{role}@{position[i]}"))
    for m in sorted(mods, key=lambda m: m.index):
        position[m.index] = "pp_noun"
    for m in mods:
        out.append((m.noun, f"pp_noun@{position.get(m.head, 'pp_noun')}"))
    return out
