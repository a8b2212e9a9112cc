"""Cross-entropy with a teacher-forcing ratio: the training regime of the paper's RNN.

Wold, Charpentier and Simon (ACL Findings 2025) trained their RNN without teacher forcing: the
decoder consumed its own previous greedy prediction and the loss stopped at the first predicted
end-of-sentence, and each sentence's loss was divided by its target length
(``--mean-over-target-length``; their target also counts a leading begin-of-sentence token,
which fairseq's does not).  This criterion generalises that to a ratio ``p``
(``--teacher-forcing-ratio``):

- ``p = 1``: standard fairseq training (one full forward pass; the loss is exactly fairseq's
  ``cross_entropy``);
- ``p = 0``: at every step the decoder consumes its own previous greedy prediction;
- ``0 < p < 1``: scheduled sampling (Bengio et al. 2015) per step and sentence: the gold token
  with probability ``p``, the model's previous greedy prediction otherwise.

With ``p < 1`` (or ``--stop-at-predicted-eos``) the decoder runs step by step.  Incremental
decoders use ``incremental_state`` (one step per token); a decoder whose incremental path is not
differentiable (fairseq's ``fconv``: ``LinearizedConvolution`` decodes under ``no_grad``) or not
incremental at all is re-run on the whole prefix at each step instead (``--step-mode auto``).

Logged: ``loss`` (bits per token like ``cross_entropy``), ``tok_acc`` (greedy token accuracy of
the steps in the loss) and ``seq_acc`` (sentences whose every target token is predicted).  In
validation (model in eval mode) the ratio is ``--valid-teacher-forcing-ratio`` (default 1), so
``seq_acc`` there is the teacher-forced sequence accuracy and valid losses compare across ratios.
"""

import math
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.logging import metrics
from fairseq.models import FairseqIncrementalDecoder
from omegaconf import II
from torch import Tensor

STEP_MODES = ChoiceEnum(["auto", "incremental", "full"])


@dataclass
class TeacherForcingCrossEntropyConfig(FairseqDataclass):
    """Options of ``--criterion teacher_forcing_cross_entropy`` (the module docstring gives the
    regimes).  Defaults (ratio 1, no stop at a predicted end, summed loss) give exactly
    fairseq's ``cross_entropy``; the paper's RNN sets ratio 0, ``--stop-at-predicted-eos`` and
    ``--mean-over-target-length``."""

    teacher_forcing_ratio: float = field(
        default=1.0,
        metadata={"help": "probability of feeding the gold previous token at each step and "
                          "sentence (1 = standard training, 0 = the decoder always consumes its "
                          "own previous greedy prediction)"},
    )
    valid_teacher_forcing_ratio: float = field(
        default=1.0,
        metadata={"help": "teacher-forcing ratio when the model is in eval mode (validation)"},
    )
    stop_at_predicted_eos: bool = field(
        default=False,
        metadata={"help": "per sentence, the loss stops at (and includes) the first step whose "
                          "greedy prediction is end-of-sentence, as the paper's RNN training"},
    )
    mean_over_target_length: bool = field(
        default=False,
        metadata={"help": "divide each sentence's loss (summed over its steps in the loss) by "
                          "its gold target length in tokens, </s> included, before summing "
                          "over the batch: the paper authors' RNN loss (with --sentence-avg "
                          "the batch's loss is then the mean over its sentences)"},
    )
    step_mode: STEP_MODES = field(
        default="auto",
        metadata={"help": "step-by-step decoding: 'incremental' uses incremental_state, 'full' "
                          "re-runs the decoder on the prefix (quadratic), 'auto' picks "
                          "incremental unless the decoder's incremental path is not "
                          "differentiable (LinearizedConvolution) or absent"},
    )
    sentence_avg: bool = II("optimization.sentence_avg")


def _has_differentiable_incremental_path(decoder) -> bool:
    from fairseq.modules import LinearizedConvolution

    if not isinstance(decoder, FairseqIncrementalDecoder):
        return False
    return not any(isinstance(m, LinearizedConvolution) for m in decoder.modules())


