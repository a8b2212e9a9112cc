"""Subword tokens: a sentencepiece unigram model (Kudo 2018) trained on one level's training
split, the sentences cut into its pieces, and the pieces joined back into words.

Binarized with a model, a level's ``dict.txt`` lists the model's pieces
(:func:`sentencepiece_words`) instead of the grammar's words, and ``spm.model``
(:data:`SPM_MODEL`) is written beside the data.  :data:`SPM_SIDES` names the sides that are cut
into pieces.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

from ..files import read_lines
from .databin import SOURCE_LANG, TARGET_LANG, BinarizeError

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
        DataFormatError: a training file that is not UTF-8 (names the file and line).
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
                            "choose another --spm-vocab") from e
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
        DataFormatError: ``src`` is missing, a directory, or not UTF-8.
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
