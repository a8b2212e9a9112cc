import numpy as np
import pytest
import torch
from fairseq.data import LanguagePairDataset, data_utils

from fairseq_entropy.data import RandomOrderDataset, exact_match


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


def test_batch_pool_sorts_within_random_pools_and_keeps_every_sentence_once():
    base = tiny_dataset(n=100)
    ds = RandomOrderDataset(base, pool_sentences=20)   # pools of 5 batches of 4
    with data_utils.numpy_seed(3):
        order = ds.ordered_indices()
    with data_utils.numpy_seed(3):
        perm = np.random.permutation(100)                # the same draw, unsorted
    assert sorted(order.tolist()) == list(range(100))
    for start in range(0, 100, 20):
        pool, drawn = order[start:start + 20], perm[start:start + 20]
        assert sorted(pool.tolist()) == sorted(drawn.tolist())   # membership from the draw
        lengths = base.tgt_sizes[pool]
        assert (np.diff(lengths) >= 0).all()                      # sorted within the pool
    assert not (np.diff(base.tgt_sizes[order]) >= 0).all()       # but not across pools
    with data_utils.numpy_seed(4):
        assert ds.ordered_indices().tolist() != order.tolist()   # new pools every epoch
    # a pool of 0 or 1 sentences is the plain permutation
    with data_utils.numpy_seed(3):
        assert RandomOrderDataset(base, 1).ordered_indices().tolist() == perm.tolist()


def test_batch_pool_cuts_padding_and_keeps_the_number_of_batches():
    base = tiny_dataset(n=100)

    def padded_positions(order, b=4):
        batches = [order[i:i + b] for i in range(0, len(order), b)]
        return sum(len(x) * base.tgt_sizes[x].max() for x in batches), len(batches)

    with data_utils.numpy_seed(5):
        plain = RandomOrderDataset(base).ordered_indices()
    with data_utils.numpy_seed(5):
        pooled = RandomOrderDataset(base, pool_sentences=20).ordered_indices()
    (p_plain, n_plain), (p_pooled, n_pooled) = padded_positions(plain), padded_positions(pooled)
    assert n_plain == n_pooled == 25
    real = int(base.tgt_sizes.sum())
    assert real <= p_pooled < p_plain


def test_cpu_seeding_draws_what_torch_manual_seed_draws_and_restores_as_a_context():
    from fairseq import utils

    from fairseq_entropy.tasks.seeding import install_cpu_seeding

    if not install_cpu_seeding():
        pytest.skip("this host has CUDA: fairseq's own seeding is kept")
    assert utils.set_torch_seed.__name__ == "_CpuTorchSeed"
    torch.manual_seed(7)
    expected = torch.rand(5)
    torch.manual_seed(123)
    utils.set_torch_seed(7)          # fairseq's Trainer reseeds like this before every update
    assert torch.equal(torch.rand(5), expected)
    before = torch.get_rng_state()
    with utils.set_torch_seed(7):
        assert torch.equal(torch.rand(5), expected)
    assert torch.equal(torch.get_rng_state(), before)


def test_symbol_dictionary_string_equals_fairseqs_dictionary_string():
    from fairseq.data import Dictionary

    from fairseq_entropy.data import SymbolDictionary

    ours, theirs = SymbolDictionary(), Dictionary()
    for d in (ours, theirs):
        for w in ("walk", "▁ju", "mp", "I_JUMP", "and"):
            d.add_symbol(w)
    n = len(theirs)
    g = torch.Generator().manual_seed(0)
    # every special index, an id past the end (fairseq writes <unk> for it) and real words
    rows = [torch.randint(0, n + 2, (12,), generator=g) for _ in range(20)]
    rows.append(torch.tensor([theirs.bos(), 4, theirs.unk(), theirs.pad(), 6, theirs.eos()]))
    cases = [dict(), dict(include_eos=True), dict(escape_unk=True), dict(unk_string="UNK"),
             dict(extra_symbols_to_ignore=[theirs.pad(), 5]), dict(bpe_symbol="sentencepiece"),
             dict(separator="|")]
    for row in rows:
        for kw in cases:
            assert ours.string(row, **kw) == theirs.string(row, **kw), kw
        assert ours.string(row.tolist()) == theirs.string(row.tolist())
    batch = torch.stack(rows[:5])
    assert ours.string(batch, extra_symbols_to_ignore={5}) == theirs.string(
        batch, extra_symbols_to_ignore={5})
    # <s> <pad> </s> <unk> come first, so walk ▁ju mp are 4 5 6
    assert ours.string(torch.tensor([4, 5, 6, theirs.eos()])) == "walk ▁ju mp"
    assert ours.string(torch.tensor([4, 5, 6]), "sentencepiece") == "walk jump"


def test_task_loads_its_dictionaries_as_symbol_dictionaries(tmp_path):
    from fairseq_entropy.data import SymbolDictionary
    from fairseq_entropy.tasks.systematicity import SystematicityTask

    (tmp_path / "dict.txt").write_text("walk 1\nJUMP 1\n")
    d = SystematicityTask.load_dictionary(str(tmp_path / "dict.txt"))
    assert isinstance(d, SymbolDictionary)
    assert d.string(torch.tensor([d.index("JUMP"), d.index("walk"), d.eos()])) == "JUMP walk"
