import argparse
import math

import pytest
import torch
from fairseq.data import Dictionary

import fairseq_entropy  # noqa: F401  (registers the model)
from fairseq_entropy.scan.dictionary import dictionary_words
from fairseq_entropy.scan.grammar import Grammar
from fairseq_entropy.models.scan_transformer import ScanTransformerModel
from fairseq_entropy.modules.dropout import UniformMaskDropout
from fairseq_entropy.modules.positions import (RelativePositions, RotaryPositions,
                                               relative_bucket, sinusoidal_table,
                                               token_positions)

SCHEMES = ["sinusoidal", "learned", "relative", "rope"]


class FakeTask:
    def __init__(self):
        d = Dictionary()
        for w in dictionary_words(Grammar.paper()):
            d.add_symbol(w)
        self.source_dictionary = self.target_dictionary = d


def build(scheme, **kw):
    torch.manual_seed(0)
    args = argparse.Namespace(**{"position_encoding": scheme, "dropout": 0.0, "embed_dim": 64,
                                 "encoder_layers": 2, "decoder_layers": 2, **kw})
    model = ScanTransformerModel.build_model(args, FakeTask())
    return model.eval()


def random_batch(d, lengths, left_pad=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    toks = torch.full((len(lengths), T), d.pad())
    for i, n in enumerate(lengths):
        row = torch.randint(d.nspecial, len(d), (n,), generator=g)
        row[-1] = d.eos()
        if left_pad:
            toks[i, T - n:] = row
        else:
            toks[i, :n] = row
    return toks


def test_token_positions_left_and_right_padding():
    t = torch.tensor([[1, 1, 5, 6, 2], [5, 6, 7, 8, 2], [5, 2, 1, 1, 1]])
    assert token_positions(t, pad=1).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4],
                                                  [0, 1, 0, 0, 0]]


def test_sinusoidal_table_values():
    t = sinusoidal_table(4, 4)
    assert t[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert t[3, 0].item() == pytest.approx(math.sin(3))
    assert t[3, 3].item() == pytest.approx(math.cos(3 / 100))


def test_relative_bucket_hand_values():
    rel = torch.tensor([-9, -3, -2, -1, 0, 1, 2, 3, 9, 100])
    # B = 4 (mid 2): |r| <= 2 keeps r; longer distances share the outermost bucket 3
    assert (relative_bucket(rel, 4, 512) - 3).tolist() == [-3, -3, -2, -1, 0, 1, 2, 3, 3, 3]
    # B = 8 (mid 4), L = 64: r = 6 -> 4 + ceil(log(1.5)/log(63/4) * 3) = 4 + ceil(0.4414) = 5
    # r = 20 -> 4 + ceil(log(5)/log(15.75) * 3) = 4 + ceil(1.7579) = 6; r = 63 -> 7
    rel = torch.tensor([4, 5, 6, 20, 63, -63, 500])
    assert (relative_bucket(rel, 8, 64) - 7).tolist() == [4, 5, 5, 6, 7, -7, 7]


def test_relative_table_inits_and_dropout():
    # default: N(0, 0.02^2), the same draws as trunc_normal_(std=0.02) from the same seed
    torch.manual_seed(3)
    default = RelativePositions(64, 512, 128)
    torch.manual_seed(3)
    expected = torch.nn.init.trunc_normal_(torch.empty(127, 128), std=0.02)
    assert torch.equal(default.table.data, expected)
    assert isinstance(default.dropout, torch.nn.Identity)
    # xavier: std sqrt(2 / (d + 2B - 1)) = sqrt(2 / 255) = 0.0886 for B = 64, d = 128, cut at
    # 2 std (a truncated unit normal cut at +-2 has std 0.8796)
    torch.manual_seed(3)
    xavier = RelativePositions(64, 512, 128, init="xavier")
    std = math.sqrt(2 / 255)
    assert xavier.table.abs().max().item() <= 2 * std
    assert xavier.table.std().item() == pytest.approx(0.8796 * std, rel=0.03)
    # the layer norm makes the forward pass independent of the table's scale, up to its eps:
    # the same rows' directions, and 1e-5 against a row variance near 0.02^2 = 4e-4 shrinks
    # the small table's rows by about 1 - sqrt(400/410) = 1.2%
    with torch.no_grad():
        xavier.table.copy_(default.table * 4.4)
    big, small = xavier(), default()
    cos = torch.nn.functional.cosine_similarity(big, small, dim=1)
    assert cos.min().item() > 1 - 1e-6
    ratio = small.norm(dim=1) / big.norm(dim=1)
    assert 0.98 < ratio.min().item() and ratio.max().item() < 0.995
    # dropout: a fresh mask at every call in training, none in evaluation
    drop = RelativePositions(4, 512, 16, dropout=0.5)
    a, b = drop(), drop()
    assert (a == 0).any() and not torch.equal(a, b)
    drop.eval()
    assert torch.equal(drop(), drop.norm(drop.table))
    with pytest.raises(ValueError, match="xavier"):
        RelativePositions(4, 512, 16, init="ones")


def test_relative_table_options_reach_the_model():
    model = build("relative", relative_table_init="xavier", relative_dropout=0.1)
    enc, dec = model.encoder.stack.relative, model.decoder.stack.relative
    assert enc.dropout.p == dec.dropout.p == 0.1
    # source table B = 64 (127 rows), target B = 4 (7 rows), d = 64: Glorot std per table
    assert enc.table.abs().max().item() <= 2 * math.sqrt(2 / (64 + 127))
    assert dec.table.abs().max().item() <= 2 * math.sqrt(2 / (64 + 7))
    assert dec.table.abs().max().item() > 2 * 0.02 * 3


def test_rope_hand_values_and_shift_invariance():
    rope = RotaryPositions(4, theta=100.0)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 1, 1, 4)
    out = rope(x, torch.tensor([[1]]))
    # pairs (0, 2) at angle 1 and (1, 3) at angle 100^(-1/2) = 0.1
    c1, s1, c2, s2 = math.cos(1), math.sin(1), math.cos(0.1), math.sin(0.1)
    expected = [1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2]
    assert out.flatten().tolist() == pytest.approx(expected, abs=1e-6)

    torch.manual_seed(1)
    q, k = torch.randn(1, 1, 1, 64), torch.randn(1, 1, 1, 64)

    def score(rope, i, j):
        return (rope(q, torch.tensor([[i]])) * rope(k, torch.tensor([[j]]))).sum().item()
    std = RotaryPositions(64, theta=1000.0, variant="standard")
    authors = RotaryPositions(64, theta=1000.0, variant="authors")
    base = score(std, 2, 0)
    for shift in (1, 5, 17, 40):
        assert score(std, 2 + shift, shift) == pytest.approx(base, abs=1e-4)
    spread = [score(authors, 2 + s, s) for s in (0, 5, 17, 40)]
    assert max(spread) - min(spread) > 1e-2  # the authors' variant is not relative


