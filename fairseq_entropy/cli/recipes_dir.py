"""``fairseq-entropy recipes-dir``: where the shell recipes are installed
(:func:`fairseq_entropy.experiments.recipes.recipes_dir`)."""

from __future__ import annotations


def add_parser(sub) -> None:
    """Add the ``recipes-dir`` subcommand to the subparsers ``sub``."""
    sub.add_parser("recipes-dir", help="print the directory of the shell recipes "
                                       "(train_level.sh, quickstart.sh)")


def run(args) -> None:
    """``recipes-dir``: print the directory of the shell recipes."""
    from ..experiments.recipes import recipes_dir

    print(recipes_dir())
