"""Whether a preset's ``arch`` is an architecture fairseq knows (fairseq's own, this plugin's,
or a user's ``--user-dir`` package's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from .presets import PresetError, load_presets


def packaged_archs() -> frozenset:
    """The archs of the packaged presets: each is registered by fairseq or by this plugin
    (tests/test_presets.py looks every one up in fairseq's registry), so no lookup is needed."""
    return frozenset(p["arch"] for p in load_presets().values())


def check_arch(name: str, preset: dict, user_dir: Optional[str | os.PathLike] = None) -> None:
    """Refuse a preset whose ``arch`` fairseq does not know.

    Without ``user_dir``, the arch of a packaged preset is known at once.  Any other arch (or
    any arch when the user's ``--user-dir`` package ``user_dir`` is given, whose import is
    checked too) is looked up in fairseq's ``ARCH_MODEL_REGISTRY`` after the plugin's models
    and the user's package are registered: that imports fairseq (about 3 s of CPU).

    Raises:
        PresetError: an unknown arch (names the preset, the arch and the fix).
    """
    if user_dir is None and preset.get("arch") in packaged_archs():
        return
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
