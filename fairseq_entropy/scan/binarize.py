"""Binarization for fairseq: one fixed dictionary per grammar, shared by every level.

The dictionary lists every command word and every action of the grammar, so token ids agree
across levels, test sets and experiments.  It is passed to ``fairseq-preprocess`` as both
``--srcdict`` and ``--tgtdict`` (``--joined-dictionary`` cannot be combined with them).
fairseq-preprocess silently maps unknown words to ``<unk>``; :func:`check_vocabulary` refuses
such data before it runs, and every pair is checked with the grammar's interpreter.

SCAN-format files (:func:`binarize_scan_files`) get a validation split held out of the training
file when none is given (:func:`hold_out`) and a manifest recording the source files, their
hashes and the restricted (verb, slot) pairs (:func:`scan_manifest`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import UserError, DataFormatError
from ..files import atomic_directory, iter_text_lines, read_json, read_lines
from ..version import __version__
from .datafiles import Example, read_pair, read_scan_file, write_pair
from .entropy import SLOTS, SlotStatistics, unseen_pairs
from .grammar import Grammar

SOURCE_LANG, TARGET_LANG = "in", "out"


class BinarizeError(UserError, RuntimeError):
    """Binarization failed; the message names the file and the fix."""


#: fairseq's mmap index: magic, then version (uint64, 1), dtype code (uint8), number of
#: sequences (uint64), then int32 sizes and int64 byte pointers into the .bin file
_MMAP_MAGIC = b"MMIDIDX\x00\x00"
_MMAP_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16,
                9: np.uint32, 10: np.uint64}


def read_mmap_index(prefix: str | os.PathLike) -> Tuple[np.dtype, np.ndarray, np.ndarray]:
    """The header of a fairseq ``mmap`` indexed dataset ``prefix.idx`` (the format written by
    ``fairseq.data.indexed_dataset.MMapIndexedDataset``, which ``fairseq-preprocess
    --dataset-impl mmap`` uses): the token dtype, the sizes [N] (int32, tokens per sequence,
    end-of-sentence included) and the byte offsets [N] (int64) of the sequences in
    ``prefix.bin``.  Read without importing fairseq, which the command line avoids.

    Raises:
        BinarizeError: the file is missing or not a version-1 fairseq mmap index.
    """
    path = f"{prefix}.idx"
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        folder, name = os.path.split(path)
        levels = sorted(entry.name for entry in os.scandir(folder or ".")
                        if entry.is_dir() and os.path.isfile(os.path.join(entry.path, name))) \
            if os.path.isdir(folder or ".") else []
        if levels:
            shown = ", ".join(os.path.join(folder, lv) for lv in levels[:4])
            raise BinarizeError(f"{path} not found: {folder} holds binarized levels "
                                f"({', '.join(levels)}), not one level. Fix: pass one level "
                                f"folder, e.g. {shown}") from None
        raise BinarizeError(f"{path} not found. Fix: binarize the level first "
                            "(fairseq-entropy binarize)") from None
    if len(blob) < 26 or blob[:9] != _MMAP_MAGIC or \
            int.from_bytes(blob[9:17], "little") != 1 or blob[17] not in _MMAP_DTYPES:
        raise BinarizeError(f"{path} is not a fairseq mmap index. Fix: binarize the level "
                            "with fairseq-entropy binarize (--dataset-impl mmap)")
    n = int.from_bytes(blob[18:26], "little")
    if len(blob) < 26 + 12 * n:
        raise BinarizeError(f"{path} is truncated ({len(blob)} bytes for {n} sequences). "
                            "Fix: binarize the level again")
    sizes = np.frombuffer(blob, dtype=np.int32, count=n, offset=26)
    pointers = np.frombuffer(blob, dtype=np.int64, count=n, offset=26 + 4 * n)
    return np.dtype(_MMAP_DTYPES[blob[17]]), sizes, pointers


def read_mmap_sequences(prefix: str | os.PathLike) -> List[np.ndarray]:
    """Every sequence of token ids of the fairseq ``mmap`` dataset ``prefix`` (``.idx`` and
    ``.bin``), in order; see :func:`read_mmap_index`.

    Raises:
        BinarizeError: a missing or malformed file.
    """
    dtype, sizes, pointers = read_mmap_index(prefix)
    try:
        data = Path(f"{prefix}.bin").read_bytes()
    except OSError:
        raise BinarizeError(f"{prefix}.bin not found. Fix: binarize the level again") from None
    end = int(pointers[-1]) + int(sizes[-1]) * dtype.itemsize if len(sizes) else 0
    if len(data) < end:
        raise BinarizeError(f"{prefix}.bin is truncated. Fix: binarize the level again")
    return [np.frombuffer(data, dtype=dtype, count=int(k), offset=int(p))
            for k, p in zip(sizes, pointers)]


def dictionary_words(grammar: Grammar) -> List[str]:
    """Command words then actions of ``grammar``, in a fixed order."""
    return grammar.command_words + grammar.action_words


def write_dictionary(path: str | os.PathLike, grammar: Optional[Grammar] = None,
                     words: Optional[Sequence[str]] = None) -> Path:
    """Write a fairseq ``dict.txt`` (``<word> <count>`` lines) of ``words``, by default the
    grammar's :func:`dictionary_words`.

    Counts are 1: the dictionary is fixed, not learned from the data.
    """
    path = Path(path)
    if words is None:
        words = dictionary_words(grammar)
    path.write_text("".join(f"{w} 1\n" for w in words), encoding="utf-8")
    return path


#: file name of the sentencepiece model written beside subword-binarized data
SPM_MODEL = "spm.model"

#: ``--spm-side`` choices: the sides cut into pieces.  ``both``: commands and actions, one
#: joint dictionary of pieces; ``source``: commands only, actions stay whole words (the
#: grammar's dictionary), so the decoder's task is the word-level one.
SPM_SIDES = {"both": (SOURCE_LANG, TARGET_LANG), "source": (SOURCE_LANG,)}


def train_sentencepiece(level_dir: str | os.PathLike, vocab_size: int,
                        side: str = "both") -> bytes:
    """Train a sentencepiece unigram model (Kudo 2018) on the training sentences of one level
    (``train.in`` then ``train.out`` for ``side="both"``, ``train.in`` alone for
    ``side="source"``; one sentence per line) and return its bytes.

    Deterministic: one thread, no input sampling or shuffling, every character covered
    (``character_coverage`` 1.0), no BOS/EOS/PAD pieces (fairseq adds its own), ``<unk>`` id 0.

    Args:
        level_dir: a level directory written by ``fairseq-entropy build``.
        vocab_size: pieces in the model, ``<unk>`` included; at least the number of distinct
            characters + 1, at most what the data can give (sentencepiece names both bounds).
        side: a key of :data:`SPM_SIDES`.

    Raises:
        BinarizeError: no training split, or a vocabulary size the data cannot give.
        ValueError: an unknown ``side``.
    """
    import io

    import sentencepiece as spm

    if side not in SPM_SIDES:
        raise ValueError(f"unknown subword side {side!r}; choose one of {sorted(SPM_SIDES)}")
    level_dir = Path(level_dir)
    lines = []
    for lang in SPM_SIDES[side]:
        path = level_dir / f"train.{lang}"
        if not path.is_file():
            raise BinarizeError(f"{path} not found: the subword model is trained on the first "
                                "level's training split. Fix: pass a build with a train split")
        lines += [" ".join(line.split()) for line in read_lines(path)]
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
            model_type="unigram", character_coverage=1.0, num_threads=1,
            input_sentence_size=0, shuffle_input_sentence=False, bos_id=-1, eos_id=-1,
            pad_id=-1, unk_id=0, minloglevel=2)
    except RuntimeError as e:
        reason = str(e).split("]", 1)[-1].strip()
        raise BinarizeError(f"sentencepiece cannot train a {vocab_size}-piece model on "
                            f"{level_dir}/train.{{{','.join(SPM_SIDES[side])}}}: {reason} Fix: "
                            "choose another "
                            "--spm-vocab") from None
    return model.getvalue()


def sentencepiece_words(model: bytes) -> List[str]:
    """The pieces of a sentencepiece model in id order, ``<unk>`` left out (fairseq's
    dictionary has its own): the symbols of the subword ``dict.txt``."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_unknown(i)]


