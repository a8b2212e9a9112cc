"""Tests of the packed RNN (``fairseq_entropy.models.packed_rnn``): K runs of ``rnn_seq2seq``
with stacked parameters give each run the loss, gradients and training trajectory of the
ordinary model with the ordinary ``teacher_forcing_cross_entropy`` criterion.

Tolerances.  The packed model does the ordinary model's arithmetic with products grouped over
runs, so sums run in another order: bit equality is not expected.  In float64 (fairseq's
``get_normalized_probs`` still takes the ordinary model's log-softmax in float32) losses and
gradients agree to 1e-6 of each tensor's largest entry; a wrong gate, bias or mask is off by
orders of magnitude more.  In float32 the ordinary model's own gradients differ from float64
by up to ~3e-5 of a tensor's largest entry (attention biases: softmax gradients cancel), and
the packed ones by no more, so float32 gradients are compared at 1e-4 of the largest entry.
After 20 float32 AdamW updates at the preset's lr 1e-4 with eps 1e-6, parameters agree to
5e-6 absolute (measured: at most 7.5e-7) while training moved them by 2e-3.  The gap is float
rounding magnified by Adam; with torch's default eps of 1e-8 an entry whose gradient is zero
up to rounding takes steps of up to lr in a direction set by the rounding, which on some CPUs
reaches 1.2e-5 (and float64 does not remove it), so the test's eps bounds that step by
lr x gradient / eps.  One step with a wrong-signed gradient moves an entry by ~2e-4, forty
times the tolerance.
"""

import argparse

import pytest
import torch
from fairseq.data import LanguagePairDataset
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

import fairseq_entropy  # noqa: F401  (registers the archs)
from fairseq_entropy.criterions.teacher_forcing import TeacherForcingCrossEntropyCriterion
from fairseq_entropy.models.packed_registry import PACKED_IMPLEMENTATIONS
from fairseq_entropy.models.packed_rnn import PackedRNNError, PackedRNNSeq2Seq
from fairseq_entropy.models.rnn_seq2seq import RNNSeq2SeqModel

from _toy import ACTIONS, PAIRS, WORDS, FakeTask, make_dictionary  # noqa: E402

PRESET_ARCHS = ["rnn_seq2seq_exp1_rnn_h64", "rnn_seq2seq_exp1_rnn_h128",
                "rnn_seq2seq_exp2_gru_l2_h64", "rnn_seq2seq_exp2_rnn_l1_h64"]
DICT = make_dictionary()
TASK = FakeTask(DICT)
SEEDS = (1, 2, 3)


def build(arch, seed, dropout=0.0, **overrides):
    args = argparse.Namespace(dropout=dropout, **overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, TASK)


def make_sample(indices):
    """A fairseq batch of :data:`PAIRS` rows ``indices`` (left-padded sources)."""
    def enc(s):
        return DICT.encode_line(s, add_if_not_exist=False, append_eos=True).long()

    src = [enc(PAIRS[i][0]) for i in indices]
    tgt = [enc(PAIRS[i][1]) for i in indices]
    ds = LanguagePairDataset(src, [len(x) for x in src], DICT, tgt, [len(x) for x in tgt], DICT)
    return ds.collater([ds[i] for i in range(len(indices))])


def make_batch(pairs):
    """A fairseq batch of ``(source, target)`` strings (left-padded sources); an empty
    source is the single token </s>."""
    def enc(s):
        return DICT.encode_line(s, add_if_not_exist=False, append_eos=True).long()

    src = [enc(a) for a, _ in pairs]
    tgt = [enc(b) for _, b in pairs]
    ds = LanguagePairDataset(src, [len(x) for x in src], DICT, tgt, [len(x) for x in tgt], DICT)
    return ds.collater([ds[i] for i in range(len(pairs))])


def words(n, vocabulary):
    """``n`` words cycling through ``vocabulary``."""
    return " ".join(vocabulary[i % len(vocabulary)] for i in range(n))


