"""fairseq's ``fconv`` encoder in a form ``torch.func.vmap`` runs (packed runs of the
``fconv_scan_*`` architectures).

``FConvEncoder.forward`` decides on the data whether to mask padding (``if not mask.any()``)
and scales the gradient into the attention keys with fairseq's ``GradMultiply``, an
``autograd.Function`` without the ``setup_context`` that functorch transforms need.
:func:`fconv_encoder_forward` is the same computation with the mask always applied (masking
nothing where there is no padding: the same values, and the attention then scales by each
sentence's own length, which equals the padded length there) and the gradient scaled by
``x.detach() + (x - x.detach()) * scale`` (the same value and gradient).  The packed
implementation (:class:`fairseq_entropy.models.packed.VmapPacked`) binds it to its private
copy of the model; ordinary models keep fairseq's code.
"""

import math

import torch.nn.functional as F
from fairseq.models.fconv import FConvEncoder

from .packed import register_vmap_forward


@register_vmap_forward(FConvEncoder)
def fconv_encoder_forward(self, src_tokens, src_lengths=None):
    """``FConvEncoder.forward`` (fairseq 0.12) without data-dependent control flow (see the
    module docstring): ``src_tokens [B, S]`` -> ``{"encoder_out": (x, y) [B, S, C] each,
    "encoder_padding_mask": [B, S]}``."""
    x = self.embed_tokens(src_tokens) + self.embed_positions(src_tokens)
    x = self.dropout_module(x)
    input_embedding = x
    x = self.fc1(x)
    encoder_padding_mask = src_tokens.eq(self.padding_idx).t()  # -> T x B
    x = x.transpose(0, 1)
    residuals = [x]
    for proj, conv, res_layer in zip(self.projections, self.convolutions, self.residuals):
        if res_layer > 0:
            residual = residuals[-res_layer]
            residual = residual if proj is None else proj(residual)
        else:
            residual = None
        x = x.masked_fill(encoder_padding_mask.unsqueeze(-1), 0)
        x = self.dropout_module(x)
        if conv.kernel_size[0] % 2 == 1:
            x = conv(x)
        else:
            padding_l = (conv.kernel_size[0] - 1) // 2
            padding_r = conv.kernel_size[0] // 2
            x = F.pad(x, (0, 0, 0, 0, padding_l, padding_r))
            x = conv(x)
        x = F.glu(x, dim=2)
        if residual is not None:
            x = (x + residual) * math.sqrt(0.5)
        residuals.append(x)
    x = x.transpose(1, 0)
    x = self.fc2(x)
    encoder_padding_mask = encoder_padding_mask.t()  # -> B x T
    x = x.masked_fill(encoder_padding_mask.unsqueeze(-1), 0)
    scale = 1.0 / (2.0 * self.num_attention_layers)
    x = x.detach() + (x - x.detach()) * scale
    y = (x + input_embedding) * math.sqrt(0.5)
    return {"encoder_out": (x, y), "encoder_padding_mask": encoder_padding_mask}
