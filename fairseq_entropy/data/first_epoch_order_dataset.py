"""``FirstEpochOrderDataset``: a training set whose length-sorted batches are composed as in
epoch 1 whatever epoch the training iterator is created at (a resumed run)."""

from fairseq.data import BaseWrapperDataset, data_utils


class FirstEpochOrderDataset(BaseWrapperDataset):
    """Wraps a training set so that its batches are composed as in epoch 1, whatever the epoch.

    Without ``--random-batches`` fairseq composes the length-sorted batches once, when the
    training iterator is created, from ``ordered_indices`` under numpy seeded with
    ``seed + epoch``, and keeps them for the rest of the run (only their order is reshuffled
    every epoch). An uninterrupted run creates the iterator at epoch 1; a run resumed from
    ``checkpoint_last.pt`` creates it at the resumed epoch, and so trains on other batches
    (same lengths, other commands). The ``systematicity`` task's ``get_batch_iterator`` sets
    ``order_seed`` to ``seed + 1``, the seed of epoch 1, so both runs see the same batches.

    Attributes:
        order_seed: the numpy seed ``ordered_indices`` runs under, or None for the caller's
            numpy state (the wrapped dataset's behaviour).
    """

    def __init__(self, dataset):
        super().__init__(dataset)
        self.order_seed = None

    def ordered_indices(self):
        """The wrapped dataset's ``ordered_indices`` (int64 array [N]), computed under
        ``numpy_seed(order_seed)`` when ``order_seed`` is set."""
        if self.order_seed is None:
            return self.dataset.ordered_indices()
        with data_utils.numpy_seed(self.order_seed):
            return self.dataset.ordered_indices()
