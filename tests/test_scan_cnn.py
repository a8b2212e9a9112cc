"""Tests of ``scan_cnn``, the authors' CNN: configuration, parameter count from the authors' layer
sizes, initialisation, attention arithmetic, shapes, learning, incremental decoding, padding
invariance and a ``fairseq-train`` -> ``fairseq-generate`` round trip."""

import argparse
import math

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

import fairseq_entropy.models.scan_cnn  # noqa: F401  (registers the model)
from fairseq_entropy.models.scan_cnn import EmbeddingAttention

from _toy import (PAIRS, FakeTask, assert_batch_equals_alone,  # noqa: E402
                  assert_incremental_equals_full,
                  losses_before_and_after, make_dictionary, make_sample,
                  train_and_generate)


def build(arch="scan_cnn_paper", dictionary=None, seed=0, **overrides):
    d = dictionary or make_dictionary()
    args = argparse.Namespace(**overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, FakeTask(d)), d, args


def authors_vocabulary() -> Dictionary:
    """A dictionary of 30 entries, the size of the authors' ``static/scan_tokenizer.json`` (26
    words and actions + [BOS] [EOS] [PAD] [TRANS]); fairseq's 4 specials + 26 symbols."""
    d = Dictionary()
    for i in range(26):
        d.add_symbol(f"w{i}")
    return d


def hand_count(vocab: int, hidden: int, kernel: int, layers: int, tied: bool = False) -> int:
    """Trainable parameters of the authors' CNN from its layer sizes (biases included)."""
    linear = hidden * hidden + hidden                   # in_proj, out_proj, residual/attn proj
    conv = hidden * 2 * hidden * kernel + 2 * hidden    # H -> 2H channels, width k
    embedding = vocab * hidden
    encoder = embedding + 2 * linear + layers * conv + (layers - 1) * linear
    decoder = embedding + 2 * linear + layers * (conv + linear) + (layers - 1) * linear
    classifier = (0 if tied else hidden * vocab) + vocab
    return encoder + decoder + classifier


def test_paper_arch_is_the_authors_configuration():
    model, _, args = build()
    assert (args.embed_dim, args.encoder_layers, args.decoder_layers, args.kernel_size,
            args.dropout, args.share_decoder_input_output_embed) == (64, 3, 3, 5, 0.1, False)
    assert len(model.encoder.layers) == len(model.decoder.layers) == 3
    conv = model.decoder.layers[0].conv
    assert (conv.in_channels, conv.out_channels, conv.kernel_size) == (64, 128, (5,))


def test_command_line_values_win_even_zero():
    _, _, args = build(dropout=0.0, kernel_size=3)
    assert args.dropout == 0.0 and args.kernel_size == 3


def test_sizes_below_one_are_refused_with_a_fix():
    with pytest.raises(ValueError, match="kernel-size.*Fix"):
        build(kernel_size=0)


def test_parameter_count_equals_the_authors_layer_sizes():
    # H = 64, k = 5, 3 layers, 30-word vocabulary: encoder 1920 + 2*4160 + 3*41088 + 2*4160
    # = 141824; decoder 1920 + 2*4160 + 3*(41088 + 4160) + 2*4160 = 154304; classifier 1950
    assert hand_count(30, 64, 5, 3) == 298_078
    for tied in (False, True):
        model, _, _ = build(dictionary=authors_vocabulary(),
                            share_decoder_input_output_embed=tied)
        n = sum(p.numel() for p in model.parameters())
        assert n == (296_158 if tied else 298_078) == hand_count(30, 64, 5, 3, tied)
    model, d, _ = build(embed_dim=32, kernel_size=3, encoder_layers=2, decoder_layers=2)
    assert sum(p.numel() for p in model.parameters()) == hand_count(len(d), 32, 3, 2)


def test_initialisation_follows_the_authors_scales():
    model, _, _ = build(dictionary=authors_vocabulary())
    p, h, k = 0.1, 64, 5

    def std(t):
        return t.detach().std().item()

    conv = torch.cat([layer.conv.weight.flatten() for layer in model.decoder.layers])
    assert std(conv) == pytest.approx(math.sqrt(4 * (1 - p) / (k * h)), rel=0.02)
    assert std(model.encoder.embed_tokens.weight) == pytest.approx(0.1, rel=0.05)
    assert std(model.encoder.in_proj.weight) == pytest.approx(math.sqrt((1 - p) / h), rel=0.05)
    assert std(model.encoder.out_proj.weight) == pytest.approx(math.sqrt(1 / h), rel=0.05)
    assert std(model.decoder.out_proj.weight) == pytest.approx(math.sqrt((1 - p) / h), rel=0.05)
    assert model.encoder.layers[0].projection is None
    assert std(model.encoder.layers[1].projection.weight) == pytest.approx(1 / 8, rel=0.05)
    biases = [m.bias for m in model.modules() if getattr(m, "bias", None) is not None]
    assert len(biases) == 18 and all(torch.count_nonzero(b) == 0 for b in biases)


