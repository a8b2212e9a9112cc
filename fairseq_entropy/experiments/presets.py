"""Training presets: the hyper-parameters of each configuration, turned into fairseq-train args.

Presets ship with the package as ``fairseq_entropy/experiments/presets.json`` (read with
:mod:`importlib.resources`, so a plain ``pip install`` has them).  A user's presets file
(``--presets FILE``, ``PRESETS=FILE``, a grid's ``presets_file``) adds its presets to the
packaged ones; they may extend packaged presets by name.  A user preset may not redefine a
packaged name with other content (an identical copy is accepted, so a copy of the packaged file
still loads): it would change what the name means in scores and aggregates.

Epoch-based schedules are converted to updates, because fairseq's ``cosine`` scheduler needs
``--max-update``: with N training commands and batch size b, one epoch is ceil(N / b) updates;
the warm-up is ``warmup_fraction`` of all updates.

A preset may ``"extends"`` another preset (or a list of them, merged left to right) and then
gives only the keys that differ.  A key overrides the inherited value; a key written with a
trailing ``+`` (``"model_args+"``, ``"notes+"``) appends to the inherited list or text
instead.  Names starting with ``_`` are bases: they can be extended but not trained.

Placeholders in ``optimizer_args``: ``{max_update}``, ``{warmup_updates}``, ``{lr}``,
``{min_lr}`` (= ``min_lr_ratio`` x lr).  ``epochs_by_train_size`` maps a training-set size to
its epochs (e.g. the CNN's 24/36/48 for 6000/4000/3000 commands).  ``epochs_formula`` (e.g.
``"64-8*(k-1)"``) computes the epochs from the support size k of an Experiment 2 level.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from importlib import resources
from pathlib import Path
from typing import Dict, List, Optional

from ..errors import DataFormatError, UserError
from ..files import loads_json, read_json, read_text
from ..scan.lm_format import data_format
from .preset_values import (KNOWN_KEYS, LIST_KEYS, TASK_ARGS, PresetError,
                            check_preset_values, eval_epochs)

DEFAULT_CRITERION = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0",
                     "--report-accuracy"]

#: keys that may be written with a trailing ``+`` to append to the inherited value
APPENDABLE_KEYS = frozenset(LIST_KEYS) | {"notes"}

#: former preset names -> their names now (the same fairseq-train arguments)
RENAMED = {"exp1_cnn": "exp1_fconv", "exp2_cnn": "exp2_fconv"}


def unknown_preset_message(name: str, known) -> str:
    """The refusal of an unknown preset ``name`` among the names ``known``: the new name of a
    renamed preset (:data:`RENAMED`), else the known names; ends with the fix."""
    if name in RENAMED and RENAMED[name] in known:
        return (f"preset {name!r} is now named {RENAMED[name]!r} (fairseq's fconv, not the "
                f"paper's CNN: that is {name}_authors). Fix: pass {RENAMED[name]}")
    return (f"unknown preset {name!r}; known: {', '.join(sorted(known))}. Fix: pass one of "
            "them (fairseq-entropy train-args --list lists them)")


def default_presets_path():
    """The ``presets.json`` shipped inside this package (an :mod:`importlib.resources`
    traversable; a real path for an installed or source-tree package)."""
    return resources.files(__package__).joinpath("presets.json")


def _line_of(text: str, name: str) -> int:
    """1-based line of preset ``name`` in the JSON ``text`` (1 if not found)."""
    index = text.find(json.dumps(name) + ":")
    return text.count("\n", 0, index) + 1 if index >= 0 else 1


def read_presets_file(path=None) -> tuple:
    """The raw entries of a presets file and its text (default :func:`default_presets_path`).

    Raises:
        PresetError: the file is missing, empty, is not JSON, repeats a key in one object, or
            is not an object of objects.
    """
    source = default_presets_path() if path is None else Path(path)
    if path is not None and not source.is_file():
        raise PresetError(f"presets file {source} not found. Fix: pass an existing file with "
                          "--presets, or leave --presets out to use the packaged one")
    try:
        # a byte-order mark and CRLF are read as plain UTF-8 text; NUL bytes and other
        # encodings are refused with file:line
        text = source.read_text(encoding="utf-8") if path is None else read_text(source)
    except DataFormatError as e:
        raise PresetError(str(e)) from None
    example = ('{"my_cnn": {"extends": "exp1_cnn_authors", "lr": 0.001}}')
    if not text.strip():
        raise PresetError(f"{source}:1: the presets file is empty. Fix: write an object mapping "
                          f"preset names to objects, e.g. {example}")
    try:
        raw = loads_json(text, source)
    except json.JSONDecodeError as e:
        raise PresetError(f"{source}:{e.lineno}: invalid JSON ({e.msg}). Fix: correct that "
                          "line (python -m json.tool FILE shows where)") from None
    except DataFormatError as e:
        raise PresetError(str(e)) from None
    if not isinstance(raw, dict):
        raise PresetError(f"{source}:1: expected an object mapping preset names to objects, "
                          f"got a JSON {type(raw).__name__}. Fix: write e.g. {example}")
    for name, value in raw.items():
        if not isinstance(value, dict):
            raise PresetError(f"{source}:{_line_of(text, name)}: preset {name!r} is a JSON "
                              f"{type(value).__name__}, not an object. Fix: write it as an "
                              f"object of preset keys, e.g. {example}")
    return raw, text, source


def expand_presets(raw: Dict[str, dict], source="presets file", text: str = "",
                   known: Optional[Dict[str, dict]] = None) -> Dict[str, dict]:
    """Resolve ``extends`` and ``key+`` of every entry; returns name -> flat preset.

    The result keeps bases (names starting with ``_``) and holds no ``extends`` or ``+`` keys.

    Args:
        raw: preset name -> entry, as written in the file.
        source, text: the file and its text, for the file:line of error messages.
        known: already expanded presets (e.g. the packaged ones) that an entry of ``raw``
            may also extend; they are not part of the result.

    Raises:
        PresetError: unknown key, unknown or cyclic ``extends``, or ``key+`` on a key that is
            not a list or ``notes``; the message names the file, line and preset.
    """
    known = known or {}
    done: Dict[str, dict] = {}

    def where(name):
        return f"{source}:{_line_of(text, name)}: preset {name!r}"

    def resolve(name, chain):
        if name in done:
            return done[name]
        if name in chain:
            raise PresetError(f"{where(name)}: 'extends' cycle {' -> '.join(chain + [name])}. "
                              "Fix: remove one of these 'extends'")
        entry = raw[name]
        for key in entry:
            base_key = key[:-1] if key.endswith("+") else key
            if base_key not in KNOWN_KEYS or (key.endswith("+") and
                                              base_key not in APPENDABLE_KEYS):
                raise PresetError(f"{where(name)}: unknown key {key!r}. Fix: use one of "
                                  f"{', '.join(sorted(KNOWN_KEYS))} (lists and notes also as "
                                  "'key+' to append)")
        parents = entry.get("extends", [])
        parents = [parents] if isinstance(parents, str) else list(parents)
        merged: dict = {}
        for parent in parents:
            if parent in raw:
                merged.update(resolve(parent, chain + [name]))
            elif parent in known:
                merged.update(known[parent])
            else:
                raise PresetError(f"{where(name)}: extends unknown preset {parent!r}. Fix: "
                                  "name a preset of the same file or a packaged one "
                                  "(fairseq-entropy train-args --list)")
        for key, value in entry.items():
            if key == "extends" or key.endswith("+"):
                continue
            merged[key] = value
        for key, value in entry.items():
            if not key.endswith("+"):
                continue
            key = key[:-1]
            inherited = merged.get(key)
            if key == "notes":
                merged[key] = f"{inherited} {value}" if inherited else value
            else:
                merged[key] = list(inherited or []) + list(value)
        done[name] = merged
        return merged

    for name in raw:
        resolve(name, [])
    return done


def load_presets(path: Optional[str | os.PathLike] = None, bases: bool = False
                 ) -> Dict[str, dict]:
    """The packaged presets, plus those of a user's presets file, expanded.

    The user's entries may extend packaged presets (and bases) by name.  An entry named like a
    packaged preset must be identical to it (a copy of the packaged file loads).

    Args:
        path: a user's presets file, or None for the packaged presets only.
        bases: also return the bases (names starting with ``_``).

    Returns:
        preset name -> flat preset (see :func:`expand_presets`).

    Raises:
        PresetError: see :func:`read_presets_file` and :func:`expand_presets`; also a runnable
            preset without ``arch``, or a user preset that redefines a packaged one.
    """
    raw, text, source = read_presets_file(None)
    presets = _checked(expand_presets(raw, source, text), source, text)
    if path is not None:
        user, user_text, user_source = read_presets_file(path)
        for name in [n for n in user if n in raw]:
            if user[name] != raw[name]:
                raise PresetError(
                    f"{user_source}:{_line_of(user_text, name)}: preset {name!r} redefines the "
                    f"packaged preset of that name. Fix: give yours another name, e.g. "
                    f"\"my_{name.lstrip('_')}\": {{\"extends\": \"{name}\", ...}} with only "
                    "the keys that differ")
            del user[name]
        presets.update(_checked(expand_presets(user, user_source, user_text, presets),
                                user_source, user_text))
    return {k: v for k, v in presets.items() if bases or not k.startswith("_")}


def _checked(presets: Dict[str, dict], source, text: str) -> Dict[str, dict]:
    """``presets``, after checking that every runnable one (no leading ``_``) has an
    ``arch`` (PresetError naming the file and line otherwise)."""
    for name, preset in presets.items():
        if not name.startswith("_") and "arch" not in preset:
            raise PresetError(f"{source}:{_line_of(text, name)}: preset {name!r} has no 'arch'. "
                              "Fix: give it one or extend a preset that has one")
        check_preset_values(name, preset, f"{source}:{_line_of(text, name)}")
    return presets


def check_preset(presets: dict, name: str) -> dict:
    """The preset ``name`` of the loaded ``presets`` table (:func:`load_presets`).

    Raises:
        PresetError: an unknown name (lists the known ones, or gives a renamed preset's new
            name, and the fix).
    """
    if name not in presets:
        raise PresetError(unknown_preset_message(name, presets))
    return presets[name]


def train_size(data_dir: str | os.PathLike) -> int:
    """Number of training examples of a binarized level, from the header of its fairseq index
    file (:func:`~fairseq_entropy.scan.databin.read_mmap_index`).

    Raises:
        PresetError: the index file is missing or not a fairseq mmap index.
    """
    from ..scan.databin import SOURCE_LANG, TARGET_LANG, BinarizeError, read_mmap_index

    prefix = os.path.join(str(data_dir), "train" if data_format(data_dir) == "lm" else
                          f"train.{SOURCE_LANG}-{TARGET_LANG}.{SOURCE_LANG}")
    try:
        return len(read_mmap_index(prefix)[1])
    except BinarizeError as e:
        raise PresetError(str(e)) from None


def check_fits_data(preset: dict, data_dir: str | os.PathLike) -> None:
    """Refuse a preset of one experiment on a level of another, or of one data format on
    data of another.

    The level's experiment is read from ``manifest.json`` in ``data_dir`` (a level without
    one, e.g. SCAN files, is not checked); its format by
    :func:`~fairseq_entropy.scan.lm_format.data_format`.

    Raises:
        PresetError: the preset's ``experiment`` or ``format`` differs from the level's
            (names both and the fix).
    """
    fmt, data_fmt = preset.get("format", "pairs"), data_format(data_dir)
    if fmt != data_fmt:
        raise PresetError(f"{data_dir}: {data_fmt}-format data, but the preset (arch "
                          f"{preset.get('arch')!r}) reads {fmt}-format data. Fix: binarize the "
                          f"level with fairseq-entropy binarize --format {fmt}, or pass a "
                          f"{data_fmt} preset")
    manifest = Path(data_dir) / "manifest.json"
    data_exp = read_json(manifest).get("experiment") if manifest.is_file() else None
    exp = preset.get("experiment")
    if exp and data_exp and exp != data_exp:
        stated = (f", or, for SCAN-format files of {exp}, binarize them again with "
                  f"fairseq-entropy binarize --experiment {exp} (checked against the files)"
                  if data_exp == "scan" and exp in ("exp1", "exp2") else "")
        raise PresetError(f"{data_dir}: a level of {data_exp}, but the preset (arch "
                          f"{preset.get('arch')!r}) is a preset of {exp}. Fix: pass a preset "
                          f"of {data_exp}, or a level of {exp}{stated}")


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
    check_fits_data(preset, data_dir)
    batch = int(preset.get("batch_size", 32))
    support = None
    if epochs is None and not max_update and "epochs_formula" in preset:
        manifest = Path(data_dir) / "manifest.json"
        support = read_json(manifest).get("support") if manifest.exists() \
            else None
        if not support:
            raise PresetError(f"preset needs the support size k but {manifest} has none")
    _, total = schedule_updates(preset, n, support, epochs, max_update)
    lr = float(preset.get("lr", 3e-4))
    values = {"max_update": total,
              "warmup_updates": int(round(float(preset.get("warmup_fraction", 0.0)) * total)),
              "lr": lr, "min_lr": float(f"{lr * float(preset.get('min_lr_ratio', 0.0)):.6g}")}
    args = [*TASK_ARGS[preset.get("format", "pairs")], "--arch", preset["arch"],
            "--batch-size", str(batch), "--lr", repr(lr), "--max-update", str(total),
            "--required-batch-size-multiple", "1"]
    args += [a.format(**values) for a in preset.get("optimizer_args", [])]
    args += list(preset.get("task_args", []))
    args += list(preset.get("model_args", []))
    args += list(preset.get("criterion_args", DEFAULT_CRITERION))
    args += list(preset.get("extra_args", []))
    for token in args:
        check_word_split_safe(token, preset)
    return args


def max_update_of(args: List[str]) -> int:
    """The ``--max-update`` of :func:`train_args`' arguments (they always hold one)."""
    return int(args[args.index("--max-update") + 1])