def criterion(ratio=0.0, stop=True, sentence_avg=True, per_length=True):
    """The ``_rnn`` preset's criterion (ratio 0, stop at the predicted </s>, sentence-avg,
    each sentence's loss over its target length)."""
    return TeacherForcingCrossEntropyCriterion(
        TASK, teacher_forcing_ratio=ratio, stop_at_predicted_eos=stop, sentence_avg=sentence_avg,
        mean_over_target_length=per_length)


def packed_step(packed, samples, crit):
    """Per-run outputs of the pack and one backward of the sum of normalised losses."""
    outs = packed.run_losses(samples, crit)
    sum(o["loss"] / max(o["sample_size"], 1) for o in outs).backward()
    return outs


def assert_grads_close(packed, models, rel):
    for k, model in enumerate(models):
        for name, p in model.named_parameters():
            got, want = packed.w(name).grad[k], p.grad
            scale = want.abs().max().clamp(min=1e-30)
            err = float((got - want).abs().max() / scale)
            assert err <= rel, f"run {k} {name}: gradient off by {err:.2e} of its max"


def check_against_ordinary(models, samples, crit, rel, train=True):
    packed = PackedRNNSeq2Seq(models).train(train)
    outs = packed_step(packed, samples, crit)
    for k, model in enumerate(models):
        model.train(train)
        loss, sample_size, log = crit(model, samples[k])
        (loss / sample_size).backward()
        torch.testing.assert_close(outs[k]["loss"].detach(), loss.detach().double(),
                                   rtol=1e-6, atol=0, check_dtype=False)
        assert outs[k]["sample_size"] == sample_size
        got = dict(outs[k]["logging"], loss=None)
        assert got == dict(log, loss=None)
    assert_grads_close(packed, models, rel)
    return outs


@pytest.mark.parametrize("arch", PRESET_ARCHS)
@pytest.mark.parametrize("dtype,rel", [(torch.float32, 1e-4), (torch.float64, 1e-6)])
def test_losses_and_gradients_equal_the_ordinary_models(arch, dtype, rel):
    models = [build(arch, seed).to(dtype) for seed in SEEDS]
    samples = [make_sample([i]) for i in (2, 0, 3)]  # targets of 7, 2 and 5 tokens
    outs = check_against_ordinary(models, samples, criterion(), rel)
    assert len({o["logging"]["ntokens"] for o in outs}) > 1  # the runs end at different steps


@pytest.mark.parametrize("ratio,stop,per_length", [(1.0, False, False), (0.0, False, False),
                                                   (1.0, True, False), (0.0, True, False)])
def test_other_ratios_and_lstm(ratio, stop, per_length):
    models = [build("rnn_seq2seq", seed, cell="lstm", encoder_hidden_size=16).double()
              for seed in SEEDS]
    samples = [make_sample([i]) for i in (3, 1, 2)]
    check_against_ordinary(models, samples, criterion(ratio, stop, sentence_avg=False,
                                                      per_length=per_length), 1e-6)


def test_validation_batches_of_several_rows_and_an_empty_run():
    """Eval mode (validation ratio 1, stop at </s>), batches of 5 and 3 left-padded rows,
    and a run without a batch: zero loss and sample size, no gradient."""
    models = [build("rnn_seq2seq_exp2_gru_l2_h64", seed).double() for seed in SEEDS]
    samples = [make_sample([0, 1, 2, 3, 4]), make_sample([4, 2, 1]), {}]
    packed = PackedRNNSeq2Seq(models).eval()
    outs = packed_step(packed, samples, criterion())
    for k in (0, 1):
        models[k].eval()
        loss, sample_size, log = criterion()(models[k], samples[k])
        (loss / sample_size).backward()
        torch.testing.assert_close(outs[k]["loss"].detach(), loss.detach().double(),
                                   rtol=1e-6, atol=0, check_dtype=False)
        assert dict(outs[k]["logging"], loss=None) == dict(log, loss=None)
    assert_grads_close(packed, models[:2], 1e-6)
    assert outs[2]["sample_size"] == 0 and float(outs[2]["loss"].detach()) == 0.0
    assert all(float(p.grad[2].abs().max()) == 0.0 for p in packed.weights.values())


