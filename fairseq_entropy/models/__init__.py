"""fairseq models of the plugin; importing a module registers its model and named
architectures (``scan_transformer_lm`` is the decoder-only form of ``scan_transformer``;
``defaults`` is the helper that fills an architecture from its model's config;
``packed`` packs K models of one architecture, ``packed_fconv`` adapts fconv's encoder to it,
``packed_rnn`` is the grouped packed implementation of ``rnn_seq2seq``)."""

from . import scan_transformer  # noqa: F401
from . import scan_transformer_lm  # noqa: F401
from . import rnn_seq2seq  # noqa: F401
from . import cnn_archs  # noqa: F401
from . import equivariant_seq2seq  # noqa: F401
from . import scan_cnn  # noqa: F401
from . import packed_fconv  # noqa: F401
from . import packed_rnn  # noqa: F401  (registers the packed RNN)
