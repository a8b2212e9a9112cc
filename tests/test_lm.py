"""Decoder-only models: the prompt-masked loss of the systematicity_lm task's batches, greedy
decoding from the prompt (batched = one at a time, a hand-checked copy model, never reading the
reference), incremental decoding of scan_transformer_lm, and its parameter count."""

import argparse

import pytest
import torch
import torch.nn.functional as F
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.models import FairseqIncrementalDecoder, FairseqLanguageModel

from fairseq_entropy.data.prompt_lines import PromptDictionary, PromptLineDataset
from fairseq_entropy.models import scan_transformer_lm as lm
from fairseq_entropy.models.scan_transformer import ScanTransformerModel, scan_transformer_paper
from fairseq_entropy.scan.grammar import Grammar
from fairseq_entropy.scan.dictionary import dictionary_words
from fairseq_entropy.scan.lm_format import lm_words
from fairseq_entropy.tasks.prompt_decoding import PromptGreedyGenerator

WORDS = "walk run jump twice and after WALK RUN JUMP".split()
LINES = [("walk", "WALK"), ("run twice", "RUN RUN"), ("jump and walk twice", "JUMP WALK WALK"),
         ("walk after run", "RUN WALK"), ("jump twice after run twice", "RUN RUN JUMP JUMP")]


class Task:
    """The attributes build_model and the criterion read from a task."""

    def __init__(self, d):
        self.source_dictionary = self.target_dictionary = d


def dictionary(words=WORDS) -> PromptDictionary:
    d = PromptDictionary()
    for w in list(words) + ["<sep>"]:
        d.add_symbol(w)
    return d


def dataset(d, lines=LINES) -> PromptLineDataset:
    tensors = [d.encode_line(f"{c} <sep> {a}", add_if_not_exist=False).long() for c, a in lines]
    return PromptLineDataset(tensors, [len(t) for t in tensors], d, shuffle=False)


def tiny_lm(d, scheme="sinusoidal", seed=0):
    """A 2-layer scan_transformer_lm (d=32) with ``scheme``, or fairseq's stock transformer_lm
    of that size for ``scheme="stock"``; in eval mode."""
    torch.manual_seed(seed)
    if scheme == "stock":
        from fairseq.models.transformer_lm import TransformerLanguageModel, base_lm_architecture
        args = argparse.Namespace(decoder_layers=2, decoder_embed_dim=32, dropout=0.0,
                                  decoder_ffn_embed_dim=64, decoder_attention_heads=2,
                                  tokens_per_sample=64, max_target_positions=64,
                                  add_bos_token=False, tpu=False)
        base_lm_architecture(args)
        return TransformerLanguageModel.build_model(args, Task(d)).eval()
    args = argparse.Namespace(embed_dim=32, decoder_layers=2, attention_heads=2, dropout=0.0,
                              position_encoding=scheme, position_buckets=4,
                              max_relative_positions=16)
    model = lm.ScanTransformerLmModel.build_model(args, Task(d))
    return model.eval()


