"""Tests of the permutation-equivariant seq2seq (Gordon et al., ICLR 2020).

Equivariance is checked numerically: for every g in G,
``log p(. | g.x, g.y_<t)[g.z] == log p(. | x, y_<t)[z]`` at initialisation and after training
steps; plus incremental decoding, padding invariance, shapes and the group derivation.
"""

import types

import pytest
import torch
from fairseq.data import Dictionary

from fairseq_entropy.models.equivariant_seq2seq import (
    EquivariantSeq2SeqConfig,
    EquivariantSeq2SeqModel,
)
from fairseq_entropy.modules.equivariant import (
    CyclicGroup,
    GAttention,
    GConv,
    GEmbedding,
    GOutputLayer,
    GRecurrentCell,
    VocabularyAction,
    dictionary_action,
    verb_orbits,
)

PAPER_VERBS = ["walk", "run", "look", "jump", "sprint", "crawl", "squat", "lunge"]
PAPER_WORDS = PAPER_VERBS + ["left", "right", "opposite", "around", "twice", "thrice", "and",
                             "after"]
PAPER_ACTIONS = [v.upper() for v in PAPER_VERBS] + ["LTURN", "RTURN"]
SCAN_WORDS = ["walk", "run", "look", "jump", "turn", "left", "right", "opposite", "around",
              "twice", "thrice", "and", "after"]
SCAN_ACTIONS = ["I_WALK", "I_RUN", "I_LOOK", "I_JUMP", "I_TURN_LEFT", "I_TURN_RIGHT"]
ATOL = 1e-5


def make_dictionary(words, actions):
    d = Dictionary()
    for tok in words + actions:
        d.add_symbol(tok)
    return d


def make_model(cell="gru", bidirectional=False, layers=1, grammar="paper", **kw):
    words, actions = (PAPER_WORDS, PAPER_ACTIONS) if grammar == "paper" \
        else (SCAN_WORDS, SCAN_ACTIONS)
    d = make_dictionary(words, actions)
    task = types.SimpleNamespace(source_dictionary=d, target_dictionary=d)
    cfg = EquivariantSeq2SeqConfig(cell=cell, embed_dim=6, hidden_dim=5, encoder_layers=layers,
                                   decoder_layers=layers, encoder_bidirectional=bidirectional,
                                   dropout=0.1, **kw)
    torch.manual_seed(0)
    model = EquivariantSeq2SeqModel.build_model(cfg, task)
    return model, d


def random_batch(d, bsz=5, src_len=7, tgt_len=9, seed=1):
    """Left-padded sources ending in eos, right-padded targets starting with eos."""
    gen = torch.Generator().manual_seed(seed)
    low = d.nspecial
    src = torch.full((bsz, src_len), d.pad())
    tgt = torch.full((bsz, tgt_len), d.pad())
    lengths = torch.randint(2, src_len + 1, (bsz,), generator=gen)
    lengths[0] = src_len
    for b in range(bsz):
        n = int(lengths[b])
        src[b, src_len - n:src_len - 1] = torch.randint(low, len(d), (n - 1,), generator=gen)
        src[b, -1] = d.eos()
        m = int(torch.randint(2, tgt_len + 1, (1,), generator=gen)) if b else tgt_len
        tgt[b, :m] = torch.randint(low, len(d), (m,), generator=gen)
        tgt[b, m - 1] = d.eos()
    # fairseq's prev_output_tokens: eos, then the target shifted right, pads kept in place
    prev = torch.cat([torch.full((bsz, 1), d.eos()), tgt[:, :-1]], dim=1)
    prev = prev.masked_fill(tgt.eq(d.pad()), d.pad())
    return src, lengths, prev, tgt


def log_probs(model, src, lengths, prev):
    out = model(src, lengths, prev)
    return model.get_normalized_probs(out, log_probs=True)


def assert_equivariant(model, d, src, lengths, prev):
    """log p(. | g.x, g.y_<t)[g.z] == log p(. | x, y_<t)[z] for every g in G."""
    model.eval()
    perm = dictionary_action(CyclicGroup(len(model.equivariant_words)), d,
                             model.equivariant_words, model.equivariant_actions).perm
    with torch.no_grad():
        base = log_probs(model, src, lengths, prev)
        mask = prev.ne(d.pad())
        for g in range(perm.shape[0]):
            moved = log_probs(model, perm[g][src], lengths, perm[g][prev])
            assert torch.allclose(moved[..., perm[g]][mask], base[mask], atol=ATOL), f"g={g}"
        # the check is not vacuous: some non-identity g changes the inputs
        assert not torch.equal(perm[1][src], src)


# -- group --------------------------------------------------------------------------------

def test_group_from_paper_dictionary():
    d = make_dictionary(PAPER_WORDS, PAPER_ACTIONS)
    words, actions = verb_orbits(d)
    assert words == sorted(PAPER_VERBS)
    assert actions == [w.upper() for w in words]


