"""Safe loading of fairseq checkpoints under ``torch.load(weights_only=True)``.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True`` and refuses pickled globals
that are not allow-listed.  A fairseq 0.12 checkpoint stores its legacy model arguments as an
``argparse.Namespace`` (everything else is dicts, lists, tensors and Python scalars), so
``fairseq-train --restore-file``, ``fairseq-generate`` and ``fairseq-interactive`` fail on it.

:func:`install` (called when the plugin is imported, as ``--user-dir`` does, before any
checkpoint is read) allow-lists exactly :data:`FAIRSEQ_CHECKPOINT_GLOBALS` with
``torch.serialization.add_safe_globals`` -- ``weights_only`` stays on -- and wraps fairseq's
``load_checkpoint_to_cpu`` so that a checkpoint carrying any other global is refused with a
:class:`UnsafeCheckpointError` naming the file and the global.

It also makes fairseq's checkpoint copies atomic.  ``save_checkpoint`` writes the first
checkpoint (e.g. ``checkpoint_best.pt``) atomically but copies it to the others
(``checkpoint_last.pt``) with a plain ``shutil.copyfile``; a run killed during that copy leaves a
truncated ``checkpoint_last.pt`` from which ``fairseq-train`` cannot resume.  :func:`atomic_copy`
writes a temporary file in the same directory and renames it over the target, so the target
is always either the old or the new checkpoint.
"""

import argparse
import functools
import os
import pickle

import torch

from .errors import UserError

#: The globals a fairseq checkpoint of this plugin contains (found with
#: ``torch.serialization.get_unsafe_globals_in_checkpoint`` on checkpoints of every model).
FAIRSEQ_CHECKPOINT_GLOBALS = (argparse.Namespace,)


class UnsafeCheckpointError(UserError, pickle.UnpicklingError):
    """A checkpoint that pickles a global outside :data:`FAIRSEQ_CHECKPOINT_GLOBALS`."""


def allow_fairseq_checkpoint_globals() -> None:
    """Allow-list :data:`FAIRSEQ_CHECKPOINT_GLOBALS` for ``weights_only`` loading (idempotent)."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch < 2.4 has no weights_only default to work around
        add(list(FAIRSEQ_CHECKPOINT_GLOBALS))


def _wrap_loader(load_fn):
    @functools.wraps(load_fn)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return load_fn(path, *args, **kwargs)
        except pickle.UnpicklingError as e:
            if isinstance(e, UnsafeCheckpointError):
                raise
            unsafe = []
            try:
                unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
            except Exception:  # noqa: BLE001 - only used to improve the message
                pass
            allowed = {f"{g.__module__}.{g.__qualname__}" for g in FAIRSEQ_CHECKPOINT_GLOBALS}
            extra = [g for g in unsafe if g not in allowed]
            raise UnsafeCheckpointError(
                f"refusing to load checkpoint {path}: it pickles "
                f"{', '.join(extra) if extra else 'globals'} beyond what a fairseq checkpoint "
                "contains (argparse.Namespace), and loading it could run arbitrary code. Fix: "
                "load it only if you trust its source, e.g. re-save it with "
                "torch.load(path, weights_only=False) after inspecting it") from e
    load_checkpoint_to_cpu._fairseq_entropy_wrapped = True
    return load_checkpoint_to_cpu


def atomic_copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
    """Copy ``src_path`` to ``dst_path`` so that ``dst_path`` is never seen half-written:
    :func:`~fairseq_entropy.files.atomic_write_bytes` of the source's bytes (a
    temporary file beside ``dst_path``, renamed over it; the permissions of a plainly created
    file).  Returns True, like fairseq's ``PathManager.copy``.

    Raises:
        FileExistsError: ``dst_path`` exists and ``overwrite`` is False.
        OSError: the copy failed; ``dst_path`` is unchanged and no temporary file is left.
    """
    from .files import atomic_write_bytes

    if not overwrite and os.path.exists(dst_path):
        raise FileExistsError(f"{dst_path} exists. Fix: pass overwrite=True or remove it")
    with open(src_path, "rb") as src:
        atomic_write_bytes(dst_path, src.read())
    return True


class _AtomicCopyPathManager:
    """fairseq's ``PathManager`` with :func:`atomic_copy` for local paths (all else delegated)."""

    def __init__(self, base):
        self._base = base

    def copy(self, src_path: str, dst_path: str, overwrite: bool = False) -> bool:
        if self._base.path_requires_pathmanager(dst_path) or \
                self._base.path_requires_pathmanager(src_path):
            return self._base.copy(src_path, dst_path, overwrite=overwrite)
        return atomic_copy(src_path, dst_path, overwrite=overwrite)

    def __getattr__(self, name):
        return getattr(self._base, name)


def install() -> None:
    """Allow-list the globals, wrap ``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` and
    make the checkpoint copies of ``fairseq.checkpoint_utils.save_checkpoint`` atomic."""
    allow_fairseq_checkpoint_globals()
    from fairseq import checkpoint_utils

    if not isinstance(checkpoint_utils.PathManager, _AtomicCopyPathManager):
        checkpoint_utils.PathManager = _AtomicCopyPathManager(checkpoint_utils.PathManager)

    if not getattr(checkpoint_utils.load_checkpoint_to_cpu, "_fairseq_entropy_wrapped", False):
        checkpoint_utils.load_checkpoint_to_cpu = _wrap_loader(
            checkpoint_utils.load_checkpoint_to_cpu)
