"""CPU-only seeding of fairseq's per-update reseed, installed by the ``systematicity`` task.

fairseq's ``Trainer`` reseeds torch through ``fairseq.utils.set_torch_seed`` before every
update; on a host without CUDA (or XLA) :func:`install_cpu_seeding` replaces it with
:class:`_CpuTorchSeed`, which seeds the CPU generator only.
"""

import torch
from fairseq import utils


class _CpuTorchSeed(utils.set_torch_seed):
    """``fairseq.utils.set_torch_seed`` for a host without CUDA (or XLA): seeds the CPU
    generator, which is the only one such a process draws from.

    ``torch.manual_seed`` also queues the seeding of every uninitialised accelerator module,
    formatting the Python stack for each, and fairseq's ``Trainer`` reseeds before every
    update: about 2.7 ms per update of a small model on one core.  The CPU generator ends in
    the same state, so training draws the same random numbers.  Usable as a context manager
    (restores the previous state on exit), as the class it replaces.

    Raises:
        AssertionError: ``seed`` is not an int (as fairseq's class).
    """

    def __init__(self, seed):
        assert isinstance(seed, int)
        self.rng_state = utils.get_rng_state()
        torch.default_generator.manual_seed(seed)


def install_cpu_seeding() -> bool:
    """Replace ``fairseq.utils.set_torch_seed`` by :class:`_CpuTorchSeed` when this process
    has neither CUDA nor XLA; returns whether it did (idempotent)."""
    if torch.cuda.is_available() or getattr(utils, "xm", None) is not None:
        return False
    utils.set_torch_seed = _CpuTorchSeed
    return True
