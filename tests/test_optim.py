"""Tests of ``--optimizer adamw`` (torch.optim.AdamW as a fairseq optimizer)."""

import math

import pytest
import torch
from omegaconf import OmegaConf

import fairseq_entropy.optim  # noqa: F401  (registers the optimizer)
from fairseq_entropy.optim.adamw import TorchAdamW, TorchAdamWConfig, parse_betas


def make(params, **overrides):
    cfg = OmegaConf.structured(TorchAdamWConfig(lr=[0.1], **overrides))
    return TorchAdamW(cfg, params)


@pytest.mark.parametrize("fused", [False, True])
def test_two_steps_match_adamw_computed_by_hand(fused):
    lr, wd, (b1, b2), eps = 0.1, 0.01, (0.9, 0.98), 1e-8
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = make([w], adam_betas="(0.9,0.98)", weight_decay=wd, adamw_fused=fused)
    assert opt.optimizer.defaults["fused"] is (True if fused else None)
    grads = [torch.tensor([0.5, -1.0]), torch.tensor([0.25, 3.0])]
    expected, m, v = [1.0, -2.0], [0.0, 0.0], [0.0, 0.0]
    for t, g in enumerate(grads, start=1):
        w.grad = g.clone()
        opt.step()
        for i in range(2):
            m[i] = b1 * m[i] + (1 - b1) * g[i].item()
            v[i] = b2 * v[i] + (1 - b2) * g[i].item() ** 2
            m_hat, v_hat = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
            expected[i] = expected[i] * (1 - lr * wd) - lr * m_hat / (math.sqrt(v_hat) + eps)
    assert w.detach().tolist() == pytest.approx(expected, rel=1e-6)
    # after step 1 each weight moved by lr (|m_hat / sqrt(v_hat)| = 1) plus the decay
    assert opt.optimizer_config == {"lr": 0.1, "betas": (0.9, 0.98), "eps": 1e-8,
                                    "weight_decay": 0.01}


def test_registered_with_fairseq_and_chosen_by_presets():
    from fairseq.optim import OPTIMIZER_REGISTRY

    from fairseq_entropy.experiments.presets import load_presets
    assert OPTIMIZER_REGISTRY["adamw"] is TorchAdamW
    presets = load_presets()
    for name in ("exp1_cnn_authors", "exp1_transformer_sinusoidal", "exp1_rnn_h64"):
        args = presets[name]["optimizer_args"]
        assert args[args.index("--optimizer") + 1] == "adamw"


@pytest.mark.parametrize("bad", ["(0.9,)", "(0.9, 1.0)", "(0.9, 'x')", "0.9"])
def test_bad_betas_are_refused_with_an_example(bad):
    with pytest.raises(ValueError, match=r"--adam-betas .*e\.g\."):
        parse_betas(bad)


@pytest.mark.parametrize("max_norm", [0.0, 0.5, 100.0])
def test_clipping_and_scaling_equal_fairseqs_per_tensor_loops(max_norm):
    from fairseq import utils

    gen = torch.Generator().manual_seed(0)
    shapes = [(3, 4), (4,), (2, 2, 2)]
    ours = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    ref = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    for a, b in zip(ours, ref):
        a.grad = torch.randn(a.shape, generator=gen)
        b.grad = a.grad.clone()
    opt = make(ours)
    opt.multiply_grads(torch.tensor(0.25))
    for b in ref:
        b.grad.mul_(0.25)
    norm = opt.clip_grad_norm(max_norm)
    ref_norm = utils.clip_grad_norm_(ref, max_norm)
    assert norm.item() == pytest.approx(ref_norm.item(), rel=1e-6)
    hand = math.sqrt(sum(float((b.grad ** 2).sum()) for b in ref)) if max_norm == 0 else None
    if hand is not None:
        assert norm.item() == pytest.approx(hand, rel=1e-6)
    for a, b in zip(ours, ref):
        assert torch.allclose(a.grad, b.grad, rtol=1e-6, atol=0)
    if 0 < max_norm < ref_norm:   # clipped: the new norm is max_norm
        clipped = math.sqrt(sum(float((a.grad ** 2).sum()) for a in ours))
        assert clipped == pytest.approx(max_norm, rel=1e-5)
