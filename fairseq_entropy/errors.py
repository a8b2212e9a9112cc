"""The base class of every error that a user can fix by changing an input.

``fairseq-entropy``'s ``main`` prints such an error as one ``error:`` line and exits 2; any
other exception is a bug and keeps its traceback.  Each domain error (grammar, data files,
builds, binarizing, presets, grids, scoring, locks, dictionaries) extends :class:`UserError`,
and its message names the file, the line or the option, and ends with ``Fix: ...``.
"""


class UserError(Exception):
    """An input the user gave (option, file, preset, grid) cannot be used; the message says
    where and how to fix it."""


class DataFormatError(UserError, ValueError):
    """A file that cannot be read or written as asked; the message names the file, the line
    and the fix."""


class PackedError(UserError, ValueError):
    """A pack that cannot be trained as packed runs (criterion, shapes, runs, options)."""
