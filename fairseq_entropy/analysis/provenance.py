"""Where a score comes from: the decoded level (its ``manifest.json``), the checkpoint (its
architecture, seed and training data), the preset, the model and the training seed.

:func:`resolve_provenance` fills in what the ``score`` options leave out from the checkpoint
that was decoded and checks that the options do not contradict it; :func:`provenance` is the
record a ``score.json`` keeps of it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Mapping, Optional, Tuple

from ..errors import UserError
from ..files import read_json
from .columns import CHECKPOINT_LABELS, ScoreError


def load_data_manifest(data_dir: str | os.PathLike) -> Tuple[dict, str]:
    """The ``manifest.json`` of a level directory (raw or binarized) and its SHA-256 (hex).

    Raises:
        ScoreError: no manifest (names the file and the fix).
        DataFormatError: an unreadable manifest (names the file and the fix).
    """
    path = Path(data_dir) / "manifest.json"
    if not path.is_file():
        raise ScoreError(f"{path} not found. Fix: --data must be a level directory written by "
                         "'fairseq-entropy build' or 'fairseq-entropy binarize'")
    manifest = read_json(path)
    return manifest, hashlib.sha256(path.read_bytes()).hexdigest()


def read_checkpoint_info(path: str | os.PathLike) -> dict:
    """Architecture, training seed and training data of a fairseq checkpoint.

    Loads the checkpoint on the CPU with ``torch.load(weights_only=True)`` (torch is imported
    here, on first use, so that the rest of the package does not need it).

    Returns:
        ``{"path": absolute path, "arch": str | None, "seed": int | None, "data": str | None}``
        from the checkpoint's ``cfg`` (or legacy ``args``).

    Raises:
        ScoreError: the file cannot be loaded as a checkpoint.
    """
    import torch

    from ..checkpoint import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure means: not a readable checkpoint
        raise ScoreError(f"{path}: not a readable fairseq checkpoint ({type(e).__name__}: "
                         f"{e}). Fix: pass --path with the checkpoint that was decoded") from None

    def get(section, key):
        cfg = state.get("cfg") or {}
        part = cfg.get(section) if isinstance(cfg, dict) else None
        value = part.get(key) if isinstance(part, dict) else getattr(part, key, None)
        if value is None and state.get("args") is not None:
            value = getattr(state["args"], key, None)
        return value

    arch = get("model", "arch") or get("model", "_name")
    seed = get("common", "seed")
    return {"path": str(Path(path).resolve()), "arch": arch,
            "seed": None if seed is None else int(seed), "data": get("task", "data")}


def data_variant(manifest: dict) -> str:
    """How a level's data departs from the paper's setup (restricted verbs, word tokens), as
    recorded in its manifest: ``""`` for the paper's setup, else ``+``-joined parts,
    ``<component>=<restricted value>`` for another component class (``build --component``)
    and ``spm<N>`` (``spm<N>-source`` for commands only) for subword tokens
    (``binarize --spm-vocab``), e.g. ``direction=left`` or ``spm48``.

    Aggregates keep each variant a curve of its own, named ``<experiment>+<variant>``, which
    the paper's tables (verbs, word tokens) do not cover."""
    parts = []
    component = manifest.get("component", "verb")
    if component != "verb":
        parts.append(f"{component}={manifest.get('restricted_value')}")
    subword = manifest.get("subword")
    if subword:
        side = subword.get("side", "both")
        parts.append(f"spm{subword.get('vocab_size')}" + ("" if side == "both" else f"-{side}"))
    return "+".join(parts)


def provenance(manifest: dict, manifest_sha256: str, data_dir: str | os.PathLike,
               split: str, checkpoint: str, preset: str, model: str, seed: int,
               checkpoint_path: Optional[str] = None) -> dict:
    """The metadata a ``score.json`` records about where its number comes from.

    Keys: experiment, variant (:func:`data_variant`), level, entropy_bits,
    target_entropy_bits, grammar, data_seed, n_train (training-set size N), split, data
    (absolute path), data_manifest_sha256, preset, model, seed (training seed), checkpoint
    (label) and checkpoint_path.

    Raises:
        ScoreError: an unknown checkpoint label.
    """
    if checkpoint not in CHECKPOINT_LABELS:
        raise ScoreError(f"unknown checkpoint label {checkpoint!r}. Fix: pass --checkpoint "
                         f"{', '.join(CHECKPOINT_LABELS)}")
    sizes = manifest.get("sizes", {})
    return {"experiment": manifest.get("experiment"), "variant": data_variant(manifest),
            "level": manifest.get("level"),
            "entropy_bits": manifest.get("entropy_bits"),
            "target_entropy_bits": manifest.get("target_entropy_bits"),
            "grammar": manifest.get("grammar"), "data_seed": manifest.get("seed"),
            "n_train": sizes.get("train"), "split": split,
            "data": str(Path(data_dir).resolve()), "data_manifest_sha256": manifest_sha256,
            "preset": preset, "model": model, "seed": seed, "checkpoint": checkpoint,
            "checkpoint_path": checkpoint_path}


