"""An entropy-controlled COGS training set (``fairseq-entropy build cogs``): the manipulation of
Wold et al. (arXiv 2505.13089, Sec. 4.1) applied to a lexical generalization case of COGS
(Kim & Linzen 2020), with COGS's own training sentences only.

A lexical case holds one (word, slot) pair out of training (its *held-out pair*, as
``measure --format cogs`` finds it, :func:`~fairseq_entropy.cogs.measure.measure_cogs`): e.g.
``subj_to_obj_common`` tests ``hedgehog`` in ``theme@object``, a noun seen once, as a subject.
The build chooses which of ``train.tsv``'s sentences to keep so that the words filling that
slot have a requested entropy H (Eq. 1, bits), the same number of sentences at every level.
The training sentences are partitioned (:func:`plan_cogs_build`):

* *kept*: every sentence holding the held-out word (its exposure example, a primitive); kept at
  every level as they are, byte for byte.  Their words in the slot (if any) are a fixed part of
  the slot's counts.
* *slot*: the other sentences that fill the slot once, grouped by the word filling it.  A level
  keeps ``n`` of them (``--slot-sentences``), how many of each word chosen by
  :func:`~fairseq_entropy.cogs.mixing.hit_counts` (H within 0.01 bit of the target).
* *rest*: the sentences without the slot; the build keeps ``size - kept - n`` of them, the same
  ones at every level (all of them by default).
* the sentences that fill the slot twice or more (``agent@subject`` of a clause and of an
  embedded clause) are left out: their words would tie two counts together.

``n`` defaults to the sentences of the slot's commonest word, the most for which the range
starts at (near) 0 bits: one word fills the whole slot.  Fewer sentences widen the range
upward a little, more raise its bottom.  Which sentences of a word a level keeps is a seeded
draw: one generator per build (seed, case), one random order of each word's sentences and one
of the rest, and a level keeps the first ``c(w)`` of word ``w``'s order, so a level with more
of a word keeps a superset of a level with fewer.  Sentences are written in ``train.tsv``'s
order.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..files import iter_text_lines
from ..scan.build_requests import check_once
from ..scan.entropy import entropy_bits
from ..scan.levels import BuildError, level_name
from ..scan.sampling import level_rng
from ..scan.scan_files import sha256_of
from ..version import __version__
from .data import CASE_TYPES, LEXICAL, check_one_lf_format, read_cogs_tsv
from .measure import measure_cogs
from .mixing import hit_counts, reachable_range
from .slots import occurrences

#: the COGS files of a build's source directory, and whether each must be there
SOURCE_FILES = {"train": True, "dev": True, "test": False, "gen": True}


@dataclass
class CogsLevel:
    """One level: which training lines it keeps and what it was built to be.

    Attributes:
        name: directory name (``entropy_1.5``).
        lines: 0-based indices into ``train.tsv``'s lines, ascending.
        fields: the level's manifest fields (target and measured entropy, counts, ...).
    """

    name: str
    lines: List[int]
    fields: dict


@dataclass
class CogsBuild:
    """A planned build: the source files and lines, the request, the levels.

    Attributes:
        sources: file stem (``train``, ``dev``, ``test``, ``gen``) -> path, those present.
        train_lines: ``train.tsv``'s lines as read (each ends with ``"\\n"``).
        record: the build's manifest fields (request, held-out pair, sources' SHA-256).
        levels: the levels, in the order asked.
    """

    sources: Dict[str, Path]
    train_lines: List[str]
    record: dict
    levels: List[CogsLevel] = field(default_factory=list)


def check_case(case: str) -> None:
    """Refuse a case that is not one of COGS's lexical cases.

    Raises:
        BuildError: an unknown or a structural case (names the lexical cases and the fix).
    """
    lexical = [c for c, t in CASE_TYPES.items() if t == LEXICAL]
    if case not in CASE_TYPES:
        raise BuildError(f"--case {case}: not a COGS generalization case. Fix: choose a lexical "
                         f"case: {', '.join(lexical)}")
    if CASE_TYPES[case] != LEXICAL:
        raise BuildError(f"--case {case}: a structural case, which holds no one (word, slot) "
                         f"pair out of training. Fix: choose a lexical case: "
                         f"{', '.join(lexical)}")


def source_files(cogs_dir: str | os.PathLike) -> Dict[str, Path]:
    """The COGS files of ``cogs_dir`` (:data:`SOURCE_FILES`), by stem.

    Raises:
        BuildError: ``cogs_dir`` is not a directory, or lacks train.tsv, dev.tsv or gen.tsv.
    """
    src = Path(cogs_dir)
    if not src.is_dir():
        raise BuildError(f"{src}: not a directory. Fix: pass the directory holding COGS's "
                         "train.tsv, dev.tsv, test.tsv and gen.tsv (COGS's data/ folder)")
    for stem, needed in SOURCE_FILES.items():
        if needed and not (src / f"{stem}.tsv").is_file():
            raise BuildError(f"{src / f'{stem}.tsv'}: file not found. Fix: pass the directory "
                             "holding COGS's train.tsv, dev.tsv and gen.tsv (gen.tsv names "
                             "the held-out pair of the case)")
    return {s: src / f"{s}.tsv" for s in SOURCE_FILES if (src / f"{s}.tsv").is_file()}


def held_out_pair(train, gen, case: str, gen_path: str) -> tuple:
    """(word, slot) that ``case`` holds out of ``train``, as ``measure --format cogs`` finds
    it in ``gen`` (:func:`~fairseq_entropy.cogs.measure.measure_cogs`).

    Raises:
        BuildError: ``gen`` has no sentence of ``case``, or the case holds no pair out.
    """
    of_case = [e for e in gen if e.case == case]
    if not of_case:
        raise BuildError(f"{gen_path}: no sentence of the case {case}. Fix: pass COGS's own "
                         "gen.tsv (1000 sentences per case)")
    rec = measure_cogs(train, of_case)["cases"][0]
    if rec["held_out"] is None:
        raise BuildError(f"{gen_path}: the {case} sentences share no (word, slot) pair absent "
                         "from train.tsv. Fix: pass the train.tsv and gen.tsv of one COGS data "
                         "set")
    return rec["held_out"]["word"], rec["held_out"]["slot"]


def _counts(occ, lines: Sequence[int], slot: str) -> Counter:
    return Counter(w for i in lines for w, s in occ[i] if s == slot)


def plan_cogs_build(cogs_dir: str | os.PathLike, case: str, levels: Sequence[float],
                    seed: int, slot_sentences: Optional[int] = None,
                    size: Optional[int] = None) -> CogsBuild:
    """Plan the levels of a COGS build (module docstring) in memory.

    Args:
        cogs_dir: directory with ``train.tsv``, ``dev.tsv``, ``gen.tsv`` (and ``test.tsv``).
        case: a lexical case of COGS (:data:`~fairseq_entropy.cogs.data.CASE_TYPES`).
        levels: target entropies of the tested slot, bits.
        seed: the data seed (>= 0).
        slot_sentences: ``n``, sentences filling the slot at every level (default: those of
            the slot's commonest word).
        size: ``M``, training sentences at every level (default: kept + ``n`` + every
            sentence without the slot).

    Returns:
        the :class:`CogsBuild`; every level's entropy is within 0.01 bit of its target.

    Raises:
        BuildError: an unknown or structural case, a missing file, a training set without
            the case's held-out word, a level asked twice or with more than 3 decimals, a
            target outside the reachable range (named) or not reached, or
            ``slot_sentences`` / ``size`` that the data cannot give (names the bounds).
        DataFormatError: a malformed line (names file:line).
    """
    check_case(case)
    check_once(list(levels), "--levels")
    sources = source_files(cogs_dir)
    train = read_cogs_tsv(sources["train"])
    gen = read_cogs_tsv(sources["gen"])
    check_one_lf_format({str(sources["train"]): train, str(sources["gen"]): gen})
    word, slot = held_out_pair(train, gen, case, str(sources["gen"]))
    train_lines = [line if line.endswith("\n") else line + "\n"
                   for _, line in iter_text_lines(sources["train"])]
    occ = [occurrences(e) for e in train]
    kept, rest, twice = [], [], 0
    by_word: Dict[str, List[int]] = defaultdict(list)
    for i, o in enumerate(occ):
        fills = [w for w, s in o if s == slot]
        if any(w == word for w, _ in o):
            kept.append(i)
        elif not fills:
            rest.append(i)
        elif len(fills) == 1:
            by_word[fills[0]].append(i)
        else:
            twice += 1
    if not kept:
        raise BuildError(f"{sources['train']}: no sentence holds {word!r}, the held-out word "
                         f"of {case} (COGS's train.tsv holds it, outside {slot}), so its gen "
                         "sentences would test a word never seen. Fix: pass COGS's own "
                         "train.tsv")
    base = _counts(occ, kept, slot)  # the slot's words in the kept sentences, at every level
    if base.get(word):  # measure_cogs found the pair absent from training
        raise AssertionError(f"{word} fills {slot} in {sources['train']}")
    available = {w: len(ix) for w, ix in sorted(by_word.items())}
    if not available:
        raise BuildError(f"{sources['train']}: no sentence fills {slot} once (besides those "
                         f"holding {word}). Fix: pass COGS's own train.tsv")
    dominant = min(available, key=lambda w: (-(available[w] + base.get(w, 0)), w))
    n = available[dominant] if slot_sentences is None else int(slot_sentences)
    if not 1 <= n <= sum(available.values()):
        raise BuildError(f"--slot-sentences {n}: outside 1..{sum(available.values())}, the "
                         f"sentences of {sources['train']} filling {slot} once. Fix: pass a "
                         "number in that range (or leave it out)")
    m = len(kept) + n + len(rest) if size is None else int(size)
    if not len(kept) + n <= m <= len(kept) + n + len(rest):
        raise BuildError(f"--size {m}: outside {len(kept) + n}..{len(kept) + n + len(rest)} "
                         f"(sentences holding {word}: {len(kept)}; filling {slot}: {n}; without "
                         f"it: up to {len(rest)}). Fix: pass a size in that range (or leave it "
                         "out)")
    rng = level_rng(seed, "cogs", case)
    order = {w: [ix[j] for j in rng.permutation(len(ix))] for w, ix in sorted(by_word.items())}
    others = sorted(rest[j] for j in rng.permutation(len(rest))[:m - len(kept) - n])
    low, high = reachable_range(available, base, n)
    what = f"{slot} ({case}: {n} slot sentences of {sources['train']})"
    record = {
        "package": "fairseq-entropy", "package_version": __version__, "builder": "cogs",
        "case": case, "held_out": {"word": word, "slot": slot}, "seed": int(seed),
        "slot_sentences": n, "size": m, "source_dir": str(Path(cogs_dir).resolve()),
        "sources": {s: {"sha256": sha256_of(p), "lines": len(train) if s == "train" else None}
                    for s, p in sources.items()},
        "reachable_bits": [round(low, 6), round(high, 6)],
        "dominant_word": dominant,
        "sentences": {"holding_held_out_word": len(kept), "filling_slot_once": sum(
            available.values()), "filling_slot_twice_or_more_left_out": twice,
            "without_slot": len(rest), "without_slot_kept": len(others)},
    }
    for s in ("dev", "test", "gen"):
        if s in record["sources"]:
            record["sources"][s]["lines"] = sum(1 for _ in iter_text_lines(sources[s]))
    build = CogsBuild(sources, train_lines, record)
    vocabulary = {t for e in train for t in e.sentence.split()}
    for target in levels:
        c, alpha = hit_counts(available, base, n, float(target), what)
        lines = sorted(kept + others + [i for w in order for i in order[w][:c[w]]])
        counts = _counts(occ, lines, slot)
        tokens = {t for i in lines for t in train[i].sentence.split()}
        build.levels.append(CogsLevel(level_name("cogs", target), lines, {
            "level": level_name("cogs", target), "target_entropy_bits": float(target),
            "entropy_bits": round(entropy_bits(counts), 6), "mixing_weight": alpha,
            "slot_words": len(counts),
            "slot_counts": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
            "words_absent": sorted(vocabulary - tokens),
            "sizes": {"train": len(lines), **{s: record["sources"][s]["lines"]
                                              for s in ("dev", "test", "gen")
                                              if s in record["sources"]}},
        }))
    return build
