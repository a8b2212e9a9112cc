"""The pack description (``pack.json``) and the ordinary checkpoints unpacked from a packed one.

``pack.json``, in the directory given to ``fairseq-train`` as its data argument, lists the K
runs of a pack::

    {"runs": [{"data": "data-bin/exp1/3bits", "seed": 1, "run_dir": "runs/3bits_s1"}, ...]}

(relative paths are relative to the pack directory; a bare list of runs is accepted too).  A
run may give its own ``max_update`` (its number of updates, at most the pack's
``--max-update``) and ``train_args_sha256`` (the hash of its own arguments, recorded in its
checkpoints instead of the pack's).
:func:`unpack` turns the packed ``checkpoint_last.pt`` into each run's
``run_dir/checkpoints/checkpoint_last.pt`` and ``checkpoint_best.pt``: ordinary fairseq
checkpoints of the ordinary architecture, whose config, task state and training record are
those of the run alone (its data, seed, clip norm and save directory).
"""

import copy
import json
import os
import pickle
import re
import shutil
from pathlib import Path
from typing import Dict, List, Optional

from ..errors import UserError
from ..files import atomic_write_bytes, check_fairseq_path

PACK_FILE = "pack.json"
#: packed-task options that the ordinary ``systematicity`` task does not know
PACKED_TASK_KEYS = ("run_clip_norm", "no_unpack_at_exit")



class PackError(UserError, ValueError):
    """A missing or malformed pack description or packed checkpoint."""


def read_pack(pack_dir: str) -> List[Dict]:
    """The runs of ``pack_dir/pack.json``: ``[{"data": abs path, "seed": int, "run_dir": abs
    path, "name": str}]`` (:func:`read_description`).

    Raises:
        PackError: as :func:`read_description`.
    """
    return read_description(pack_dir)["runs"]


def read_description(pack_dir: str) -> Dict:
    """``pack_dir/pack.json``, the one reader of the file: ``{"runs": [{"data": abs path,
    "seed": int, "run_dir": abs path, "name": str, "max_update": int or None,
    "train_args_sha256": str or None}], "sweep_key": str or None}`` (the key of the sweep
    that wrote it, see :func:`write_pack`).

    Raises:
        PackError: no pack.json, not JSON, a run without data / an int seed / run_dir, a
            ``max_update`` that is not a positive int, or two runs with one run_dir.
    """
    path = Path(pack_dir) / PACK_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise PackError(f"error: {path}: no pack description. Fix: write pack.json with "
                        "{\"runs\": [{\"data\": ..., \"seed\": ..., \"run_dir\": ...}]} in the "
                        "directory given to fairseq-train") from None
    except json.JSONDecodeError as e:
        raise PackError(f"{path}:{e.lineno}: not JSON ({e.msg}). Fix: write valid JSON") \
            from None
    runs = raw.get("runs") if isinstance(raw, dict) else raw
    if not isinstance(runs, list) or not runs:
        raise PackError(f"{path}: no list of runs. Fix: give \"runs\": [...] with one entry "
                        "per run")
    out = []
    for i, run in enumerate(runs):
        ok = isinstance(run, dict) and isinstance(run.get("data"), str) and \
            isinstance(run.get("seed"), int) and isinstance(run.get("run_dir"), str)
        if not ok:
            raise PackError(f"{path}: run {i} is {run!r}; each run needs \"data\" (a data-bin "
                            "directory), \"seed\" (an int) and \"run_dir\". Fix: complete it")
        limit = run.get("max_update")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                                  or limit < 1):
            raise PackError(f"{path}: run {i} has max_update {limit!r}. Fix: give a positive "
                            "int (its number of updates) or leave it out (the pack's)")
        base = path.parent
        check_fairseq_path((base / run["data"]).resolve(), f"{path}: run {i}'s data")
        out.append({"data": str((base / run["data"]).resolve()), "seed": run["seed"],
                    "run_dir": str((base / run["run_dir"]).resolve()),
                    "name": str(run.get("name") or f"run{i}"), "max_update": limit,
                    "train_args_sha256": run.get("train_args_sha256")})
    dirs = [r["run_dir"] for r in out]
    if len(set(dirs)) != len(dirs):
        raise PackError(f"{path}: two runs share a run_dir. Fix: give every run its own")
    key = raw.get("sweep_key") if isinstance(raw, dict) else None
    return {"runs": out, "sweep_key": key if isinstance(key, str) else None}


def write_pack(pack_dir: str, runs: List[Dict], sweep_key: Optional[str] = None) -> Path:
    """Write ``pack_dir/pack.json``, the one writer of the file, atomically: ``runs`` (dicts
    with data, seed, run_dir and optionally name) and, for a pack of a sweep, its
    ``sweep_key`` (the preset, N, schedule and arguments its cells share), by which a later
    sweep finds the pack to resume."""
    Path(pack_dir).mkdir(parents=True, exist_ok=True)
    path = Path(pack_dir) / PACK_FILE
    desc = {"runs": runs, **({"sweep_key": sweep_key} if sweep_key is not None else {})}
    atomic_write_bytes(path, json.dumps(desc, indent=1).encode())
    return path


