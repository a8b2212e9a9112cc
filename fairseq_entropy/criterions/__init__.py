"""fairseq criterions of the plugin; importing a module registers it."""

from . import teacher_forcing  # noqa: F401
