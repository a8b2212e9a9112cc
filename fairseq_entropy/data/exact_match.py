"""``exact_match``: whether a decoded sequence equals its reference (the ``seq_acc`` of the
``systematicity`` task's ``--eval-seq-acc``)."""

import torch


def exact_match(hyp_tokens: torch.Tensor, ref_tokens: torch.Tensor, pad: int, eos: int) -> bool:
    """Whether two token sequences are equal once padding and end-of-sentence are stripped.

    Args:
        hyp_tokens: 1-D token ids [T1] (a hypothesis of fairseq's ``SequenceGenerator``).
        ref_tokens: 1-D token ids [T2] (a row of the batch's ``target``).
        pad: the padding index.
        eos: the end-of-sentence index.
    """
    def strip(t):
        t = t[(t != pad) & (t != eos)]
        return t.tolist()
    return strip(hyp_tokens) == strip(ref_tokens)