@pytest.mark.parametrize("scheme", SCHEMES)
def test_shapes_and_padding_invariance(scheme):
    model = build(scheme)
    d = model.encoder.dictionary
    src = random_batch(d, [7, 3, 5], left_pad=True, seed=1)
    prev = random_batch(d, [6, 2, 4], left_pad=False, seed=2)
    prev[:, 0] = d.eos()
    with torch.no_grad():
        logits, _ = model(src, torch.tensor([7, 3, 5]), prev)
        assert logits.shape == (3, prev.shape[1], len(d))
        for i, (n, m) in enumerate(zip([7, 3, 5], [6, 2, 4])):
            alone, _ = model(src[i:i + 1, -n:], torch.tensor([n]), prev[i:i + 1, :m])
            assert torch.allclose(alone[0], logits[i, :m], atol=1e-5)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_real_token_pass_equals_the_padded_computation(scheme):
    """Encoder and teacher-forced decoder compute the real tokens only; the loss and every
    gradient equal those of the whole padded [B, S] / [B, T] computation (run here through
    the same layers without packing), and encoder output and logits are zero at padding."""
    model = build(scheme).train()  # dropout 0: deterministic, but the training code path
    d = model.encoder.dictionary
    src = random_batch(d, [7, 3, 5], left_pad=True, seed=4)
    prev = random_batch(d, [9, 2, 5], left_pad=False, seed=5)
    prev[:, 0] = d.eos()
    target = random_batch(d, [9, 2, 5], left_pad=False, seed=6)
    real = prev.ne(d.pad())

    def loss_and_grads(logits):
        loss = torch.nn.functional.cross_entropy(logits[real], target[real], reduction="sum")
        model.zero_grad()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                               if p.grad is not None}

    enc = model.encoder(src, torch.tensor([7, 3, 5]))
    src_real = src.ne(d.pad())
    assert not src_real.all() and torch.count_nonzero(enc["encoder_out"][0][~src_real]) == 0
    packed, _ = model.decoder(prev, enc)
    assert torch.count_nonzero(packed[~real]) == 0
    loss, grads = loss_and_grads(packed)

    encoder, dec = model.encoder, model.decoder
    src_pos = token_positions(src, d.pad())
    enc_padded = encoder._layers(encoder.stack.embed(src, src_pos), src_pos, ~src_real)
    assert torch.allclose(enc["encoder_out"][0][src_real], enc_padded[src_real], atol=1e-5)
    enc = {"encoder_out": [enc_padded], "encoder_padding_mask": [~src_real],
           "src_positions": [src_pos]}
    pos = token_positions(prev, d.pad())
    padded = dec.output_layer(dec._layers(dec.stack.embed(prev, pos), pos, enc))
    ref_loss, ref_grads = loss_and_grads(padded)
    assert torch.allclose(packed[real], padded[real], atol=1e-5)
    assert torch.allclose(loss, ref_loss, rtol=1e-5)
    assert grads.keys() == ref_grads.keys()
    for name, g in grads.items():
        assert torch.allclose(g, ref_grads[name], atol=1e-5, rtol=1e-4), name


