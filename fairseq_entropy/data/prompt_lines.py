"""``PromptLineDataset``: the lines ``command <sep> actions </s>`` of the lm format as
decoder-only training samples whose prompt is masked out of the loss, and
``PromptDictionary``, which prints a line's prompt (the command) as its source."""

from typing import List, Sequence

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils

from .dictionary import SymbolDictionary


def prompt_end(line: torch.Tensor, sep: int) -> int:
    """Index of the first ``sep`` in the 1-D ``line`` (the prompt is ``line[:end + 1]``).

    Raises:
        ValueError: the line holds no ``sep``.
    """
    hits = (line == sep).nonzero()
    if hits.numel() == 0:
        raise ValueError("a line without <sep>: lm-format data is 'command <sep> actions'. "
                         "Fix: binarize the data with fairseq-entropy binarize --format lm")
    return int(hits[0, 0])


class PromptDictionary(SymbolDictionary):
    """The lm format's dictionary whose :meth:`string` keeps the ids before the first
    ``<sep>``: the source of a line ``</s> command <sep> actions`` is its command.  A task's
    ``source_dictionary``; fairseq-generate and fairseq-interactive print ``S-`` lines with it.
    """

    sep_word = "<sep>"

    def string(self, tensor, *args, **kwargs):
        """The words of ``tensor`` (1-D ids) before its first ``<sep>`` (all of them without
        one), as :meth:`SymbolDictionary.string`; a 2-D tensor gives one line per row."""
        if torch.is_tensor(tensor) and tensor.dim() == 1:
            sep = self.index(self.sep_word)
            hits = (tensor == sep).nonzero()
            if hits.numel():
                tensor = tensor[: int(hits[0, 0])]
        return super().string(tensor, *args, **kwargs)


class PromptLineDataset(FairseqDataset):
    """Lines ``c_1 .. c_n <sep> a_1 .. a_m </s>`` as next-token samples with a masked prompt.

    A batch (:meth:`collater`, right-padded) holds ``net_input.src_tokens`` = ``</s> c_1 ..
    c_n <sep> a_1 .. a_m`` [B, T] (the line shifted right, as fairseq's language modeling),
    ``target`` [B, T] = the line with its first n + 1 tokens (the command's words and
    ``<sep>``) replaced by padding, so that only ``a_1 .. a_m </s>`` are predicted, and
    ``ntokens`` = the number of those real targets (the criterion's normaliser).

    Args:
        lines: indexable 1-D LongTensors (a fairseq indexed dataset).
        sizes: tokens per line [N], ``</s>`` included.
        dictionary: the lm dictionary (pad, eos and ``<sep>`` are read).
        shuffle: :meth:`ordered_indices` starts from a random permutation (training).

    Attributes:
        src_sizes: prompt lengths [N] (command and ``<sep>``); batches are sorted by them
            first, so a batch mostly holds prompts of one length.
        tgt_sizes: predicted tokens per line [N] (actions and ``</s>``).

    Raises:
        ValueError: a line without ``<sep>`` (:func:`prompt_end`).
    """

    def __init__(self, lines, sizes: Sequence[int], dictionary, shuffle: bool = True):
        self.lines = lines
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.dictionary = dictionary
        self.pad, self.eos = dictionary.pad(), dictionary.eos()
        self.sep = dictionary.index(PromptDictionary.sep_word)
        self.shuffle = shuffle
        ends = np.array([prompt_end(lines[i], self.sep) for i in range(len(lines))],
                        dtype=np.int64)
        self.src_sizes = ends + 1
        self.tgt_sizes = self.sizes - self.src_sizes

    @classmethod
    def from_commands(cls, commands: List[torch.Tensor], dictionary) -> "PromptLineDataset":
        """Prompts without actions, for ``fairseq-interactive``: each ``command </s>`` (as
        ``encode_line`` gives it) becomes the line ``command <sep> </s>``."""
        sep = dictionary.index(PromptDictionary.sep_word)
        lines = [torch.cat([c[c.ne(dictionary.eos())], c.new_tensor([sep, dictionary.eos()])])
                 for c in commands]
        return cls(lines, [len(x) for x in lines], dictionary, shuffle=False)

    def __getitem__(self, index):
        return {"id": index, "line": self.lines[index].long()}

    def __len__(self):
        return len(self.sizes)

    def collater(self, samples):
        """Right-padded ``src_tokens``, masked ``target`` (see the class docstring)."""
        if not samples:
            return {}
        lines = [s["line"] for s in samples]
        inputs = [torch.cat([x.new_tensor([self.eos]), x[:-1]]) for x in lines]
        targets = []
        for x in lines:
            t = x.clone()
            t[: prompt_end(x, self.sep) + 1] = self.pad
            targets.append(t)
        src = data_utils.collate_tokens(inputs, self.pad, left_pad=False)
        tgt = data_utils.collate_tokens(targets, self.pad, left_pad=False)
        return {"id": torch.LongTensor([s["id"] for s in samples]),
                "nsentences": len(samples), "ntokens": int(tgt.ne(self.pad).sum()),
                "net_input": {"src_tokens": src,
                              "src_lengths": torch.LongTensor([len(x) for x in inputs])},
                "target": tgt}

    def num_tokens(self, index):
        return int(self.sizes[index])

    def size(self, index):
        return int(self.sizes[index])

    def ordered_indices(self):
        """Indices sorted by prompt length, then line length (stably, from a random
        permutation when ``shuffle``)."""
        order = np.random.permutation(len(self)) if self.shuffle else np.arange(len(self))
        order = order[np.argsort(self.sizes[order], kind="mergesort")]
        return order[np.argsort(self.src_sizes[order], kind="mergesort")]

    @property
    def supports_prefetch(self):
        return False
