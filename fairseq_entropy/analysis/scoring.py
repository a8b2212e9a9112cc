"""Exact-match scoring of one ``fairseq-generate`` output.

:func:`read_generate_output` matches ``S-``/``T-``/``H-`` lines by sample id (fairseq prints
samples in batch order, not id order).  :func:`score_generate_output` computes exact-match
accuracy (Wold et al., arXiv 2505.13089, Sec. 4: a prediction counts only if the whole action
sequence is right), broken down by conjunction and by whether the two slots share a verb.
:func:`write_score` checks the output against the decoded split, command by command
(:func:`check_sources`), adds the graded metrics (:mod:`.metrics`) and writes
``examples.tsv`` and ``score.json`` with the provenance of :mod:`.provenance`.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..cogs.binarize import read_cases
from ..cogs.data import case_type
from ..files import atomic_write_text, iter_text_lines, read_lines
from ..scan.databin import BinarizeError, read_mmap_sequences
from ..scan.subword import SPM_MODEL, detokenize_sentencepiece
from ..scan.grammar import CONJUNCTIONS, Grammar
from ..scan.lm_format import LM_DICT, SEP
from .columns import HELD_OUT_SLOT, SHARED_VERB_KEYS, ScoreError
from .metrics import graded_scores


@dataclass
class Scored:
    """One scored test example."""

    id: int
    source: str
    target: str
    hypothesis: str
    correct: bool
    conjunction: str
    shared_verb: bool


def read_generate_output(path: str | os.PathLike) -> Dict[int, Dict[str, str]]:
    """Read ``fairseq-generate`` output: sample id -> {"S": src, "T": ref, "H": hyp}.

    Only the first ``H-`` line of an id is kept (the best hypothesis). A line of
    sentencepiece pieces (it holds U+2581, the word-start mark, which no word of the grammars
    has) is joined back into words as ``--post-process sentencepiece`` does: the ``S-`` lines
    of commands cut into pieces on the source side only (``binarize --spm-side source``), or
    any line of subword data decoded without ``--post-process``.

    Raises:
        DataFormatError: a missing file, a directory or a line that is not UTF-8
            (:func:`~fairseq_entropy.files.iter_text_lines`).
        ScoreError: no samples; an id without its ``S-``, ``T-`` or ``H-`` line; an ``H-``
            line without its score column; an id whose
            lines appear twice (two decodes in one file); or an output
            cut off while it was written (the last line has no newline, or the file has
            ``D-`` lines and an ``H-`` line lacks its ``D-`` line); names the file, the line
            or sample, and the fix.
    """
    samples: Dict[int, Dict[str, str]] = defaultdict(dict)
    detokenized = set()  # ids with a D- line (fairseq-generate prints one after every H-)
    finished, previous = set(), None  # ids whose block of lines has ended; the last line's id
    for lineno, line in iter_text_lines(path):
        if line[:2] not in ("S-", "T-", "H-", "D-", "P-"):
            continue
        if not line.endswith("\n"):
            raise ScoreError(f"{path}:{lineno}: the last line is cut off (no newline at the "
                             "end): the decode was interrupted while writing. Fix: run "
                             "fairseq-generate again and keep its whole output")
        tag, _, rest = line.rstrip("\n").partition("\t")
        try:
            sid = int(tag[2:])
        except ValueError:
            continue
        kind = tag[0]
        if sid != previous and previous is not None:
            finished.add(previous)
        previous = sid
        if sid in finished or (kind in "ST" and kind in samples.get(sid, {})):
            raise ScoreError(f"{path}:{lineno}: {tag} again: sample {sid} was "
                             "decoded before in this file (fairseq-generate writes each "
                             "sample's lines together, once), so two decodes are mixed in it. "
                             "Fix: score the output of one fairseq-generate run")
        if kind == "D":
            detokenized.add(sid)
        if kind not in "STH":
            continue
        if kind == "H":
            parts = rest.split("\t", 1)
            if len(parts) != 2 or not _is_float(parts[0]):
                raise ScoreError(f"{path}:{lineno}: {tag} is not H-<id><TAB><score><TAB>"
                                 "<hypothesis> (fairseq-generate's form), so its hypothesis "
                                 "cannot be told from its score. Fix: score fairseq-generate's "
                                 "own output, unedited")
            text = parts[1]
        else:
            text = rest
        if "\u2581" in text:
            text = detokenize_sentencepiece(text)
        samples[sid].setdefault(kind, " ".join(text.split()))
    if not samples:
        raise ScoreError(f"{path}: no S-/T-/H- lines. Fix: pass the stdout of fairseq-generate")
    for sid, s in samples.items():
        missing = [k + "-" for k in "STH" if k not in s]
        if missing:
            raise ScoreError(f"{path}: sample {sid} has no {' or '.join(missing)} line. Fix: run "
                             "fairseq-generate on a split with references and keep its whole "
                             "output")
        if detokenized and sid not in detokenized:
            raise ScoreError(f"{path}: sample {sid} has an H- line but no D- line after it: the "
                             "output is cut off. Fix: run fairseq-generate again and keep its "
                             "whole output")
    return dict(samples)


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def clause_verbs(source: str) -> Tuple[str, Optional[str], Optional[str]]:
    """(conjunction, first-slot verb, second-slot verb) of a command, by execution order."""
    words = source.split()
    conj = next((w for w in words if w in CONJUNCTIONS), None)
    if conj is None:
        return "none", words[0] if words else None, None
    i = words.index(conj)
    left, right = words[0], words[i + 1] if i + 1 < len(words) else None
    return (conj, left, right) if conj == "and" else (conj, right, left)


def score_generate_output(path: str | os.PathLike) -> Tuple[List[Scored], dict]:
    """Score a generate output; returns the per-example records and a summary dict.

    Summary keys: ``accuracy`` (fraction in [0, 1]), ``n``, ``correct``, ``by_conjunction``
    and ``by_shared_verb`` (each ``{key: {"accuracy", "n"}}``).
    """
    samples = read_generate_output(path)
    rows = []
    for sid in sorted(samples):
        s = samples[sid]
        conj, v1, v2 = clause_verbs(s.get("S", ""))
        rows.append(Scored(sid, s.get("S", ""), s["T"], s["H"], s["H"] == s["T"], conj,
                           v1 is not None and v1 == v2))

    def acc(subset: List[Scored]) -> dict:
        n = len(subset)
        return {"accuracy": (sum(r.correct for r in subset) / n) if n else None, "n": n}

    summary = {"n": len(rows), "correct": sum(r.correct for r in rows),
               "accuracy": acc(rows)["accuracy"]}
    by_conj = defaultdict(list)
    by_shared = defaultdict(list)
    for r in rows:
        by_conj[r.conjunction].append(r)
        by_shared[SHARED_VERB_KEYS[0] if r.shared_verb else SHARED_VERB_KEYS[1]].append(r)
    summary["by_conjunction"] = {k: acc(v) for k, v in sorted(by_conj.items())}
    summary["by_shared_verb"] = {k: acc(v) for k, v in sorted(by_shared.items())}
    return rows, summary


def read_fairseq_dictionary(path: str | os.PathLike) -> List[str]:
    """The symbols of a fairseq ``dict.txt`` by id: fairseq's four special symbols
    (``<s> <pad> </s> <unk>``, ids 0-3), then one symbol per line (``word count``).

    Raises:
        DataFormatError: the file is missing or unreadable.
        ScoreError: a line has no symbol.
    """
    symbols = ["<s>", "<pad>", "</s>", "<unk>"]
    for i, line in enumerate(read_lines(path), 1):
        parts = line.split()
        if not parts:
            raise ScoreError(f"{path}:{i}: empty line. Fix: binarize the level again")
        symbols.append(parts[0])
    return symbols


def split_commands(data_dir: str | os.PathLike, split: str) -> List[str]:
    """The commands of ``split`` of a level, in sample-id order.

    Reads ``<split>.in`` of a raw level, or decodes ``<split>.in-out.in`` of a binarized one
    with its ``dict.in.txt`` (as fairseq-generate prints them on its ``S-`` lines; subword data,
    with ``spm.model`` beside it, detokenized as ``--post-process sentencepiece`` does), or
    the lm format's ``<split>`` with its ``dict.txt``, each line cut at ``<sep>``.

    Raises:
        ScoreError: the level holds neither form of the split, or its binarized form does
            not decode with its dictionary.
        DataFormatError: ``<split>.in`` is unreadable.
    """
    data_dir = Path(data_dir)
    raw = data_dir / f"{split}.in"
    if raw.is_file():
        return [" ".join(line.split()) for line in read_lines(raw)]
    lm = data_dir / split
    if Path(f"{lm}.bin").is_file() and (data_dir / LM_DICT).is_file():
        try:
            symbols = read_fairseq_dictionary(data_dir / LM_DICT)
            lines = [[symbols[i] for i in seq[:-1]] for seq in read_mmap_sequences(lm)]
            return [" ".join(w[:w.index(SEP)] if SEP in w else w) for w in lines]
        except (BinarizeError, IndexError) as e:
            raise ScoreError(f"{lm}: {e if str(e) else 'a token id beyond dict.txt'}. "
                             "Fix: binarize the level again") from None
    prefix = data_dir / f"{split}.in-out.in"
    if Path(f"{prefix}.bin").is_file() and (data_dir / "dict.in.txt").is_file():
        subword = (data_dir / SPM_MODEL).is_file()
        try:
            symbols = read_fairseq_dictionary(data_dir / "dict.in.txt")
            lines = [" ".join(symbols[i] for i in seq[:-1]) for seq in read_mmap_sequences(prefix)]
            return [detokenize_sentencepiece(x) for x in lines] if subword else lines
        except (BinarizeError, IndexError) as e:
            raise ScoreError(f"{prefix}: {e if str(e) else 'a token id beyond dict.in.txt'}. "
                             "Fix: binarize the level again") from None
    raise ScoreError(f"{data_dir} holds no {split} split ({raw.name} or {prefix.name}.bin). "
                     "Fix: pass the --data level that was decoded, and its --split")


def _cut_off(samples: Dict[int, Dict[str, str]], commands: Sequence[str]) -> bool:
    """Whether a short decode, whose every source equals its command, looks cut off: its
    ids are ``0 .. K-1``, or 8 or more commands are missing (more than fairseq's default
    batch multiple of 8 drops).  fairseq-generate writes its batches in order of length and,
    within a batch, the longest first, so an interrupted decode holds no simple set of ids."""
    ids = sorted(samples)
    if any(samples[i].get("S") != commands[i] for i in ids):
        return False  # a decode of other data: check_sources names the first difference
    return ids == list(range(len(ids))) or len(commands) - len(ids) >= 8


def check_sources(samples: Dict[int, Dict[str, str]], commands: Sequence[str],
                  gen_path: str | os.PathLike, data_dir: str | os.PathLike, split: str,
                  sample: bool = False) -> None:
    """Refuse a decode that is not of ``commands``: same number of samples, ids
    ``0 .. len(commands) - 1``, and each ``S-`` line equal to the command of its id.

    Args:
        sample: the decode is of a sample of the split: any ids of ``0 .. len(commands) - 1``
            (each ``S-`` line still equal to its command).

    Raises:
        ScoreError: naming the first sample that differs and the fix.
    """
    n = len(commands)
    if sample:
        outside = [sid for sid in samples if not 0 <= sid < n]
        if outside:
            raise ScoreError(f"{gen_path}: sample id {outside[0]} is outside the {split} split "
                             f"(ids 0..{n - 1}). Fix: pass the --data level that was decoded")
    elif len(samples) < n and all(0 <= sid < n for sid in samples) and _cut_off(samples,
                                                                               commands):
        raise ScoreError(
            f"{gen_path} holds {len(samples)} samples but the {split} split has {n}; each "
            "is complete, and they are the first ones fairseq-generate decodes: the decode "
            f"may have been interrupted. Fix: decode the whole {split} split again and score "
            "the new output (keep --required-batch-size-multiple 1; if you decoded another "
            "split, pass it with --split, e.g. --split valid)")
    elif len(samples) != n:
        raise ScoreError(
            f"{gen_path} holds {len(samples)} samples but the {split} split has {n}. "
            f"Fix: if you decoded another split, pass its name with --split (e.g. --split "
            f"valid); otherwise decode the whole {split} split (fairseq-generate "
            "--required-batch-size-multiple 1 keeps the last sentences that the default "
            "multiple of 8 drops)")
    last = max(samples)
    if not sample and last != n - 1:
        raise ScoreError(
            f"{gen_path}: sample ids run up to {last} but the {split} split has ids "
            f"0..{n - 1}. Fix: pass the --split (and --data level) that was decoded")
    for sid in sorted(samples):
        if samples[sid]["S"] != commands[sid]:
            raise ScoreError(
                f"{gen_path}: sample {sid} is {samples[sid]['S']!r} but command {sid} of the "
                f"{split} split of {data_dir} is {commands[sid]!r}: the output is a decode of "
                "other data. Fix: pass the --data level and --split that were decoded")


def case_summary(rows: Sequence[Scored], cases: Sequence[str], gen_path, data_dir,
                 split: str) -> dict:
    """Exact-match accuracy per case and per case type of the scored ``rows``.

    Args:
        cases: the case of every sentence of the split, by sample id (``<split>.case``).

    Returns:
        ``{"by_case": {case: {"accuracy", "n"}}, "by_case_type": {type: {"accuracy", "n"}}}``,
        the types those of :func:`~fairseq_entropy.cogs.data.case_type` (lexical, structural,
        in_distribution); keys sorted.

    Raises:
        ScoreError: a sample id beyond the case file (names both and the fix).
    """
    by_case: Dict[str, List[bool]] = defaultdict(list)
    by_type: Dict[str, List[bool]] = defaultdict(list)
    for r in rows:
        if not 0 <= r.id < len(cases):
            raise ScoreError(f"{gen_path}: sample {r.id} but {data_dir}/{split}.case has "
                             f"{len(cases)} lines. Fix: binarize the level again "
                             "(binarize --format cogs writes one case per sentence)")
        by_case[cases[r.id]].append(r.correct)
        by_type[case_type(cases[r.id])].append(r.correct)

    def acc(v):
        return {"accuracy": sum(v) / len(v), "n": len(v)}

    return {"by_case": {k: acc(v) for k, v in sorted(by_case.items())},
            "by_case_type": {k: acc(v) for k, v in sorted(by_type.items())}}


def graded_summary(rows: Sequence[Scored], metadata: dict) -> dict:
    """Graded metrics of scored examples (:func:`~fairseq_entropy.analysis.metrics.graded_scores`):
    clause exact match, the share right except in the held-out slot's clause, chrF and BLEU.

    The grammar is the metadata's (``paper`` or ``scan``), else guessed from the words
    (``turn`` or ``I_`` actions mean original SCAN); the held-out slot follows the experiment
    (:data:`HELD_OUT_SLOT`; none for other data).

    Returns:
        the graded record, or None for COGS data (grammar ``cogs``).

    Raises:
        ScoreError: a reference that is not its command's interpretation.
    """
    name = metadata.get("grammar")
    if name == "cogs":
        return None  # the graded metrics read SCAN actions; COGS is scored per case
    if name not in ("paper", "scan"):
        scan_like = any(r.source.split()[:1] == ["turn"] or " turn " in f" {r.source} "
                        or r.target.startswith("I_") for r in rows)
        name = "scan" if scan_like else "paper"
    try:
        graded = graded_scores([(r.source, r.target, r.hypothesis) for r in rows],
                               Grammar.by_name(name),
                               HELD_OUT_SLOT.get(metadata.get("experiment")))
    except ValueError as e:
        raise ScoreError(f"graded metrics: {e}") from None
    return graded.as_dict()


def write_score(gen_path: str | os.PathLike, out_dir: str | os.PathLike,
                metadata: Optional[dict] = None, data_dir: Optional[str | os.PathLike] = None,
                split: str = "test", force: bool = False, sample: bool = False) -> dict:
    """Score ``gen_path`` and write ``examples.tsv`` and ``score.json`` into ``out_dir``.

    Args:
        metadata: provenance recorded in ``score.json``
            (:func:`~fairseq_entropy.analysis.provenance.provenance`).
        data_dir: the decoded level; when given, the output must be a decode of exactly the
            commands of its ``split`` (:func:`check_sources`).
        force: replace an existing ``score.json``.
        sample: the output decodes a sample of the split: ``score.json`` gets
            ``test_sample`` = ``{"n": decoded commands, "split_size": commands of the split}``
            (a score that is not comparable with full-split scores; ``aggregate`` keeps it
            apart), and the decode may hold any subset of the split's ids.

    A level with the case of every sentence beside the split (COGS: ``<split>.case``) gets
    ``by_case`` and ``by_case_type`` (:func:`case_summary`).

    Raises:
        ScoreError: the output is incomplete (:func:`read_generate_output`), not a decode of
            the split, its references are not their commands' interpretations, or
            ``out_dir`` already holds a score and not ``force`` (nothing is written).
        DataFormatError: the output or the split's files are unreadable.
    """
    out = Path(out_dir)
    if (out / "score.json").exists() and not force:
        raise ScoreError(f"{out / 'score.json'} already exists. Fix: pass --force to replace "
                         "it, or choose another --out")
    if out.exists() and not out.is_dir():
        raise ScoreError(f"{out} is a file. Fix: --out names a directory")
    rows, summary = score_generate_output(gen_path)
    commands = None
    if data_dir is not None:
        commands = split_commands(data_dir, split)
        check_sources(read_generate_output(gen_path), commands, gen_path, data_dir, split,
                      sample)
    if sample:
        summary["test_sample"] = {"n": len(rows),
                                  "split_size": None if commands is None else len(commands)}
    cases = read_cases(data_dir, split) if data_dir is not None else None
    if cases is not None:
        summary.update(case_summary(rows, cases, gen_path, data_dir, split))
    summary["graded"] = graded_summary(rows, metadata or {})
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(["id", "correct", "conjunction", "shared_verb", "source", "target", "hypothesis"])
    for r in rows:
        w.writerow([r.id, int(r.correct), r.conjunction, int(r.shared_verb), r.source,
                    r.target, r.hypothesis])
    atomic_write_text(out / "examples.tsv", buf.getvalue())
    record = {**(metadata or {}), **summary, "generate_output": str(Path(gen_path).resolve())}
    atomic_write_text(out / "score.json", json.dumps(record, indent=2) + "\n")
    return record


def score_lines(rec: dict, split: str, out_dir: str | os.PathLike) -> str:
    """The two lines that report a score written by :func:`write_score` (``rec``, its
    ``score.json`` record): exact-match accuracy with its provenance, then the graded
    metrics (clause exact match, chrF, BLEU, right except the held-out slot's clause)."""
    g = rec["graded"]
    types = rec.get("by_case_type") or {}
    if g is None:  # COGS: per case type instead of the graded metrics
        return (f"exact-match accuracy {rec['accuracy']:.4f} ({rec['correct']}/{rec['n']}) on "
                f"{rec['experiment']} {rec['level']} {split}, preset {rec['preset']}, seed "
                f"{rec['seed']}, {rec['checkpoint']} checkpoint; wrote {out_dir}/score.json\n"
                "by case type: " + (", ".join(f"{k} {v['accuracy']:.4f} (n={v['n']})"
                                              for k, v in types.items()) or "none"))
    held = g["correct_except_restricted_clause"]
    return (f"exact-match accuracy {rec['accuracy']:.4f} ({rec['correct']}/{rec['n']}) on "
            f"{rec['experiment']} {rec['level']} {split}, preset {rec['preset']}, seed "
            f"{rec['seed']}, {rec['checkpoint']} checkpoint; wrote {out_dir}/score.json\n"
            f"graded: clause exact match {g['clause_accuracy']:.4f}, chrF {g['chrf']:.2f}, "
            f"BLEU {g['bleu']:.2f}"
            + ("" if held is None else f", right except the held-out slot's clause {held:.4f}"))
