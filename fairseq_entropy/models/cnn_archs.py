"""The paper's convolutional seq2seq as named architectures of fairseq's ``fconv``.

Wold, Charpentier and Simon (ACL Findings 2025) trained a convolutional encoder-decoder after
Gehring et al. (2017), "Convolutional Sequence to Sequence Learning"; fairseq's ``fconv`` is that
model's original implementation (gated linear units, residual connections, learned absolute
positions, multi-step attention, incremental decoding through ``LinearizedConvolution``).  The
paper's configuration is 3 layers of 64 channels with kernel width 5 in both encoder and decoder.

The authors' own CNN differed from ``fconv`` in two respects: sinusoidal instead of learned
positions, and attention values computed from projected input embeddings (``fconv`` uses
``encoder output + input embedding``).  These architectures are plain ``fconv`` (the
authors' own CNN is :mod:`fairseq_entropy.models.scan_cnn`).

Architectures registered here (``--arch``; training hyper-parameters in
``fairseq_entropy/experiments/presets.json``):

- ``fconv_scan_exp1``: Experiment 1 (lr 1e-3; 24/36/48 epochs for 6000/4000/3000 samples).
- ``fconv_scan_exp2``: Experiment 2 (same model; lr 3e-4, 64 - 8(k-1) epochs).
"""

from fairseq.models import register_model_architecture
from fairseq.models.fconv import base_architecture

CNN_LAYERS = 3
CNN_CHANNELS = 64
CNN_KERNEL = 5


def _scan_cnn(args):
    """3 layers x 64 channels x kernel 5 (encoder and decoder), 64-wide embeddings."""
    layers = f"[({CNN_CHANNELS}, {CNN_KERNEL})] * {CNN_LAYERS}"
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", None) or CNN_CHANNELS
    args.encoder_layers = getattr(args, "encoder_layers", None) or layers
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", None) or CNN_CHANNELS
    args.decoder_layers = getattr(args, "decoder_layers", None) or layers
    args.decoder_out_embed_dim = getattr(args, "decoder_out_embed_dim", None) or CNN_CHANNELS
    base_architecture(args)


@register_model_architecture("fconv", "fconv_scan_exp1")
def fconv_scan_exp1(args):
    """Experiment 1 CNN: ``fconv`` with 3 layers, 64 channels, kernel 5, dropout 0.1."""
    _scan_cnn(args)


@register_model_architecture("fconv", "fconv_scan_exp2")
def fconv_scan_exp2(args):
    """Experiment 2 CNN: same model as Experiment 1 (only the training schedule differs)."""
    _scan_cnn(args)
