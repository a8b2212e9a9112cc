"""COGS TSV files into a fairseq data-bin.

The directory's ``train.tsv``, ``dev.tsv``, ``test.tsv`` and ``gen.tsv`` (any beyond train and
dev may be missing) become the fairseq splits of :data:`~fairseq_entropy.cogs.data.SPLITS`:
``train``, ``valid`` (from ``dev.tsv``: fairseq-train's default ``--valid-subset``), ``test``
and ``gen`` (``fairseq-generate --gen-subset gen``), source ``in`` = the sentence, target
``out`` = the logical form.  The dictionaries (``dict.in.txt``, ``dict.out.txt``) are built
from the training split alone, so a token that only other splits hold becomes ``<unk>``: the
manifest counts such tokens per split and ``binarize`` prints the counts.  Beside the
binary files, ``<split>.case`` holds the case of every sentence (line i = sample id i), which
``score`` reads to report accuracy per case and per case type.

A level written by ``build cogs`` (its ``manifest.json`` has ``builder`` ``cogs``) keeps the
build's record in the binarized manifest (:data:`BUILD_FIELDS`: the case, its held-out pair,
the data seed, the target and measured entropy of the tested slot in bits) and gets one more
split, :data:`CASE_SPLIT` (``gen_case``): the sentences of ``gen.tsv`` of the level's case
(1000 on COGS), which ``fairseq-entropy run`` decodes and scores beside ``test``.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

from ..files import atomic_directory
from ..scan.databin import SOURCE_LANG, TARGET_LANG, BinarizeError
from ..scan.preprocess import run_preprocess
from ..scan.scan_files import sha256_of
from .data import SPLITS, CogsExample, check_one_lf_format, data_lf_format, read_cogs_tsv

#: the suffix of the file of cases beside a binarized split (``gen.case``)
CASE_SUFFIX = "case"
#: the split of a ``build cogs`` level holding the gen sentences of its case only
CASE_SPLIT = "gen_case"
#: the fields of a ``build cogs`` level's manifest that its binarized manifest keeps
BUILD_FIELDS = ("level", "case", "held_out", "seed", "target_entropy_bits", "entropy_bits",
                "reachable_bits", "slot_sentences", "size")


def build_dictionary(lines: List[str]) -> List[tuple]:
    """(token, count) pairs of the whitespace tokens of ``lines``, most frequent first (ties
    by token), as fairseq's ``dict.txt`` lists them."""
    counts = Counter(t for line in lines for t in line.split())
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _write_dictionary(path: Path, entries: List[tuple]) -> None:
    path.write_text("".join(f"{t} {n}\n" for t, n in entries))


def read_cogs_dir(src_dir: str | os.PathLike) -> Dict[str, List[CogsExample]]:
    """The COGS files of ``src_dir`` by fairseq split name (:data:`SPLITS`).

    Raises:
        BinarizeError: no ``train.tsv`` or no ``dev.tsv`` in ``src_dir``.
        DataFormatError: a bad file or line (:func:`~fairseq_entropy.cogs.data.read_cogs_tsv`),
            or files of two LF formats (:func:`~fairseq_entropy.cogs.data.check_one_lf_format`).
    """
    src = Path(src_dir)
    for need in ("train", "dev"):
        if not (src / f"{need}.tsv").is_file():
            raise BinarizeError(f"{src}: no {need}.tsv. Fix: pass the directory holding the "
                                "COGS files train.tsv, dev.tsv (and test.tsv, gen.tsv), e.g. "
                                "the data/ folder of github.com/najoungkim/COGS")
    files = {str(src / f"{stem}.tsv"): split for stem, split in SPLITS.items()
             if (src / f"{stem}.tsv").is_file()}
    read = {path: read_cogs_tsv(path) for path in files}
    check_one_lf_format(read)
    return {split: read[path] for path, split in files.items()}


