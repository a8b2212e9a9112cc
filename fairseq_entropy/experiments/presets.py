"""Training presets: the hyper-parameters of each configuration, turned into fairseq-train args.

Presets live in ``recipes/presets.json`` (one object per preset; the recipes read it through
``fairseq-entropy train-args``).  Epoch-based schedules are converted to updates, because
fairseq's ``cosine`` scheduler needs ``--max-update``: with N training commands and batch size
b, one epoch is ceil(N / b) updates; the warm-up is ``warmup_fraction`` of all updates.

Placeholders in ``optimizer_args``: ``{max_update}``, ``{warmup_updates}``, ``{lr}``,
``{min_lr}`` (= ``min_lr_ratio`` x lr).  ``epochs_by_train_size`` maps a training-set size to
its epochs (e.g. the CNN's 24/36/48 for 6000/4000/3000 commands).  ``epochs_formula`` (e.g. ``"64-8*(k-1)"``) computes the
epochs from the support size k of an Experiment 2 level.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import os
from pathlib import Path
from typing import Dict, List, Optional

DEFAULT_CRITERION = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0",
                     "--report-accuracy"]


class PresetError(ValueError):
    """Unknown preset or an unusable preset file."""


def default_presets_path() -> Optional[Path]:
    """``recipes/presets.json`` of the source tree this package was installed from."""
    p = Path(__file__).resolve().parents[2] / "recipes" / "presets.json"
    return p if p.exists() else None


def load_presets(path: Optional[str | os.PathLike] = None) -> Dict[str, dict]:
    """Read a presets file (default :func:`default_presets_path`)."""
    path = Path(path) if path else default_presets_path()
    if path is None or not path.exists():
        raise PresetError(f"presets file {path} not found. Fix: pass --presets "
                          "recipes/presets.json")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PresetError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv}


def eval_epochs(formula: str, k: int) -> int:
    """Evaluate an integer formula in ``k`` (only + - * // and parentheses)."""
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id == "k":
            return k
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise PresetError(f"unsupported epochs formula {formula!r}")
    return int(ev(ast.parse(formula, mode="eval")))


def train_size(data_dir: str | os.PathLike) -> int:
    """Number of training examples of a binarized level (from its fairseq index file)."""
    from fairseq.data import data_utils

    from ..scan.binarize import SOURCE_LANG, TARGET_LANG

    prefix = os.path.join(str(data_dir), f"train.{SOURCE_LANG}-{TARGET_LANG}.{SOURCE_LANG}")
    ds = data_utils.load_indexed_dataset(prefix, None)
    if ds is None:
        raise PresetError(f"{prefix}.bin not found. Fix: binarize the level first "
                          "(fairseq-entropy binarize)")
    return len(ds)


def train_args(preset: dict, data_dir: str | os.PathLike, epochs: Optional[float] = None,
               max_update: Optional[int] = None) -> List[str]:
    """fairseq-train arguments (without the data dir and ``--user-dir``) for ``preset``.

    Args:
        preset: one entry of the presets file.
        data_dir: the binarized level (for the training-set size and, for Experiment 2, the
            support size from ``manifest.json``).
        epochs: override the preset's epochs (e.g. a shorter CPU schedule).
        max_update: override the number of updates directly.

    Returns:
        the argument list; every token is free of whitespace, quotes and glob characters, so
        ``" ".join(args)`` round-trips through unquoted shell word splitting.

    Raises:
        PresetError: the level is not binarized, an Experiment 2 preset's level has no support
            size, or a preset argument is not word-split safe (:func:`check_word_split_safe`).
    """
    n = train_size(data_dir)
    batch = int(preset.get("batch_size", 32))
    if epochs is None:
        if "epochs_formula" in preset:
            manifest = Path(data_dir) / "manifest.json"
            support = json.loads(manifest.read_text()).get("support") if manifest.exists() \
                else None
            if not support:
                raise PresetError(f"preset needs the support size k but {manifest} has none")
            epochs = eval_epochs(preset["epochs_formula"], len(support))
        elif str(n) in preset.get("epochs_by_train_size", {}):
            epochs = float(preset["epochs_by_train_size"][str(n)])
        else:
            epochs = float(preset.get("epochs", 24))
    updates_per_epoch = math.ceil(n / batch)
    total = int(max_update) if max_update else int(round(epochs * updates_per_epoch))
    lr = float(preset.get("lr", 3e-4))
    values = {"max_update": total,
              "warmup_updates": int(round(float(preset.get("warmup_fraction", 0.0)) * total)),
              "lr": lr, "min_lr": float(f"{lr * float(preset.get('min_lr_ratio', 0.0)):.6g}")}
    args = ["--task", "systematicity", "--source-lang", "in", "--target-lang", "out",
            "--arch", preset["arch"], "--batch-size", str(batch), "--lr", repr(lr),
            "--max-update", str(total), "--required-batch-size-multiple", "1"]
    args += [a.format(**values) for a in preset.get("optimizer_args", [])]
    args += list(preset.get("task_args", []))
    args += list(preset.get("model_args", []))
    args += list(preset.get("criterion_args", DEFAULT_CRITERION))
    args += list(preset.get("extra_args", []))
    for token in args:
        check_word_split_safe(token, preset)
    return args


#: characters that an unquoted ``$(...)`` would split on or expand (whitespace, quotes, globs,
#: variables and escapes); a preset argument holding one would reach fairseq-train mangled
UNSAFE_CHARS = frozenset(" \t\n'\"*?[]$\\`")


def check_word_split_safe(token: str, preset: dict) -> None:
    """Raise :class:`PresetError` if ``token`` would not survive unquoted shell word splitting.

    ``fairseq-entropy train-args`` prints the arguments space-separated so that
    ``fairseq-train ... $(fairseq-entropy train-args ...)`` works as written; a token with a
    space or quote (e.g. ``"(0.9, 0.98)"``) would be split into pieces fairseq cannot parse.
    """
    bad = sorted(set(token) & UNSAFE_CHARS)
    if bad or not token:
        raise PresetError(
            f"preset for arch {preset.get('arch')!r}: argument {token!r} contains "
            f"{', '.join(repr(c) for c in bad) or 'nothing'}, which shell word splitting would "
            "break. Fix: write it without spaces or quotes in recipes/presets.json, "
            "e.g. \"(0.9,0.98)\" for --adam-betas")
