"""Inverted dropout (Srivastava et al. 2014) with a mask from uniform draws.

``torch.nn.Dropout`` draws its CPU mask with ``bernoulli_``, which costs about twice as much
per element on this project's one-core runs as ``torch.rand_like`` followed by a comparison.
The distribution is the same (each entry kept with probability 1 - p and scaled by
1 / (1 - p)); the random stream differs, so a run is reproducible with either module but not
across them.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor


class UniformMaskDropout(nn.Dropout):
    """``nn.Dropout(p)`` with the keep mask ``rand_like(x) >= p``.

    ``forward(x [...]) -> [...]``: in training, ``x * keep / (1 - p)`` with each entry kept
    independently with probability 1 - p (p = 1 gives zeros); in evaluation, ``x`` itself.
    Raises ``ValueError`` for p outside [0, 1] (as ``nn.Dropout``).
    """

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:
            return x * 0.0
        keep = torch.rand_like(x).ge_(self.p)  # 1.0 where kept, 0.0 where dropped
        return x * keep.mul_(1.0 / (1.0 - self.p))


def dropout_or_identity(p: float) -> nn.Module:
    """``UniformMaskDropout(p)`` (``nn.Dropout`` with a cheaper mask), or ``nn.Identity()``
    for p = 0 (no kernel and no random numbers)."""
    return UniformMaskDropout(p) if p > 0 else nn.Identity()
