"""fairseq tasks of the plugin; importing a module registers it.

``systematicity`` is the task; ``seeding`` is the CPU seeding patch that task installs (it
registers nothing).
"""

from . import systematicity  # noqa: F401