def run_checkpoint(state: Dict, k: int, model_state: Dict, record: Dict,
                   extra: Optional[Dict] = None) -> Dict:
    """Run ``k``'s ordinary checkpoint from a packed checkpoint ``state`` (as fairseq saved it).

    Args:
        model_state: the run's ordinary model state dict.
        record: the run's entry of the packed task state (``run``, ``task_cfg``,
            ``task_state``, ``clip_norm``, and ``own`` -- the run's own ``max_update``,
            ``train_args_sha256``, updates and iterator state -- for a run with its own
            ``max_update``).
        extra: the run's ``extra_state`` (default: the pack's, with the run's best value).
    """
    run = record["run"]
    cfg = copy.deepcopy(state["cfg"])
    task = cfg["task"]
    for key in PACKED_TASK_KEYS:
        task.pop(key, None)
    task.update(record["task_cfg"])
    task["_name"] = "systematicity"
    task["data"] = run["data"]
    cfg["common"]["seed"] = run["seed"]
    cfg["optimization"]["clip_norm"] = record["clip_norm"]
    cfg["checkpoint"]["save_dir"] = os.path.join(run["run_dir"], "checkpoints")
    history = [dict(h) for h in state.get("optimizer_history") or []]
    own = record.get("own")
    if own is not None:
        cfg["optimization"]["max_update"] = own["max_update"]
        task["max_update"] = own["max_update"]
        if own.get("train_args_sha256"):
            task["train_args_sha256"] = own["train_args_sha256"]
        if history:
            history[-1]["num_updates"] = own["updates"]
    if extra is None:
        extra = {key: value for key, value in (state.get("extra_state") or {}).items()
                 if key not in ("metrics", "best", "val_loss")}
        if own is not None:
            extra["train_iterator"] = dict(own["train_iterator"])
        if record.get("best") is not None:
            extra["best"] = record["best"]["value"]
    return {"args": None, "cfg": cfg, "model": model_state,
            "criterion": state.get("criterion", {}), "optimizer_history": history,
            "task_state": record["task_state"], "extra_state": extra}


def unpack(checkpoint: str) -> List[Path]:
    """Write every run's ``checkpoint_last.pt`` (and ``checkpoint_best.pt`` when the pack has
    validated) from the packed ``checkpoint`` into ``run_dir/checkpoints``; returns the paths
    written.  Atomic per file.

    Raises:
        PackError: ``checkpoint`` is missing, a directory, not a torch checkpoint (any other
            file) or not a packed one.
        OSError: reading or writing failed.
    """
    import torch

    from ..checkpoint import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()
    if Path(checkpoint).is_dir():
        raise PackError(f"{checkpoint} is a directory, not a file. Fix: give its "
                        "checkpoint_last.pt (fairseq-entropy unpack PACK/checkpoints takes the "
                        "directory's)")
    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise PackError(f"{checkpoint}: file not found. Fix: check the path") from None
    except (pickle.UnpicklingError, EOFError, RuntimeError, KeyError, ValueError):
        raise PackError(f"{checkpoint}: not a torch checkpoint (torch.load cannot read it). "
                        "Fix: give the checkpoint_last.pt of a packed_systematicity run") \
            from None
    task_state = state.get("task_state") if isinstance(state, dict) else None
    packed = task_state.get("packed") if isinstance(task_state, dict) else None
    if not packed:
        raise PackError(f"{checkpoint}: not a packed checkpoint (no packed task state). Fix: "
                        "give the checkpoint_last.pt of a packed_systematicity run")
    _check_packed(state, packed, checkpoint)
    outputs = []  # every run's files, made before anything is written
    for k, record in enumerate(packed["runs"]):
        out_dir = Path(record["run"]["run_dir"]) / "checkpoints"
        files = {"checkpoint_last.pt": run_checkpoint(state, k, record["model"], record)}
        best = record.get("best")
        history = state.get("optimizer_history") or [{}]
        own = record.get("own")
        last_updates = own["updates"] if own is not None else history[-1].get("num_updates")
        if best is not None and best["updates"] == last_updates:
            # the best is the last state: a copy of checkpoint_last.pt, as fairseq's own
            # checkpoint_best.pt is (so that the run decodes it once)
            files["checkpoint_best.pt"] = "checkpoint_last.pt"
        elif best is not None:
            files["checkpoint_best.pt"] = run_checkpoint(
                state, k, best["model"], {**record, "task_state": best["task_state"]},
                extra={"train_iterator": best["train_iterator"], "best": best["value"],
                       "previous_training_time": 0})
            history = files["checkpoint_best.pt"]["optimizer_history"]
            if history:
                history[-1]["num_updates"] = best["updates"]
        outputs.append((out_dir, files))
    written = []
    for out_dir, files in outputs:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, ckpt in files.items():
            if isinstance(ckpt, str):  # a copy of a file written before
                tmp = out_dir / f".{name}.tmp{os.getpid()}"
                shutil.copyfile(out_dir / ckpt, tmp)
                os.replace(tmp, out_dir / name)
                written.append(out_dir / name)
            else:
                written.append(_save(ckpt, out_dir / name))
    return written


