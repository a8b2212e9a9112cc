"""The fixed dictionary of a grammar: one ``dict.txt`` shared by every level.

The dictionary lists every command word and every action of the grammar
(:func:`dictionary_words`), so token ids agree across levels, test sets and experiments.  It
is passed to ``fairseq-preprocess`` as both ``--srcdict`` and ``--tgtdict``
(``--joined-dictionary`` cannot be combined with them).  fairseq-preprocess silently maps
unknown words to ``<unk>``; :func:`check_vocabulary` refuses such data before it runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Sequence

from ..files import iter_text_lines
from .databin import SOURCE_LANG, TARGET_LANG, BinarizeError
from .grammar import Grammar


def dictionary_words(grammar: Grammar) -> List[str]:
    """Command words then actions of ``grammar``, in a fixed order."""
    return grammar.command_words + grammar.action_words


def write_dictionary(path: str | os.PathLike, grammar: Optional[Grammar] = None,
                     words: Optional[Sequence[str]] = None) -> Path:
    """Write a fairseq ``dict.txt`` (``<word> <count>`` lines) of ``words``, by default the
    grammar's :func:`dictionary_words`.

    Counts are 1: the dictionary is fixed, not learned from the data.  fairseq's
    ``Dictionary.load`` puts its four special symbols (``<s>``, ``<pad>``, ``</s>``, ``<unk>``)
    first, so ``words[i]`` gets id ``i + 4``.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    if words is None:
        words = dictionary_words(grammar)
    path.write_text("".join(f"{w} 1\n" for w in words), encoding="utf-8")
    return path


def check_vocabulary(prefix: str | os.PathLike, grammar: Grammar) -> None:
    """Refuse ``<prefix>.in``/``.out`` if any token is outside the grammar's dictionary.

    Raises:
        BinarizeError: a token outside the dictionary, naming the file, line and token, and
            the fix.
        DataFormatError: a missing file, a directory, or a line that is not UTF-8.
    """
    vocab = set(dictionary_words(grammar))
    for lang in (SOURCE_LANG, TARGET_LANG):
        p = f"{prefix}.{lang}"
        for lineno, line in iter_text_lines(p):
            for tok in line.split():
                if tok not in vocab:
                    raise BinarizeError(
                        f"{p}:{lineno}: token {tok!r} is not in the {grammar.name} "
                        f"grammar's dictionary and would become <unk>. Fix: use "
                        f"--grammar {'scan' if grammar.name == 'paper' else 'paper'} if the "
                        "data uses that vocabulary, or correct the data")