def test_group_from_scan_dictionary_excludes_turn():
    d = make_dictionary(SCAN_WORDS, SCAN_ACTIONS)
    words, actions = verb_orbits(d)
    assert words == ["jump", "look", "run", "walk"]
    assert actions == ["I_JUMP", "I_LOOK", "I_RUN", "I_WALK"]


def test_group_from_options_and_errors():
    d = make_dictionary(PAPER_WORDS, PAPER_ACTIONS)
    assert verb_orbits(d, ["jump", "run"]) == (["jump", "run"], ["JUMP", "RUN"])
    assert verb_orbits(d, ["jump", "run"], ["RUN", "JUMP"]) == (["jump", "run"], ["RUN", "JUMP"])
    with pytest.raises(ValueError):
        verb_orbits(d, ["jump", "run"], ["JUMP"])
    with pytest.raises(ValueError):
        verb_orbits(d, ["jump", "hop"])
    with pytest.raises(ValueError):
        verb_orbits(d, ["jump"])
    with pytest.raises(ValueError):
        verb_orbits(d, None, ["JUMP", "RUN"])
    model, _ = make_model(equivariant_words="jump,run")
    assert model.equivariant_words == ["jump", "run"]


def test_vocabulary_action_is_a_group_action():
    group = CyclicGroup(4)
    action = VocabularyAction(group, 12, [[3, 5, 7, 9], [4, 6, 8, 10]])
    perm = action.perm
    assert torch.equal(perm[0], torch.arange(12))
    for a in range(4):
        for b in range(4):
            assert torch.equal(perm[a][perm[b]], perm[int(group.mul[a, b])])
    assert perm[1, 3] == 5 and perm[3, 3] == 9 and perm[2, 11] == 11
    assert int(action.orbit_rep[9]) == 3 and int(action.orbit_rep[11]) == 11
    with pytest.raises(ValueError):
        VocabularyAction(group, 12, [[3, 5, 7]])
    with pytest.raises(ValueError):
        VocabularyAction(group, 12, [[3, 5, 7, 9], [9, 4, 6, 8]])


# -- layers -------------------------------------------------------------------------------

def test_layers_commute_with_the_group():
    torch.manual_seed(0)
    group = CyclicGroup(5)
    action = VocabularyAction(group, 9, [[1, 2, 3, 4, 5]])
    emb, conv = GEmbedding(action, 3), GConv(group, 3, 4)
    out = GOutputLayer(action, GEmbedding(action, 4))
    with torch.no_grad():
        out.bias.normal_()
    attn = GAttention(group, 4, 3)
    cell = GRecurrentCell(group, 3, 4, "lstm")
    tokens = torch.randint(0, 9, (2, 6))
    f = torch.randn(2, 5, 3)
    keys = torch.randn(2, 6, 5, 3)
    q = torch.randn(2, 5, 4)
    for g in range(5):
        act = lambda t, dim=-2: group.act_on_functions(t, g, dim % t.dim())  # noqa: E731
        assert torch.allclose(emb(action.act_on_tokens(tokens, g)), act(emb(tokens)), atol=ATOL)
        assert torch.allclose(conv(act(f)), act(conv(f)), atol=ATOL)
        assert torch.allclose(out(act(q))[:, action.perm[g]], out(q), atol=ATOL)
        ctx_g, a_g = attn(act(q), act(keys), None)
        ctx, a = attn(q, keys, None)
        assert torch.allclose(a_g, a, atol=ATOL) and torch.allclose(ctx_g, act(ctx), atol=ATOL)
        h, c = cell.step(cell.project_input(act(f)), (act(q), act(q)), cell.hidden_map.matrix())
        h0, c0 = cell.step(cell.project_input(f), (q, q), cell.hidden_map.matrix())
        assert torch.allclose(h, act(h0), atol=ATOL) and torch.allclose(c, act(c0), atol=ATOL)


def test_untied_output_bias_breaks_equivariance():
    model, d = make_model()
    with torch.no_grad():
        model.decoder.output_projection.bias.normal_()
    src, lengths, prev, _ = random_batch(d)
    assert_equivariant(model, d, src, lengths, prev)  # orbit-tied: still equivariant
    # untie: give one verb action its own bias
    layer = model.decoder.output_projection
    jump = d.index("JUMP")
    layer.orbit_rep = layer.orbit_rep.clone()
    layer.orbit_rep[jump] = jump
    with torch.no_grad():
        layer.bias[jump] += 1.0
    with pytest.raises(AssertionError):
        assert_equivariant(model, d, src, lengths, prev)


# -- model --------------------------------------------------------------------------------

@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_equivariant_at_init(cell, bidirectional):
    model, d = make_model(cell, bidirectional, layers=2)
    src, lengths, prev, _ = random_batch(d)
    assert_equivariant(model, d, src, lengths, prev)


