"""Which class trains K runs of one model side by side ("packed runs").

``PACKED_IMPLEMENTATIONS`` maps an ordinary model class to the class that packs K of its
instances.  A packed implementation follows one protocol::

    impl = Impl(models)                       # K ordinary models of one architecture
    outs = impl.run_losses(samples, criterion)
        # one dict per run: "loss" (the criterion's loss of that run's sample), "sample_size",
        # "logging" (the criterion's logging output of that run)
    impl.unpacked_state_dicts()               # K state dicts loadable by the ordinary model
    impl.load_unpacked(k, state_dict)         # put run k's ordinary weights into the pack

A model class without an entry is packed by the default implementation (``vmap`` over the
stacked parameters); a model whose operators have no batching rule registers its own class
with :func:`register_packed`.
"""

from typing import Callable, Dict

#: ordinary model class -> packed implementation class
PACKED_IMPLEMENTATIONS: Dict[type, type] = {}


def register_packed(base_cls: type) -> Callable[[type], type]:
    """Class decorator: register the decorated class as the packed implementation of
    ``base_cls``.

    Args:
        base_cls: the ordinary model class (e.g. ``RNNSeq2SeqModel``).
    Returns:
        the decorator, which returns the class unchanged.
    Raises:
        ValueError: ``base_cls`` already has another packed implementation.
    """

    def decorator(impl_cls: type) -> type:
        known = PACKED_IMPLEMENTATIONS.get(base_cls)
        same = known is not None and (known.__module__, known.__qualname__) == (
            impl_cls.__module__, impl_cls.__qualname__)  # a reloaded module
        if known is not None and not same:
            raise ValueError(f"{base_cls.__name__} already packed by {known.__name__}")
        PACKED_IMPLEMENTATIONS[base_cls] = impl_cls
        return impl_cls

    return decorator
