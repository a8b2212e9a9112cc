"""What the sweep knows about Slurm and submitit: valid ``[resources]`` keys, task states,
cancelling an array, and the threads of a task.

The state of a task comes from submitit's watcher (``sacct``); when accounting is off
(:func:`sacct_works`), from ``squeue --states=all``, which knows a job until ``MinJobAge``
seconds after it ended (:func:`squeue_states`).
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
from typing import Dict, Optional

#: the message of a task that Slurm ended before it finished
CANCELLED_MESSAGE = "cancelled by Slurm (scancel, time limit or preemption): re-run to resume"
#: Slurm job states of a task that Slurm ended before it finished
CANCELLED_STATES = ("CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE", "NODE_FAIL", "BOOT_FAIL",
                    "REVOKED")
#: Slurm job states of a task that has not ended
ACTIVE_STATES = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING",
                 "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "REQUEUE_HOLD",
                 "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT")


#: numeric ``[resources]`` parameters that may be 0 (every other number must be > 0)
ZERO_RESOURCES = ("gpus_per_node",)


def resource_keys() -> Dict[str, Optional[type]]:
    """Every key a grid's ``[resources]`` table may have, with its type (None: any).

    The keys of ``submitit.AutoExecutor.update_parameters``: the generic ones
    (``timeout_min``, ``cpus_per_task``, ``mem_gb``...), typed as submitit checks them, and
    ``<executor>_<parameter>`` for every executor submitit knows (``slurm_partition``,
    ``slurm_array_parallelism``, ``local_setup``...), read from submitit without a cluster.
    """
    from submitit.auto.auto import AutoExecutor
    from submitit.core import plugins

    generic = {k: (float if t is float else t) for k, t in AutoExecutor._typed_parameters().items()}
    keys: Dict[str, Optional[type]] = dict(generic)
    for name, executor in plugins.get_executors().items():
        for arg in set(executor._valid_parameters()) | set(generic):
            keys.setdefault(f"{name}_{arg}", generic.get(arg))
    return keys


def resource_problem(key: str, value: object,
                     keys: Optional[Dict[str, Optional[type]]] = None) -> Optional[str]:
    """Why ``key = value`` cannot be a ``[resources]`` entry, or None when it can (see
    :func:`resource_keys`; an integer is a valid float).  A number must be finite, and a
    typed numeric parameter (``timeout_min``, ``cpus_per_task``, ``mem_gb``, ``nodes``...)
    positive (``gpus_per_node``: >= 0, :data:`ZERO_RESOURCES`)."""
    keys = resource_keys() if keys is None else keys
    if key not in keys:
        return f"unknown key {key!r}"
    want = keys[key]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and not math.isfinite(value):
        return f"{key} = {value!r} is not a finite number"
    if want is None:
        return None
    ok = number if want is float \
        else isinstance(value, want) and (want is bool or not isinstance(value, bool))
    if not ok:
        return f"{key} = {value!r} is not of type {want.__name__}"
    if want in (int, float):
        zero_ok = key.split("_", 1)[-1] in ZERO_RESOURCES or key in ZERO_RESOURCES
        if value < 0 or (value == 0 and not zero_ok):
            return f"{key} = {value!r} must be {'>= 0' if zero_ok else '> 0'}"
    return None


def array_id(job_id: str) -> str:
    """The job array's id of one task's id: ``18`` for ``18_0`` (``scancel 18`` cancels every
    task, ``scancel 18_0`` only the first)."""
    return str(job_id).split("_", 1)[0]


def normal_state(state: object) -> str:
    """A Slurm state as one upper-case word: ``CANCELLED`` for sacct's ``CANCELLED by 0`` or
    a ``CANCELLED+``; ``""`` for none."""
    words = str(state or "").split()
    return words[0].rstrip("+").upper() if words else ""


def squeue_states(array: str) -> Optional[Dict[str, str]]:
    """``{task id: state}`` (``{"18_0": "RUNNING", ...}``) of the tasks of array ``array``
    that the controller still knows (``squeue --states=all --array``), or None when squeue
    fails (no Slurm)."""
    try:
        out = subprocess.run(["squeue", "-h", "--states=all", "--array", "-j", array, "-o",
                              "%i|%T"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        # a job the controller forgot: "Invalid job id specified"
        return {} if "Invalid job id" in out.stderr else None
    states = {}
    for line in out.stdout.splitlines():
        task, _, state = line.strip().partition("|")
        if task and state:
            states[task] = normal_state(state)
    return states


def sacct_works(array: str) -> Optional[str]:
    """None when ``sacct`` answers for job ``array``, else why not (its last error line):
    Slurm without accounting (``Slurm accounting storage is disabled``)."""
    try:
        out = subprocess.run(["sacct", "-n", "-X", "-j", array, "-o", "JobID"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if out.returncode == 0:
        return None
    lines = [ln.strip() for ln in (out.stderr or out.stdout).splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {out.returncode}"


def cancel_array(array: str) -> bool:
    """``scancel ARRAY`` (every task of the array); whether it succeeded."""
    try:
        return subprocess.run(["scancel", array], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class SacctWarnings(logging.Filter):
    """Keeps submitit's ``Bypassing sacct error`` warnings (one per status poll when Slurm
    accounting is off) out of the console; :attr:`count` says how many there were and
    :attr:`last` holds the last one."""

    def __init__(self):
        super().__init__()
        self.count, self.last = 0, ""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if "Bypassing sacct error" in msg:
            self.count += 1
            self.last = msg
            return False
        return True


def task_threads(env: Optional[Dict[str, str]] = None) -> Optional[int]:
    """The CPUs Slurm gave this task (``SLURM_CPUS_PER_TASK``), or None outside Slurm."""
    value = (env if env is not None else os.environ).get("SLURM_CPUS_PER_TASK", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def thread_env(threads: Optional[int]) -> Dict[str, str]:
    """``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` for ``threads`` CPUs (empty when None)."""
    return {} if threads is None else {"OMP_NUM_THREADS": str(threads),
                                       "MKL_NUM_THREADS": str(threads)}


def resource_error(key: str, value, keys: Optional[dict] = None) -> Optional[str]:
    """What is wrong with the ``[resources]`` entry ``key = value``, with the fix (None when
    submitit takes it): :func:`resource_problem` against ``keys`` (default
    :func:`resource_keys`), then an example of the right type or the valid keys."""
    keys = resource_keys() if keys is None else keys
    problem = resource_problem(key, value, keys)
    if problem is None:
        return None
    if key in keys:
        want = keys[key] or float
        example = {int: "2", float: "4", bool: "true", str: '"value"'}[want]
        return (f"{problem}. Fix: write a {'finite, positive ' if want in (int, float) else ''}"
                f"{want.__name__}, e.g. {key} = {example}")
    generic = sorted(k for k in keys if k.split("_")[0] not in ("slurm", "local", "debug"))
    slurm_keys = sorted(k for k in keys if k.startswith("slurm_"))
    return (f"{problem}. Fix: use the submitit parameters {', '.join(generic)}, or a Slurm "
            f"one: {', '.join(slurm_keys)}")
