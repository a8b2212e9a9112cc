"""Grouped products in a recurrent loop whose weight gradients are summed once.

A recurrent loop multiplies by the same weights at every step.  Autograd forms a full-size
weight gradient at each step (for one row, an outer product) and adds them up: for ``K``
stacked runs of a small model that per-step work dominates the backward pass.  Here the steps
record their inputs and output gradients instead, and one grouped product (or one
``index_add`` for embedding tables) per weight turns them into the weight's gradient when
autograd reaches the weight.  The sum is the same; only its order differs.

Usage: ``w = defer(weight)`` once per forward pass, then ``deferred_baddbmm(add, x, w)`` or
``deferred_embedding(ids, defer(table, "embedding"))`` at every step.
"""

from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


class Deferred:
    """Gradient contributions to one stacked weight, summed in one product after the loop.

    A recurrent loop multiplies by the same weights at every step; autograd would form a
    full-size weight gradient per step (an outer product for one row) and add them up.  The
    steps instead record their inputs and output gradients here, and :class:`_Collect`
    turns them into the weight's gradient with one grouped product (or one ``index_add``).
    """

    def __init__(self):
        self.inputs: List[Tensor] = []
        self.grads: List[Tensor] = []


class _Collect(torch.autograd.Function):
    """``weight`` -> a view of it whose gradient is the sum of the recorded contributions
    (plus any gradient from ordinary uses of the view)."""

    @staticmethod
    def forward(ctx, weight: Tensor, deferred: Deferred, kind: str):
        ctx.deferred, ctx.kind, ctx.shape = deferred, kind, weight.shape
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx, grad: Tensor):
        deferred = ctx.deferred
        if deferred.inputs:
            inputs = torch.cat(deferred.inputs, dim=1)
            grads = torch.cat(deferred.grads, dim=1)
            if ctx.kind == "matmul":  # (G, N, in), (G, N, out) -> (G, in, out)
                grad = grad + torch.bmm(inputs.transpose(1, 2), grads)
            else:  # embedding rows: (G, N) flat ids, (G, N, E) -> (G*V, E)
                flat = grad.flatten(0, 1).index_add(0, inputs.flatten(), grads.flatten(0, 1))
                grad = flat.view(ctx.shape)
            deferred.inputs.clear()
            deferred.grads.clear()
        return grad, None, None


class _DeferredBaddbmm(torch.autograd.Function):
    """``torch.baddbmm(add, x, weight)`` whose weight gradient is left to :class:`_Collect`."""

    @staticmethod
    def forward(ctx, add: Tensor, x: Tensor, weight: Tensor, deferred: Deferred):
        ctx.save_for_backward(x, weight)
        ctx.deferred, ctx.add_shape = deferred, add.shape
        return torch.baddbmm(add, x, weight)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        ctx.deferred.inputs.append(x)
        ctx.deferred.grads.append(grad)
        grad_add = grad.sum_to_size(ctx.add_shape) if ctx.needs_input_grad[0] else None
        grad_x = torch.bmm(grad, weight.transpose(1, 2)) if ctx.needs_input_grad[1] else None
        return grad_add, grad_x, None, None


class _DeferredEmbedding(torch.autograd.Function):
    """Rows ``ids`` (``(G, B)`` flat indices) of ``table`` (``(G*V, E)``); the table's
    gradient is left to :class:`_Collect`."""

    @staticmethod
    def forward(ctx, ids: Tensor, table: Tensor, deferred: Deferred):
        ctx.ids, ctx.deferred = ids, deferred
        return F.embedding(ids, table)

    @staticmethod
    def backward(ctx, grad: Tensor):
        ctx.deferred.inputs.append(ctx.ids)
        ctx.deferred.grads.append(grad)
        return None, None, None


def defer(weight: Tensor, kind: str = "matmul") -> Tuple[Tensor, Deferred]:
    """A view of ``weight`` for per-step uses (``matmul``: :func:`deferred_baddbmm`; ``embedding``:
    :func:`deferred_embedding`) whose gradient is summed once by :class:`_Collect`."""
    deferred = Deferred()
    return _Collect.apply(weight, deferred, kind), deferred


def deferred_baddbmm(add: Tensor, x: Tensor, weight: Tuple[Tensor, Deferred]) -> Tensor:
    """``torch.baddbmm(add, x, weight)`` for a ``weight`` from :func:`defer`."""
    if torch.is_grad_enabled():
        return _DeferredBaddbmm.apply(add, x, *weight)
    return torch.baddbmm(add, x, weight[0])


def deferred_embedding(ids: Tensor, table: Tuple[Tensor, Deferred]) -> Tensor:
    """Rows ``ids`` of a ``(G, V, E)`` table from :func:`defer`; ``ids`` are ``(G, B)`` flat
    indices into ``(G*V, E)``."""
    if torch.is_grad_enabled():
        return _DeferredEmbedding.apply(ids, table[0].flatten(0, 1), table[1])
    return F.embedding(ids, table[0].flatten(0, 1))
