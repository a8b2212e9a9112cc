"""Tests of the ``teacher_forcing_cross_entropy`` criterion."""

import argparse

import pytest
import torch
import torch.nn.functional as F
from fairseq.criterions.cross_entropy import CrossEntropyCriterion
from fairseq.data import Dictionary, LanguagePairDataset
from fairseq.models import (
    ARCH_CONFIG_REGISTRY,
    ARCH_MODEL_NAME_REGISTRY,
    ARCH_MODEL_REGISTRY,
    MODEL_DATACLASS_REGISTRY,
)

import fairseq_entropy.models.cnn_archs  # noqa: F401
import fairseq_entropy.models.rnn_seq2seq  # noqa: F401
from fairseq_entropy.criterions.teacher_forcing import (
    TeacherForcingCrossEntropyCriterion,
    _has_differentiable_incremental_path,
)

from _toy import ACTIONS, PAIRS, WORDS, FakeTask  # noqa: F401,E402

ARCHS = {
    "rnn_seq2seq": dict(encoder_hidden_size=16),
    "fconv_scan_exp1": dict(max_source_positions=1024, max_target_positions=1024),
}


# the plugin's other models, when registered: the criterion must work with every one
OTHER_PLUGIN_ARCHS = [a for a in ("scan_transformer", "scan_transformer_relative",
                                  "scan_transformer_rope", "equivariant_seq2seq")
                      if a in ARCH_MODEL_REGISTRY]


def setup(arch="rnn_seq2seq"):
    d = Dictionary()
    for w in WORDS + ACTIONS:
        d.add_symbol(w)
    task = FakeTask(d)
    args = argparse.Namespace(**ARCHS.get(arch, dict(max_source_positions=1024,
                                                     max_target_positions=1024)))
    ARCH_CONFIG_REGISTRY[arch](args)
    dataclass = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY[arch])
    if dataclass is not None:  # a dataclass-configured model: its defaults, then the arch's
        cfg = dataclass()
        for key, value in vars(args).items():
            if hasattr(cfg, key):
                setattr(cfg, key, value)
        args = cfg
    torch.manual_seed(0)
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)

    def enc(s):
        return d.encode_line(s, add_if_not_exist=False, append_eos=True).long()

    src = [enc(s) for s, _ in PAIRS]
    tgt = [enc(t) for _, t in PAIRS]
    ds = LanguagePairDataset(src, [len(x) for x in src], d, tgt, [len(x) for x in tgt], d)
    sample = ds.collater([ds[i] for i in range(len(PAIRS))])
    return model, task, sample


def criterion(task, **kw):
    return TeacherForcingCrossEntropyCriterion(task, **kw)


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("sentence_avg", [False, True])
def test_ratio_one_equals_fairseq_cross_entropy(arch, sentence_avg):
    model, task, sample = setup(arch)
    model.train()
    torch.manual_seed(1)  # same dropout masks in both passes
    ce_loss, ce_size, ce_log = CrossEntropyCriterion(task, sentence_avg)(model, sample)
    torch.manual_seed(1)
    tf_loss, tf_size, tf_log = criterion(task, teacher_forcing_ratio=1.0,
                                         sentence_avg=sentence_avg)(model, sample)
    assert torch.equal(tf_loss, ce_loss)
    assert tf_size == ce_size
    assert tf_log["ntokens"] == ce_log["ntokens"]


@pytest.mark.parametrize("arch,mode", [("rnn_seq2seq", "incremental"),
                                       ("rnn_seq2seq", "full"),
                                       ("fconv_scan_exp1", "auto")])
def test_step_by_step_at_ratio_one_matches_the_full_pass(arch, mode):
    model, task, sample = setup(arch)
    model.eval()
    full, _, _ = criterion(task, valid_teacher_forcing_ratio=1.0)(model, sample)
    crit = criterion(task, step_mode=mode)
    lprobs, mask = crit._step_by_step(model, sample, sample["target"], ratio=1.0)
    stepped = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), sample["target"].view(-1),
                         ignore_index=task.target_dictionary.pad(), reduction="sum")
    assert torch.allclose(stepped, full, rtol=1e-5)
    assert torch.equal(mask, sample["target"].ne(task.target_dictionary.pad()))