def encode_sentencepiece(model: bytes, src: Path, dest: Path) -> None:
    """Write ``dest`` (one line per line of ``src``): the sentence's pieces separated by spaces.

    Raises:
        BinarizeError: a sentence needs ``<unk>`` (a character the model was not trained on).
    """
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model)
    out = []
    for i, line in enumerate(read_lines(src), 1):
        ids = sp.encode(" ".join(line.split()))
        if any(sp.is_unknown(t) for t in ids):
            raise BinarizeError(f"{src}:{i}: {line!r} has a character the subword model never "
                                "saw in the first level's training split. Fix: binarize with "
                                "a first level that covers every character")
        out.append(" ".join(sp.id_to_piece(t) for t in ids) + "\n")
    dest.write_text("".join(out), encoding="utf-8")


def detokenize_sentencepiece(text: str) -> str:
    """Words of a sentence of sentencepiece pieces separated by spaces (what
    ``fairseq-generate --post-process sentencepiece`` prints)."""
    return text.replace(" ", "").replace("\u2581", " ").strip()


def check_vocabulary(prefix: str | os.PathLike, grammar: Grammar) -> None:
    """Refuse ``<prefix>.in``/``.out`` if any token is outside the grammar's dictionary.

    Raises:
        BinarizeError: naming the file, line and token, and the fix.
    """
    vocab = set(dictionary_words(grammar))
    for lang in (SOURCE_LANG, TARGET_LANG):
        p = f"{prefix}.{lang}"
        try:
            for lineno, line in iter_text_lines(p):
                for tok in line.split():
                    if tok not in vocab:
                        raise BinarizeError(
                            f"{p}:{lineno}: token {tok!r} is not in the {grammar.name} "
                            f"grammar's dictionary and would become <unk>. Fix: use "
                            f"--grammar {'scan' if grammar.name == 'paper' else 'paper'} if the "
                            "data uses that vocabulary, or correct the data")
        except DataFormatError as e:
            raise BinarizeError(str(e)) from None


