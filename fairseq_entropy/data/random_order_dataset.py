"""``RandomOrderDataset``: a training set whose batches are drawn at random every epoch
(``--random-batches``, optionally padding-aware with ``--batch-pool``)."""

import numpy as np
from fairseq.data import BaseWrapperDataset


class RandomOrderDataset(BaseWrapperDataset):
    """Wraps a training set so that ``ordered_indices`` is a random permutation.

    fairseq seeds numpy with (seed + epoch) around the call, so the order is reproducible and,
    with ``rebuild_batches``, different in every epoch.  fairseq's ``batch_by_size`` then cuts
    the order into consecutive batches of ``--batch-size`` sentences.

    Args:
        dataset: a ``LanguagePairDataset`` (``src_sizes`` and ``tgt_sizes`` are read).
        pool_sentences: 0 for a plain permutation (uniformly random batches).  Otherwise the
            permutation is cut into consecutive pools of this many sentences (a multiple of
            the batch size: K batches) and each pool is sorted by target length, then source
            length, stably.  The batches are then as random in membership as their pool but
            nearly uniform in length, so far fewer padded positions are computed; with pools
            a multiple of the batch size the number of batches is unchanged.

    Raises:
        ValueError: ``pool_sentences`` is negative.
    """

    def __init__(self, dataset, pool_sentences: int = 0):
        super().__init__(dataset)
        if pool_sentences < 0:
            raise ValueError(f"pool_sentences must be >= 0, got {pool_sentences}")
        self.pool_sentences = pool_sentences

    def ordered_indices(self):
        """A permutation of ``range(len(dataset))`` (int64 array [N]) drawn from numpy's global
        generator, sorted within each pool when ``pool_sentences`` > 1."""
        order = np.random.permutation(len(self.dataset))
        if self.pool_sentences <= 1:
            return order
        tgt = np.asarray(self.dataset.tgt_sizes)
        src = np.asarray(self.dataset.src_sizes)
        pools = []
        for start in range(0, len(order), self.pool_sentences):
            pool = order[start:start + self.pool_sentences]
            pools.append(pool[np.lexsort((src[pool], tgt[pool]))])
        return np.concatenate(pools) if pools else order

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        """False: the order changes every epoch, so fairseq must not reuse the epoch iterator
        (``FairseqDataset.can_reuse_epoch_itr_across_epochs``)."""
        return False
