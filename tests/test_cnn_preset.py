"""Tests of the paper's CNN presets on fairseq's ``fconv`` (issue 3, item 4): configuration,
shapes, learning, incremental decoding, padding invariance and a ``fairseq-generate`` round trip."""

import argparse
import os
import subprocess
import sys

import pytest
import torch
from fairseq.data import LanguagePairDataset
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

import fairseq_entropy
import fairseq_entropy.models.cnn_presets  # noqa: F401  (registers the presets)

from _toy import (ACTIONS, PAIRS, WORDS, FakeTask,  # noqa: F401,E402
                  losses_before_and_after, make_dictionary)

PRESETS = ["fconv_scan_exp1", "fconv_scan_exp2"]


def build(arch="fconv_scan_exp1", **overrides):
    d = make_dictionary()
    args = argparse.Namespace(max_source_positions=1024, max_target_positions=1024, **overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(0)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, FakeTask(d)), d, args


def make_sample(d, pairs=PAIRS):
    def enc(s):
        return d.encode_line(s, add_if_not_exist=False, append_eos=True).long()

    src = [enc(s) for s, _ in pairs]
    tgt = [enc(t) for _, t in pairs]
    ds = LanguagePairDataset(src, [len(x) for x in src], d, tgt, [len(x) for x in tgt], d)
    return ds.collater([ds[i] for i in range(len(pairs))])


def greedy(model, src_tokens, src_lengths, steps, eos, incremental=True):
    enc = model.encoder(src_tokens, src_lengths=src_lengths)
    tokens = torch.full((src_tokens.size(0), 1), eos, dtype=torch.long)
    state = {}
    logits = []
    for _ in range(steps):
        if incremental:
            out, _ = model.decoder(tokens, encoder_out=enc, incremental_state=state)
        else:
            out, _ = model.decoder(tokens, encoder_out=enc)
        logits.append(out[:, -1])
        tokens = torch.cat([tokens, out[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens[:, 1:], torch.stack(logits, dim=1)


@pytest.mark.parametrize("arch", PRESETS)
def test_preset_is_the_papers_configuration(arch):
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
    model.eval()
    net = make_sample(d)["net_input"]
    with torch.no_grad():
        inc_tokens, inc_logits = greedy(model, net["src_tokens"], net["src_lengths"], 8, d.eos())
        full_tokens, full_logits = greedy(model, net["src_tokens"], net["src_lengths"], 8,
                                          d.eos(), incremental=False)
    assert torch.equal(inc_tokens, full_tokens)
    assert torch.allclose(inc_logits, full_logits, atol=1e-4)


def test_padded_batch_equals_each_sentence_alone():
    model, d, _ = build()
    model.eval()
    batch = make_sample(d)
    with torch.no_grad():
        batch_tokens, batch_logits = greedy(model, batch["net_input"]["src_tokens"],
                                            batch["net_input"]["src_lengths"], 8, d.eos())
        for row, i in enumerate(batch["id"].tolist()):
            alone = make_sample(d, [PAIRS[i]])["net_input"]
            tokens, logits = greedy(model, alone["src_tokens"], alone["src_lengths"], 8, d.eos())
            assert torch.equal(tokens[0], batch_tokens[row])
            assert torch.allclose(logits[0], batch_logits[row], atol=1e-4)


def _run(cmd, cwd):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_checkpoint_round_trips_through_fairseq_generate(tmp_path):
    dict_path = tmp_path / "dict.txt"
    dict_path.write_text("".join(f"{w} 1\n" for w in WORDS + ACTIONS))
    pairs = PAIRS * 4
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.in").write_text("".join(s + "\n" for s, _ in pairs))
        (tmp_path / f"{split}.out").write_text("".join(t + "\n" for _, t in pairs))
    bin_dir = tmp_path / "bin"
    _run([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "in",
          "--target-lang", "out", "--trainpref", "train", "--validpref", "valid",
          "--testpref", "test", "--srcdict", str(dict_path), "--tgtdict", str(dict_path),
          "--destdir", str(bin_dir), "--workers", "1"], cwd=tmp_path)
    common = ["--user-dir", os.path.dirname(fairseq_entropy.__file__), "--task", "translation",
              "--source-lang", "in", "--target-lang", "out", "--cpu", "--num-workers", "0"]
    _run([sys.executable, "-m", "fairseq_cli.train", str(bin_dir), *common,
          "--arch", "fconv_scan_exp1", "--criterion", "cross_entropy", "--optimizer", "adam",
          "--lr", "1e-3", "--batch-size", "4", "--max-epoch", "2",
          "--save-dir", str(tmp_path / "ck"), "--no-epoch-checkpoints"], cwd=tmp_path)
    out = _run([sys.executable, "-m", "fairseq_cli.generate", str(bin_dir), *common,
                "--path", str(tmp_path / "ck" / "checkpoint_last.pt"), "--gen-subset", "test",
                "--beam", "1", "--max-len-a", "0", "--max-len-b", "60", "--batch-size", "512",
                "--required-batch-size-multiple", "1"], cwd=tmp_path)
    assert sum(line.startswith("H-") for line in out.splitlines()) == len(pairs)
