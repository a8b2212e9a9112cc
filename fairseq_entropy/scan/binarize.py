"""Binarization for fairseq: a level, a build (every level) or SCAN-format files into fairseq
binary data with one fixed dictionary per grammar, or with sentencepiece pieces.

Every pair is checked with the grammar's interpreter and every token against the grammar's
dictionary (:mod:`~fairseq_entropy.scan.dictionary`) before ``fairseq-preprocess`` runs
(:mod:`~fairseq_entropy.scan.preprocess`); with a subword model the sentences are first cut
into its pieces (:mod:`~fairseq_entropy.scan.subword`).  SCAN-format files
(:func:`binarize_scan_files`) get a validation split held out of the training file when none
is given and a manifest of their own (:mod:`~fairseq_entropy.scan.scan_files`).  Results are
written to a temporary directory renamed into place when complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional

from ..files import atomic_directory, read_json, remove_own_partials
from .databin import SOURCE_LANG, TARGET_LANG, BinarizeError
from .datafiles import Example, parse_examples, read_pair, read_scan_file, write_pair
from .dictionary import check_vocabulary, write_dictionary
from .entropy import SlotStatistics
from .grammar import Grammar
from .lm_format import binarize_level_lm
from .preprocess import preprocess_processes, run_preprocess
from .scan_files import (DEFAULT_SCAN_VALID_FRACTION, hold_out, scan_manifest, sha256_of,
                         stated_experiment)
from .subword import SPM_MODEL, SPM_SIDES, encode_sentencepiece, sentencepiece_words


def binarize_level(level_dir: str | os.PathLike, dest: str | os.PathLike, grammar: Grammar,
                   workers: int = 1, spm_model: Optional[bytes] = None,
                   spm_side: str = "both", fmt: str = "pairs") -> Path:
    """Binarize one level directory (``{train,valid,test}.{in,out}`` + optional manifest).

    Every pair is checked with the grammar's interpreter first (the actions must be those of
    the command), and every split present must be non-empty; a ``train`` split needs a
    ``valid`` split beside it (fairseq-train validates on it).  The result is written to a
    temporary directory and renamed to ``dest`` when complete; ``manifest.json`` is copied
    beside the binarized data for the ``systematicity`` task and for ``score --data``.

    With ``spm_model`` (from :func:`~fairseq_entropy.scan.subword.train_sentencepiece`) the
    sentences of the sides named by ``spm_side``
    (:data:`~fairseq_entropy.scan.subword.SPM_SIDES`) are first cut into its pieces.
    ``both``: one joint dictionary of pieces for commands and actions; decode with
    ``fairseq-generate --post-process sentencepiece``.  ``source``: the commands' dictionary is
    the pieces and the actions' the grammar's words; decode as word-level data.  ``spm.model``
    is written beside the data and the manifest records it, the side and the decoding under
    ``subword``.

    With ``fmt="lm"`` the checked level is written in the decoder-only format instead
    (:func:`~fairseq_entropy.scan.lm_format.binarize_level_lm`; word-level only).

    Returns:
        ``dest`` as a :class:`~pathlib.Path`.

    Raises:
        BinarizeError: no split files, a token outside the dictionary, an empty split, a
            train split without valid split, a character the subword model never saw, or
            fairseq-preprocess failing; names the file (and line) and the fix.
        DataFormatError: a split file that is missing, not UTF-8 or not line-aligned with
            its other side, an empty line, a pair the grammar rejects
            (:func:`~fairseq_entropy.scan.datafiles.read_pair`), or, with ``spm_model``, a
            ``manifest.json`` that is not valid JSON.
        KeyError: ``spm_side`` is not a key of ``SPM_SIDES``.
    """
    level_dir, dest = Path(level_dir), Path(dest)
    splits = [s for s in ("train", "valid", "test")
              if (level_dir / f"{s}.{SOURCE_LANG}").exists()]
    if not splits:
        raise BinarizeError(f"{level_dir}: no train/valid/test .in/.out files. Fix: pass a "
                            "directory written by 'fairseq-entropy build'")
    if "train" in splits and "valid" not in splits:
        raise BinarizeError(f"{level_dir}: has train.{SOURCE_LANG} but no valid.{SOURCE_LANG}; "
                            "fairseq-train needs a validation split. Fix: rebuild the level "
                            "with 'fairseq-entropy build'")
    manifest_path = level_dir / "manifest.json"
    recorded = read_json(manifest_path) if manifest_path.exists() else {}
    for s in splits:
        check_vocabulary(level_dir / s, grammar)
        examples = read_pair(level_dir / s, grammar)  # aligned, no empty lines, valid pairs
        if not examples:
            raise BinarizeError(f"{level_dir / s}.{SOURCE_LANG} is empty; fairseq cannot train "
                                "on, validate with or decode an empty split. Fix: rebuild the "
                                "level with more commands (a larger --n or --valid-fraction)")
        check_against_manifest(level_dir / s, examples, grammar, recorded, manifest_path)
    if fmt == "lm":
        if spm_model is not None:
            raise BinarizeError("--format lm writes word-level data. Fix: drop --spm-vocab, "
                                "or use --format pairs")
        return binarize_level_lm(level_dir, dest, grammar, splits, workers)
    with atomic_directory(dest) as tmp:
        if spm_model is None:
            dict_path = write_dictionary(tmp / "dict.txt", grammar)
            run_preprocess(level_dir, tmp, dict_path, splits, workers)
            if manifest_path.exists():
                shutil.copyfile(manifest_path, tmp / "manifest.json")
        else:
            sides = SPM_SIDES[spm_side]
            pieces = tmp / "pieces"
            pieces.mkdir()
            for split in splits:
                for lang in (SOURCE_LANG, TARGET_LANG):
                    if lang in sides:
                        encode_sentencepiece(spm_model, level_dir / f"{split}.{lang}",
                                             pieces / f"{split}.{lang}")
                    else:
                        shutil.copyfile(level_dir / f"{split}.{lang}", pieces / f"{split}.{lang}")
            words = sentencepiece_words(spm_model)
            dict_path = write_dictionary(tmp / "dict.txt", words=words)
            tgt_dict_path = (None if TARGET_LANG in sides
                             else write_dictionary(tmp / "dict.words.txt", grammar))
            run_preprocess(pieces, tmp, dict_path, splits, workers, tgt_dict_path)
            shutil.rmtree(pieces)
            if tgt_dict_path is not None:
                os.unlink(tgt_dict_path)
            (tmp / SPM_MODEL).write_bytes(spm_model)
            manifest = read_json(manifest_path) if manifest_path.exists() else {}
            manifest["subword"] = {
                "tokenizer": "sentencepiece", "model": SPM_MODEL, "vocab_size": len(words) + 1,
                "model_sha256": hashlib.sha256(spm_model).hexdigest(), "side": spm_side,
                "decode": ("fairseq-generate --post-process sentencepiece"
                           if TARGET_LANG in sides else "fairseq-generate")}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        os.unlink(dict_path)
    return dest


def check_against_manifest(prefix: Path, examples, grammar, manifest: dict,
                           manifest_path: Path) -> None:
    """Refuse a split whose commands are not those its level's ``manifest.json`` describes
    (its size and the verb counts of each slot, as ``build`` recorded them), e.g. a split
    file edited after the build: the copied manifest would misstate the data that is
    trained on and scored.  A manifest without ``slots`` for the split is not compared.

    Raises:
        BinarizeError: naming the split file, both counts and the fix.
    """
    expected = (manifest.get("slots") or {}).get(prefix.name)
    if not isinstance(expected, dict):
        return
    verbs = manifest.get("verbs") or grammar.verbs
    got = SlotStatistics.of(parse_examples(examples, grammar), verbs).as_dict()
    if got["n_commands"] != expected.get("n_commands") or \
            got["verb_counts"] != expected.get("verb_counts"):
        what = (f"{got['n_commands']} commands, {manifest_path} records "
                f"{expected.get('n_commands')}" if got["n_commands"] !=
                expected.get("n_commands") else "its slots' verb counts differ from those "
                f"{manifest_path} records")
        raise BinarizeError(f"{prefix}.{SOURCE_LANG}: {what}: the split was changed after "
                            "the build, and the manifest copied beside the data would misstate "
                            "it. Fix: rebuild the level with fairseq-entropy build (or restore "
                            "its files)")


def level_dirs(build_dir: str | os.PathLike) -> List[Path]:
    """Level directories of a build, in order.

    ``build_dir`` itself when it holds ``train.in`` or ``test.in`` (one level); else the levels
    listed in its ``manifest.json``; else, without a manifest, its subdirectories holding
    ``train.in``, sorted by name.

    Raises:
        BinarizeError: ``build_dir`` is a file, neither a level nor a build directory, a
            build whose manifest lists no levels, or an interrupted build: a level its
            manifest plans (``planned_levels``) but does not list, or lists without its
            directory (names those levels).
        DataFormatError: its ``manifest.json`` is not valid JSON (names the file and line).
    """
    build_dir = Path(build_dir)
    if any((build_dir / f"{s}.{SOURCE_LANG}").exists() for s in ("train", "test")):
        return [build_dir]
    if build_dir.is_file():
        raise BinarizeError(f"{build_dir} is a file. Fix: pass the directory written by "
                            "'fairseq-entropy build', or SCAN files with --train/--test")
    manifest = build_dir / "manifest.json"
    if manifest.exists():
        record = read_json(manifest)
        names = record.get("levels", [])
        listed = [build_dir / n for n in names]
        if not listed:
            raise BinarizeError(f"{manifest} lists no levels (a build stopped before its first "
                                "level). Fix: run the same 'fairseq-entropy build' again")
        missing = [n for n in record.get("planned_levels", []) if n not in names] + \
            [n for n in names if not (build_dir / n).is_dir()]
        if missing:
            raise BinarizeError(f"{build_dir}: level(s) {', '.join(missing)} of this build were "
                                "never written (the build was interrupted). Fix: run the same "
                                "'fairseq-entropy build' again (it keeps the finished levels), "
                                "then binarize")
        return listed
    found = sorted(p for p in build_dir.iterdir() if (p / f"train.{SOURCE_LANG}").exists()) \
        if build_dir.is_dir() else []
    if not found:
        raise BinarizeError(f"{build_dir}: not a build directory (no manifest.json, no "
                            "train.in). Fix: pass the --out of 'fairseq-entropy build'")
    return found


def grammar_of_build(build_dir: str | os.PathLike) -> Optional[str]:
    """The grammar name recorded in a build's (or level's) ``manifest.json``; ``None``
    without a manifest or without a ``grammar`` field.

    Raises:
        DataFormatError: the manifest is not valid JSON (names the file and line).
    """
    manifest = Path(build_dir) / "manifest.json"
    return read_json(manifest).get("grammar") if manifest.exists() else None


def binarize_build(build_dir: str | os.PathLike, out: str | os.PathLike,
                   grammar: Optional[Grammar] = None, workers: int = 1,
                   spm_model: Optional[bytes] = None, spm_side: str = "both",
                   fmt: str = "pairs") -> List[Path]:
    """Binarize every level of a build into ``out/<level>`` (or ``out`` for a single level),
    with the subword model ``spm_model`` on ``spm_side`` if given, in the format ``fmt`` (see
    :func:`binarize_level`).

    Without ``grammar``, the grammar is the one named in the first level's manifest
    (:func:`grammar_of_build`): ``paper`` (also without a manifest) or else the original SCAN
    grammar.

    Returns:
        the binarized level directories, in the order of :func:`level_dirs`.

    Raises:
        BinarizeError, DataFormatError: as :func:`level_dirs` and :func:`binarize_level`.
    """
    build_dir, out = Path(build_dir), Path(out)
    dirs = level_dirs(build_dir)
    if grammar is None:
        name = grammar_of_build(dirs[0]) or "paper"
        grammar = Grammar.paper() if name == "paper" else Grammar.scan()
    if dirs == [build_dir]:
        return [binarize_level(build_dir, out, grammar, workers, spm_model, spm_side, fmt)]
    return [binarize_level(d, out / d.name, grammar, workers, spm_model, spm_side, fmt)
            for d in dirs]


def binarize_build_in_parallel(build_dir: str | os.PathLike, out: str | os.PathLike,
                               grammar: Optional[Grammar] = None, workers: int = 1,
                               jobs: Optional[int] = None, spm_model: Optional[bytes] = None,
                               spm_side: str = "both",
                               fmt: str = "pairs",
                               each: Callable[[Iterable, int], Iterable] = lambda done, total: done
                               ) -> List[Path]:
    """Binarize every level of a build into ``out/<level>``, ``jobs`` levels at once (default:
    one per CPU core, at most one per level), or a single level into ``out``.

    The levels run in threads that share ``jobs`` fairseq-preprocess worker processes
    (:func:`~fairseq_entropy.scan.preprocess.preprocess_processes`), so fairseq is imported
    once per process.  Each level is :func:`binarize_build` of its directory: without
    ``grammar``, the grammar named in that level's manifest.

    Args:
        workers: fairseq-preprocess workers per level.
        jobs: levels binarized at once; ``None``: ``os.cpu_count()``.
        spm_model, spm_side: the subword model and the sides it cuts (:func:`binarize_level`).
        fmt: the data format, ``pairs`` or ``lm`` (:func:`binarize_level`).
        each: ``each(finished, total)`` wraps the iterable of finished levels and their
            number (e.g. a progress bar).

    Returns:
        the binarized level directories, in the order of :func:`level_dirs`.

    Raises:
        BinarizeError, DataFormatError: as :func:`level_dirs` and :func:`binarize_level`;
            the first failing level's error (the others still run to the end, then the
            levels this call wrote are removed, and ``out`` if this call created it: a
            data-bin holds all of a build's levels or none of this call's).
    """
    dirs = level_dirs(build_dir)
    if dirs == [Path(build_dir)]:
        return binarize_build(build_dir, out, grammar, workers, spm_model, spm_side, fmt)
    jobs = min(jobs or os.cpu_count() or 1, len(dirs))
    new = [Path(out) / d.name for d in dirs if not (Path(out) / d.name).exists()]
    created = not Path(out).exists()
    try:
        return _binarize_levels(dirs, out, grammar, workers, jobs, spm_model, spm_side, fmt,
                                each)
    except Exception:  # a level failed (the others stopped or ended): no partial data-bin
        for level in new:
            shutil.rmtree(level, ignore_errors=True)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise


def _binarize_levels(dirs, out, grammar, workers, jobs, spm_model, spm_side, fmt, each):
    """The levels ``dirs`` into ``out/<level>``, ``jobs`` at once
    (:func:`binarize_build_in_parallel`)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    # the threads end last: on Ctrl-C (or SIGTERM raised as KeyboardInterrupt) the levels not
    # started are cancelled and the worker processes killed first, so the running levels fail
    # at once and remove their temporary directories
    pool = ThreadPoolExecutor(jobs)
    try:
        with preprocess_processes(jobs):
            futures = {pool.submit(binarize_build, d, Path(out) / d.name, grammar, workers,
                                   spm_model, spm_side, fmt): i for i, d in enumerate(dirs)}
            done = {}
            try:
                for f in each(as_completed(futures), len(futures)):
                    done[futures[f]] = f.result()  # the first error is raised here
            except KeyboardInterrupt:
                for f in futures:
                    f.cancel()
                raise
    except KeyboardInterrupt:
        pool.shutdown(wait=True, cancel_futures=True)
        remove_own_partials(out)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [o for i in sorted(done) for o in done[i]]


