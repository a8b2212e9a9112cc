"""Whether a preset's ``arch`` is an architecture fairseq knows (fairseq's own, this plugin's,
or a user's ``--user-dir`` package's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from .presets import PresetError


def check_arch(name: str, preset: dict, user_dir: Optional[str | os.PathLike] = None) -> None:
    """Refuse a preset whose ``arch`` fairseq does not know: the plugin's models (and those of
    the user's ``--user-dir`` package ``user_dir``, when given) are registered, then the arch
    is looked up in fairseq's ``ARCH_MODEL_REGISTRY`` (imports fairseq: seconds).

    Raises:
        PresetError: an unknown arch (names the preset, the arch and the fix).
    """
    from argparse import Namespace

    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.utils import import_user_module

    import fairseq_entropy.models  # noqa: F401 - registers the plugin's architectures

    if user_dir is not None:
        import_user_module(Namespace(user_dir=str(Path(user_dir).resolve())))
    arch = preset.get("arch")
    if arch not in ARCH_MODEL_REGISTRY:
        where = f"fairseq, this plugin or --user-dir {user_dir}" if user_dir is not None \
            else "fairseq or this plugin"
        raise PresetError(f"preset {name}: arch {arch!r} is not an architecture of {where}. "
                          "Fix: write a registered arch in the presets file (e.g. that of "
                          "exp1_cnn_authors), or pass --user-dir with the package that "
                          "registers it")
