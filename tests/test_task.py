import numpy as np
import torch
from fairseq.data import LanguagePairDataset, data_utils

from fairseq_entropy.tasks.systematicity import RandomOrderDataset, exact_match


def tiny_dataset(n=40):
    from fairseq.data import Dictionary
    d = Dictionary()
    for w in "walk run jump WALK RUN JUMP".split():
        d.add_symbol(w)
    rng = np.random.RandomState(0)
    src = [torch.tensor(list(rng.randint(4, 7, size=rng.randint(1, 6))) + [d.eos()])
           for _ in range(n)]
    return LanguagePairDataset(src, [len(s) for s in src], d, src, [len(s) for s in src], d)


def test_random_order_is_a_seeded_permutation_unlike_length_sorting():
    base = tiny_dataset()
    ds = RandomOrderDataset(base)
    with data_utils.numpy_seed(1):
        a = ds.ordered_indices()
    with data_utils.numpy_seed(1):
        b = ds.ordered_indices()
    with data_utils.numpy_seed(2):
        c = ds.ordered_indices()
    assert sorted(a.tolist()) == list(range(40))
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
    with data_utils.numpy_seed(1):
        sorted_by_len = base.ordered_indices()
    lengths = base.src_sizes[sorted_by_len]
    assert (np.diff(lengths) >= 0).all()           # fairseq's order: by length
    assert not (np.diff(base.src_sizes[a]) >= 0).all()
    assert ds.can_reuse_epoch_itr_across_epochs is False


def test_exact_match_ignores_padding_and_eos():
    pad, eos = 1, 2
    assert exact_match(torch.tensor([5, 6, 2]), torch.tensor([5, 6, 2, 1, 1]), pad, eos)
    assert not exact_match(torch.tensor([5, 6, 6, 2]), torch.tensor([5, 6, 2]), pad, eos)