def test_prompt_targets_are_padding_and_the_loss_is_over_the_actions_alone():
    d = dictionary()
    ds = dataset(d)
    sample = ds.collater([ds[i] for i in range(len(ds))])
    pad = d.pad()
    # the first n + 1 targets (command words and <sep>) are padding, then actions and </s>
    for row, (c, a) in zip(sample["target"], LINES):
        n = len(c.split())
        assert row[: n + 1].eq(pad).all()
        real = row[row.ne(pad)].tolist()
        assert real == [d.index(w) for w in a.split()] + [d.eos()]
    assert sample["ntokens"] == sum(len(a.split()) + 1 for _, a in LINES)
    # inputs: </s> then the line without its </s>
    first = sample["net_input"]["src_tokens"][0]
    assert first[:4].tolist() == [d.eos(), d.index("walk"), d.index("<sep>"), d.index("WALK")]

    model = tiny_lm(d)
    logits, extra = model(**sample["net_input"])
    logits.retain_grad()
    crit = LabelSmoothedCrossEntropyCriterion(Task(d), sentence_avg=False, label_smoothing=0.0)
    loss, _ = crit.compute_loss(model, (logits, extra), sample, reduce=True)
    (loss / sample["ntokens"]).backward()
    # by hand: each line alone, unpadded; -log p of each action and </s> after the prompt
    total, count = 0.0, 0
    for c, a in LINES:
        line = d.encode_line(f"{c} <sep> {a}", add_if_not_exist=False).long()
        inp = torch.cat([line.new_tensor([d.eos()]), line[:-1]])[None]
        with torch.no_grad():
            lp = F.log_softmax(model(inp)[0][0].double(), dim=-1)
        n = len(c.split())
        for j in range(n + 1, len(line)):
            total -= float(lp[j, line[j]])
            count += 1
    assert count == sample["ntokens"]
    assert float(loss.detach()) / sample["ntokens"] == pytest.approx(total / count, rel=1e-5)
    for row, (c, a) in zip(range(len(LINES)), LINES):
        n = len(c.split())
        assert logits.grad[row, : n + 1].abs().max() == 0          # prompt: no gradient
        assert logits.grad[row, n + 1: n + 2 + len(a.split())].abs().sum(-1).gt(0).all()


class CopyDecoder(FairseqIncrementalDecoder):
    """A hand-made model: after ``</s> c_1 .. c_n <sep>`` it writes c_1 .. c_n, then ``</s>``
    (each step reads the whole prefix, so the incremental state holds nothing)."""

    def forward(self, tokens, incremental_state=None, **kwargs):
        d = self.dictionary
        sep = d.index("<sep>")
        logits = torch.full((tokens.size(0), tokens.size(1), len(d)), -10.0)
        for b, row in enumerate(tokens):
            where = (row == sep).nonzero()
            if not where.numel():
                continue
            s = int(where[0, 0])
            command = row[1:s]                        # after the leading </s>
            k = len(row) - 1 - s                      # tokens written so far
            nxt = command[k] if k < len(command) else d.eos()
            logits[b, -1, nxt] = 10.0
        return logits, {"attn": [None]}


class CopyModel(FairseqLanguageModel):
    pass


def test_a_hand_checked_copy_model_decodes_exactly_and_never_reads_the_reference():
    d = dictionary()
    model = CopyModel(CopyDecoder(d))
    lines = [("walk", "WALK"), ("run twice", "RUN RUN"), ("jump and walk twice", "JUMP")]
    gen = PromptGreedyGenerator([model], d, 0, 20)
    ds = dataset(d, lines)
    sample = ds.collater([ds[i] for i in range(3)])
    hyps = gen.generate([model], sample)
    assert [d.string(h[0]["tokens"]) for h in hyps] == ["walk", "run twice",
                                                        "jump and walk twice"]
    assert all(h[0]["tokens"][-1] == d.eos() for h in hyps)
    # other references (actions) in the lines: the same hypotheses
    other = dataset(d, [(c, "RUN JUMP WALK WALK") for c, _ in lines])
    again = gen.generate([model], other.collater([other[i] for i in range(3)]))
    assert [h[0]["tokens"].tolist() for h in again] == [h[0]["tokens"].tolist() for h in hyps]
    # max_len: a hypothesis is cut with </s> (fairseq's behaviour)
    short = PromptGreedyGenerator([model], d, 0, 2).generate([model], sample)
    assert d.string(short[2][0]["tokens"], include_eos=True) == "jump and </s>"


