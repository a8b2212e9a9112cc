"""Optimizers registered with fairseq on import (``--optimizer adamw``)."""

from . import adamw  # noqa: F401