def test_auto_step_mode_avoids_fconvs_non_differentiable_incremental_path():
    rnn, _, _ = setup("rnn_seq2seq")
    cnn, _, _ = setup("fconv_scan_exp1")
    assert _has_differentiable_incremental_path(rnn.decoder)
    assert not _has_differentiable_incremental_path(cnn.decoder)


@pytest.mark.parametrize("arch", OTHER_PLUGIN_ARCHS)
def test_works_with_the_other_plugin_models(arch):
    model, task, sample = setup(arch)
    model.train()
    torch.manual_seed(1)
    ce_loss, _, _ = CrossEntropyCriterion(task, False)(model, sample)
    torch.manual_seed(1)
    tf_loss, _, _ = criterion(task)(model, sample)
    assert torch.equal(tf_loss, ce_loss)
    model.eval()
    with torch.no_grad():
        full, _, _ = criterion(task)(model, sample)
        lprobs, _ = criterion(task)._step_by_step(model, sample, sample["target"], ratio=1.0)
    stepped = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), sample["target"].view(-1),
                         ignore_index=task.target_dictionary.pad(), reduction="sum")
    assert torch.allclose(stepped, full, rtol=1e-4)
    model.train()
    loss, _, _ = criterion(task, teacher_forcing_ratio=0.0, stop_at_predicted_eos=True)(
        model, sample)
    loss.backward()
    assert torch.isfinite(loss)


def own_prediction_reference(model, sample, pad, eos):
    """Loss of the targets when the decoder always reads its own greedy prediction."""
    net = sample["net_input"]
    target = sample["target"]
    enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
    tokens = net["prev_output_tokens"][:, :1]
    state = {}
    lprobs = []
    for _ in range(target.size(1)):
        out = model.decoder(tokens, encoder_out=enc, incremental_state=state)
        lp = model.get_normalized_probs((out[0][:, -1:],), log_probs=True)[:, 0]
        lprobs.append(lp)
        choice = lp.clone()
        choice[:, pad] = float("-inf")
        tokens = torch.cat([tokens, choice.argmax(-1, keepdim=True)], dim=1)
    return torch.stack(lprobs, 1), tokens[:, 1:]


def test_ratio_zero_feeds_own_predictions():
    model, task, sample = setup()
    model.eval()
    pad, eos = task.target_dictionary.pad(), task.target_dictionary.eos()
    with torch.no_grad():
        ref_lprobs, _ = own_prediction_reference(model, sample, pad, eos)
        loss, size, log = criterion(task, valid_teacher_forcing_ratio=0.0)(model, sample)
        teacher_forced, _, _ = criterion(task)(model, sample)
    target = sample["target"]
    ref = F.nll_loss(ref_lprobs.view(-1, ref_lprobs.size(-1)), target.view(-1),
                     ignore_index=pad, reduction="sum")
    assert torch.allclose(loss, ref, rtol=1e-5)
    assert not torch.allclose(loss, teacher_forced)
    assert size == int(target.ne(pad).sum())


def test_stop_at_predicted_eos_masks_steps_after_it():
    model, task, sample = setup()
    model.eval()
    pad, eos = task.target_dictionary.pad(), task.target_dictionary.eos()
    # make end-of-sentence the greedy prediction at every step
    with torch.no_grad():
        model.decoder.output_projection.bias[eos] += 100.0
        loss, size, log = criterion(task, valid_teacher_forcing_ratio=0.0,
                                    stop_at_predicted_eos=True)(model, sample)
        ref_lprobs, _ = own_prediction_reference(model, sample, pad, eos)
    # only the first step of each sentence is in the loss
    assert size == log["ntokens"] == len(PAIRS)
    ref = F.nll_loss(ref_lprobs[:, 0], sample["target"][:, 0], reduction="sum")
    assert torch.allclose(loss, ref, rtol=1e-5)
    assert log["n_seq_correct"] == 0