@pytest.mark.parametrize("scheme", ["sinusoidal", "learned", "relative", "rope", "stock"])
def test_batched_mixed_length_prompts_decode_as_one_at_a_time(scheme):
    d = dictionary()
    model = tiny_lm(d, scheme, seed=3)
    ds = dataset(d)
    gen = PromptGreedyGenerator([model], d, 0, 12)
    batch = gen.generate([model], ds.collater([ds[i] for i in range(len(ds))]))
    for i in range(len(ds)):
        alone = gen.generate([model], ds.collater([ds[i]]))[0][0]
        assert batch[i][0]["tokens"].tolist() == alone["tokens"].tolist()
        assert torch.allclose(batch[i][0]["positional_scores"], alone["positional_scores"],
                              atol=1e-5)
    # and one-at-a-time greedy decoding by full forward passes, without any cache
    for i, (c, _) in enumerate(LINES):
        tokens = d.encode_line(f"{c} <sep>", add_if_not_exist=False, append_eos=False).long()
        tokens = torch.cat([tokens.new_tensor([d.eos()]), tokens])[None]
        out = []
        with torch.no_grad():
            for _ in range(13):
                logits = model(tokens)[0][0, -1]
                logits[d.pad()] = float("-inf")           # never padding, as fairseq
                nxt = int(logits.argmax())
                out.append(nxt)
                if nxt == d.eos():
                    break
                tokens = torch.cat([tokens, tokens.new_tensor([[nxt]])], dim=1)
        if out[-1] != d.eos():
            out[-1] = d.eos()
        assert batch[i][0]["tokens"].tolist() == out


@pytest.mark.parametrize("scheme", ["sinusoidal", "relative", "rope"])
def test_left_padded_rows_compute_as_unpadded_rows(scheme):
    d = dictionary()
    model = tiny_lm(d, scheme, seed=5)
    a = d.encode_line("walk <sep> WALK", add_if_not_exist=False).long()
    b = d.encode_line("jump and walk twice <sep> JUMP", add_if_not_exist=False).long()
    padded = torch.stack([torch.cat([a.new_full((len(b) - len(a),), d.pad()), a]), b])
    with torch.no_grad():
        both = model(padded)[0]
        alone = model(a[None])[0]
    assert torch.allclose(both[0, len(b) - len(a):], alone[0], atol=1e-5)


def test_paper_preset_has_about_the_parameters_of_the_encoder_decoder():
    g = Grammar.paper()
    pair = PromptDictionary()
    for w in dictionary_words(g):
        pair.add_symbol(w)
    lmd = PromptDictionary()
    for w in lm_words(g):
        lmd.add_symbol(w)
    enc_args = argparse.Namespace()
    scan_transformer_paper(enc_args)
    enc_dec = ScanTransformerModel.build_model(enc_args, Task(pair))
    lm_args = argparse.Namespace()
    lm.scan_transformer_lm_paper(lm_args)
    dec = lm.ScanTransformerLmModel.build_model(lm_args, Task(lmd))
    n_enc_dec = sum(p.numel() for p in enc_dec.parameters())
    n_lm = sum(p.numel() for p in dec.parameters())
    d, v = 128, len(lmd)
    # 7 layers of 16 d^2 + 17 d, one embedding, output projection with bias, final norm
    assert n_lm == 7 * (16 * d * d + 17 * d) + v * d + v * d + v + 2 * d
    assert (n_enc_dec, n_lm) == (1796894, 1858463)
    assert abs(n_lm / n_enc_dec - 1) < 0.04
    assert lm_args.decoder_layers == 7 and lm_args.attention_heads == 2   # heads of 64


def test_training_batches_are_those_of_epoch_1_and_sorted_by_prompt_length():
    from fairseq.data import data_utils

    from fairseq_entropy.data import FirstEpochOrderDataset

    d = dictionary()
    tensors = [d.encode_line(f"{c} <sep> {a}", add_if_not_exist=False).long()
               for c, a in LINES * 4]
    ds = PromptLineDataset(tensors, [len(t) for t in tensors], d, shuffle=True)
    wrapped = FirstEpochOrderDataset(ds)
    wrapped.order_seed = 2
    with data_utils.numpy_seed(7):
        first = wrapped.ordered_indices()
    with data_utils.numpy_seed(99):                    # a resumed run's other epoch seed
        again = wrapped.ordered_indices()
    assert first.tolist() == again.tolist()
    assert sorted(first.tolist()) == list(range(len(tensors)))
    prompts = ds.src_sizes[first]
    assert (prompts[1:] >= prompts[:-1]).all()         # batches hold one prompt length
    assert ds.tgt_sizes.tolist() == [len(a.split()) + 1 for _, a in LINES * 4]
