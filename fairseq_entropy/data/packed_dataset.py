"""``PackedDataset``: the K runs' datasets of one split side by side, and the batch iterator
whose step j holds step j of every run (the ``packed_systematicity`` task)."""

from typing import Callable, List, Sequence

import numpy as np
from fairseq.data import FairseqDataset, data_utils, iterators


class PackedDataset(FairseqDataset):
    """K datasets as one: item ``offsets[k] + i`` is item i of run k, and a batch of such
    indices collates into K batches, one per run.

    Args:
        datasets: the K runs' datasets of one split (``LanguagePairDataset`` or wrappers).

    ``collater(items) -> {"runs": [batch of run k or None], "nsentences", "ntokens"}``:
    run k's batch is its own dataset's collater output on its items (in the order given);
    None when the step has none of run k's items (a run with fewer validation batches).
    """

    def __init__(self, datasets: Sequence[FairseqDataset]):
        super().__init__()
        self.datasets = list(datasets)
        sizes = [len(d) for d in self.datasets]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.steps_per_epoch = 0  # set by packed_batch_sampler

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def locate(self, index: int):
        """``(k, i)``: run and index in its dataset of the packed ``index``."""
        k = int(np.searchsorted(self.offsets, index, side="right")) - 1
        return k, int(index - self.offsets[k])

    def __getitem__(self, index):
        k, i = self.locate(index)
        return k, self.datasets[k][i]

    def collater(self, samples):
        per_run: List[list] = [[] for _ in self.datasets]
        for k, item in samples:
            per_run[k].append(item)
        runs = [self.datasets[k].collater(items) if items else None
                for k, items in enumerate(per_run)]
        runs = [r if r else None for r in runs]  # fairseq collaters return {} for no items
        return {"runs": runs,
                "nsentences": sum(r["nsentences"] for r in runs if r is not None),
                "ntokens": sum(r["ntokens"] for r in runs if r is not None)}

    def num_tokens(self, index):
        k, i = self.locate(index)
        return self.datasets[k].num_tokens(i)

    def size(self, index):
        k, i = self.locate(index)
        return self.datasets[k].size(i)

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        for d in self.datasets:
            if hasattr(d, "set_epoch"):
                d.set_epoch(epoch)

    @property
    def supports_prefetch(self):
        return False

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return False


def run_batches(itr: iterators.EpochBatchIterator, epoch: int, shuffle: bool) -> list:
    """The batches (lists of indices into the run's dataset) that the ordinary iterator
    ``itr`` of one run gives in ``epoch``, in order: its batch sampler's batches (rebuilt for
    the epoch when the sampler is a callable), shuffled under numpy seeded with
    ``itr.seed + epoch`` when ``shuffle`` (``EpochBatchIterator._get_iterator_for_epoch``
    with one shard, no grouped shuffling)."""
    if callable(itr.batch_sampler):
        batches = list(itr.batch_sampler(itr.dataset, epoch))
    else:
        batches = list(itr.frozen_batches)
    if shuffle:
        with data_utils.numpy_seed(itr.seed + epoch):
            np.random.shuffle(batches)
    return batches


def packed_batch_sampler(dataset: PackedDataset, runs: List[iterators.EpochBatchIterator],
                         shuffle: bool, same_length: bool) -> Callable:
    """A callable batch sampler (fairseq's ``EpochBatchIterator`` calls it once per epoch)
    whose j-th batch is the j-th batch of every run, as indices into ``dataset``.

    Args:
        runs: each run's ordinary iterator over its own dataset (its seed is the run's).
        shuffle: the runs' batches are shuffled every epoch (training).
        same_length: raise when runs have different numbers of batches (training); otherwise
            runs that have run out contribute nothing to later steps (validation).

    Raises:
        ValueError: ``same_length`` and the runs' batch counts differ.
    """
    def sampler(_dataset, epoch):
        per_run = [run_batches(itr, epoch, shuffle) for itr in runs]
        counts = [len(b) for b in per_run]
        if same_length and len(set(counts)) > 1:
            raise ValueError(
                f"packed runs: the runs have {counts} training batches per epoch; a pack "
                "shares one schedule. Fix: pack runs whose training sets have the same size")
        steps = max(counts) if counts else 0
        dataset.steps_per_epoch = steps
        out = []
        for j in range(steps):
            out.append([int(dataset.offsets[k] + i) for k, batches in enumerate(per_run)
                        if j < len(batches) for i in batches[j]])
        return out

    return sampler


class PackedEpochBatchIterator(iterators.EpochBatchIterator):
    """fairseq's ``EpochBatchIterator`` that never reorders its (packed) batches: each run's
    own shuffle is already in them (:func:`packed_batch_sampler`)."""

    def _get_iterator_for_epoch(self, epoch, shuffle, fix_batches_to_gpus=False, offset=0):
        return super()._get_iterator_for_epoch(epoch, False, fix_batches_to_gpus, offset)
