"""fairseq-entropy: a fairseq ``--user-dir`` plugin for entropy-controlled systematic
generalization.

Implements the data, models and scoring of Wold, Charpentier and Simon, *Systematic
Generalization in Language Models Scales with Information Entropy* (ACL Findings 2025,
arXiv 2505.13089).  Importing the package (as ``fairseq-train --user-dir`` does) registers
every task, criterion and model with fairseq and allow-lists the globals of fairseq checkpoints
for ``torch.load(weights_only=True)``; see :func:`register`.

The ``fairseq-entropy`` command line (console script or ``python -m fairseq_entropy.cli``)
uses none of that, and skips it: importing fairseq's task registry costs seconds per call.
"""

from .version import __version__  # noqa: E402,F401

import logging as _logging


class _DropTensorboardXNotice(_logging.Filter):
    """Drops fairseq's "Please install tensorboardX" notice, which its speech tasks log on
    import although only their own tensorboard logging needs tensorboardX."""

    def filter(self, record: _logging.LogRecord) -> bool:
        return "tensorboardX" not in record.getMessage()


# installed before fairseq is first imported below, for an environment without tensorboardX
# (the Makefile installs it: fairseq-train imports fairseq itself before --user-dir, so there
# only tensorboardX keeps the notice out of its log)
_logging.getLogger("fairseq.tasks.text_to_speech").addFilter(_DropTensorboardXNotice())

import os as _os  # noqa: E402
import sys as _sys  # noqa: E402
import warnings as _warnings  # noqa: E402


def _quiet_fairseq_deprecations() -> None:
    """Ignore the deprecation warnings that fairseq's own calls raise in every run (hydra's
    experimental initialize/compose API, its strict flag and schema matching; the
    ``torch.cuda.amp.autocast`` of fairseq's train step; the ``pin_memory`` its data loaders
    ask for on a machine without an accelerator): about 25 lines at the top of every train
    and generate log that no user setting can fix.  Warnings from other code stay."""
    _warnings.filterwarnings("ignore", module=r"hydra\.")
    _warnings.filterwarnings("ignore", category=UserWarning,
                             message=r"\s*'config' is validated against ConfigStore schema")
    _warnings.filterwarnings("ignore", category=FutureWarning, module=r"fairseq\.",
                             message=r"`torch\.cuda\.amp\.autocast")
    _warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.utils\.data\.",
                             message=r"'pin_memory' argument is set as true but no accelerator")


def register() -> None:
    """Allow-list the checkpoint globals, then register the plugin's tasks, criterions and
    models with fairseq, and give numpy the ``compat.long`` that fairseq's stock language-modeling
data reads (:mod:`.numpy_compat`) (idempotent: each module registers once, on its first import)."""
    from . import checkpoint, numpy_compat

    checkpoint.install()  # allow-list the checkpoint globals before any checkpoint is read
    numpy_compat.install()  # fairseq's TokenBlockDataset reads numpy.compat.long
    from . import criterions, models, optim  # noqa: F401
    from .tasks import packed, systematicity, systematicity_lm  # noqa: F401


def _started_as_cli() -> bool:
    """Whether this process is the ``fairseq-entropy`` command line: its console script, or
    ``python -m fairseq_entropy...`` (Python sets ``sys.argv[0]`` to ``-m`` while it imports
    the packages of the module to run)."""
    arg0 = _sys.argv[0] if _sys.argv else ""
    return arg0 == "-m" or _os.path.basename(arg0) == "fairseq-entropy"


if not _started_as_cli():
    _quiet_fairseq_deprecations()
    register()