#: worker processes that run fairseq-preprocess in-process; set by :func:`preprocess_processes`
_PREPROCESS_POOL = None


@contextlib.contextmanager
def preprocess_processes(n: int):
    """Inside this block, :func:`run_preprocess` runs fairseq-preprocess in ``n`` reusable
    worker processes, each importing fairseq once, instead of one new interpreter per call
    (whose import of fairseq costs several seconds, more than binarizing a level).

    Calls from several threads share the workers.  Outside the block, or nested, each call
    starts its own ``python -m fairseq_cli.preprocess``.
    """
    global _PREPROCESS_POOL
    if _PREPROCESS_POOL is not None or n < 1:
        yield
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))
    _PREPROCESS_POOL = pool
    try:
        yield
    finally:
        _PREPROCESS_POOL = None
        pool.shutdown(wait=True, cancel_futures=True)


def _preprocess_main(argv: List[str]) -> Tuple[int, str]:
    """fairseq-preprocess's ``main`` on ``argv``, in this worker process.

    Returns the exit status (0 or 1) and everything it logged or printed, which would otherwise
    reach the user's terminal; ``main`` adds a log file in its ``--destdir`` on every call,
    which is closed and removed afterwards.
    """
    import io
    import logging
    import traceback
    from contextlib import redirect_stderr, redirect_stdout

    buf = io.StringIO()
    root = logging.getLogger()
    with redirect_stdout(buf), redirect_stderr(buf):
        # a root handler first, so that fairseq_cli's logging.basicConfig adds none
        saved_handlers, saved_level = root.handlers[:], root.level
        root.handlers = [logging.StreamHandler(buf)]
        root.setLevel(logging.INFO)
        from fairseq import options
        from fairseq_cli import preprocess
        try:
            preprocess.main(options.get_preprocessing_parser().parse_args(argv))
            status = 0
        except BaseException:  # argparse exits; report like a failed subprocess
            traceback.print_exc()
            status = 1
        finally:
            for h in preprocess.logger.handlers[:]:
                if isinstance(h, logging.FileHandler):
                    h.close()
                    preprocess.logger.removeHandler(h)
            root.handlers, root.level = saved_handlers, saved_level
    return status, buf.getvalue()


