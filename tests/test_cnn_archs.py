"""Tests of the paper's CNN architectures on fairseq's ``fconv``: configuration,
shapes, learning, incremental decoding, padding invariance and a ``fairseq-generate`` round trip."""

import argparse

import pytest
import torch
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

import fairseq_entropy.models.cnn_archs  # noqa: F401  (registers the architectures)

from _toy import (PAIRS, FakeTask, assert_batch_equals_alone,  # noqa: E402
                  assert_incremental_equals_full,
                  losses_before_and_after, make_dictionary, make_sample,
                  train_and_generate)

ARCHS = ["fconv_scan_exp1", "fconv_scan_exp2"]


def build(arch="fconv_scan_exp1", **overrides):
    d = make_dictionary()
    args = argparse.Namespace(max_source_positions=1024, max_target_positions=1024, **overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(0)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, FakeTask(d)), d, args


@pytest.mark.parametrize("arch", ARCHS)
def test_arch_is_the_papers_configuration(arch):
    model, _, args = build(arch)
    assert eval(args.encoder_layers) == [(64, 5)] * 3
    assert eval(args.decoder_layers) == [(64, 5)] * 3
    assert args.encoder_embed_dim == args.decoder_embed_dim == 64
    assert len(model.encoder.convolutions) == 3
    assert all(conv.kernel_size[0] == 5 and conv.out_channels == 128
               for conv in model.decoder.convolutions)  # GLU halves 128 to 64 channels


def test_command_line_overrides_win():
    _, _, args = build("fconv_scan_exp1", encoder_layers="[(32, 3)] * 2")
    assert args.encoder_layers == "[(32, 3)] * 2"


def test_output_shapes():
    model, d, _ = build()
    net = make_sample(d)["net_input"]
    model.eval()  # fconv returns attention weights in eval mode only
    logits, attn = model(**net)
    bsz, src_len = net["src_tokens"].shape
    assert logits.shape == (bsz, net["prev_output_tokens"].size(1), len(d))
    assert attn.shape == (bsz, net["prev_output_tokens"].size(1), src_len)


def test_a_few_updates_lower_the_loss():
    model, d, _ = build(dropout=0.0)
    sample = make_sample(d)
    first, last = losses_before_and_after(model, sample, d.pad(), lr=3e-3)
    assert last < 0.5 * first


def test_incremental_greedy_equals_full_forward():
    model, d, _ = build()
    assert_incremental_equals_full(model, d, 8, atol=1e-4)


def test_padded_batch_equals_each_sentence_alone():
    model, d, _ = build()
    assert_batch_equals_alone(model, d, 8, atol=1e-4)


@pytest.mark.slow
def test_checkpoint_round_trips_through_fairseq_generate(tmp_path):
    hyps = train_and_generate(tmp_path, ["--arch", "fconv_scan_exp1"],
                              ["--criterion", "cross_entropy"], lr=1e-3, epochs=2)
    assert len(hyps) == 4 * len(PAIRS)
