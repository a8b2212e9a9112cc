"""Tests of the ``rnn_seq2seq`` model: shapes, learning, incremental decoding,
padding invariance, presets and a ``fairseq-train`` / ``fairseq-generate --user-dir`` round trip."""

import argparse

import pytest
import torch
from fairseq.models import ARCH_MODEL_REGISTRY, ARCH_CONFIG_REGISTRY
from fairseq.sequence_generator import SequenceGenerator

import fairseq_entropy  # noqa: F401  (registers the archs)
from fairseq_entropy.models.rnn_seq2seq import RNNSeq2SeqModel, rotate_padding

from _toy import (PAIRS, FakeTask, assert_batch_equals_alone,  # noqa: E402
                  assert_incremental_equals_full,
                  greedy, losses_before_and_after, make_dictionary, make_sample,
                  train_and_generate)


def build(arch="rnn_seq2seq", **overrides):
    d = make_dictionary()
    args = argparse.Namespace(**overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(0)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, FakeTask(d)), d


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_output_shapes(cell):
    model, d = build(cell=cell, encoder_layers=2, encoder_hidden_size=16)
    sample = make_sample(d)
    net = sample["net_input"]
    enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
    bsz, src_len = net["src_tokens"].shape
    tgt_len = net["prev_output_tokens"].size(1)
    assert enc["encoder_out"][0].shape == (bsz, src_len, 32)
    assert enc["encoder_hidden"][0].shape == (bsz, 32)
    assert ("encoder_cell" in enc) == (cell == "lstm")
    logits, extra = model(**net)
    assert logits.shape == (bsz, tgt_len, len(d))
    assert extra["attn"][0].shape == (bsz, tgt_len, src_len)
    # attention never looks at source padding
    pad = net["src_tokens"].eq(d.pad()).unsqueeze(1).expand_as(extra["attn"][0])
    assert extra["attn"][0][pad].abs().max() == 0
    assert model.decoder.hidden_size == 2 * model.encoder.hidden_size


def test_unknown_cell_raises():
    with pytest.raises(ValueError):
        build(cell="transformer")


def test_presets_match_the_paper():
    expected = {
        "rnn_seq2seq_exp1_rnn_h64": ("rnn", 2, 64),
        "rnn_seq2seq_exp1_rnn_h128": ("rnn", 2, 128),
        "rnn_seq2seq_exp2_gru_l2_h64": ("gru", 2, 64),
        "rnn_seq2seq_exp2_rnn_l1_h64": ("rnn", 1, 64),
    }
    for arch, (cell, layers, hidden) in expected.items():
        model, _ = build(arch)
        assert isinstance(model, RNNSeq2SeqModel)
        assert model.encoder.cell == cell
        assert model.encoder.num_layers == layers
        assert model.encoder.hidden_size == hidden
        assert model.decoder.hidden_size == 2 * hidden


def test_rotate_padding_round_trip():
    x = torch.arange(12).view(3, 4)
    shift = torch.tensor([0, 1, 3])
    rolled = rotate_padding(x, shift)
    assert rolled.tolist() == [[0, 1, 2, 3], [5, 6, 7, 4], [11, 8, 9, 10]]
    assert torch.equal(rotate_padding(rolled, -shift), x)


def test_a_few_updates_lower_the_loss():
    model, d = build(encoder_hidden_size=16, dropout=0.0)
    sample = make_sample(d)
    first, last = losses_before_and_after(model, sample, d.pad(), lr=1e-2)
    assert last < 0.5 * first


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_incremental_greedy_equals_full_forward(cell):
    model, d = build(cell=cell, encoder_hidden_size=16)
    net, inc_tokens, inc_logits = assert_incremental_equals_full(model, d, 8, atol=1e-5)
    # one full teacher-forced pass over the greedy output gives the same logits
    with torch.no_grad():
        prev = torch.cat([torch.full((inc_tokens.size(0), 1), d.eos()), inc_tokens[:, :-1]], 1)
        one_pass, _ = model(net["src_tokens"], net["src_lengths"], prev)
    assert torch.allclose(inc_logits, one_pass, atol=1e-5)


def test_sequence_generator_beam1_matches_greedy_and_beam_reorders():
    model, d = build(cell="gru", encoder_hidden_size=16)
    model.eval()
    net = make_sample(d)["net_input"]
    sample = {"net_input": net}
    with torch.no_grad():
        # the generator never emits pad, and not end-of-sentence first (min_len 1)
        tokens, _ = greedy(model, net["src_tokens"], net["src_lengths"], 10, d.eos(),
                           forbid=[(None, d.pad()), (0, d.eos())])
        hyps = SequenceGenerator([model], d, beam_size=1, max_len_a=0, max_len_b=10).generate(
            [model], sample)
        beam = SequenceGenerator([model], d, beam_size=3, max_len_a=0, max_len_b=10).generate(
            [model], sample)
    for i, hyp in enumerate(hyps):
        out = hyp[0]["tokens"]
        n = len(out) - 1 if out[-1] == d.eos() else len(out)
        assert out[:n].tolist() == tokens[i, :n].tolist()
    assert all(len(b) == 3 for b in beam)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
@pytest.mark.parametrize("left_pad_source", [True, False])
def test_padded_batch_equals_each_sentence_alone(cell, left_pad_source):
    model, d = build(cell=cell, encoder_hidden_size=16)
    assert_batch_equals_alone(model, d, 8, atol=1e-5, left_pad_source=left_pad_source,
                              teacher_forced=True)


@pytest.mark.slow
def test_checkpoint_round_trips_through_fairseq_generate(tmp_path):
    hyps = train_and_generate(
        tmp_path,
        ["--arch", "rnn_seq2seq", "--encoder-hidden-size", "16"],
        ["--criterion", "teacher_forcing_cross_entropy", "--teacher-forcing-ratio", "0",
         "--stop-at-predicted-eos"],
    )
    assert len(hyps) == 4 * len(PAIRS)