def binarize_scan_files(out: str | os.PathLike, grammar: Grammar, train: Optional[str] = None,
                        valid: Optional[str] = None, test: Optional[str] = None,
                        workers: int = 1, valid_fraction: Optional[float] = None,
                        seed: int = 1, fmt: str = "pairs", experiment: Optional[str] = None,
                        restricted_verb: Optional[str] = None,
                        support: Optional[int] = None) -> Path:
    """Binarize SCAN-format files (``IN: ... OUT: ...``) into ``out`` with a manifest.

    Every line is validated against ``grammar`` first (errors name file:line).  Without a
    ``valid`` file, ``valid_fraction`` (default
    :data:`~fairseq_entropy.scan.scan_files.DEFAULT_SCAN_VALID_FRACTION`) of the training file
    is held out for validation, drawn with ``seed``
    (:func:`~fairseq_entropy.scan.scan_files.hold_out`).  The level is named after ``out``;
    its ``manifest.json`` is :func:`~fairseq_entropy.scan.scan_files.scan_manifest`; ``fmt``
    is the data format (:func:`binarize_level`).

    ``experiment`` (``exp1`` or ``exp2``) states the experiment the files belong to, e.g. the
    paper authors' own files: the files are checked against it
    (:func:`~fairseq_entropy.scan.scan_files.stated_experiment`, with ``restricted_verb`` and
    for Experiment 2 ``support``) and the manifest records a level of that experiment, its
    controlled slot and that slot's measured training entropy (bits), so that the
    experiment's presets train on it.  Without it the level is of experiment ``scan``.

    Returns:
        ``out`` as a :class:`~pathlib.Path`.

    Raises:
        BinarizeError: no file given, ``valid`` together with ``valid_fraction``, ``valid``
            without ``train``, an empty file or split, a bad fraction, or as
            :func:`binarize_level`, or files that contradict ``experiment`` (names file:line).
        DataFormatError: a file that cannot be read, a line that is not ``IN: ... OUT: ...``
            or fails the grammar (:func:`~fairseq_entropy.scan.datafiles.read_scan_file`).
    """
    given = {"train": train, "valid": valid, "test": test}
    if not any(given.values()):
        raise BinarizeError("no SCAN file given. Fix: pass --train/--valid/--test FILE")
    if valid and valid_fraction is not None:
        raise BinarizeError("--valid FILE and --valid-fraction both given. Fix: pass one: the "
                            "fraction holds out part of --train when there is no --valid file")
    if valid and not train:
        raise BinarizeError("--valid without --train. Fix: pass the training file with --train")
    splits: Dict[str, List[Example]] = {}
    sources = {}
    for split, path in given.items():
        if path:
            splits[split] = read_scan_file(path, grammar)
            if not splits[split]:
                raise BinarizeError(f"{path} holds no commands; fairseq cannot use an empty "
                                    f"{split} split. Fix: pass a non-empty file")
            sources[split] = {"path": str(Path(path).resolve()), "sha256": sha256_of(path),
                              "lines": len(splits[split])}
    stated = None
    if experiment is not None:
        stated = stated_experiment(experiment, grammar, splits, given, restricted_verb,
                                   support)
    elif restricted_verb is not None or support is not None:
        raise BinarizeError("--restricted-verb and --support describe the experiment stated "
                            "with --experiment. Fix: add --experiment exp1 or exp2, or drop "
                            "them")
    held = None
    if train and not valid:
        held = DEFAULT_SCAN_VALID_FRACTION if valid_fraction is None else float(valid_fraction)
        splits["train"], splits["valid"] = hold_out(splits["train"], held, seed)
    manifest = scan_manifest(Path(out).name, grammar, splits, sources, seed, held)
    if stated is not None:
        slot = stated["controlled_slot"]
        manifest.update(stated, entropy_bits=round(
            float(manifest["slots"]["train"]["entropy_bits"][slot]), 6))
    with tempfile.TemporaryDirectory() as tmp:
        for split, examples in splits.items():
            write_pair(Path(tmp) / split, examples)
        (Path(tmp) / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return binarize_level(tmp, out, grammar, workers, fmt=fmt)
