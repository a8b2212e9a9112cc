"""Graded metrics beside exact match: clause-level match, restricted-clause errors, chrF, BLEU.

Exact match (Wold et al., arXiv 2505.13089, Sec. 4) counts an output only when the whole action
sequence is right, so a model that executes one clause right and the other wrong scores like
one that outputs nothing.  These metrics make that partial generalization visible:

* **clause exact match**: the reference action span of each executed clause (from the
  interpreter, :meth:`~fairseq_entropy.scan.grammar.Grammar.clause_actions`) is compared with
  the hypothesis: the clause executed first with the hypothesis' prefix of the same length,
  the clause executed second with its suffix, and the two spans may not overlap (a hypothesis
  shorter than both spans together gets credit for its first clause at most).  The score is the
  fraction of executed clauses that match, over all clauses of all commands.
* **correct except the restricted clause**: the share of outputs whose clause in the held-out
  slot (``first`` in Experiment 1, where the restricted verb is never executed first in
  training; ``second`` in Experiment 2) is wrong while the other clause is right.
* **chrF** and **BLEU**: corpus scores of :mod:`sacrebleu` over the action strings (0..100).
  Action tokens are whole words, so BLEU uses sacrebleu's ``none`` tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ..scan.grammar import Grammar, GrammarError

SLOT_INDEX = {"first": 0, "second": 1}


def clause_matches(actions: Sequence[Sequence[str]], hypothesis: Sequence[str]) -> List[bool]:
    """Whether each executed clause's action span is right in ``hypothesis``.

    Args:
        actions: the reference actions of each clause in execution order (one or two lists).
        hypothesis: the predicted action tokens.

    Returns:
        One bool per clause: clause 1 matches the hypothesis' prefix, clause 2 its suffix, and
        clause 2 gets no credit where the two spans would overlap.

    Raises:
        ValueError: zero or more than two clauses.
    """
    if not 1 <= len(actions) <= 2:
        raise ValueError(f"a command has one or two clauses, got {len(actions)}")
    hyp = list(hypothesis)
    first = list(actions[0])
    out = [hyp[:len(first)] == first]
    if len(actions) == 1:
        out[0] = out[0] and len(hyp) == len(first)
        return out
    second = list(actions[1])
    fits = len(hyp) >= len(first) + len(second)
    out.append(fits and hyp[len(hyp) - len(second):] == second)
    return out


@dataclass
class GradedScores:
    """Corpus-level graded metrics of one decode.

    Attributes:
        clause_accuracy: fraction of executed clauses whose span matches (0..1).
        except_restricted: fraction of two-clause outputs that are right except in the clause
            of ``restricted_slot`` (0..1); ``None`` when no slot was given.
        chrf, bleu: sacrebleu corpus chrF and BLEU (0..100).
        n_clauses: number of executed clauses scored.
    """

    clause_accuracy: float
    except_restricted: Optional[float]
    chrf: float
    bleu: float
    n_clauses: int

    def as_dict(self) -> dict:
        """JSON-ready form, rounded to 6 decimals."""
        return {"clause_accuracy": round(self.clause_accuracy, 6),
                "correct_except_restricted_clause": (None if self.except_restricted is None
                                                     else round(self.except_restricted, 6)),
                "chrf": round(self.chrf, 4), "bleu": round(self.bleu, 4),
                "n_clauses": self.n_clauses}


def graded_scores(examples: Sequence[Tuple[str, str, str]], grammar: Grammar,
                  restricted_slot: Optional[str] = None) -> GradedScores:
    """Graded metrics over ``(command, reference actions, hypothesis actions)`` triples.

    Args:
        examples: strings of space-separated tokens; the command is parsed by ``grammar``.
        grammar: the grammar of the commands (its interpreter gives each clause's span).
        restricted_slot: ``"first"`` or ``"second"``, the slot held out in training.

    Raises:
        ValueError: no examples, an unknown slot, or a reference that is not the command's
            interpretation (the decode does not belong to this grammar).
    """
    import sacrebleu

    if not examples:
        raise ValueError("no examples to score")
    if restricted_slot is not None and restricted_slot not in SLOT_INDEX:
        raise ValueError(f"unknown slot {restricted_slot!r}; expected 'first' or 'second'")
    matched = total = two_clause = except_restricted = 0
    for command, reference, hypothesis in examples:
        try:
            cmd = grammar.parse(command)
        except GrammarError as e:
            raise ValueError(f"command {command!r}: {e}. Fix: score with the grammar the data "
                             "was built with") from None
        clauses = [cmd.first] + ([cmd.second] if cmd.second is not None else [])
        spans = [grammar.clause_actions(c) for c in clauses]
        if [a for s in spans for a in s] != reference.split():
            raise ValueError(f"reference of {command!r} is not its interpretation under the "
                             f"{grammar.name} grammar. Fix: score with the grammar the data "
                             "was built with")
        ok = clause_matches(spans, hypothesis.split())
        matched += sum(ok)
        total += len(ok)
        if restricted_slot is not None and len(ok) == 2:
            two_clause += 1
            i = SLOT_INDEX[restricted_slot]
            except_restricted += (not ok[i]) and ok[1 - i]
    hyps = [h for _, _, h in examples]
    refs = [[r for _, r, _ in examples]]
    return GradedScores(
        clause_accuracy=matched / total,
        except_restricted=(except_restricted / two_clause if two_clause else None)
        if restricted_slot is not None else None,
        chrf=sacrebleu.corpus_chrf(hyps, refs).score,
        bleu=sacrebleu.corpus_bleu(hyps, refs, tokenize="none").score,
        n_clauses=total)