@register_criterion("teacher_forcing_cross_entropy", dataclass=TeacherForcingCrossEntropyConfig)
class TeacherForcingCrossEntropyCriterion(FairseqCriterion):
    """Cross-entropy whose decoder inputs mix gold tokens and the model's own predictions.

    Works with any fairseq encoder-decoder model (``model.encoder``, ``model.decoder`` taking
    ``prev_output_tokens, encoder_out=..., incremental_state=...``) on samples of fairseq's
    ``translation`` format (``net_input.prev_output_tokens`` begins with end-of-sentence and is
    the target shifted right).

    Raises:
        ValueError: a ratio outside [0, 1].
    """

    def __init__(self, task, teacher_forcing_ratio=1.0, valid_teacher_forcing_ratio=1.0,
                 stop_at_predicted_eos=False, step_mode="auto", sentence_avg=False,
                 mean_over_target_length=False):
        super().__init__(task)
        for name, ratio in (("teacher_forcing_ratio", teacher_forcing_ratio),
                            ("valid_teacher_forcing_ratio", valid_teacher_forcing_ratio)):
            if not 0.0 <= ratio <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1], got {ratio}")
        self.teacher_forcing_ratio = teacher_forcing_ratio
        self.valid_teacher_forcing_ratio = valid_teacher_forcing_ratio
        self.stop_at_predicted_eos = stop_at_predicted_eos
        self.step_mode = str(step_mode)
        self.sentence_avg = sentence_avg
        self.mean_over_target_length = mean_over_target_length
        self.eos_idx = task.target_dictionary.eos()

    def forward(self, model, sample, reduce=True):
        """Compute the loss of ``sample``.

        Returns:
            ``(loss, sample_size, logging_output)`` as fairseq criteria.  ``loss`` (nats) is
            the negative log-likelihood summed over the steps in the loss, each sentence's
            part divided by its gold target length with ``--mean-over-target-length``
            (per token with ``reduce=False``); ``sample_size`` is the
            number of sentences with ``--sentence-avg``, else the number of target tokens in
            the loss (all non-pad tokens unless ``--stop-at-predicted-eos`` cut some).
        """
        ratio = self.teacher_forcing_ratio if model.training else self.valid_teacher_forcing_ratio
        target = model.get_targets(sample, None)
        if ratio >= 1.0 and not self.stop_at_predicted_eos:
            net_output = model(**sample["net_input"])
            lprobs = model.get_normalized_probs(net_output, log_probs=True)
            mask = target.ne(self.padding_idx)
        else:
            lprobs, mask = self._step_by_step(model, sample, target, ratio)

        flat = lprobs.reshape(-1, lprobs.size(-1))
        loss_target = target.masked_fill(~mask, self.padding_idx).view(-1)
        if self.mean_over_target_length:
            nll = F.nll_loss(flat, loss_target, ignore_index=self.padding_idx,
                             reduction="none").view_as(target)
            lengths = target.ne(self.padding_idx).sum(dim=1, keepdim=True).clamp(min=1)
            nll = (nll / lengths).view(-1)
            loss = nll.sum() if reduce else nll
        else:
            loss = F.nll_loss(flat, loss_target, ignore_index=self.padding_idx,
                              reduction="sum" if reduce else "none")

        with torch.no_grad():
            predictions = lprobs.argmax(dim=-1)
            correct = predictions.eq(target) & mask
            gold_mask = target.ne(self.padding_idx)
            # a sentence is right when every gold token is in the loss and predicted
            seq_correct = (correct | ~gold_mask).all(dim=1) & (mask == gold_mask).all(dim=1)
        ntokens_in_loss = int(mask.sum())
        sample_size = target.size(0) if self.sentence_avg else ntokens_in_loss
        logging_output = {
            "loss": loss.data,
            "ntokens": ntokens_in_loss,
            "nsentences": target.size(0),
            "sample_size": sample_size,
            "n_correct": int(correct.sum()),
            "n_seq_correct": int(seq_correct.sum()),
        }
        return loss, sample_size, logging_output

    def _step_by_step(self, model, sample, target: Tensor,
                      ratio: float) -> Tuple[Tensor, Tensor]:
        """Decode one step at a time, choosing each input by the teacher-forcing coin.

        Returns:
            log-probabilities ``(batch, tgt_len, vocab)`` and the mask ``(batch, tgt_len)`` of
            steps in the loss.
        """
        net_input = sample["net_input"]
        gold_inputs = net_input["prev_output_tokens"]
        bsz, tgt_len = gold_inputs.shape
        encoder_input = {k: v for k, v in net_input.items() if k != "prev_output_tokens"}
        encoder_out = model.encoder(**encoder_input)

        mode = self.step_mode
        if mode == "auto":
            mode = "incremental" if _has_differentiable_incremental_path(model.decoder) else "full"
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = (
            torch.jit.annotate(Dict[str, Dict[str, Optional[Tensor]]], {})
            if mode == "incremental" else None
        )

        prefix = gold_inputs[:, :1]
        step_lprobs = []
        for t in range(tgt_len):
            if mode == "incremental":
                decoder_out = model.decoder(prefix, encoder_out=encoder_out,
                                            incremental_state=incremental_state)
            else:
                decoder_out = model.decoder(prefix, encoder_out=encoder_out)
            last = (decoder_out[0][:, -1:, :],) + tuple(decoder_out[1:])
            lprobs_t = model.get_normalized_probs(last, log_probs=True)[:, 0, :]
            step_lprobs.append(lprobs_t)
            if t + 1 == tgt_len:
                break
            with torch.no_grad():
                choice = lprobs_t.detach().clone()
                choice[:, self.padding_idx] = float("-inf")
                predicted = choice.argmax(dim=-1)
                if ratio >= 1.0:
                    next_input = gold_inputs[:, t + 1]
                elif ratio <= 0.0:
                    next_input = predicted
                else:
                    use_gold = torch.rand(bsz, device=predicted.device) < ratio
                    next_input = torch.where(use_gold, gold_inputs[:, t + 1], predicted)
            prefix = torch.cat([prefix, next_input.unsqueeze(1)], dim=1)
        lprobs = torch.stack(step_lprobs, dim=1)

        mask = target.ne(self.padding_idx)
        if self.stop_at_predicted_eos:
            with torch.no_grad():
                choice = lprobs.detach().clone()
                choice[:, :, self.padding_idx] = float("-inf")
                is_eos = choice.argmax(dim=-1).eq(self.eos_idx)
                # steps strictly after the first predicted end-of-sentence are dropped
                eos_before = (is_eos.long().cumsum(dim=1) - is_eos.long()) > 0
            mask = mask & ~eos_before
        return lprobs, mask

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        """Aggregate logging outputs: loss in bits, token and sequence accuracy."""
        loss_sum = sum(log.get("loss", 0) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        nsentences = sum(log.get("nsentences", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        n_correct = sum(log.get("n_correct", 0) for log in logging_outputs)
        n_seq_correct = sum(log.get("n_seq_correct", 0) for log in logging_outputs)

        metrics.log_scalar("loss", loss_sum / max(sample_size, 1) / math.log(2),
                           sample_size, round=3)
        if sample_size != ntokens:
            metrics.log_scalar("nll_loss", loss_sum / max(ntokens, 1) / math.log(2),
                               ntokens, round=3)
            metrics.log_derived("ppl", lambda m: utils.get_perplexity(m["nll_loss"].avg))
        else:
            metrics.log_derived("ppl", lambda m: utils.get_perplexity(m["loss"].avg))
        if ntokens > 0:
            metrics.log_scalar("tok_acc", n_correct / ntokens, ntokens, round=4)
        if nsentences > 0:
            metrics.log_scalar("seq_acc", n_seq_correct / nsentences, nsentences, round=4)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