def run_preprocess(src_dir: Path, dest: Path, dict_path: Path, splits: Sequence[str],
                   workers: int = 1, tgt_dict_path: Optional[Path] = None) -> None:
    """Run ``fairseq-preprocess`` on ``src_dir/{split}.{in,out}`` into ``dest`` with the
    dictionary ``dict_path`` (for the target side too unless ``tgt_dict_path`` is given): in a
    worker of :func:`preprocess_processes` when one is open (and ``workers`` is 1), else as a
    new ``python -m fairseq_cli.preprocess``.

    Raises:
        BinarizeError: fairseq-preprocess failed (with the end of its output), or replaced
            tokens by ``<unk>``.
    """
    argv = ["--source-lang", SOURCE_LANG, "--target-lang", TARGET_LANG,
            "--srcdict", str(dict_path), "--tgtdict", str(tgt_dict_path or dict_path),
            "--destdir", str(dest), "--workers", str(workers), "--dataset-impl", "mmap"]
    for split, flag in (("train", "--trainpref"), ("valid", "--validpref"),
                        ("test", "--testpref")):
        if split in splits:
            argv += [flag, str(src_dir / split)]
    pool = _PREPROCESS_POOL
    if pool is not None and workers == 1:
        status, log = pool.submit(_preprocess_main, argv).result()
    else:
        res = subprocess.run([sys.executable, "-m", "fairseq_cli.preprocess", *argv],
                             capture_output=True, text=True)
        status, log = res.returncode, res.stdout + res.stderr
    if status != 0:
        raise BinarizeError(f"fairseq-preprocess failed on {src_dir}:\n{log[-2000:]}")
    # fairseq-preprocess logs "... N replaced by <unk>"; the vocabulary check makes it 0.
    for line in log.splitlines():
        if "replaced by <unk>" in line and "0.0% replaced" not in line and " 0%" not in line:
            raise BinarizeError(f"fairseq-preprocess replaced tokens by <unk> in {src_dir}: "
                                f"{line.strip()}")


