"""fairseq tasks of the plugin; importing a module registers it."""

from . import systematicity  # noqa: F401
