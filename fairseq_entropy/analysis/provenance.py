"""Where a score comes from: the decoded level (its ``manifest.json``), the checkpoint (its
architecture, seed, training data and schedule), the preset, the model and the training seed.

:func:`resolve_provenance` fills in what the ``score`` options leave out from the checkpoint
that was decoded and checks that the options do not contradict it; :func:`provenance` is the
record a ``score.json`` keeps of it.

The training data is checked by its manifest: the checkpoint records the SHA-256 of the
training data's ``manifest.json`` (task option ``train_data_manifest_sha256``), and the
``--data`` of the score must have the same manifest (:func:`check_training_data`).  Without
the checkpoint (moved away), the record is read from the decode's log ``<output>.log``
(``generate-last.log`` beside ``generate-last.txt``), where the ``systematicity`` task logs
it as ``checkpoint record: {json}`` when fairseq-generate loads the checkpoint.  With neither,
the score is refused unless ``unverified`` is asked for.  A checkpoint written before the
record existed, or trained on data without a manifest, is scored with a statement that the
data could not be verified (``score.json``: ``training_data_check``).

The schedule and its label come from :mod:`.schedules`; aggregates keep runs of different
schedules apart.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Callable, Mapping, Optional, Tuple

from ..errors import DataFormatError, UserError
from ..files import iter_text_lines, read_json
from ..scan.manifests import manifest_sha256
from .decoding import check_decoding, read_generation_options
from .schedules import schedule_label, schedule_record
from .checkpoint_labels import check_checkpoint_label, check_selection
from .columns import CHECKPOINT_LABELS, DECODER_ONLY, ENCODER_DECODER, ScoreError


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
    return manifest, manifest_sha256(path)


def read_checkpoint_info(path: str | os.PathLike) -> dict:
    """Architecture, training seed and training data of a fairseq checkpoint.

    Loads the checkpoint on the CPU with ``torch.load(weights_only=True)`` (torch is imported
    here, on first use, so that the rest of the package does not need it).

    Returns:
        ``{"path": absolute path, "arch": str | None, "seed": int | None, "data": str | None,
        "training": dict}`` from the checkpoint's ``cfg`` (or legacy ``args``); ``training``
        holds ``data_manifest_sha256`` (None when the checkpoint predates the record, ``""``
        for data without a manifest), ``experiment``, ``level``, ``data_seed``,
        ``train_args_sha256``, ``extra_args_sha256`` (of the arguments after the preset's),
        ``best_checkpoint_metric`` (fairseq's, which kept ``checkpoint_best.pt``) and
        ``valid_subset`` (the splits it was measured on),
        ``max_update``, ``max_epoch``, ``batch_size``, ``updates`` (done) and ``epoch_state``
        (fairseq's iterator ``[epoch, iterations_in_epoch]``).

    Raises:
        ScoreError: the file cannot be loaded as a checkpoint.
    """
    import torch

    from ..checkpoint import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure means: not a readable checkpoint
        raise ScoreError(f"{path}: not a fairseq checkpoint (torch.load failed: "
                         f"{type(e).__name__}). Fix: pass --path with the checkpoint file that "
                         "was decoded (checkpoints/checkpoint_<label>.pt), not its decode or "
                         "log") from None

    def get(section, key):
        cfg = state.get("cfg") or {}
        part = cfg.get(section) if isinstance(cfg, dict) else None
        value = part.get(key) if isinstance(part, dict) else getattr(part, key, None)
        if value is None and state.get("args") is not None:
            value = getattr(state["args"], key, None)
        return value

    arch = get("model", "arch") or get("model", "_name")
    seed = get("common", "seed")
    history = state.get("optimizer_history") or [{}]
    iterator = (state.get("extra_state") or {}).get("train_iterator") or {}
    training = {"data_manifest_sha256": get("task", "train_data_manifest_sha256"),
                "experiment": get("task", "train_data_experiment"),
                "level": get("task", "train_data_level"),
                "data_seed": get("task", "train_data_seed"),
                "train_args_sha256": get("task", "train_args_sha256"),
                "extra_args_sha256": get("task", "train_extra_args_sha256"),
                "best_checkpoint_metric": get("checkpoint", "best_checkpoint_metric"),
                "valid_subset": get("dataset", "valid_subset"),
                "max_update": get("optimization", "max_update"),
                "max_epoch": get("optimization", "max_epoch"),
                "batch_size": get("dataset", "batch_size"),
                "updates": history[-1].get("num_updates"),
                "epoch_state": [iterator["epoch"], iterator.get("iterations_in_epoch", 0)]
                if "epoch" in iterator else None}
    return {"path": str(Path(path).resolve()), "arch": arch,
            "seed": None if seed is None else int(seed), "data": get("task", "data"),
            "training": training}


#: the line the ``systematicity`` task logs when a checkpoint is loaded
RECORD_MARK = "checkpoint record: "


def read_generate_log(path: str | os.PathLike) -> Optional[dict]:
    """The checkpoint's ``training`` record logged by the ``systematicity`` task in a
    fairseq-generate log (the last ``checkpoint record: {json}`` line), or None when the
    file does not exist or has no such line.

    Raises:
        DataFormatError: the log is not UTF-8 text, or its record is not a ``training``
            object of the expected types (:func:`check_training_record`).
    """
    if not Path(path).is_file():
        return None
    found = None
    for lineno, line in iter_text_lines(path):
        if RECORD_MARK in line:
            try:
                record = json.loads(line.split(RECORD_MARK, 1)[1])
            except ValueError:
                continue
            found = record.get("training") if isinstance(record, dict) else record
            check_training_record(found, f"{path}:{lineno}")
    return found


#: the type of each value of a checkpoint's ``training`` record (None is allowed for all)
TRAINING_RECORD_TYPES = {
    "data_manifest_sha256": str, "experiment": str, "level": str, "data_seed": int,
    "train_args_sha256": str, "extra_args_sha256": str, "best_checkpoint_metric": str,
    "max_update": int, "max_epoch": int, "batch_size": int, "updates": int,
    "epoch_state": list}


def check_training_record(training, where: str) -> None:
    """Check a logged ``training`` record (:func:`read_checkpoint_info`'s): a JSON object
    whose values have the types of :data:`TRAINING_RECORD_TYPES` (or null), ``epoch_state``
    two integers.

    Raises:
        DataFormatError: ``where: ...`` naming the key, its value and the fix.
    """
    fix = ("Fix: decode again with fairseq-generate (the task logs the checkpoint's record "
           "itself), or score with --path CHECKPOINT")
    if not isinstance(training, dict):
        raise DataFormatError(f"{where}: the checkpoint record's training entry is "
                              f"{training!r}, not a JSON object. {fix}")
    for key, kind in TRAINING_RECORD_TYPES.items():
        value = training.get(key)
        if value is None:
            continue
        ok = isinstance(value, kind) and not isinstance(value, bool)
        if key == "epoch_state":
            ok = ok and len(value) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value)
        if not ok:
            want = "two integers" if key == "epoch_state" else f"a JSON {kind.__name__}"
            raise DataFormatError(f"{where}: the checkpoint record's {key} is {value!r}, not "
                                  f"{want}. {fix}")


def check_training_data(training: Optional[dict], source: str, manifest: dict,
                        manifest_sha256: str, data: str | os.PathLike) -> str:
    """Compare the training data recorded by a checkpoint (``training``, see
    :func:`read_checkpoint_info`; ``source`` names where it was read) with the decoded level
    (``data``, its ``manifest`` and SHA-256).

    Returns:
        the statement ``score.json`` keeps as ``training_data_check``: ``verified: ...`` or
        ``not verified: ...`` (an older checkpoint without the record, or data without a
        manifest).

    Raises:
        UserError: the checkpoint was trained on data with another manifest (names both
            levels and the fix).
    """
    recorded = (training or {}).get("data_manifest_sha256")
    if recorded is None:
        return (f"not verified: {source} does not record its training data (written before "
                "checkpoints recorded it)")
    if recorded == "":
        return f"not verified: {source} was trained on data without a manifest.json"
    if recorded != manifest_sha256:
        theirs = f"{training.get('experiment') or '?'} {training.get('level') or '?'} " \
                 f"(data seed {training.get('data_seed')})"
        ours = f"{manifest.get('experiment')} {manifest.get('level')} (data seed " \
               f"{manifest.get('seed')})"
        raise UserError(f"--data {data} is {ours}, but {source} was trained on {theirs}: "
                        f"its training data's manifest.json has SHA-256 {recorded[:16]}..., "
                        f"this level's {manifest_sha256[:16]}.... Fix: pass --data with the "
                        "level the checkpoint was trained on (its data-bin, or the build "
                        "level it was binarized from), or --path with the checkpoint that "
                        "was decoded")
    return f"verified: the data's manifest.json is the one {source} was trained on"


def data_variant(manifest: dict) -> str:
    """How a level's data departs from the paper's setup, as recorded in its manifest: ``""``
    for the paper's setup, else ``+``-joined parts, in this order:

    - ``grammar=<name>``: an Experiment 1 or 2 build on another grammar than the paper's;
    - ``verbs=<v1-v2-...>``: another verb set than the paper's 8 (``build --verbs``; a
      reordering of the 8 is the same set);
    - ``verb=<v>``: another restricted verb than the paper's (jump in Experiment 1, lunge in
      Experiment 2; ``build --restricted-verb``);
    - ``order=<v1-v2-...>``: another Experiment 2 support order than the authors';
    - ``<component>=<restricted value>``: another component class (``build --component``);
    - ``spm<N>`` (``spm<N>-source`` for commands only): subword tokens
      (``binarize --spm-vocab``);
    - ``case=<case>``: a COGS level built for one generalization case (``build cogs``),
      whose curve over the levels is the case's own.

    e.g. ``direction=left``, ``verb=walk`` or ``verbs=walk-jump+spm48``.  Aggregates keep each
    variant a curve of its own, named ``<experiment>+<variant>``, without the paper's values:
    scores of different data are never seeds of one cell.  The validation fraction is not
    part of it (it changes only the held-out validation set)."""
    from ..scan.builders import AUTHORS_SUPPORT_ORDER, RESTRICTED_VERB
    from ..scan.grammar import PAPER_VERBS

    parts = []
    experiment = manifest.get("experiment")
    if experiment in RESTRICTED_VERB:
        if manifest.get("grammar", "paper") != "paper":
            parts.append(f"grammar={manifest['grammar']}")
        verbs = manifest.get("verbs") or list(PAPER_VERBS)
        if sorted(verbs) != sorted(PAPER_VERBS):
            parts.append(f"verbs={'-'.join(verbs)}")
        restricted = manifest.get("restricted_verb") or RESTRICTED_VERB[experiment]
        if restricted != RESTRICTED_VERB[experiment]:
            parts.append(f"verb={restricted}")
        order = manifest.get("support_order") or list(AUTHORS_SUPPORT_ORDER)
        if experiment == "exp2" and list(order) != list(AUTHORS_SUPPORT_ORDER):
            parts.append(f"order={'-'.join(order)}")
    component = manifest.get("component", "verb")
    if component != "verb":
        parts.append(f"{component}={manifest.get('restricted_value')}")
    subword = manifest.get("subword")
    if subword:
        side = subword.get("side", "both")
        parts.append(f"spm{subword.get('vocab_size')}" + ("" if side == "both" else f"-{side}"))
    if experiment == "cogs" and manifest.get("case"):
        parts.append(f"case={manifest['case']}")
    return "+".join(parts)


def provenance(manifest: dict, manifest_sha256: str, data_dir: str | os.PathLike,
               split: str, checkpoint: str, preset: str, model: str, seed: int,
               checkpoint_path: Optional[str] = None, training: Optional[dict] = None,
               data_check: str = "", own_schedule: Optional[dict] = None,
               decoding: Optional[dict] = None) -> dict:
    """The metadata a ``score.json`` records about where its number comes from.

    Keys: experiment, variant (:func:`data_variant`), level, entropy_bits,
    target_entropy_bits, grammar, data_seed, n_train (training-set size N), split, data
    (absolute path), data_manifest_sha256, preset, model, seed (training seed), checkpoint
    (label), checkpoint_path, training_data_check (the statement of
    :func:`check_training_data`), train_data_manifest_sha256 (the checkpoint's record, None
    when unknown), schedule (:func:`.schedules.schedule_record` of ``training``), schedule_label
    (:func:`.schedules.schedule_label`), decoding (the generation options of
    :func:`.decoding.check_decoding`, None when not known) and model_family
    (:func:`model_family`); a ``build cogs`` level adds case and held_out (its tested
    (word, slot) pair).

    Raises:
        ScoreError: an unknown checkpoint label.
    """
    if checkpoint not in CHECKPOINT_LABELS:
        raise ScoreError(f"unknown checkpoint label {checkpoint!r}. Fix: pass --checkpoint "
                         f"{', '.join(CHECKPOINT_LABELS)}")
    sizes = manifest.get("sizes", {})
    schedule = schedule_record(training, sizes.get("train"), own_schedule)
    return {"experiment": manifest.get("experiment"), "variant": data_variant(manifest),
            "level": manifest.get("level"),
            "entropy_bits": manifest.get("entropy_bits"),
            "target_entropy_bits": manifest.get("target_entropy_bits"),
            "grammar": manifest.get("grammar"), "data_seed": manifest.get("seed"),
            "n_train": sizes.get("train"), "split": split,
            "data": str(Path(data_dir).resolve()), "data_manifest_sha256": manifest_sha256,
            "preset": preset, "model": model, "seed": seed, "checkpoint": checkpoint,
            "checkpoint_path": checkpoint_path, "training_data_check": data_check,
            "train_data_manifest_sha256": (training or {}).get("data_manifest_sha256"),
            "schedule": schedule, "decoding": decoding,
            "schedule_label": schedule_label(schedule, checkpoint, decoding),
            "model_family": model_family(manifest),
            **({"case": manifest["case"], "held_out": manifest.get("held_out")}
               if manifest.get("case") else {})}


def model_family(manifest: dict) -> str:
    """``decoder-only`` for a decode of lm-format data (the manifest's ``format`` is ``lm``),
    else ``encoder-decoder``."""
    return DECODER_ONLY if manifest.get("format") == "lm" else ENCODER_DECODER


def resolve_provenance(generate_output: str | os.PathLike, checkpoint_label: str,
                       presets: Mapping[str, dict], path: Optional[str | os.PathLike] = None,
                       data: Optional[str | os.PathLike] = None, preset: Optional[str] = None,
                       model: Optional[str] = None, seed: Optional[int] = None,
                       split: str = "test", unverified: bool = False,
                       own_schedule: Optional[Callable[[dict, dict], Optional[dict]]] = None,
                       args_sha256: Optional[Callable[..., Optional[str]]] = None) -> dict:
    """Resolve the data, preset, model and seed of a decode.

    Each comes from its argument, else from the decoded checkpoint (``path``, or
    ``checkpoints/checkpoint_last.pt`` or ``checkpoint_best.pt`` (labels ``best`` and
    ``test-loss``) beside ``generate_output``): its training
    data, its architecture (the one preset of that architecture and the data's experiment,
    told apart by the hash of their arguments when several share it) and its seed.  The
    data must be the checkpoint's training data (:func:`check_training_data`); without the
    checkpoint, its record is read from the decode's log ``<generate_output without
    suffix>.log`` (:func:`read_generate_log`).

    Args:
        presets: the known presets, name -> preset dict (``arch``, ``experiment``, ``model``
            keys are read), as ``experiments.presets.load_presets()`` returns them; the caller
            checks that ``preset`` is one of them.
        unverified: score without any record of the checkpoint (no checkpoint, no log),
            taking the data, preset and seed as given; ``score.json`` says so.
        own_schedule: ``(preset dict, level manifest) -> {"epochs", "max_update"}``, the
            preset's own schedule on the level (None when unknown), recorded beside the run's.
        args_sha256: ``(preset dict, data dir, max_update) -> sha256 | None``, the hash of the
            preset's fairseq-train arguments with the checkpoint's schedule (None when it
            cannot be computed); compared with the checkpoint's ``train_args_sha256`` to
            refuse a ``preset`` it was not trained with, and to pick the preset among those
            of the checkpoint's architecture when ``preset`` is None.

    Returns:
        ``{"data": the level directory, "meta": :func:`provenance` of the decode}``.

    Raises:
        UserError: a value that cannot be known, arguments that contradict the checkpoint,
            or a decode made with an option that is not the model's own output
            (:func:`.decoding.check_decoding`: its log names it).
        ScoreError: an unreadable checkpoint, a level without a manifest, or an unknown
            checkpoint label.
        DataFormatError: an unreadable manifest.
    """
    ckpt = Path(path) if path else \
        Path(generate_output).parent / "checkpoints" / \
        f"checkpoint_{'last' if checkpoint_label == 'last' else 'best'}.pt"
    if path and not ckpt.is_file():
        raise UserError(f"{ckpt}: checkpoint not found. Fix: pass --path with the checkpoint "
                        "that was decoded")
    check_checkpoint_label(generate_output, checkpoint_label, path)
    info = read_checkpoint_info(ckpt) if ckpt.is_file() else None
    if info:
        check_selection(ckpt, checkpoint_label, info["training"].get("best_checkpoint_metric"),
                        info["training"].get("valid_subset"))
    where = f"checkpoint {ckpt}" if info else f"no checkpoint at {ckpt}"
    log = Path(generate_output).with_suffix(".log")
    decoding = check_decoding(read_generation_options(log), str(log))
    training, source = ((info["training"], f"checkpoint {ckpt}") if info else
                        (read_generate_log(log), f"the checkpoint record in {log}"))

    if data and not Path(data).is_dir():
        raise UserError(f"--data {data}: " + ("a file, not" if Path(data).exists() else "no")
                        + " directory. Fix: pass the binarized level directory that was "
                          "decoded (it holds manifest.json and the dictionaries)")
    data = data or (info or {}).get("data")
    if not data or not Path(data).is_dir():
        raise UserError(f"the decoded data is unknown (no --data; {where}"
                        f"{', whose data ' + repr(data) + ' is not a directory' if data else ''}"
                        "). Fix: pass --data LEVEL_DIR")
    manifest, sha = load_data_manifest(data)
    if training is not None:
        data_check = check_training_data(training, source, manifest, sha, data)
    elif unverified:
        data_check = (f"not verified: {where} and no checkpoint record in {log} "
                      "(--unverified: the data, preset and seed were taken as given)")
    else:
        raise UserError(f"{where} and no checkpoint record in {log}: the training data and "
                        f"schedule of {generate_output} cannot be verified. Fix: pass --path "
                        "with the checkpoint that was decoded (or keep fairseq-generate's log "
                        "as that .log file), or --unverified to score it as --data, --preset "
                        "and --seed say")

    recorded = (training or {}).get("train_args_sha256")

    @functools.cache
    def hash_of(name):
        """The hash of preset ``name``'s arguments with the checkpoint's schedule."""
        return args_sha256(presets[name], data, (training or {}).get("max_update")) \
            if recorded and args_sha256 else None

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
    # the recorded arguments' hash checks --preset whether the record is the checkpoint's or
    # the copy fairseq-generate's log keeps of it (the checkpoint gone)
    if preset is not None and hash_of(preset) not in (None, recorded):
        raise UserError(f"--preset {preset} gives other fairseq-train arguments (sha256 "
                        f"{hash_of(preset)[:12]}) than {source} records ({recorded[:12]}). "
                        "Fix: pass the preset of the run, or drop --preset to find it by the "
                        "arguments' hash")
    if preset is None and not info and recorded and args_sha256:
        fits = [n for n, p in presets.items()
                if p.get("experiment") == manifest.get("experiment") and hash_of(n) == recorded]
        preset = fits[0] if len(fits) == 1 else None
    if info and info["arch"]:
        if preset is None:
            fits = [n for n in same_arch
                    if presets[n].get("experiment") == manifest.get("experiment")]
            if len(fits) > 1 and recorded and args_sha256:
                fits = [n for n in fits if hash_of(n) == recorded] or fits
            if len(fits) != 1:
                raise UserError(f"cannot tell the preset of {ckpt} (arch {info['arch']}, "
                                f"experiment {manifest.get('experiment')}): candidates "
                                f"{', '.join(fits or same_arch) or 'none'}. Fix: pass --preset")
            preset = fits[0]
    if preset is None:
        raise UserError(f"the preset is unknown (no --preset; {where}). Fix: pass --preset "
                        "NAME (fairseq-entropy train-args --list lists them) or --path CHECKPOINT")
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
    if not info and training is not None:
        # the logged record holds the data and the arguments' hash, not the seed
        data_check += (f"; preset {preset} " + ("verified by its arguments' hash"
                                                if recorded and args_sha256 else "taken as given")
                       + f", seed {seed} taken as given (not in {log})")
    own = own_schedule(presets[preset], manifest) if own_schedule else None
    if recorded and args_sha256 and hash_of(preset) == recorded:
        # the run trained the preset's arguments: their hash with the schedule left out (one
        # update, no warm-up) names the configuration at every level of the preset
        own = {**(own or {}), "config_sha256": args_sha256(presets[preset], data, 1)}
    return {"data": data, "meta": provenance(manifest, sha, data, split, checkpoint_label,
                                             preset, preset_model, seed,
                                             info["path"] if info else None, training,
                                             data_check, own, decoding)}