def test_a_finished_run_is_not_changed_by_longer_neighbours():
    """Run 0 (a 2-token target) packed beside a 2-token or a 7-token neighbour, in float64:
    its loss and gradients agree to 1e-12 (float64 rounding; the pack's shapes differ, so
    reductions may group differently), so the steps after its end contribute nothing."""
    grads = []
    for neighbour in (0, 2):
        models = [build("rnn_seq2seq_exp1_rnn_h64", seed).double() for seed in (1, 2)]
        packed = PackedRNNSeq2Seq(models).train()
        outs = packed_step(packed, [make_sample([0]), make_sample([neighbour])],
                           criterion(stop=False))
        grads.append([outs[0]["loss"].detach()] + [p.grad[0] for p in packed.weights.values()])
    assert outs[1]["logging"]["ntokens"] == 7
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12 * float(b.abs().max()))


#: runs whose lengths differ widely: (source tokens, target tokens) per row, </s> included
WIDE_RUNS = [[(9, 3)], [(1, 45)], [(9, 45), (4, 10), (1, 3)], [(5, 7), (2, 20)]]


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
@pytest.mark.parametrize("ratio", [0.0, 1.0])
@pytest.mark.parametrize("stop", [False, True])
@pytest.mark.parametrize("per_length", [False, True])
def test_runs_of_widely_different_lengths_each_equal_the_run_alone(cell, ratio, stop,
                                                                     per_length):
    """Targets of 3 and 45 tokens, sources of 1 and 9, a run of 3 rows beside runs of 1 and
    2 (float64): the pack computes each run only while it decodes and over its own source
    steps, and every run's loss, logging and gradients equal the ordinary model's."""
    samples = [make_batch([(words(s - 1, WORDS[:-3]), words(t - 1, ACTIONS)) for s, t in rows])
               for rows in WIDE_RUNS]
    models = [build("rnn_seq2seq", seed, cell=cell, encoder_hidden_size=16).double()
              for seed in range(1, len(samples) + 1)]
    outs = check_against_ordinary(models, samples, criterion(ratio, stop, sentence_avg=False,
                                                             per_length=per_length), 1e-6)
    if not stop:
        assert [o["logging"]["ntokens"] for o in outs] == [3, 45, 58, 27]


