"""Where the shell recipes (``train_level.sh``, ``quickstart.sh``) are installed."""

from __future__ import annotations

from pathlib import Path


def recipes_dir() -> Path:
    """The shell recipes: ``fairseq_entropy/recipes/`` of an installed package (setup.py
    installs the top-level ``recipes/`` there), else ``recipes/`` of the source checkout.

    Raises:
        FileNotFoundError: neither holds ``train_level.sh``.
    """
    from importlib import resources

    package = Path(str(resources.files("fairseq_entropy")))
    for candidate in (package / "recipes", package.parent / "recipes"):
        if (candidate / "train_level.sh").is_file():
            return candidate
    raise FileNotFoundError(f"no recipes beside {package}. Fix: install the package with pip "
                            "(they are package data) or run from a source checkout")


def default_recipe() -> Path:
    """``train_level.sh`` of :func:`recipes_dir`."""
    return recipes_dir() / "train_level.sh"
