"""Which device runs train on, and the worker slots of a sweep (environment per slot)."""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

from ..errors import UserError


class DeviceError(UserError, ValueError):
    """A sweep's device request that this machine cannot meet (no GPU, too many jobs)."""


def gpu_count() -> int:
    """``torch.cuda.device_count()`` (imports torch)."""
    import torch

    return torch.cuda.device_count()


def default_device() -> str:
    """``gpu`` when torch sees a CUDA device, else ``cpu``."""
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def detect_device(device: str = "auto", gpus: Optional[int] = None) -> Tuple[str, int]:
    """Resolve a sweep's ``--device`` and ``--gpus``.

    Args:
        device: ``auto`` (``gpu`` when there is a GPU, else ``cpu``), ``cpu`` or ``gpu``.
        gpus: the number of GPUs, or None to count them (:func:`gpu_count`; not counted for
            ``cpu``).

    Returns:
        ``(device, gpus)`` with device ``cpu`` or ``gpu`` and gpus >= 0.
    """
    if device == "auto":
        gpus = gpu_count() if gpus is None else gpus
        return ("gpu" if gpus else "cpu"), gpus
    if device == "gpu" and gpus is None:
        gpus = gpu_count()
    return device, gpus or 0


#: worker slots per GPU when ``sweep --per-gpu`` is not given
DEFAULT_PER_GPU = 8


def device_slots(jobs: Optional[int], device: str, gpus: int = 0,
                 per_gpu: int = 1, cores: Optional[int] = None,
                 gpus_given: bool = False, threads: int = 1) -> List[Dict[str, str]]:
    """Worker slots: the environment each concurrently running cell gets.

    Args:
        jobs: number of slots (None: one per core on a CPU, ``gpus x per_gpu`` on GPUs).
        device: ``cpu`` or ``gpu``.
        gpus: number of GPUs (e.g. ``torch.cuda.device_count()``).
        per_gpu: runs packed on each GPU (K).
        cores: CPU cores (default ``os.cpu_count()``).
        gpus_given: ``gpus`` came from the user's ``--gpus`` (for the message).
        threads: torch threads of each CPU slot (``OMP_NUM_THREADS``).

    Returns:
        one dict per slot. CPU: ``DEVICE=cpu``, ``OMP_NUM_THREADS=<threads>``. GPU: ``DEVICE=gpu``
        and ``CUDA_VISIBLE_DEVICES`` assigned round-robin (slot i gets GPU i mod gpus, so
        that the first slots spread over all GPUs), at most ``per_gpu`` slots per GPU.

    Raises:
        DeviceError: a GPU sweep without GPUs, more jobs than ``gpus x per_gpu``, or CPU slots
            of more than one thread that together need more threads than ``cores``.
    """
    if device == "cpu":
        cores = cores or os.cpu_count() or 1
        n = jobs or max(1, cores // threads)
        if threads > 1 and n * threads > cores:
            raise DeviceError(f"--threads {threads} x {n} cell(s) at once = {n * threads} "
                              f"threads on {cores} core(s): the runs would slow each other "
                              f"down. Fix: --jobs {max(1, cores // threads)} with --threads "
                              f"{threads}, or --threads {max(1, cores // n)}")
        return [{"DEVICE": "cpu", "OMP_NUM_THREADS": str(threads)} for _ in range(n)]
    if gpus < 1:
        given = "--gpus 0 was given" if gpus == 0 and gpus_given else "torch sees none"
        raise DeviceError(f"--device gpu: no GPU found ({given}). Fix: run with --device cpu "
                          "(or --device auto), or on a machine with a GPU")
    capacity = gpus * per_gpu
    n = jobs or capacity
    if n > capacity:
        raise DeviceError(f"--jobs {n} exceeds {gpus} GPU(s) x {per_gpu} run(s) per GPU. Fix: "
                         f"raise --per-gpu to {-(-n // gpus)} or lower --jobs")
    return [{"DEVICE": "gpu", "CUDA_VISIBLE_DEVICES": str(i % gpus)} for i in range(n)]
