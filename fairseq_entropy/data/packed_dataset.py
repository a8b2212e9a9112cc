"""``PackedDataset``: the K runs' datasets of one split side by side, and the batch iterator
whose step j holds step j of every run (the ``packed_systematicity`` task)."""

from typing import Callable, Dict, List, Optional, Sequence, Tuple

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
                         shuffle: bool, same_length: bool,
                         limits: Optional[Sequence[int]] = None) -> Callable:
    """A callable batch sampler (fairseq's ``EpochBatchIterator`` calls it once per epoch)
    whose j-th batch is the j-th batch of every run, as indices into ``dataset``.

    Args:
        runs: each run's ordinary iterator over its own dataset (its seed is the run's).
        shuffle: the runs' batches are shuffled every epoch (training).
        same_length: raise when runs have different numbers of batches (training); otherwise
            runs that have run out contribute nothing to later steps (validation).
        limits: training only, the runs' own numbers of updates ``U_k`` (their
            ``--max-update``) for runs whose training sets may differ in size
            (:class:`RaggedSchedule`): pack step ``g`` (counted over the whole training)
            holds run k's own step ``g`` while ``g < U_k`` -- batch ``g mod n_k`` of its
            epoch ``g // n_k + 1``, ``n_k`` its batches per epoch -- and nothing of it after.
            A pack epoch is then the longest run epoch.  None: every run's epoch j is the
            pack's epoch j (``same_length`` applies).

    Raises:
        ValueError: ``same_length`` and the runs' batch counts differ.
    """
    if limits is not None:
        return RaggedSchedule(dataset, runs, shuffle, limits)

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


class RaggedSchedule:
    """The training batch sampler of a pack whose runs have their own epoch lengths ``n_k``
    and numbers of updates ``U_k`` (see ``limits`` of :func:`packed_batch_sampler`): every
    run's step ``g`` is the step ``g`` of the run alone, whatever the pack's epoch.

    Attributes:
        epoch_steps: ``[n_k]``, each run's batches per epoch (its epoch 1's count).
        limits: ``[U_k]``.
        steps: the pack's steps per epoch, ``max n_k``.

    Calling it for a pack epoch raises ValueError when a run's number of batches changes
    from one epoch to another (its step ``g`` would no longer follow from ``g`` and ``n_k``).
    """

    def __init__(self, dataset: PackedDataset, runs: List[iterators.EpochBatchIterator],
                 shuffle: bool, limits: Sequence[int]):
        self.dataset, self.runs, self.shuffle = dataset, runs, shuffle
        self.limits = [int(u) for u in limits]
        self._cache: Dict[int, Tuple[int, list]] = {}
        self.epoch_steps = [len(self._batches(k, 1)) for k in range(len(runs))]
        self.steps = max(self.epoch_steps) if self.epoch_steps else 0
        dataset.steps_per_epoch = self.steps

    def _batches(self, k: int, epoch: int) -> list:
        """Run k's batches of its own ``epoch`` (the last epoch asked is kept)."""
        cached = self._cache.get(k)
        if cached is None or cached[0] != epoch:
            batches = run_batches(self.runs[k], epoch, self.shuffle)
            if k < len(getattr(self, "epoch_steps", [])) and \
                    len(batches) != self.epoch_steps[k]:
                raise ValueError(
                    f"packed runs: run {k} has {len(batches)} batches in its epoch {epoch} "
                    f"and {self.epoch_steps[k]} in its first; runs with their own "
                    "--max-update need a fixed number of batches per epoch. Fix: pack runs "
                    "of one --max-update")
            self._cache[k] = (epoch, batches)
        return self._cache[k][1]

    def run_position(self, k: int, step: int) -> Tuple[int, int]:
        """``(epoch, j)``: run k's own epoch (from 1) and batch index at its step ``step``
        (counted from 0)."""
        epoch, j = divmod(step, self.epoch_steps[k])
        return epoch + 1, j

    def __call__(self, _dataset, epoch: int) -> list:
        out = []
        first = (epoch - 1) * self.steps
        for g in range(first, first + self.steps):
            step = []
            for k in range(len(self.runs)):
                if g < self.limits[k]:
                    run_epoch, j = self.run_position(k, g)
                    step += [int(self.dataset.offsets[k] + i)
                             for i in self._batches(k, run_epoch)[j]]
            if not step:
                break  # every run has finished
            out.append(step)
        return out


class PackedEpochBatchIterator(iterators.EpochBatchIterator):
    """fairseq's ``EpochBatchIterator`` that never reorders its (packed) batches: each run's
    own shuffle is already in them (:func:`packed_batch_sampler`)."""

    def _get_iterator_for_epoch(self, epoch, shuffle, fix_batches_to_gpus=False, offset=0):
        return super()._get_iterator_for_epoch(epoch, False, fix_batches_to_gpus, offset)
