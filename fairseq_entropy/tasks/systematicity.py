"""The ``systematicity`` task: fairseq translation on entropy-controlled SCAN-style data.

Extends fairseq's ``translation`` task (Wold et al., arXiv 2505.13089, Sec. 4) with

* validation-time exact-match accuracy by greedy decoding, logged as ``seq_acc`` so that
  ``--best-checkpoint-metric seq_acc --maximize-best-checkpoint-metric`` selects checkpoints on
  the validation split (never on the test set);
* a log line with the training set's slot entropies read from the ``manifest.json`` that
  ``fairseq-entropy binarize`` copies next to the binarized data.
"""


import json
import logging
import os
from argparse import Namespace
from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq import utils
from fairseq.data import BaseWrapperDataset, data_utils
from fairseq.logging import metrics
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

logger = logging.getLogger(__name__)


@dataclass
class SystematicityConfig(TranslationConfig):
    """Options of the ``systematicity`` task: fairseq's translation options plus these."""

    eval_seq_acc: bool = field(
        default=False,
        metadata={"help": "decode the validation set greedily and log exact-match accuracy "
                          "as seq_acc"},
    )
    eval_seq_acc_max_len_b: int = field(
        default=60,
        metadata={"help": "maximum output length when decoding for seq_acc (the longest "
                          "output of the paper's grammar has 48 actions)"},
    )
    random_batches: bool = field(
        default=False,
        metadata={"help": "draw training batches uniformly at random and anew every epoch "
                          "(as a PyTorch DataLoader with shuffle=True) instead of fairseq's "
                          "length-sorted batches, whose members share a length and hence "
                          "mostly a syntactic template"},
    )
    rebuild_batches: bool = field(
        default=False,
        metadata={"help": "rebuild the batches every epoch (set by --random-batches)"},
    )


class RandomOrderDataset(BaseWrapperDataset):
    """Wraps a training set so that ``ordered_indices`` is a random permutation.

    fairseq seeds numpy with (seed + epoch) around the call, so the order is reproducible and,
    with ``rebuild_batches``, different in every epoch.
    """

    def ordered_indices(self):
        return np.random.permutation(len(self.dataset))

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return False


class FirstEpochOrderDataset(BaseWrapperDataset):
    """Wraps a training set so that its batches are composed as in epoch 1, whatever the epoch.

    Without ``--random-batches`` fairseq composes the length-sorted batches once, when the
    training iterator is created, from ``ordered_indices`` under numpy seeded with
    ``seed + epoch``, and keeps them for the rest of the run (only their order is reshuffled
    every epoch). An uninterrupted run creates the iterator at epoch 1; a run resumed from
    ``checkpoint_last.pt`` creates it at the resumed epoch, and so trains on other batches
    (same lengths, other commands). :meth:`SystematicityTask.get_batch_iterator` sets
    ``order_seed`` to ``seed + 1``, the seed of epoch 1, so both runs see the same batches.
    """

    def __init__(self, dataset):
        super().__init__(dataset)
        self.order_seed = None

    def ordered_indices(self):
        if self.order_seed is None:
            return self.dataset.ordered_indices()
        with data_utils.numpy_seed(self.order_seed):
            return self.dataset.ordered_indices()


def exact_match(hyp_tokens: torch.Tensor, ref_tokens: torch.Tensor, pad: int, eos: int) -> bool:
    """Whether two token sequences are equal once padding and end-of-sentence are stripped."""
    def strip(t):
        t = t[(t != pad) & (t != eos)]
        return t.tolist()
    return strip(hyp_tokens) == strip(ref_tokens)


@register_task("systematicity", dataclass=SystematicityConfig)
class SystematicityTask(TranslationTask):
    """Translation task for systematic-generalization data (see module docstring)."""

    cfg: SystematicityConfig

    @classmethod
    def setup_task(cls, cfg: SystematicityConfig, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        first = utils.split_paths(cfg.data)[0]
        manifest = os.path.join(first, "manifest.json")
        if os.path.exists(manifest):
            with open(manifest) as f:
                info = json.load(f)
            task.manifest = info
            train = info.get("slots", {}).get("train", {}).get("entropy_bits", {})
            logger.info(
                "training set %s: %s, controlled slot %s, target %s bits, measured slot "
                "entropies first=%s second=%s bits",
                info.get("level", "?"), info.get("experiment", "?"),
                info.get("controlled_slot", "?"), info.get("target_entropy_bits", "?"),
                train.get("first"), train.get("second"))
        else:
            task.manifest = None
            logger.info("no manifest.json in %s: training-set entropies unknown", first)
        return task

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if self.cfg.random_batches and split == self.cfg.train_subset:
            self.cfg.rebuild_batches = True
            self.datasets[split] = RandomOrderDataset(self.datasets[split])
        elif split == self.cfg.train_subset:
            self.datasets[split] = FirstEpochOrderDataset(self.datasets[split])

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if self.cfg.eval_seq_acc:
            self.sequence_generator = self.build_generator(
                [model], Namespace(beam=1, max_len_a=0, max_len_b=self.cfg.eval_seq_acc_max_len_b,
                                   min_len=1, sampling=False, unnormalized=False))
        return model

    def valid_step(self, sample, model, criterion):
        loss, sample_size, logging_output = super().valid_step(sample, model, criterion)
        if self.cfg.eval_seq_acc:
            hyps = self.inference_step(self.sequence_generator, [model], sample, prefix_tokens=None)
            pad, eos = self.tgt_dict.pad(), self.tgt_dict.eos()
            correct = sum(
                exact_match(hyps[i][0]["tokens"].cpu(), sample["target"][i].cpu(), pad, eos)
                for i in range(len(hyps)))
            logging_output["_seq_acc_correct"] = correct
            logging_output["_seq_acc_total"] = len(hyps)
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if self.cfg.eval_seq_acc:
            correct = sum(log.get("_seq_acc_correct", 0) for log in logging_outputs)
            total = sum(log.get("_seq_acc_total", 0) for log in logging_outputs)
            if total > 0:
                metrics.log_scalar("_seq_acc_correct", correct)
                metrics.log_scalar("_seq_acc_total", total)
                metrics.log_derived(
                    "seq_acc",
                    lambda meters: round(
                        meters["_seq_acc_correct"].sum / meters["_seq_acc_total"].sum, 4)
                    if meters["_seq_acc_total"].sum > 0 else 0.0)

    def get_batch_iterator(self, dataset, *args, seed=1, **kwargs):
        """fairseq's batch iterator; a :class:`FirstEpochOrderDataset` gets the seed of epoch 1.

        With this, a run resumed from a checkpoint trains on the same batches as an
        uninterrupted run (fairseq restores the model, optimizer, scheduler, epoch and
        iterator position, and reseeds torch with ``seed + update`` before every update, so
        dropout is restored too). ``seed`` must be passed by keyword, as fairseq does.
        """
        if isinstance(dataset, FirstEpochOrderDataset):
            dataset.order_seed = seed + 1
        return super().get_batch_iterator(dataset, *args, seed=seed, **kwargs)
