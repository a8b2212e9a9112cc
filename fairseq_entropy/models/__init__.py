"""fairseq models of the plugin; importing a module registers its model and arch presets."""

from . import scan_transformer  # noqa: F401
from . import rnn_seq2seq  # noqa: F401
from . import cnn_presets  # noqa: F401
from . import equivariant_seq2seq  # noqa: F401
from . import scan_cnn  # noqa: F401
