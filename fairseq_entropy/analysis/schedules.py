"""A run's schedule as a score records it (:func:`schedule_record`): the checkpoint's
``max_update`` and ``max_epoch``, the updates and epochs it did, and the hash of the preset's
fairseq-train arguments (``train_args_sha256``, set by ``fairseq-entropy run``), beside the
preset's own schedule for the level when known; and its label (:func:`schedule_label`), by
which aggregates keep runs of different schedules, and cut-off trainings
(:func:`training_finished`), apart."""

from __future__ import annotations

import hashlib
import math
from typing import Optional

from .decoding import decoding_label


#: ``extra_args_sha256`` of a run without arguments after the preset's: the SHA-256 of no
#: bytes (``experiments.presets.train_args_sha256([])``)
NO_EXTRA_ARGS_SHA256 = hashlib.sha256(b"").hexdigest()


def schedule_record(training: Optional[dict], n_train: Optional[int],
                    own: Optional[dict] = None) -> dict:
    """The ``schedule`` of a ``score.json``: ``max_update``, ``max_epoch``, ``updates`` and
    ``epochs`` done, ``train_args_sha256``, ``extra_args_sha256`` and
    ``best_checkpoint_metric`` (each None when not recorded) and the preset's own
    schedule for the level (``own``: ``{"epochs", "max_update", "config_sha256"}``) as
    ``preset_epochs``, ``preset_max_update`` and ``preset_config_sha256`` (the hash of the
    preset's arguments with the schedule left out, the same at every level).

    ``epochs`` done: fairseq's iterator state ``(epoch, iterations_in_epoch)`` gives
    ``epoch - 1`` whole epochs plus ``iterations_in_epoch`` of ceil(N / batch size) updates;
    without the iterator state, updates / ceil(N / batch size); rounded to 3 decimals; None
    when neither the batch size nor whole epochs tell it.
    """
    t = training or {}
    per_epoch = math.ceil(n_train / t["batch_size"]) if n_train and t.get("batch_size") \
        else None
    epochs = None
    state = t.get("epoch_state")
    if state and state[1] == 0:
        epochs = float(state[0] - 1)
    elif state and per_epoch:
        epochs = round(state[0] - 1 + state[1] / per_epoch, 3)
    elif t.get("updates") is not None and per_epoch:
        epochs = round(t["updates"] / per_epoch, 3)
    return {"max_update": t.get("max_update"), "max_epoch": t.get("max_epoch"),
            "updates": t.get("updates"), "epochs": epochs,
            "train_args_sha256": t.get("train_args_sha256"),
            "extra_args_sha256": t.get("extra_args_sha256"),
            "best_checkpoint_metric": t.get("best_checkpoint_metric"),
            "preset_epochs": (own or {}).get("epochs"),
            "preset_max_update": (own or {}).get("max_update"),
            "preset_config_sha256": (own or {}).get("config_sha256")}


def training_finished(schedule: Optional[dict]) -> Optional[bool]:
    """Whether a checkpoint's training had reached its end when the checkpoint was saved:
    ``updates >= max_update`` (when ``max_update`` is set) or ``epochs >= max_epoch`` (when
    ``max_epoch`` is set), read from a :func:`schedule_record`; None when the record does not
    tell (no updates or epochs recorded, or neither limit set).  Meaningful for a last
    checkpoint only: a best checkpoint is saved before the end by design."""
    s = schedule or {}
    ends = []
    if s.get("max_update") and s.get("updates") is not None:
        ends.append(s["updates"] >= s["max_update"])
    if s.get("max_epoch") and s.get("epochs") is not None:
        ends.append(s["epochs"] >= s["max_epoch"])
    return any(ends) if ends else None


def schedule_label(schedule: Optional[dict], checkpoint: Optional[str] = None,
                   decoding: Optional[dict] = None) -> str:
    """The schedule part of an aggregate's cell key: ``max_update=U`` (and ``max_epoch=E``
    when set) and the first 8 hex digits of the arguments' hash, e.g. ``max_update=40
    args=1a2b3c4d``, then ``extra=`` and the first 8 hex digits of the hash of the arguments
    given after the preset's, when there were any; ``unknown`` for a score without a recorded
    schedule (older score files and ``results.tsv``).  The last checkpoint (``checkpoint``
    ``last``) of a training stopped before its end (:func:`training_finished` False: killed,
    preempted, still running) adds ``unfinished=<updates>``, so it is never averaged with
    finished runs, nor with runs cut off elsewhere; a decode with a beam wider than 1
    (``decoding``, :func:`.decoding.decoding_label`) adds ``beam=<K>``.  Runs with different
    labels are never seeds of one cell."""
    s = schedule or {}
    beam = decoding_label(decoding)
    if s.get("max_update") is None and s.get("max_epoch") is None:
        return " ".join(["unknown", beam]) if beam else "unknown"
    parts = [f"max_update={s.get('max_update') or 0}"]
    if s.get("max_epoch"):
        parts.append(f"max_epoch={s['max_epoch']}")
    if s.get("train_args_sha256"):
        parts.append(f"args={s['train_args_sha256'][:8]}")
    if s.get("extra_args_sha256") and s["extra_args_sha256"] != NO_EXTRA_ARGS_SHA256:
        parts.append(f"extra={s['extra_args_sha256'][:8]}")
    if checkpoint == "last" and training_finished(s) is False:
        parts.append(f"unfinished={s.get('updates')}")
    if beam:
        parts.append(beam)
    return " ".join(parts)