def _check_packed(state: Dict, packed, checkpoint: str) -> None:
    """Check that a packed checkpoint holds what :func:`unpack` reads: fairseq's ``cfg``
    (``task``, ``common``, ``optimization``, ``checkpoint``) and, per run, its description
    (``run``: data, seed, run_dir), ordinary weights, task config and state and clip norm,
    and its best and own record where present.

    Raises:
        PackError: naming the checkpoint and the first thing missing.
    """
    def bad(what: str):
        return PackError(f"{checkpoint}: not a packed checkpoint this version can read "
                         f"({what}). Fix: give the checkpoint_last.pt that a "
                         "packed_systematicity fairseq-train wrote")

    cfg = state.get("cfg")
    if not isinstance(cfg, dict) or any(not isinstance(cfg.get(key), dict) for key in (
            "task", "common", "optimization", "checkpoint")):
        raise bad("no fairseq cfg with task, common, optimization and checkpoint")
    runs = packed.get("runs") if isinstance(packed, dict) else None
    if not isinstance(runs, list) or not runs:
        raise bad("no list of runs in its packed task state")
    for k, record in enumerate(runs):
        if not isinstance(record, dict):
            raise bad(f"run {k} is not a record")
        run = record.get("run")
        missing = [key for key in ("model", "task_cfg", "task_state", "clip_norm")
                   if key not in record]
        if not isinstance(run, dict) or any(key not in run for key in
                                            ("data", "seed", "run_dir")):
            missing.insert(0, "run (data, seed, run_dir)")
        if missing:
            raise bad(f"run {k} has no {', '.join(missing)}")
        best, own = record.get("best"), record.get("own")
        if best is not None and (not isinstance(best, dict) or any(
                key not in best for key in ("value", "model", "task_state", "updates",
                                            "train_iterator"))):
            raise bad(f"run {k}'s best record is incomplete")
        if own is not None and (not isinstance(own, dict) or any(
                key not in own for key in ("max_update", "updates", "train_iterator"))):
            raise bad(f"run {k}'s own-length record is incomplete")


def _save(state: Dict, path: Path) -> Path:
    """``torch.save`` to a temporary file beside ``path``, then rename."""
    import torch

    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


_OWN_VALID = re.compile(r"\| run (\d+) \([^)]*\): valid on ")
_METRIC = re.compile(r"^([A-Za-z][\w/]*?)_(\d+) ")
_POOLED_VALID = re.compile(r" \| valid on '")
_LAST_VALID = re.compile(r" \| last valid seq_acc [0-9.]+")


def run_lines(lines: List[str], k: int) -> List[str]:
    """Run k's view of a pack's console lines (``train.log`` lines that fairseq and the
    packed task print).

    - The pack's validations (``... | valid on 'valid' subset | loss_0 ... | loss | ... |
      num_updates U``) keep their fields up to ``valid on``, run k's metrics under their
      ordinary names (``loss``, ``seq_acc``) and ``num_updates``; the other runs', the pooled
      ones (``loss``, ``wps``, fairseq's ``best_<metric>``) are left out.
    - Where the pack validated runs at their own epochs (lines ``run k (...): valid on ...``),
      run k's lines only, and none of the pack's validations.
    - Progress lines are the pack's (its epoch and update, for runs of their own length),
      without the pooled ``last valid seq_acc``; other lines are unchanged.
    """
    own = any(_OWN_VALID.search(ln) for ln in lines)
    out = []
    for line in lines:
        m = _OWN_VALID.search(line)
        if m:
            if int(m.group(1)) == k:
                out.append(line)
            continue
        if not _POOLED_VALID.search(line):
            out.append(_LAST_VALID.sub("", line) if "progress: " in line else line)
            continue
        if own:  # the run's own validation line says it
            continue
        fields = line.rstrip("\n").split(" | ")
        at = next(i for i, f in enumerate(fields) if f.startswith("valid on '"))
        kept = fields[:at + 1]
        for field in fields[at + 1:]:
            m = _METRIC.match(field)
            if m and int(m.group(2)) == k:
                kept.append(m.group(1) + field[m.end() - 1:])
            elif field.startswith("num_updates "):
                kept.append(field)
        out.append(" | ".join(kept) + "\n")
    return out
