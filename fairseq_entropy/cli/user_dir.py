"""``fairseq-entropy user-dir``: the path to pass to ``fairseq-* --user-dir``."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    """Add the ``user-dir`` subcommand to the subparsers ``sub``."""
    sub.add_parser("user-dir", help="print the absolute path to pass to fairseq's --user-dir")


def run(args) -> None:
    """``user-dir``: the absolute path of this package, for ``fairseq-* --user-dir``."""
    print(Path(__file__).resolve().parents[1])
