"""fairseq-entropy: a fairseq ``--user-dir`` plugin for entropy-controlled systematic
generalization.

Implements the data, models and scoring of Wold, Charpentier and Simon, *Systematic
Generalization in Language Models Scales with Information Entropy* (ACL Findings 2025,
arXiv 2505.13089).  Importing the package registers every task, criterion and model with
fairseq and allow-lists the globals of fairseq checkpoints for ``torch.load(weights_only=True)``.
"""

__version__ = "0.1.0"

import logging as _logging


class _DropTensorboardXNotice(_logging.Filter):
    """Drops fairseq's "Please install tensorboardX" notice, which its speech tasks log on
    import although only their own tensorboard logging needs tensorboardX."""

    def filter(self, record: _logging.LogRecord) -> bool:
        return "tensorboardX" not in record.getMessage()


# installed before fairseq is first imported below (fairseq-train imports fairseq itself
# before --user-dir, so there the notice is already in its log)
_logging.getLogger("fairseq.tasks.text_to_speech").addFilter(_DropTensorboardXNotice())

from . import checkpoint  # noqa: F401,E402  (allow-list checkpoint globals first)
from . import criterions, models, tasks  # noqa: F401,E402