def test_mean_over_target_length_divides_each_sentence_by_its_gold_length():
    """The authors' RNN loss: per sentence, the NLL of the steps in the loss (here: up to the
    first predicted </s>) over its gold target length, summed over the sentences."""
    model, task, sample = setup()
    model.eval()
    pad, eos = task.target_dictionary.pad(), task.target_dictionary.eos()
    with torch.no_grad():
        ref_lprobs, predicted = own_prediction_reference(model, sample, pad, eos)
        loss, size, log = criterion(task, valid_teacher_forcing_ratio=0.0,
                                    stop_at_predicted_eos=True, sentence_avg=True,
                                    mean_over_target_length=True)(model, sample)
        summed, _, summed_log = criterion(task, valid_teacher_forcing_ratio=0.0,
                                          stop_at_predicted_eos=True,
                                          sentence_avg=True)(model, sample)
    target = sample["target"]
    want = 0.0
    for i in range(target.size(0)):
        gold = [int(t) for t in target[i] if int(t) != pad]
        stop = next((t for t, p in enumerate(predicted[i].tolist()) if p == eos), None)
        steps = len(gold) if stop is None else min(stop + 1, len(gold))
        nll = -sum(float(ref_lprobs[i, t, gold[t]]) for t in range(steps))
        want += nll / len(gold)
    assert float(loss) == pytest.approx(want, rel=1e-5)
    assert len({len([t for t in row if int(t) != pad]) for row in target}) > 1
    assert float(loss) < float(summed)
    assert size == summed_log["nsentences"] == target.size(0)
    assert log["ntokens"] == summed_log["ntokens"]


def test_ratio_zero_backpropagates_through_the_decoding_loop():
    model, task, sample = setup()
    model.train()
    loss, _, _ = criterion(task, teacher_forcing_ratio=0.0, stop_at_predicted_eos=True)(
        model, sample)
    loss.backward()
    grads = [p.grad for p in model.encoder.parameters()]
    assert all(g is not None for g in grads)
    assert sum(g.abs().sum() for g in grads) > 0


def test_scheduled_sampling_mixes_gold_and_predicted_inputs():
    model, task, sample = setup()
    model.eval()
    with torch.no_grad():
        gold, _, _ = criterion(task, valid_teacher_forcing_ratio=1.0)(model, sample)
        own, _, _ = criterion(task, valid_teacher_forcing_ratio=0.0)(model, sample)
        torch.manual_seed(0)
        mixed = [criterion(task, valid_teacher_forcing_ratio=0.5)(model, sample)[0]
                 for _ in range(8)]
    assert all(torch.isfinite(m) for m in mixed)
    assert len({round(float(m), 4) for m in mixed}) > 1  # the coin changes the inputs


def test_accuracies_are_logged():
    model, task, sample = setup()
    model.eval()
    pad = task.target_dictionary.pad()
    with torch.no_grad():
        _, _, log = criterion(task)(model, sample)
        logits, _ = model(**sample["net_input"])
    target = sample["target"]
    correct = logits.argmax(-1).eq(target) & target.ne(pad)
    assert log["n_correct"] == int(correct.sum())
    assert log["n_seq_correct"] == int((correct | target.eq(pad)).all(1).sum())
    assert log["nsentences"] == len(PAIRS)


def test_invalid_ratio_raises():
    _, task, _ = setup()
    with pytest.raises(ValueError):
        criterion(task, teacher_forcing_ratio=1.5)


def test_packed_vmap_loss_refuses_the_settings_it_does_not_compute():
    """The vmap packed loss is plain summed NLL: the teacher-forcing criterion packs only at
    ratio 1 without stop-at-predicted-eos and without the per-length mean; otherwise a
    PackedError names the fix (never a different loss than the run alone would have)."""
    from fairseq_entropy.models.packed import PackedError, _criterion_kind

    _, task, _ = setup()
    assert _criterion_kind(criterion(task)) == "nll"
    for options in (dict(mean_over_target_length=True), dict(stop_at_predicted_eos=True),
                    dict(teacher_forcing_ratio=0.5)):
        with pytest.raises(PackedError, match="Fix: .*--teacher-forcing-ratio 1"):
            _criterion_kind(criterion(task, **options))