def test_attention_context_is_scaled_by_the_real_source_length():
    # zero keys give uniform weights over the 3 real positions of row 0 and all 5 of row 1;
    # the context is then sqrt(n) times the mean of the real values
    torch.manual_seed(0)
    att = EmbeddingAttention(4)
    a, g = torch.randn(2, 1, 4), torch.randn(2, 1, 4)
    values = torch.randn(2, 5, 4)
    pad = torch.tensor([[True, True, False, False, False], [False] * 5])
    n = torch.tensor([3.0, 5.0]).view(2, 1, 1)
    out, weights = att(a, g, torch.zeros(2, 5, 4), values, pad, n.sqrt())
    assert torch.allclose(weights[0, 0], torch.tensor([0, 0, 1 / 3, 1 / 3, 1 / 3]))
    mean = torch.stack([values[0, 2:].mean(0), values[1].mean(0)]).unsqueeze(1)
    assert torch.allclose(out, (mean * n.sqrt() + a) * math.sqrt(0.5), atol=1e-6)


def test_key_gradient_is_scaled_by_one_over_twice_the_decoder_layers():
    model, d, _ = build()
    net = make_sample(d)["net_input"]
    keys = model.encoder(net["src_tokens"], net["src_lengths"])["encoder_out"][0]
    keys.sum().backward()
    bsz, src_len = net["src_tokens"].shape
    expected = torch.full((64,), bsz * src_len / 6.0)
    assert torch.allclose(model.encoder.out_proj.bias.grad, expected)


def test_output_shapes():
    model, d, _ = build()
    model.eval()
    net = make_sample(d)["net_input"]
    enc = model.encoder(net["src_tokens"], net["src_lengths"])
    bsz, src_len = net["src_tokens"].shape
    tgt_len = net["prev_output_tokens"].size(1)
    assert enc["encoder_out"][0].shape == enc["encoder_values"][0].shape == (bsz, src_len, 64)
    assert enc["encoder_padding_mask"][0].shape == (bsz, src_len)
    logits, extra = model(**net)
    assert logits.shape == (bsz, tgt_len, len(d))
    attn = extra["attn"][0]
    assert attn.shape == (bsz, tgt_len, src_len)
    assert torch.allclose(attn.sum(-1), torch.ones(bsz, tgt_len), atol=1e-5)
    assert torch.all(attn.masked_select(enc["encoder_padding_mask"][0].unsqueeze(1)) == 0)


def test_decoder_is_causal():
    model, d, _ = build()
    model.eval()
    net = make_sample(d)["net_input"]
    changed = net["prev_output_tokens"].clone()
    changed[:, 3:] = d.index("JUMP")
    with torch.no_grad():
        a, _ = model(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"])
        b, _ = model(net["src_tokens"], net["src_lengths"], changed)
    assert torch.equal(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_a_few_updates_lower_the_loss():
    model, d, _ = build(dropout=0.0)
    first, last = losses_before_and_after(model, make_sample(d), d.pad(), lr=3e-3)
    assert last < 0.5 * first


def test_incremental_greedy_equals_full_forward():
    model, d, _ = build()
    assert_incremental_equals_full(model, d, 9, atol=1e-5)


def test_incremental_state_follows_a_reordered_batch():
    model, d, _ = build()
    model.eval()
    net = make_sample(d)["net_input"]
    order = torch.tensor([3, 0, 4, 1, 2])
    enc = model.encoder(net["src_tokens"], net["src_lengths"])
    tokens = net["prev_output_tokens"][:, :4]
    state = {}
    with torch.no_grad():
        for t in range(1, 4):
            model.decoder(tokens[:, :t], encoder_out=enc, incremental_state=state)
        model.decoder.reorder_incremental_state_scripting(state, order)
        step, _ = model.decoder(tokens[order], model.encoder.reorder_encoder_out(enc, order),
                                incremental_state=state)
        full, _ = model.decoder(tokens, encoder_out=enc)
    # the teacher-forced pass computes real tokens only (zeros at padding)
    real = tokens[order, -1].ne(d.pad())
    assert 0 < int(real.sum()) < len(order)
    assert torch.allclose(step[real, -1], full[order, -1][real], atol=1e-5)
    assert full[order, -1][~real].eq(0).all()


@pytest.mark.parametrize("left_pad_source", [True, False])
def test_padded_batch_equals_each_sentence_alone(left_pad_source):
    model, d, _ = build()
    batch = make_sample(d, left_pad_source=left_pad_source)
    assert batch["net_input"]["src_tokens"].eq(d.pad()).any()  # the batch is really padded
    # teacher_forced: the full pass, which computes the real target tokens only, too
    assert_batch_equals_alone(model, d, 8, atol=1e-5, left_pad_source=left_pad_source,
                              teacher_forced=True)


@pytest.mark.slow
def test_checkpoint_round_trips_through_fairseq_generate(tmp_path):
    hyps = train_and_generate(tmp_path, ["--arch", "scan_cnn_paper", "--dropout", "0"],
                              ["--criterion", "cross_entropy"], lr=3e-3, epochs=30)
    assert len(hyps) == 4 * len(PAIRS)
    d = make_dictionary()
    wanted = {i: t for i, (_, t) in enumerate(PAIRS * 4)}
    got = {int(h.split("\t")[0][2:]): h.split("\t")[2] for h in hyps}
    correct = sum(got[i] == wanted[i] for i in wanted)
    assert correct >= 2 * len(PAIRS), (correct, got)  # an untrained model gets none right
    assert all(w in d.indices for h in got.values() for w in h.split())