@pytest.mark.parametrize("scheme", SCHEMES)
def test_incremental_decoding_matches_full_forward(scheme):
    model = build(scheme)
    d = model.encoder.dictionary
    src = random_batch(d, [6, 9, 4], seed=3)
    lengths = torch.tensor([6, 9, 4])
    with torch.no_grad():
        enc = model.encoder(src, lengths)
        tokens = torch.full((3, 1), d.eos())
        state = {}
        step_logits = []
        for _ in range(12):
            out, _ = model.decoder(tokens, enc, incremental_state=state)
            step_logits.append(out[:, -1])
            tokens = torch.cat([tokens, out[:, -1].argmax(-1, keepdim=True)], dim=1)
        full, _ = model.decoder(tokens[:, :-1], enc)
    assert torch.allclose(torch.stack(step_logits, 1), full, atol=1e-5)
    assert torch.equal(torch.stack(step_logits, 1).argmax(-1), full.argmax(-1))


def test_authors_initialisation_and_embedding_scale():
    model = build("sinusoidal")
    w = model.decoder.output_projection.weight
    assert w.abs().max() <= 0.1 and model.decoder.output_projection.bias.abs().max() == 0
    q = model.encoder.stack.layers[0].self_attn.q_proj.weight
    std = math.sqrt(2 / (5 * 64))
    assert q.abs().max() <= 2 * std + 1e-6 and q.std().item() == pytest.approx(0.88 * std, rel=0.1)
    assert model.encoder.stack.embed_scale == 2.0
    assert model.encoder.stack.layers[0].self_attn.num_heads == 1  # d / 64


def test_few_updates_lower_the_loss():
    model = build("sinusoidal").train()
    d = model.encoder.dictionary
    src = random_batch(d, [5, 6, 4, 6], seed=4)
    tgt = random_batch(d, [5, 3, 6, 4], left_pad=False, seed=5)
    prev = torch.roll(tgt, 1, dims=1)
    prev[:, 0] = d.eos()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(30):
        logits, _ = model(src, None, prev)
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt,
                                                 ignore_index=d.pad())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("scheme", ["sinusoidal", "learned", "relative"])
def test_rope_variant_without_rope_is_refused(scheme):
    with pytest.raises(ValueError, match="applies only to --position-encoding rope"):
        build(scheme, rope_variant="authors")
    assert build("rope", rope_variant="authors").encoder is not None


def test_dropout_only_on_attention_and_residual_branches():
    """The authors' placement: no dropout on the embeddings or inside the GEGLU; the options
    put it there."""
    model = build("sinusoidal", dropout=0.5).train()
    s = model.encoder.stack
    d = model.encoder.dictionary
    src = random_batch(d, [5, 6, 4, 6], seed=4)
    pos = token_positions(src, d.pad())
    x = torch.randn(4, 6, 64)
    torch.manual_seed(1)
    assert torch.equal(s.embed(src, pos), s.embed(src, pos))
    assert torch.equal(s.layers[0].ffn(x), s.layers[0].ffn(x))
    # the residual branches and attention keep --dropout: two passes differ
    out = [model.encoder(src)["encoder_out"][0] for _ in range(2)]
    assert not torch.allclose(out[0], out[1])

    model = build("sinusoidal", dropout=0.0, embedding_dropout=0.5,
                  activation_dropout=0.5).train()
    s = model.encoder.stack
    emb = s.embed(src, pos)
    kept = emb != 0
    # inverted dropout: the kept entries are scaled by 1 / (1 - p)
    ref = s.embed_scale * s.embed_tokens(src) + s.absolute(pos)
    assert 0.3 < kept.float().mean() < 0.7
    assert torch.allclose(emb[kept], 2 * ref[kept])
    assert not torch.equal(s.layers[0].ffn(x), s.layers[0].ffn(x))
    model.eval()
    assert torch.equal(s.layers[0].ffn(x), s.layers[0].ffn(x))