def test_equivariant_with_invariant_decoder_input():
    model, d = make_model("gru", bidirectional=True, decoder_input="invariant")
    src, lengths, prev, _ = random_batch(d)
    assert_equivariant(model, d, src, lengths, prev)


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_equivariant_after_training(cell):
    model, d = make_model(cell, bidirectional=True, grammar="scan")
    src, lengths, prev, tgt = random_batch(d, bsz=8, seed=3)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    model.train()
    losses = []
    for _ in range(15):
        lp = log_probs(model, src, lengths, prev)
        loss = torch.nn.functional.nll_loss(lp.view(-1, lp.shape[-1]), tgt.view(-1),
                                            ignore_index=d.pad())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    src2, lengths2, prev2, _ = random_batch(d, seed=4)
    assert_equivariant(model, d, src2, lengths2, prev2)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_incremental_decoding_equals_full_forward(cell):
    model, d = make_model(cell, bidirectional=True, layers=2)
    model.eval()
    src, lengths, prev, _ = random_batch(d)
    with torch.no_grad():
        full, extra = model(src, lengths, prev)
        enc = model.encoder(src, lengths)
        state = {}
        steps, attns = [], []
        for t in range(prev.shape[1]):
            out, ex = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
            steps.append(out)
            attns.append(ex["attn"][0])
        assert torch.allclose(torch.cat(steps, 1), full, atol=ATOL)
        assert torch.allclose(torch.cat(attns, 1), extra["attn"][0], atol=ATOL)
        # reorder the batch (beam search) mid-way and continue
        order = torch.tensor([2, 0, 1, 4, 3])
        state = {}
        for t in range(3):
            model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
        model.decoder.reorder_incremental_state_scripting(state, order)
        enc_r = model.encoder.reorder_encoder_out(enc, order)
        out, _ = model.decoder(prev[order][:, :4], encoder_out=enc_r, incremental_state=state)
        assert torch.allclose(out[:, 0], full[order][:, 3], atol=ATOL)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_padding_does_not_change_outputs(cell):
    model, d = make_model(cell, bidirectional=True, layers=2)
    model.eval()
    src, lengths, prev, _ = random_batch(d)
    with torch.no_grad():
        batch = log_probs(model, src, lengths, prev)
        for b in range(src.shape[0]):
            keep_s, keep_t = src[b].ne(d.pad()), prev[b].ne(d.pad())
            alone = log_probs(model, src[b][keep_s][None], lengths[b:b + 1], prev[b][keep_t][None])
            assert torch.allclose(alone[0], batch[b][keep_t], atol=ATOL)
        # right padding of the source gives the same too
        right = torch.stack([torch.cat([s[s.ne(d.pad())], s[s.eq(d.pad())]]) for s in src])
        assert torch.allclose(log_probs(model, right, lengths, prev), batch, atol=ATOL)


def test_output_shapes_and_positions():
    model, d = make_model("lstm", bidirectional=True)
    src, lengths, prev, _ = random_batch(d, bsz=3, src_len=4, tgt_len=6)
    logits, extra = model(src, lengths, prev)
    assert logits.shape == (3, 6, len(d))
    assert extra["attn"][0].shape == (3, 6, 4)
    enc = model.encoder(src, lengths)
    assert enc["encoder_out"][0].shape == (3, 4, 8, 5)
    assert enc["encoder_final"][0].shape == (3, 8, 5)
    assert model.max_positions() == (1024, 1024)
    assert torch.allclose(extra["attn"][0].sum(-1), torch.ones(3, 6), atol=ATOL)


def test_sequence_generator_greedy_matches_argmax():
    from fairseq.sequence_generator import SequenceGenerator

    model, d = make_model("gru", bidirectional=True)
    model.eval()
    src, lengths, _, _ = random_batch(d, bsz=4)
    gen = SequenceGenerator([model], d, beam_size=1, max_len_a=0, max_len_b=8)
    hyps = gen.forward({"net_input": {"src_tokens": src, "src_lengths": lengths}})
    with torch.no_grad():
        for b in range(4):
            prev = torch.tensor([[d.eos()]])
            s = src[b][src[b].ne(d.pad())][None]
            for step in range(8):
                nxt = log_probs(model, s, None, prev)[0, -1]
                nxt[d.pad()] = float("-inf")
                if step == 0:  # the generator's min_len = 1
                    nxt[d.eos()] = float("-inf")
                prev = torch.cat([prev, nxt.argmax().view(1, 1)], dim=1)
                if prev[0, -1] == d.eos():
                    break
            greedy = prev[0, 1:]
            if greedy[-1] != d.eos():
                greedy = torch.cat([greedy, torch.tensor([d.eos()])])
            assert torch.equal(hyps[b][0]["tokens"], greedy)
