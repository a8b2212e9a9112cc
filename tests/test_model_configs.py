"""Dataclass configs of scan_transformer and rnn_seq2seq: help on every option, named
architectures that keep an explicit 0, and checkpoints of the add_args code that still load and
decode identically."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils, models, options

import fairseq_entropy
from _toy import FakeTask, greedy, make_dictionary, make_sample
from fairseq_entropy.models.rnn_seq2seq import RNNSeq2SeqConfig
from fairseq_entropy.models.scan_transformer import ScanTransformerConfig

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "old_checkpoints"
USER_DIR = str(Path(fairseq_entropy.__file__).parent)


@pytest.mark.parametrize("config", [ScanTransformerConfig, RNNSeq2SeqConfig])
def test_every_option_has_help(config):
    for f in dataclasses.fields(config):
        if f.name == "_name":
            continue  # fairseq's own bookkeeping field of every FairseqDataclass
        if isinstance(f.default, str) and f.default.startswith("${"):
            continue  # fairseq's own task options, referenced by interpolation
        assert f.metadata.get("help"), f.name


def parse(*args):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, ["data", "--user-dir", USER_DIR, *args])


def test_named_architecture_fills_defaults_and_keeps_explicit_zero():
    args = parse("--arch", "scan_transformer_exp2_l2")
    assert (args.embed_dim, args.encoder_layers, args.decoder_layers, args.attention_heads,
            args.dropout, args.embed_scale) == (256, 2, 2, 4, 0.1, 2.0)
    args = parse("--arch", "scan_transformer_exp2_l2", "--encoder-layers", "0", "--dropout",
                 "0", "--embed-scale", "0", "--embed-dim", "64")
    assert (args.embed_dim, args.encoder_layers, args.decoder_layers, args.attention_heads,
            args.dropout, args.embed_scale) == (64, 0, 2, 1, 0.0, 0.0)
    model = models.build_model(args, FakeTask(make_dictionary()))
    assert len(model.encoder.stack.layers) == 0 and len(model.decoder.stack.layers) == 2
    assert model.encoder.stack.embed_scale == 0.0


def test_rnn_architecture_fills_defaults_and_keeps_explicit_values():
    args = parse("--arch", "rnn_seq2seq_exp2_gru_l2_h64")
    assert (args.cell, args.encoder_layers, args.encoder_hidden_size, args.dropout) == \
        ("gru", 2, 64, 0.1)
    args = parse("--arch", "rnn_seq2seq_exp2_gru_l2_h64", "--dropout", "0", "--cell", "lstm",
                 "--encoder-hidden-size", "8")
    assert (args.cell, args.encoder_layers, args.encoder_hidden_size, args.dropout) == \
        ("lstm", 2, 8, 0.0)
    model = models.build_model(args, FakeTask(make_dictionary()))
    assert isinstance(model.encoder.rnn, torch.nn.LSTM) and model.encoder.rnn.hidden_size == 8
    assert model.encoder.dropout.p == 0.0


def test_help_lists_the_options_with_their_help():
    parser = options.get_training_parser()
    options.parse_args_and_arch(parser, ["data", "--user-dir", USER_DIR, "--arch",
                                         "scan_transformer_paper"])
    text = " ".join(parser.format_help().split())
    assert "--encoder-layers ENCODER_LAYERS number of encoder layers" in text
    assert "--dropout DROPOUT dropout probability" in text


EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_checkpoint_of_the_add_args_code_loads_and_decodes_identically(name):
    """The fixtures were written by the models when they declared options with add_args
    (``tests/fixtures/make_old_checkpoints.py``); fairseq's loading path: cfg from the
    checkpoint (an argparse.Namespace there), ``models.build_model``, strict ``load_state_dict``."""
    state = checkpoint_utils.load_checkpoint_to_cpu(str(FIXTURES / f"{name}.pt"))
    cfg = state["cfg"]
    d = make_dictionary()
    model = models.build_model(cfg.model, FakeTask(d), from_checkpoint=True)
    model.load_state_dict(state["model"], strict=True, model_cfg=cfg.model)
    model.eval()
    sample = make_sample(d)
    expected = EXPECTED[name]
    steps = len(expected["tokens"][0])
    with torch.no_grad():
        tokens, logits = greedy(model, sample["net_input"]["src_tokens"],
                                sample["net_input"]["src_lengths"], steps, d.eos())
    assert tokens.tolist() == expected["tokens"]
    # the fixture holds the logits rounded to 5 decimals
    torch.testing.assert_close(logits, torch.tensor(expected["logits"]), atol=1e-5, rtol=0)
