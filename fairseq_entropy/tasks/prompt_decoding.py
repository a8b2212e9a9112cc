"""Greedy decoding of a decoder-only model from each line's prompt (the ``systematicity_lm``
task's generator, used by ``fairseq-generate``, ``fairseq-interactive`` and
``--eval-seq-acc``).

fairseq's own language-model generation continues the whole input line, which for a test line
``command <sep> actions`` holds the reference.  :class:`PromptGreedyGenerator` cuts every row
of ``src_tokens`` at its first ``<sep>`` and never reads what follows.  Rows whose prompts have
different lengths are decoded in groups of one prompt length, each group without any padding,
so every model decodes a mixed batch exactly as it decodes each row alone (fairseq's stock
``transformer_lm`` gives a left-padded row's tokens wrong positions when decoding step by step).
"""

import math
from typing import Dict, List

import torch
from torch import Tensor


class PromptGreedyGenerator:
    """Greedy continuation of the prompts ``</s> command <sep>`` of a batch.

    Args:
        models: the fairseq decoder-only models (an ensemble averages their probabilities).
        dictionary: the lm dictionary (pad, eos and ``<sep>``).
        max_len_a, max_len_b: at most ``max_len_a * prompt length + max_len_b`` tokens are
            generated per row before its ``</s>`` (fairseq's options, with their meaning in
            ``SequenceGenerator``).

    ``generate(models, sample)`` returns, per row of ``sample["net_input"]["src_tokens"]``
    [B, T], ``[{"tokens": [L] (ending in </s>), "score": mean log-probability,
    "positional_scores": [L], "alignment": None, "attention": None}]``, fairseq's hypothesis
    format.
    """

    def __init__(self, models, dictionary, max_len_a: float = 0.0, max_len_b: int = 60):
        self.models = list(models)
        self.pad, self.eos = dictionary.pad(), dictionary.eos()
        self.sep = dictionary.index("<sep>")
        self.max_len_a, self.max_len_b = max_len_a, max_len_b

    def cuda(self):
        """Nothing to move (fairseq calls this on a GPU)."""
        return self

    def prompts(self, src_tokens: Tensor) -> List[Tensor]:
        """Each row's tokens up to and including its first ``<sep>``, padding removed (a row
        without ``<sep>`` is the prompt as a whole, with ``<sep>`` appended)."""
        out = []
        for row in src_tokens:
            row = row[row.ne(self.pad)]
            hits = (row == self.sep).nonzero()
            out.append(row[: int(hits[0, 0]) + 1] if hits.numel() else
                       torch.cat([row, row.new_tensor([self.sep])]))
        return out

    @torch.no_grad()
    def generate(self, models, sample, **kwargs) -> List[List[Dict]]:
        """Decode every row of ``sample`` greedily from its prompt (see the class)."""
        models = self.models or list(models)
        for m in models:
            m.eval()
        prompts = self.prompts(sample["net_input"]["src_tokens"])
        hypos: List = [None] * len(prompts)
        by_length: Dict[int, List[int]] = {}
        for i, p in enumerate(prompts):
            by_length.setdefault(len(p), []).append(i)
        for length, rows in sorted(by_length.items()):
            tokens = torch.stack([prompts[i] for i in rows])
            max_len = max(1, int(self.max_len_a * length + self.max_len_b))
            for i, hypo in zip(rows, self._greedy(models, tokens, max_len)):
                hypos[i] = [hypo]
        return hypos

    def _greedy(self, models, prompt: Tensor, max_len: int) -> List[Dict]:
        """Greedy decoding of ``prompt`` [B, P] (no padding): at most ``max_len`` tokens, then
        ``</s>``."""
        states = [{} for _ in models]
        tokens = prompt
        bsz, plen = prompt.shape
        scores = prompt.new_zeros(bsz, 0, dtype=torch.float)
        for t in range(1, plen):  # the prompt, one position at a time, fills the caches
            self._step(models, states, prompt[:, :t])
        done = torch.zeros(bsz, dtype=torch.bool, device=prompt.device)
        for step in range(max_len + 1):
            lprobs = self._step(models, states, tokens)
            best, nxt = lprobs.max(dim=-1)
            if step == max_len:  # fairseq ends a hypothesis at max_len with </s>
                nxt = torch.where(done, nxt, torch.full_like(nxt, self.eos))
                best = lprobs.gather(1, nxt[:, None])[:, 0]
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
            scores = torch.cat([scores, best[:, None]], dim=1)
            done |= nxt.eq(self.eos)
            if bool(done.all()):
                break
        out = []
        for b in range(bsz):
            gen = tokens[b, plen:]
            end = int((gen == self.eos).nonzero()[0, 0]) + 1
            pos = scores[b, :end]
            out.append({"tokens": gen[:end], "score": pos.mean(),
                        "positional_scores": pos, "alignment": None, "attention": None})
        return out

    def _step(self, models, states, tokens: Tensor) -> Tensor:
        """Log-probabilities [B, V] of the token after ``tokens`` [B, t], each model reading
        only the last token with its incremental state; padding gets -inf."""
        outs = []
        for model, state in zip(models, states):
            decoder_out = model.decoder(tokens, incremental_state=state)
            logits = decoder_out[0][:, -1:, :]
            outs.append(model.get_normalized_probs((logits, decoder_out[1]),
                                                   log_probs=True)[:, -1, :].float())
        lprobs = outs[0] if len(outs) == 1 else \
            torch.logsumexp(torch.stack(outs), dim=0) - math.log(len(outs))
        lprobs[:, self.pad] = -math.inf  # never padding (as fairseq's SequenceGenerator)
        return lprobs
