"""The criterion of packed runs: each run's own loss, normalised by its own sample size.

:class:`PackedCriterion` wraps the runs' ordinary criterion (the one ``--criterion`` names;
the ``packed_systematicity`` task builds it).  One packed training step computes every run's
loss with its ordinary criterion's value (:meth:`PackedModel.run_losses`), divides it by the
run's own sample size and sums over the runs: the runs' parameters never meet, so the
gradient of the sum with respect to run k's parameters is run k's own gradient, as fairseq's
trainer computes it for run k alone (loss summed over the batch, divided by its sample size).
The step's sample size is then 1, so the trainer divides by nothing more.

Logged per run k: ``loss_k`` (bits per token, as ``cross_entropy``); ``loss`` is the runs'
pooled loss.
"""

import math
from typing import List

import torch
from fairseq.criterions import FairseqCriterion
from fairseq.logging import metrics


def run_keys(logging_outputs: List[dict]) -> List[int]:
    """The run indices k with a ``_loss_k`` entry in ``logging_outputs``, sorted."""
    ks = set()
    for log in logging_outputs:
        for key in log:
            if key.startswith("_loss_"):
                ks.add(int(key[len("_loss_"):]))
    return sorted(ks)


class PackedCriterion(FairseqCriterion):
    """Sum over the runs of each run's loss divided by its own sample size.

    Args:
        task: the packed task.
        inner: the runs' ordinary criterion (e.g. ``label_smoothed_cross_entropy``).

    ``forward(model, sample) -> (loss, 1, logging_output)`` for a :class:`PackedModel` and a
    packed sample ``{"runs": [batch or None per run]}``.
    """

    def __init__(self, task, inner: FairseqCriterion):
        super().__init__(task)
        self.inner = inner

    def forward(self, model, sample, reduce=True):
        results = model.run_losses(sample["runs"], self.inner)
        total = None
        logging_output = {"ntokens": 0, "nsentences": 0, "sample_size": 1}
        for k, res in enumerate(results):
            if res is None or not sample["runs"][k]:
                continue  # no batch of run k in this step (it has finished)
            part = res["loss"] / res["sample_size"]
            total = part if total is None else total + part
            log = res["logging"]
            logging_output[f"_loss_{k}"] = float(log["loss"])
            logging_output[f"_ss_{k}"] = res["sample_size"]
            logging_output["ntokens"] += log.get("ntokens", 0)
            logging_output["nsentences"] += log.get("nsentences", 0)
        if total is None:
            total = torch.zeros(())
        logging_output["loss"] = total.data
        return total, 1, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        """Per run k ``loss_k`` (its summed losses over its summed sample sizes, in bits) and
        ``loss``, the runs' pooled loss (all runs' losses over all their sample sizes)."""
        total_loss = total_size = 0.0
        for k in run_keys(logging_outputs):
            loss = sum(float(log.get(f"_loss_{k}", 0)) for log in logging_outputs)
            size = sum(log.get(f"_ss_{k}", 0) for log in logging_outputs)
            if size:
                metrics.log_scalar(f"loss_{k}", loss / size / math.log(2), size, round=3)
                total_loss += loss
                total_size += size
        if total_size:
            metrics.log_scalar("loss", total_loss / total_size / math.log(2), total_size,
                               round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return False
