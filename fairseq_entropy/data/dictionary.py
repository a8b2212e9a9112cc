"""Dictionaries of the ``systematicity`` task and the check that a checkpoint's dictionaries are
the data's.

* :class:`SymbolDictionary`: ``fairseq.data.Dictionary`` with a ``string`` that converts a
  tensor of ids in one call;
* :func:`dictionary_hash` and :func:`dictionary_grammar`: what the task records in its config
  and in every checkpoint's task state;
* :func:`check_dictionaries`: raises :class:`DictionaryMismatchError` when a checkpoint's record
  does not match the data to decode.
"""

import hashlib

import torch
from fairseq import utils
from fairseq.data import Dictionary, data_utils

from ..errors import UserError
from ..scan.dictionary import dictionary_words
from ..scan.grammar import Grammar


class SymbolDictionary(Dictionary):
    """``fairseq.data.Dictionary`` whose :meth:`string` reads a tensor of ids with one
    ``tolist()`` instead of one 0-d tensor per token.

    fairseq's ``string`` iterates over the tensor element by element and compares each
    0-d tensor with the special indices; ``fairseq-generate`` calls it for the source, the
    reference and every hypothesis, which made it the largest cost of writing a test set's
    output.  Same arguments, same result (tested against fairseq's implementation).
    """

    def string(self, tensor, bpe_symbol=None, escape_unk=False, extra_symbols_to_ignore=None,
               unk_string=None, include_eos=False, separator=" "):
        """Token ids -> text, as ``fairseq.data.Dictionary.string``.

        Args:
            tensor: 1-D ids (a tensor or any iterable of ints), or a 2-D tensor, one line per
                row (rows get fairseq's defaults for ``unk_string`` and ``separator``, as in
                fairseq).
            bpe_symbol: post-processing for ``data_utils.post_process`` ("sentencepiece", ...).
            escape_unk: write ``<unk>`` as ``<<unk>>``.
            extra_symbols_to_ignore: ids left out; end-of-sentence is left out unless
                ``include_eos``, beginning-of-sentence always.
            unk_string: text for ``<unk>`` (overrides ``escape_unk``).
        """
        if torch.is_tensor(tensor) and tensor.dim() == 2:
            return "\n".join(self.string(t, bpe_symbol, escape_unk, extra_symbols_to_ignore,
                                          include_eos=include_eos) for t in tensor)
        ignore = {utils.item(i) for i in (extra_symbols_to_ignore or [])}
        if not include_eos:
            ignore.add(self.eos())
        if hasattr(self, "bos_index"):
            ignore.add(self.bos())
        ids = tensor.tolist() if torch.is_tensor(tensor) else [utils.item(i) for i in tensor]
        unk = self.unk()
        unk_text = unk_string if unk_string is not None else self.unk_string(escape_unk)
        symbols, n = self.symbols, len(self.symbols)
        sent = separator.join(unk_text if i == unk else (symbols[i] if i < n else self.unk_word)
                              for i in ids if i not in ignore)
        return data_utils.post_process(sent, bpe_symbol)


def dictionary_hash(*dictionaries) -> str:
    """First 16 hex digits of the sha256 of the dictionaries' symbols (ids in order)."""
    h = hashlib.sha256()
    for d in dictionaries:
        h.update("\n".join(d.symbols).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def dictionary_grammar(dictionary) -> str:
    """``paper`` or ``scan`` if ``dictionary`` is that grammar's fixed dictionary (the words of
    :func:`fairseq_entropy.scan.dictionary.dictionary_words` after fairseq's special symbols,
    followed by ``<sep>`` in the lm format), else ``custom``."""
    words = dictionary.symbols[dictionary.nspecial:]
    if words[-1:] == ["<sep>"]:
        words = words[:-1]
    for name in ("paper", "scan"):
        if words == dictionary_words(Grammar.by_name(name)):
            return name
    return "custom"


class DictionaryMismatchError(UserError, RuntimeError):
    """A checkpoint was trained on data with another dictionary than the data to decode."""


def check_dictionaries(theirs: dict, mine: dict, data_dir: str) -> None:
    """Compare a checkpoint's dictionary record with the data's.

    Args:
        theirs: the checkpoint's record, ``{"grammar", "hash", "source_size",
            "target_size"}`` and, for the lm format, ``"format": "lm"`` (keys may be
            missing in a hand-made record; no ``format`` is the pair format).
        mine: the same record of the data's dictionaries.
        data_dir: the data directory, named in the message.

    Raises:
        DictionaryMismatchError: the hashes differ; the message gives both grammars, hashes
            and sizes and the fix (re-binarize with the checkpoint's grammar).
    """
    if theirs.get("hash") == mine["hash"]:
        return
    formats = (theirs.get("format", "pairs"), mine.get("format", "pairs"))
    if formats[0] != formats[1]:
        task = {"lm": "systematicity_lm", "pairs": "systematicity"}
        raise DictionaryMismatchError(
            f"the checkpoint was trained on {formats[0]}-format data (task "
            f"{task.get(formats[0], '?')}), but {data_dir} is {formats[1]}-format data; the "
            f"token ids do not match. Fix: decode data binarized with --format {formats[0]} "
            f"(fairseq-entropy binarize ... --format {formats[0]}) with --task "
            f"{task.get(formats[0], '?')}")
    fix = (f"re-binarize the data with --grammar {theirs.get('grammar')} "
           f"(fairseq-entropy binarize ... --grammar {theirs.get('grammar')})"
           if theirs.get("grammar") in ("paper", "scan") else
           "binarize the data with the dictionary the model was trained on")
    raise DictionaryMismatchError(
        f"the checkpoint was trained on data with the {theirs.get('grammar')} "
        f"grammar's dictionary ({theirs.get('source_size')} source / "
        f"{theirs.get('target_size')} target symbols, hash {theirs.get('hash')}), "
        f"but {data_dir} uses the {mine['grammar']} grammar's dictionary "
        f"({mine['source_size']} / {mine['target_size']} symbols, hash "
        f"{mine['hash']}); the token ids do not match. Fix: {fix}, or decode "
        f"data binarized with --grammar {theirs.get('grammar')}")