def test_uniform_mask_dropout_keeps_with_probability_one_minus_p_and_rescales():
    """Inverted dropout: each entry kept with probability 1 - p and scaled by 1 / (1 - p);
    the gradient is the same mask; identity in evaluation; zeros for p = 1."""
    torch.manual_seed(3)
    drop = UniformMaskDropout(0.25).train()
    x = torch.full((400, 500), 2.0, requires_grad=True)
    y = drop(x)
    kept = y != 0
    # 200,000 Bernoulli(0.75) draws: the share kept is within 5 standard errors of 0.75
    share = kept.float().mean().item()
    assert abs(share - 0.75) < 5 * math.sqrt(0.75 * 0.25 / kept.numel())
    assert torch.equal(y[kept], torch.full_like(y[kept], 2.0 / 0.75))
    y.sum().backward()
    assert torch.equal(x.grad, kept.float() / 0.75)
    assert drop.eval()(x) is x
    assert torch.count_nonzero(UniformMaskDropout(1.0).train()(x)) == 0
    with pytest.raises(ValueError):
        UniformMaskDropout(1.5)


def _attention_inputs(seed=5, b=3, h=2, tq=5, tk=7, dh=8):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, t, dh, generator=g) for t in (tq, tk, tk))
    bias = torch.randn(b, h, tq, tk, generator=g)
    pads = torch.zeros(b, tk, dtype=torch.bool)
    pads[0, 5:] = True
    pads[2, 6:] = True
    blocked = pads[:, None, None, :] | torch.ones(tq, tk, dtype=torch.bool).triu(tk - tq + 1)
    return q, k, v, bias, blocked


def test_attention_with_dropout_is_the_fused_kernels_computation():
    """Without dropping anything, the written-out training path equals
    scaled_dot_product_attention (scale 1/sqrt(d_head), additive bias, -inf where blocked),
    and a hand computation of softmax(q k^T / sqrt(d_head) + bias) v."""
    from fairseq_entropy.modules.attention import MultiheadAttention

    attn = MultiheadAttention(16, 2, dropout=0.3)
    attn.dropout.eval()  # the mask is all ones: the rest of the computation is compared
    q, k, v, bias, blocked = _attention_inputs()
    got = attn._attend_with_dropout(q, k, v, bias, blocked)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=bias.masked_fill(blocked, float("-inf")))
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8) + bias
    hand = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1) @ v
    assert torch.allclose(got, sdpa, atol=1e-6)
    assert torch.allclose(got, hand, atol=1e-6)
    # blocked keys get no weight: changing their values changes nothing
    v2 = v.clone()
    v2[0, :, 5:] = 100.0
    assert torch.allclose(attn._attend_with_dropout(q, k, v2, None, blocked),
                          attn._attend_with_dropout(q, k, v, None, blocked), atol=1e-6)


def test_attention_dropout_drops_probabilities_and_is_unbiased():
    """In training, each attention probability is kept with probability 1 - p and scaled
    by 1 / (1 - p): with v the identity the output rows are the dropped-out probabilities
    themselves, and their mean over draws is the probabilities without dropout."""
    from fairseq_entropy.modules.attention import MultiheadAttention

    torch.manual_seed(11)
    p = 0.25
    attn = MultiheadAttention(16, 2, dropout=p).train()
    q, k, _, _, blocked = _attention_inputs(tk=8, dh=8)
    eye = torch.eye(8).expand(3, 2, 8, 8)  # v = I: the output is the probability matrix
    probs = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(
        blocked, float("-inf")), dim=-1)
    draws = torch.stack([attn._attend_with_dropout(q, k, eye, None, blocked)
                         for _ in range(4000)])
    kept = draws != 0
    allowed = probs > 0
    assert not kept[:, ~allowed.expand_as(kept[0])].any()
    assert torch.allclose(draws[kept], (probs / (1 - p)).expand_as(draws)[kept], rtol=1e-5)
    share = kept[:, allowed].float().mean().item()
    n = kept[:, allowed].numel()
    assert abs(share - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)
    # unbiased: the mean over 4000 draws is within 5 standard errors of each probability
    se = probs * math.sqrt(p / (1 - p) / 4000)
    assert ((draws.mean(0) - probs).abs() <= 5 * se + 1e-6).all()


def test_cpu_training_with_dropout_takes_the_written_out_path(monkeypatch):
    """On the CPU, training with dropout > 0 computes attention through _attend_with_dropout;
    evaluation, and training without dropout, through scaled_dot_product_attention."""
    from fairseq_entropy.modules.attention import MultiheadAttention

    calls = []
    original = MultiheadAttention._attend_with_dropout

    def counted(self, *args):
        calls.append(self)
        return original(self, *args)

    monkeypatch.setattr(MultiheadAttention, "_attend_with_dropout", counted)
    d = build("sinusoidal").encoder.dictionary
    src = random_batch(d, [5, 6, 4], seed=2)
    model = build("sinusoidal", dropout=0.1).train()
    model.encoder(src)
    assert len(calls) == 2  # one self-attention per encoder layer
    model.eval()
    model.encoder(src)
    build("sinusoidal", dropout=0.0).train().encoder(src)
    assert len(calls) == 2
