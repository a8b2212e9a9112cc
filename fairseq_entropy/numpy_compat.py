"""``numpy.compat.long`` for fairseq 0.12.3 under numpy 2.

fairseq's ``TokenBlockDataset`` (the stock ``language_modeling`` task with
``--sample-break-mode eos``) builds its index with ``dtype=np.compat.long``; numpy 2 removed
``numpy.compat``, so the stock task fails on any data.  :func:`install` adds the one name
fairseq reads, as numpy 1 defined it (``int64`` on the 64-bit platforms torch supports), when
numpy has no ``compat``; the plugin installs it on import, so ``fairseq-train --user-dir`` runs
the stock task.
"""

import types

import numpy


def install() -> bool:
    """Give numpy a ``compat`` namespace with ``long = numpy.int64`` if it has none; returns
    whether it did (idempotent)."""
    if hasattr(numpy, "compat"):
        return False
    numpy.compat = types.SimpleNamespace(long=numpy.int64)
    return True