def schedule_updates(preset: dict, n: int, support: Optional[list] = None,
                     epochs: Optional[float] = None, max_update: Optional[int] = None) -> tuple:
    """(epochs, updates) of ``preset`` on ``n`` training commands: ``max_update`` when given,
    else ``epochs`` (default: the preset's ``epochs_formula`` of the support size, its
    ``epochs_by_train_size`` entry for ``n``, or its ``epochs``, 24 by default) x ceil(n /
    batch size) updates.  Without overrides this is the preset's own schedule (the paper's,
    for the paper's presets).  ``epochs`` is None when ``max_update`` decides.

    Raises:
        PresetError: an ``epochs_formula`` preset without ``support``.
    """
    batch = int(preset.get("batch_size", 32))
    if max_update:
        return None, int(max_update)
    if epochs is None:
        if "epochs_formula" in preset:
            if not support:
                raise PresetError("preset needs the support size k but its level has none")
            epochs = eval_epochs(preset["epochs_formula"], len(support))
        elif str(n) in preset.get("epochs_by_train_size", {}):
            epochs = float(preset["epochs_by_train_size"][str(n)])
        else:
            epochs = float(preset.get("epochs", 24))
    return float(epochs), int(round(epochs * math.ceil(n / batch)))


def own_schedule(preset: dict, manifest: dict) -> Optional[dict]:
    """The preset's own schedule (:func:`schedule_updates` without overrides) on a level
    described by its ``manifest.json`` (``sizes.train``, and ``support`` for
    ``epochs_formula``): ``{"epochs", "max_update"}``, or None when the manifest does not
    tell the training size (or the support size that the preset needs)."""
    n = (manifest.get("sizes") or {}).get("train")
    if not isinstance(n, int) or n <= 0:
        return None
    try:
        epochs, total = schedule_updates(preset, n, manifest.get("support"))
    except PresetError:
        return None
    return {"epochs": epochs, "max_update": total}


def preset_args_sha256(preset: dict, data_dir: str | os.PathLike,
                       max_update: Optional[int]) -> Optional[str]:
    """:func:`train_args_sha256` of ``preset`` on ``data_dir`` with ``max_update`` updates
    (a checkpoint's recorded schedule), or None when the arguments cannot be built there
    (no ``max_update``, a level that is not binarized, another experiment's level)."""
    if not max_update:
        return None
    try:
        return train_args_sha256(train_args(preset, data_dir, max_update=int(max_update)))
    except (UserError, OSError):
        return None


def train_args_sha256(args: List[str]) -> str:
    """SHA-256 (hex) of fairseq-train arguments as :func:`train_args` returns them: the
    preset's full arguments with the schedule applied, without the data directory,
    ``--user-dir``, ``--save-dir``, ``--seed``, device, logging and validation-batch options
    (which ``fairseq-entropy run`` adds and which do not change what is trained), each token
    followed by a newline.  Two runs with the same hash trained with the same arguments."""
    return hashlib.sha256("".join(f"{a}\n" for a in args).encode()).hexdigest()


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
            "break. Fix: write it without spaces or quotes in the presets file, "
            "e.g. \"(0.9,0.98)\" for --adam-betas")