def resolve_provenance(generate_output: str | os.PathLike, checkpoint_label: str,
                       presets: Mapping[str, dict], path: Optional[str | os.PathLike] = None,
                       data: Optional[str | os.PathLike] = None, preset: Optional[str] = None,
                       model: Optional[str] = None, seed: Optional[int] = None,
                       split: str = "test") -> dict:
    """Resolve the data, preset, model and seed of a decode.

    Each comes from its argument, else from the decoded checkpoint (``path``, or
    ``checkpoints/checkpoint_<checkpoint_label>.pt`` beside ``generate_output``): its training
    data, its architecture (the one preset of that architecture and the data's experiment)
    and its seed.

    Args:
        presets: the known presets, name -> preset dict (``arch``, ``experiment``, ``model``
            keys are read), as ``experiments.presets.load_presets()`` returns them; the caller
            checks that ``preset`` is one of them.

    Returns:
        ``{"data": the level directory, "meta": :func:`provenance` of the decode}``.

    Raises:
        UserError: a value that cannot be known, or arguments that contradict the checkpoint.
        ScoreError: an unreadable checkpoint, a level without a manifest, or an unknown
            checkpoint label.
        DataFormatError: an unreadable manifest.
    """
    ckpt = Path(path) if path else \
        Path(generate_output).parent / "checkpoints" / f"checkpoint_{checkpoint_label}.pt"
    if path and not ckpt.is_file():
        raise UserError(f"{ckpt}: checkpoint not found. Fix: pass --path with the checkpoint "
                        "that was decoded")
    info = read_checkpoint_info(ckpt) if ckpt.is_file() else None
    where = f"checkpoint {ckpt}" if info else f"no checkpoint at {ckpt}"

    data = data or (info or {}).get("data")
    if not data or not Path(data).is_dir():
        raise UserError(f"the decoded data is unknown (no --data; {where}"
                        f"{', whose data ' + repr(data) + ' is not a directory' if data else ''}"
                        "). Fix: pass --data LEVEL_DIR")
    manifest, sha = load_data_manifest(data)

    if info and info["arch"]:
        same_arch = sorted(n for n, p in presets.items() if p.get("arch") == info["arch"])
        if preset is not None and preset not in same_arch:
            raise UserError(f"{ckpt} was trained with --arch {info['arch']}, but preset "
                            f"{preset} uses {presets[preset].get('arch')}. Fix: pass the "
                            f"preset of the run (one of: {', '.join(same_arch) or 'none'})")
        if preset is None and not same_arch:
            raise UserError(f"{ckpt} was trained with --arch {info['arch']}, and no preset has "
                            f"--arch {info['arch']}. Fix: pass --presets with your presets file "
                            "(the one the run was trained with)")
        if preset is None:
            fits = [n for n in same_arch
                    if presets[n].get("experiment") == manifest.get("experiment")]
            if len(fits) != 1:
                raise UserError(f"cannot tell the preset of {ckpt} (arch {info['arch']}, "
                                f"experiment {manifest.get('experiment')}): candidates "
                                f"{', '.join(fits or same_arch) or 'none'}. Fix: pass --preset")
            preset = fits[0]
    if preset is None:
        raise UserError(f"the preset is unknown (no --preset; {where}). Fix: pass --preset "
                        "NAME (fairseq-entropy train-args lists them) or --path CHECKPOINT")
    preset_model = presets[preset].get("model", preset)
    if model is not None and model != preset_model:
        raise UserError(f"--model {model} contradicts preset {preset}, whose model is "
                        f"{preset_model}. Fix: drop --model (it is read from the preset)")

    if info and info["seed"] is not None:
        if seed is not None and seed != info["seed"]:
            raise UserError(f"--seed {seed} contradicts {ckpt}, trained with seed "
                            f"{info['seed']}. Fix: drop --seed (it is read from the checkpoint)")
        seed = info["seed"]
    if seed is None:
        raise UserError(f"the training seed is unknown (no --seed; {where}). Fix: pass --seed "
                        "S or --path CHECKPOINT")
    return {"data": data, "meta": provenance(manifest, sha, data, split, checkpoint_label,
                                             preset, preset_model, seed,
                                             info["path"] if info else None)}