def build_record(src_dir: str | os.PathLike) -> Optional[dict]:
    """The :data:`BUILD_FIELDS` of the ``build cogs`` level ``src_dir`` (from its
    ``manifest.json``, with ``build_manifest_sha256``, that file's SHA-256), or None when
    ``src_dir`` is no such level (COGS's own ``data/`` folder).

    Raises:
        DataFormatError: a ``manifest.json`` that is not valid JSON.
    """
    from ..files import read_json
    from ..scan.manifests import manifest_sha256

    path = Path(src_dir) / "manifest.json"
    if not path.is_file():
        return None
    manifest = read_json(path)
    if not isinstance(manifest, dict) or manifest.get("builder") != "cogs":
        return None
    return {**{k: manifest.get(k) for k in BUILD_FIELDS},
            "build_manifest_sha256": manifest_sha256(path)}


def binarize_cogs(src_dir: str | os.PathLike, out: str | os.PathLike, workers: int = 1,
                  name: Optional[str] = None) -> dict:
    """Binarize the COGS files of ``src_dir`` into ``out`` (module docstring).

    Args:
        src_dir: a directory with ``train.tsv`` and ``dev.tsv`` (and ``test.tsv``,
            ``gen.tsv``).
        out: the data-bin directory, replaced as a whole when complete.
        workers: fairseq-preprocess workers.
        name: the level name recorded in the manifest (default: ``out``'s name).

    Returns:
        the manifest written as ``out/manifest.json``: ``experiment`` ``cogs``, ``level``
        (``name``, else a ``build cogs`` level's own, else ``out``'s name), ``grammar``
        ``cogs``, ``lf_format`` (original or variable_free), ``sizes``,
        ``sources`` (path, SHA-256, lines per split), ``cases`` (per split: case ->
        sentences), ``unknown_tokens`` (per split: source and target tokens outside the
        training dictionaries, sentences holding one) and ``max_target_tokens`` (per split:
        the longest logical form, for the decoding length, :func:`decode_max_len`); for a
        ``build cogs`` level also :func:`build_record`'s fields and the split
        :data:`CASE_SPLIT`.

    Raises:
        BinarizeError: a missing file (:func:`read_cogs_dir`), a ``build cogs`` level whose
            ``gen.tsv`` has no sentence of its case, or fairseq-preprocess failing.
        DataFormatError: a bad file or line (names file:line).
    """
    import json

    splits = read_cogs_dir(src_dir)
    src = Path(src_dir)
    build = build_record(src)
    stems = {split: stem for stem, split in SPLITS.items()}
    if build is not None:
        splits[CASE_SPLIT] = [e for e in splits.get("gen", []) if e.case == build["case"]]
        stems[CASE_SPLIT] = "gen"
        if not splits[CASE_SPLIT]:
            raise BinarizeError(f"{src / 'gen.tsv'}: no sentence of the level's case "
                                f"{build['case']} ({src / 'manifest.json'}). Fix: build the "
                                "level again with fairseq-entropy build cogs (it copies "
                                "COGS's gen.tsv)")
    src_dict = build_dictionary([e.sentence for e in splits["train"]])
    tgt_dict = build_dictionary([e.lf for e in splits["train"]])
    known = ({t for t, _ in src_dict}, {t for t, _ in tgt_dict})
    unknown = {}
    for split, examples in splits.items():
        s = sum(t not in known[0] for e in examples for t in e.sentence.split())
        t = sum(t not in known[1] for e in examples for t in e.lf.split())
        n = sum(any(x not in known[0] for x in e.sentence.split())
                or any(x not in known[1] for x in e.lf.split()) for e in examples)
        unknown[split] = {"source": s, "target": t, "sentences": n}
    manifest = {
        "experiment": "cogs",
        "level": name or (build or {}).get("level") or Path(out).name, "grammar": "cogs",
        "lf_format": data_lf_format(splits["train"]),
        "sizes": {split: len(ex) for split, ex in splits.items()},
        "sources": {split: {"path": str((src / f"{stems[split]}.tsv").resolve()),
                            "sha256": sha256_of(src / f"{stems[split]}.tsv"),
                            "lines": len(ex)} for split, ex in splits.items()},
        "cases": {split: dict(sorted(Counter(e.case for e in ex).items()))
                  for split, ex in splits.items()},
        "unknown_tokens": unknown,
        "max_target_tokens": {split: max(len(e.lf.split()) for e in ex)
                              for split, ex in splits.items()},
        **{k: v for k, v in (build or {}).items() if k != "level"},
    }
    with atomic_directory(out) as tmp:
        raw = tmp / "raw"
        raw.mkdir()
        for split, examples in splits.items():
            (raw / f"{split}.{SOURCE_LANG}").write_text(
                "".join(e.sentence + "\n" for e in examples))
            (raw / f"{split}.{TARGET_LANG}").write_text("".join(e.lf + "\n" for e in examples))
            (tmp / f"{split}.{CASE_SUFFIX}").write_text("".join(e.case + "\n" for e in examples))
        _write_dictionary(raw / "dict.in.txt", src_dict)
        _write_dictionary(raw / "dict.out.txt", tgt_dict)
        standard = [s for s in ("train", "valid", "test") if s in splits]
        run_preprocess(raw, tmp, raw / "dict.in.txt", standard, workers,
                       raw / "dict.out.txt", allow_unk=True)
        for other in (s for s in splits if s not in standard):
            # fairseq-preprocess knows train/valid/test: gen (and gen_case) go as test
            gen_raw, gen_out = tmp / "gen_raw", tmp / "gen_out"
            gen_raw.mkdir()
            for lang in (SOURCE_LANG, TARGET_LANG):
                os.replace(raw / f"{other}.{lang}", gen_raw / f"test.{lang}")
            run_preprocess(gen_raw, gen_out, raw / "dict.in.txt", ["test"], workers,
                           raw / "dict.out.txt", allow_unk=True)
            pair = f"{SOURCE_LANG}-{TARGET_LANG}"
            for lang in (SOURCE_LANG, TARGET_LANG):
                for ext in ("bin", "idx"):
                    os.replace(gen_out / f"test.{pair}.{lang}.{ext}",
                               tmp / f"{other}.{pair}.{lang}.{ext}")
            for p in (*gen_raw.iterdir(), *gen_out.iterdir()):
                p.unlink()
            gen_raw.rmdir()
            gen_out.rmdir()
        for p in raw.iterdir():
            p.unlink()
        raw.rmdir()
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def decode_max_len(data_dir: str | os.PathLike) -> Optional[int]:
    """The longest logical form of a COGS level over all its splits plus 8 tokens (the
    ``--max-len-b`` that decoding and validation need); None for other data (no
    ``max_target_tokens`` in its ``manifest.json``)."""
    from ..files import read_json

    manifest = Path(data_dir) / "manifest.json"
    longest = read_json(manifest).get("max_target_tokens") if manifest.is_file() else None
    return max(longest.values()) + 8 if isinstance(longest, dict) and longest else None


def case_splits(data_dir: str | os.PathLike) -> List[str]:
    """The splits of a binarized level that ``fairseq-entropy run`` decodes beside ``test``:
    ``[CASE_SPLIT]`` for a ``build cogs`` level (its ``manifest.json`` names a ``case`` and
    counts a :data:`CASE_SPLIT` split), else none."""
    from ..files import read_json

    manifest = Path(data_dir) / "manifest.json"
    m = read_json(manifest) if manifest.is_file() else {}
    sizes = m.get("sizes") if isinstance(m, dict) else None
    return [CASE_SPLIT] if isinstance(sizes, dict) and sizes.get(CASE_SPLIT) and \
        m.get("case") else []


def read_cases(data_dir: str | os.PathLike, split: str) -> Optional[List[str]]:
    """The case of every sentence of ``split`` (``<split>.case`` beside the binarized data),
    by sample id; None when the level has no such file (data other than COGS)."""
    from ..files import read_lines

    path = Path(data_dir) / f"{split}.{CASE_SUFFIX}"
    return read_lines(path) if path.is_file() else None
