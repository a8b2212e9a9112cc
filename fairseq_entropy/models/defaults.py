"""Architecture defaults read from a model's dataclass config, so that each default is written
once: in the config's field."""

import dataclasses

from fairseq.utils import safe_getattr


def fill_defaults(args, config) -> None:
    """Set every option of ``config`` that ``args`` lacks to the field's default.

    Values already in ``args`` are kept, 0 and False included, as is None in an
    ``argparse.Namespace``; in an OmegaConf config a None counts as unset
    (``fairseq.utils.safe_getattr``).  Left alone: ``FairseqDataclass``'s own ``_name``,
    fields without a plain default (none or a ``default_factory``) and interpolations of other
    config groups (``II("task.max_source_positions")``, resolved by fairseq).

    Args:
        args: the model's options: an ``argparse.Namespace`` (fairseq's argument parsing, the
            ``args`` of old checkpoints) or an OmegaConf ``DictConfig`` (``build_model``).
        config: the model's ``FairseqDataclass`` subclass.
    """
    for f in dataclasses.fields(config):
        if f.name == "_name" or f.default is dataclasses.MISSING:
            continue
        if isinstance(f.default, str) and f.default.startswith("${"):
            continue
        setattr(args, f.name, safe_getattr(args, f.name, f.default))