def binarize_level(level_dir: str | os.PathLike, dest: str | os.PathLike, grammar: Grammar,
                   workers: int = 1, spm_model: Optional[bytes] = None,
                   spm_side: str = "both") -> Path:
    """Binarize one level directory (``{train,valid,test}.{in,out}`` + optional manifest).

    Every pair is checked with the grammar's interpreter first (the actions must be those of
    the command), and every split present must be non-empty; a ``train`` split needs a
    ``valid`` split beside it (fairseq-train validates on it).  The result is written to a
    temporary directory and renamed to ``dest`` when complete; ``manifest.json`` is copied
    beside the binarized data for the ``systematicity`` task and for ``score --data``.

    With ``spm_model`` (from :func:`train_sentencepiece`) the sentences of the sides named by
    ``spm_side`` (:data:`SPM_SIDES`) are first cut into its pieces.  ``both``: one joint
    dictionary of pieces for commands and actions; decode with ``fairseq-generate
    --post-process sentencepiece``.  ``source``: the commands' dictionary is the pieces and the
    actions' the grammar's words; decode as word-level data.  ``spm.model`` is written beside
    the data and the manifest records it, the side and the decoding under ``subword``.

    Raises:
        BinarizeError: no split files, a token outside the dictionary, a pair the grammar
            rejects, an empty split, a train split without valid split, or fairseq-preprocess
            failing; names the file (and line) and the fix.
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
    for s in splits:
        check_vocabulary(level_dir / s, grammar)
        try:
            examples = read_pair(level_dir / s, grammar)  # aligned, no empty lines, valid pairs
        except DataFormatError as e:
            raise BinarizeError(str(e)) from None
        if not examples:
            raise BinarizeError(f"{level_dir / s}.{SOURCE_LANG} is empty; fairseq cannot train "
                                "on, validate with or decode an empty split. Fix: rebuild the "
                                "level with more commands (a larger --n or --valid-fraction)")
    manifest_path = level_dir / "manifest.json"
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
            try:
                manifest = read_json(manifest_path) if manifest_path.exists() else {}
            except DataFormatError as e:
                raise BinarizeError(str(e)) from None
            manifest["subword"] = {
                "tokenizer": "sentencepiece", "model": SPM_MODEL, "vocab_size": len(words) + 1,
                "model_sha256": hashlib.sha256(spm_model).hexdigest(), "side": spm_side,
                "decode": ("fairseq-generate --post-process sentencepiece"
                           if TARGET_LANG in sides else "fairseq-generate")}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        os.unlink(dict_path)
    return dest


def level_dirs(build_dir: str | os.PathLike) -> List[Path]:
    """Level directories of a build (those listed in its manifest), or the dir itself."""
    build_dir = Path(build_dir)
    if any((build_dir / f"{s}.{SOURCE_LANG}").exists() for s in ("train", "test")):
        return [build_dir]
    if build_dir.is_file():
        raise BinarizeError(f"{build_dir} is a file. Fix: pass the directory written by "
                            "'fairseq-entropy build', or SCAN files with --train/--test")
    manifest = build_dir / "manifest.json"
    if manifest.exists():
        try:
            names = read_json(manifest).get("levels", [])
        except DataFormatError as e:
            raise BinarizeError(str(e)) from None
        return [build_dir / n for n in names]
    found = sorted(p for p in build_dir.iterdir() if (p / f"train.{SOURCE_LANG}").exists()) \
        if build_dir.is_dir() else []
    if not found:
        raise BinarizeError(f"{build_dir}: not a build directory (no manifest.json, no "
                            "train.in). Fix: pass the --out of 'fairseq-entropy build'")
    return found


def grammar_of_build(build_dir: str | os.PathLike) -> Optional[str]:
    """The grammar name recorded in a build's (or level's) manifest, if any."""
    manifest = Path(build_dir) / "manifest.json"
    try:
        return read_json(manifest).get("grammar") if manifest.exists() else None
    except DataFormatError as e:
        raise BinarizeError(str(e)) from None


def binarize_build(build_dir: str | os.PathLike, out: str | os.PathLike,
                   grammar: Optional[Grammar] = None, workers: int = 1,
                   spm_model: Optional[bytes] = None, spm_side: str = "both") -> List[Path]:
    """Binarize every level of a build into ``out/<level>`` (or ``out`` for a single level),
    with the subword model ``spm_model`` on ``spm_side`` if given (see
    :func:`binarize_level`)."""
    build_dir, out = Path(build_dir), Path(out)
    dirs = level_dirs(build_dir)
    if grammar is None:
        name = grammar_of_build(dirs[0]) or "paper"
        grammar = Grammar.paper() if name == "paper" else Grammar.scan()
    if dirs == [build_dir]:
        return [binarize_level(build_dir, out, grammar, workers, spm_model, spm_side)]
    return [binarize_level(d, out / d.name, grammar, workers, spm_model, spm_side)
            for d in dirs]


def sha256_of(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hold_out(examples: Sequence[Example], fraction: float, seed: int
             ) -> Tuple[List[Example], List[Example]]:
    """Split ``examples`` into (train, valid): ``round(fraction * n)`` examples drawn uniformly
    without replacement for validation, seeded by ``seed``; both keep the file order.

    Raises:
        BinarizeError: ``fraction`` outside (0, 1), or a split that would be empty.
    """
    if not 0.0 < fraction < 1.0:
        raise BinarizeError(f"validation fraction {fraction} is outside (0, 1). Fix: pass "
                            "--valid-fraction between 0 and 1, e.g. 0.05")
    n = len(examples)
    n_valid = int(round(fraction * n))
    if n_valid < 1 or n_valid >= n:
        raise BinarizeError(f"holding out {fraction} of {n} training commands leaves "
                            f"{n - n_valid} for training and {n_valid} for validation. Fix: "
                            "choose a --valid-fraction that leaves both non-empty, or pass "
                            "--valid FILE")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(b"scan-valid")]))
    chosen = set(rng.choice(n, size=n_valid, replace=False).tolist())
    train = [e for i, e in enumerate(examples) if i not in chosen]
    valid = [e for i, e in enumerate(examples) if i in chosen]
    return train, valid


def scan_manifest(name: str, grammar: Grammar, splits: Dict[str, List[Example]],
                  sources: Dict[str, dict], seed: int, valid_fraction: Optional[float]) -> dict:
    """The manifest of a data set binarized from SCAN-format files.

    Records the grammar, each source file (path, SHA-256, lines), how the validation split was
    made, split sizes, slot verb counts and entropies (bits) of every split, and the
    *restricted pairs*: the (verb, slot) pairs the test split has and the training split lacks
    (as ``fairseq-entropy measure --train`` lists them).  When there is exactly one restricted
    pair (v*, s), ``controlled_slot`` is the other slot, where v* was seen in training, and
    ``entropy_bits`` the training entropy of that slot: the entropy the paper relates to
    generalizing v* into s, as a built level's ``controlled_slot`` is.  Otherwise both are
    ``None``.
    """
    stats = {s: SlotStatistics.of([grammar.parse(e.command) for e in ex], grammar.verbs)
             for s, ex in splits.items()}
    restricted = (unseen_pairs(stats["train"], stats["test"])
                  if "train" in stats and "test" in stats else [])
    slot = (next(s for s in SLOTS if s != restricted[0][1])
            if len(restricted) == 1 else None)
    h = stats["train"].entropy[slot] if slot and "train" in stats else None
    return {
        "package": "fairseq-entropy", "package_version": __version__,
        "experiment": "scan", "level": name, "grammar": grammar.name,
        "builder": "scan-files", "seed": int(seed),
        "sources": sources,
        "valid": ({"held_out_from": "train", "fraction": valid_fraction, "seed": int(seed)}
                  if valid_fraction is not None
                  else {"file": sources.get("valid", {}).get("path")}),
        "sizes": {s: len(ex) for s, ex in splits.items()},
        "restricted_pairs": [list(p) for p in restricted],
        "controlled_slot": slot,
        "entropy_bits": None if h is None else round(h, 6),
        "slots": {s: st.as_dict() for s, st in stats.items()},
    }


DEFAULT_SCAN_VALID_FRACTION = 0.05


def binarize_scan_files(out: str | os.PathLike, grammar: Grammar, train: Optional[str] = None,
                        valid: Optional[str] = None, test: Optional[str] = None,
                        workers: int = 1, valid_fraction: Optional[float] = None,
                        seed: int = 1) -> Path:
    """Binarize SCAN-format files (``IN: ... OUT: ...``) into ``out`` with a manifest.

    Every line is validated against ``grammar`` first (errors name file:line).  Without a
    ``valid`` file, ``valid_fraction`` (default :data:`DEFAULT_SCAN_VALID_FRACTION`) of the
    training file is held out for validation, drawn with ``seed`` (:func:`hold_out`).  The
    level is named after ``out``; its ``manifest.json`` is :func:`scan_manifest`.

    Raises:
        BinarizeError: no file given, ``valid`` together with ``valid_fraction``, a file that
            cannot be read or fails the grammar, an empty split, or a bad fraction.
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
            try:
                splits[split] = read_scan_file(path, grammar)
            except DataFormatError as e:
                raise BinarizeError(str(e)) from None
            if not splits[split]:
                raise BinarizeError(f"{path} holds no commands; fairseq cannot use an empty "
                                    f"{split} split. Fix: pass a non-empty file")
            sources[split] = {"path": str(Path(path).resolve()), "sha256": sha256_of(path),
                              "lines": len(splits[split])}
    held = None
    if train and not valid:
        held = DEFAULT_SCAN_VALID_FRACTION if valid_fraction is None else float(valid_fraction)
        splits["train"], splits["valid"] = hold_out(splits["train"], held, seed)
    manifest = scan_manifest(Path(out).name, grammar, splits, sources, seed, held)
    with tempfile.TemporaryDirectory() as tmp:
        for split, examples in splits.items():
            write_pair(Path(tmp) / split, examples)
        (Path(tmp) / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return binarize_level(tmp, out, grammar, workers)