def test_a_second_forward_pass_before_the_backward_pass():
    """The pack's sorted weight copies are reused between forward passes: a backward pass
    after another forward pass (other lengths, other order) still gets its own gradients."""
    models = [build("rnn_seq2seq_exp2_gru_l2_h64", seed).double() for seed in SEEDS]
    first = [make_sample([i]) for i in (2, 0, 3)]
    second = [make_sample([i]) for i in (0, 3, 2)]
    crit = criterion(stop=False)
    alone = PackedRNNSeq2Seq(models).train()
    packed_step(alone, first, crit)
    packed = PackedRNNSeq2Seq(models).train()
    outs = packed.run_losses(first, crit)
    packed.run_losses(second, crit)
    sum(o["loss"] / max(o["sample_size"], 1) for o in outs).backward()
    for name, p in packed.weights.items():
        torch.testing.assert_close(p.grad, alone.weights[name].grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("arch", PRESET_ARCHS)
def test_20_adamw_updates_equal_each_run_alone(arch):
    """20 AdamW steps of 3 packed runs against each run alone agree to 5e-6 absolute, while
    each run's parameters move by about 20 x lr = 2e-3.

    Adam divides each gradient by its running RMS plus ``eps``: with torch's default eps of
    1e-8, an entry whose gradient is near zero moves by about the learning rate whatever the
    gradient's size, so a float32 rounding difference between the grouped and the fused GRU
    kernels can move it by up to 20 x lr (measured 1.2e-5 on one of 32768 entries of the
    h128 model, on one CPU).  With eps = 1e-6 such an entry moves by at most lr x
    gradient / eps, which keeps rounding differences in view without amplifying them
    (measured at most 7.5e-7 on that CPU); each run's own Adam state is still checked, since
    a run given another run's batch, gradient or moments would differ by about 2e-3."""
    models = [build(arch, seed) for seed in SEEDS]
    start = [{k: v.clone() for k, v in m.state_dict().items()} for m in models]
    packed = PackedRNNSeq2Seq(models).train()
    optimisers = [torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)
                  for m in models]
    packed_opt = torch.optim.AdamW(packed.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)
    crit = criterion()
    for step in range(20):
        samples = [make_sample([(step * (k + 1) + k) % len(PAIRS)]) for k in range(3)]
        packed_opt.zero_grad()
        packed_step(packed, samples, crit)
        packed_opt.step()
        for model, opt, sample in zip(models, optimisers, samples):
            model.train()
            opt.zero_grad()
            loss, sample_size, _ = crit(model, sample)
            (loss / sample_size).backward()
            opt.step()
    moved = 0.0
    for k, state in enumerate(packed.unpacked_state_dicts()):
        for name, p in models[k].named_parameters():
            torch.testing.assert_close(state[name], p.detach(), rtol=0, atol=5e-6)
            moved = max(moved, float((p.detach() - start[k][name]).abs().max()))
    assert moved > 1e-3


def test_dropout_masks_differ_across_runs():
    """Two runs with the same weights and the same sample: with dropout their losses and
    gradients differ, without dropout (eval mode) they are equal."""
    models = [build("rnn_seq2seq_exp2_gru_l2_h64", 1, dropout=0.3) for _ in range(2)]
    sample = make_sample([2])
    crit = criterion(ratio=1.0, stop=False)  # gold inputs: both runs decode the same steps
    packed = PackedRNNSeq2Seq(models)
    torch.manual_seed(0)
    train = packed.train().run_losses([sample, sample], crit)
    assert float(train[0]["loss"]) != float(train[1]["loss"])
    evaluated = packed.eval().run_losses([sample, sample], crit)
    assert float(evaluated[0]["loss"]) == float(evaluated[1]["loss"])


def test_unpacked_state_dicts_load_into_the_ordinary_model():
    models = [build("rnn_seq2seq_exp2_gru_l2_h64", seed) for seed in SEEDS]
    packed = PackedRNNSeq2Seq(models)
    states = packed.unpacked_state_dicts()
    for model, state in zip(models, states):
        assert list(state) == list(model.state_dict())
        fresh = build("rnn_seq2seq_exp2_gru_l2_h64", 99)
        fresh.load_state_dict(state, strict=True)
        assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(),
                                                     model.state_dict().values()))
    packed.load_unpacked(0, states[2])
    assert torch.equal(packed.w("decoder.cell.weight_hh")[0], states[2]["decoder.cell.weight_hh"])
    assert PACKED_IMPLEMENTATIONS[RNNSeq2SeqModel] is PackedRNNSeq2Seq


def test_refuses_mixed_architectures_and_other_criteria():
    with pytest.raises(PackedRNNError, match="run 1 .*Fix:"):
        PackedRNNSeq2Seq([build("rnn_seq2seq_exp1_rnn_h64", 1),
                          build("rnn_seq2seq_exp2_rnn_l1_h64", 1)])
    packed = PackedRNNSeq2Seq([build("rnn_seq2seq_exp2_rnn_l1_h64", 1)])
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    with pytest.raises(PackedRNNError, match="teacher_forcing_cross_entropy.*Fix:"):
        packed.run_losses([make_sample([0])], CrossEntropyCriterion(TASK, True))
