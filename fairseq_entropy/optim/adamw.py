"""``--optimizer adamw``: PyTorch's ``torch.optim.AdamW`` as a fairseq optimizer.

The paper's authors trained every model with ``torch.optim.AdamW`` (Loshchilov & Hutter 2019:
Adam with decoupled weight decay).  fairseq's ``adam`` is the same algorithm with two
differences: its epsilon is added to sqrt(v) before the bias correction (``torch.optim.AdamW``
adds it after, i.e. fairseq's epsilon is eps / sqrt(1 - beta2^t) in AdamW's terms, which
matters only while sqrt(v) is near eps), and it updates the parameters one tensor at a time
in Python.  This optimizer runs PyTorch's multi-tensor (``foreach``) implementation, or with
``--adamw-fused`` its fused kernel, which for the paper's small models on a CPU spend a
fraction of the time per update; the gradient
scaling, clipping and zeroing that fairseq's ``Trainer`` asks of the optimizer run as
multi-tensor operations too (same results as fairseq's per-tensor loops).
"""

import ast
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, List

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II, OmegaConf


@dataclass
class TorchAdamWConfig(FairseqDataclass):
    """Options of :class:`TorchAdamW` (``torch.optim.AdamW``'s defaults)."""

    adam_betas: Any = field(default="(0.9, 0.999)", metadata={
        "help": "AdamW's (beta1, beta2): decay rates of the running means of the gradient and "
                "of its square, as a Python tuple, e.g. '(0.9,0.98)'"})
    adam_eps: float = field(default=1e-8, metadata={
        "help": "AdamW's epsilon, added to the bias-corrected sqrt(v) in the denominator"})
    weight_decay: float = field(default=0.01, metadata={
        "help": "decoupled weight decay: each step multiplies the weights by (1 - lr x this)"})
    foreach: bool = field(default=True, metadata={
        "help": "PyTorch's multi-tensor implementation (the same arithmetic as the per-tensor "
                "loop, fewer kernel launches)"})
    adamw_fused: bool = field(default=False, metadata={
        "help": "PyTorch's fused AdamW kernel (CPU or CUDA) instead of --foreach: one pass "
                "over each parameter, about 4x faster steps on a CPU core; the same update up "
                "to float rounding (about 1e-7 relative), so runs are not bit-identical to "
                "--foreach runs"})
    lr: List[float] = II("optimization.lr")


def parse_betas(value) -> tuple:
    """``'(0.9,0.98)'`` (or a list / tuple) -> ``(0.9, 0.98)``.

    Raises:
        ValueError: not two numbers in [0, 1).
    """
    betas = ast.literal_eval(value) if isinstance(value, str) else (
        OmegaConf.to_container(value) if OmegaConf.is_config(value) else value)
    try:
        betas = tuple(float(b) for b in betas)
    except (TypeError, ValueError):
        betas = ()
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"--adam-betas {value!r}: expected two numbers in [0, 1), "
                         "e.g. --adam-betas '(0.9,0.98)'")
    return betas


@register_optimizer("adamw", dataclass=TorchAdamWConfig)
class TorchAdamW(FairseqOptimizer):
    """``torch.optim.AdamW`` over the model's parameters, configured by
    :class:`TorchAdamWConfig`; fairseq's learning-rate schedulers set its ``lr``."""

    def __init__(self, cfg: TorchAdamWConfig, params):
        super().__init__(cfg)
        impl = {"fused": True} if cfg.adamw_fused else \
            {"foreach": bool(cfg.foreach)}
        self._optimizer = torch.optim.AdamW(params, **impl, **self.optimizer_config)

    @property
    def optimizer_config(self):
        """The arguments that override those stored in a checkpoint when training resumes."""
        lr = self.cfg.lr[0] if isinstance(self.cfg.lr, Collection) else self.cfg.lr
        return {"lr": lr, "betas": parse_betas(self.cfg.adam_betas), "eps": self.cfg.adam_eps,
                "weight_decay": self.cfg.weight_decay}

    @property
    def supports_flat_params(self):
        return True

    def _grads(self) -> List[torch.Tensor]:
        return [p.grad.detach() for p in self.params if p.grad is not None]

    def zero_grad(self):
        """Drop every gradient (``set_to_none``; fairseq's loop does the same, then asks the
        wrapped optimizer to do it again)."""
        self._optimizer.zero_grad(set_to_none=True)

    def multiply_grads(self, c):
        """Multiply every gradient by ``c`` (a number or a 0-d tensor), as fairseq's loop."""
        grads = self._grads()
        if grads:
            if torch.is_tensor(c):
                c = c.to(grads[0].device)
            torch._foreach_mul_(grads, c)

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        """The L2 norm of all gradients together (float32, 0-d tensor), after
        ``aggregate_norm_fn`` (distributed training); with ``max_norm > 0`` the gradients are
        scaled by ``min(1, max_norm / (norm + 1e-6))``: ``fairseq.utils.clip_grad_norm_``."""
        grads = self._grads()
        if not grads:
            return torch.tensor(0.0)
        norms = torch._foreach_norm(grads, 2)
        total = torch.linalg.vector_norm(torch.stack([n.float() for n in norms]), 2)
        if aggregate_norm_fn is not None:
            total = aggregate_norm_fn(total)
        if max_norm > 0:
            coef = (float(max_norm) / (total + 1e-6)).clamp_(max=1)
            torch._foreach_mul_(grads, coef.to(grads[0].device))
        return total
