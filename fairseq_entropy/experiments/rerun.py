"""Whether a run directory may be skipped or its training reused: the training it records
(in ``last/score.json``, which must score the last checkpoint on the whole test split, or in
its finished ``checkpoint_last.pt``) against the one a run asks now, and the checks of a
run's directory and device made before anything is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

from ..analysis.checkpoint_labels import SELECT_OF
from ..analysis.provenance import read_checkpoint_info
from ..analysis.schedules import NO_EXTRA_ARGS_SHA256
from ..scan.manifests import manifest_sha256
from ..errors import UserError
from ..files import read_json
from .presets import PresetError, max_update_of, train_args, train_args_sha256


class ScheduleChanged(UserError):
    """A scored run whose recorded schedule differs from the schedule asked now."""


class NotTheRunsScore(ScheduleChanged):
    """``RUN/last/score.json`` that is not the score of the run's last checkpoint on the
    whole test split (another checkpoint label, another split, a sample).  A
    :class:`ScheduleChanged`, so that the sweep and ``run`` refuse such a run directory as
    they refuse one holding another training."""


def scored(run_dir: str | os.PathLike, expected: Optional[dict] = None) -> Optional[float]:
    """Accuracy in ``RUN_DIR/last/score.json``, or None when the run is not scored (the one
    test of "already scored", used by the sweep and by :func:`run_level`).

    Args:
        expected: what the run would train with now (:func:`expected_schedule`); None skips
            the comparison.  A score without a recorded schedule, data manifest or seed
            (written before they were recorded) is accepted on that part.

    Raises:
        DataFormatError: the file exists but is not valid JSON.
        NotTheRunsScore: the file records another checkpoint than ``last``, a split other than
            ``test`` or a ``test_sample`` (:func:`check_last_test_score`).
        ScheduleChanged: the score's ``max_update``, arguments' hash, training data or seed
            differs from ``expected``.
    """
    f = Path(run_dir) / "last" / "score.json"
    if not f.exists():
        return None
    rec = read_json(f)
    check_last_test_score(f, rec)
    if expected is not None:
        got = dict(rec.get("schedule") or {})
        got["data_manifest_sha256"] = rec.get("train_data_manifest_sha256") or \
            rec.get("data_manifest_sha256")
        got["seed"] = rec.get("seed")
        got["data_label"] = _data_label(rec.get("experiment"), rec.get("level"),
                                        rec.get("data_seed"))
        check_same_training(run_dir, "scored", got, expected)
    return float(rec["accuracy"])


def check_last_test_score(path: str | os.PathLike, rec: dict) -> None:
    """Refuse ``rec`` (read from ``path``, a run's ``last/score.json``) as the run's score
    unless it scores the last checkpoint on the whole test split: its ``checkpoint`` is
    ``last``, its ``split`` is ``test`` and it has no ``test_sample``.  A field the file does
    not record (a score written by hand or before it was recorded) is not compared.

    Raises:
        NotTheRunsScore: naming the file, what it records and the fix.
    """
    wrong, folder = [], None  # folder: where the score belongs (the first of its labels)
    if rec.get("checkpoint") not in (None, "last"):
        wrong.append(f"checkpoint {rec['checkpoint']!r}, not 'last'")
        folder = str(rec["checkpoint"])
    if rec.get("split") not in (None, "test"):
        wrong.append(f"split {rec['split']!r}, not 'test'")
        folder = folder or str(rec["split"])
    if rec.get("test_sample"):
        n = rec["test_sample"].get("n") if isinstance(rec["test_sample"], dict) else None
        wrong.append(f"a sample of {n if n is not None else 'some'} test sentences "
                     "(test_sample), not the whole split")
        folder = folder or "sample"
    if wrong:
        last = Path(path).parent
        raise NotTheRunsScore(
            f"{path} records {'; '.join(wrong)}: it is not the run's score (the last "
            "checkpoint on the whole test split), so the run is neither skipped with it nor "
            f"decoded over it. Fix: move the folder {last} away (e.g. to "
            f"{last.parent / folder}), then run again to decode and score the last checkpoint")


def _data_label(experiment, level, data_seed) -> str:
    return f"{experiment or '?'} level {level or '?'} (data seed {data_seed})"


def check_same_training(run_dir: str | os.PathLike, state: str, got: dict,
                        expected: dict) -> None:
    """Refuse a run directory whose recorded training (``got``: ``max_update``,
    ``train_args_sha256``, ``data_manifest_sha256``, ``seed``, ``data_label``,
    ``extra_args_sha256``, ``best_checkpoint_metric``; a None value is not compared) differs from
    what the run asks now (``expected``, of
    :func:`expected_schedule`; ``state`` says what the directory holds, e.g. ``scored``).

    Raises:
        ScheduleChanged: naming the recorded and the asked value and the fix.
    """
    fix = (f"Fix: move or remove {run_dir} to train it anew (or sweep into another root), or "
           "ask for what it was trained with")

    def differs(key):
        return got.get(key) is not None and expected.get(key) is not None and \
            got[key] != expected[key]

    if differs("max_update"):
        raise ScheduleChanged(f"{run_dir} was {state} with max_update {got['max_update']}, "
                              f"the run asks {expected['max_update']}. {fix}")
    if differs("train_args_sha256"):
        raise ScheduleChanged(
            f"{run_dir} was {state} with other fairseq-train arguments (sha256 "
            f"{got['train_args_sha256'][:12]}; the preset now gives "
            f"{expected['train_args_sha256'][:12]}). {fix}")
    if differs("data_manifest_sha256"):
        raise ScheduleChanged(f"{run_dir} holds a run {state} on {got.get('data_label')}, the "
                              f"run asks {expected.get('data_label')}. {fix}")
    if differs("seed"):
        raise ScheduleChanged(f"{run_dir} holds a run {state} with seed {got['seed']}, the run "
                              f"asks --seed {expected['seed']}. {fix}")
    if differs("extra_args_sha256"):
        def extra(h):
            return "none" if h == NO_EXTRA_ARGS_SHA256 else f"sha256 {h[:12]}"

        raise ScheduleChanged(
            f"{run_dir} was {state} with other fairseq-train arguments after the preset's "
            f"(after --: {extra(got['extra_args_sha256'])}; the run asks "
            f"{extra(expected['extra_args_sha256'])}). {fix}")
    if differs("best_checkpoint_metric"):
        raise ScheduleChanged(
            f"{run_dir} was {state} keeping the checkpoint with the best "
            f"{got['best_checkpoint_metric']} as checkpoint_best.pt (SELECT="
            f"{SELECT_OF.get(got['best_checkpoint_metric'], '?')}); the run asks for the best "
            f"{expected['best_checkpoint_metric']} (SELECT="
            f"{SELECT_OF.get(expected['best_checkpoint_metric'], '?')}). {fix}, or score only "
            "its last checkpoint (SCORE_BEST=0, --no-score-best)")


def check_trained(run_dir: str | os.PathLike, expected: Optional[dict]) -> None:
    """Refuse to skip or to resume the training of a run directory whose
    ``checkpoint_last.pt`` records another training (:func:`check_same_training` of its
    ``max_update``, arguments' hash, data manifest and seed) than the one asked now: a
    finished training (``checkpoints/trained``) would be decoded as if it were the one asked,
    and a cut-off one resumed under another schedule, data or seed would mix two trainings in
    one run.  Nothing is checked without ``checkpoint_last.pt`` or ``expected``.

    Raises:
        ScheduleChanged: the recorded and the asked training differ.
        ScoreError: ``checkpoint_last.pt`` is unreadable.
    """
    ckpts = Path(run_dir) / "checkpoints"
    last = ckpts / "checkpoint_last.pt"
    if expected is None or not last.is_file():
        return
    info = read_checkpoint_info(last)
    t = info["training"]
    got = {"max_update": t.get("max_update"), "train_args_sha256": t.get("train_args_sha256"),
           "data_manifest_sha256": t.get("data_manifest_sha256") or None, "seed": info["seed"],
           "data_label": _data_label(t.get("experiment"), t.get("level"), t.get("data_seed")),
           "extra_args_sha256": t.get("extra_args_sha256"),
           "best_checkpoint_metric": t.get("best_checkpoint_metric")}
    check_same_training(run_dir, "trained" if (ckpts / "trained").exists() else
                        "started (and cut off)", got, expected)


def expected_schedule(spec: dict, databin: str | os.PathLike, epochs: Optional[float] = None,
                      max_update: Optional[int] = None, seed: Optional[int] = None,
                      extra_args: Optional[Sequence[str]] = None,
                      best_metric: Optional[str] = None) -> Optional[dict]:
    """What a run of preset ``spec`` on ``databin`` with these overrides trains with:
    ``max_update`` and ``train_args_sha256`` (:func:`~.presets.train_args`,
    :func:`~.presets.train_args_sha256`), ``data_manifest_sha256`` and ``data_label`` of the
    level's ``manifest.json`` (None without one), ``seed``, ``extra_args_sha256`` (the hash
    of ``extra_args``, the fairseq-train arguments after the preset's) and
    ``best_checkpoint_metric`` (each None when not given: not compared); None when the level
    is not there to compute it."""
    try:
        args = train_args(spec, databin, epochs, max_update)
    except PresetError:
        return None
    manifest = Path(databin) / "manifest.json"
    sha, label = None, None
    if manifest.is_file():
        sha = manifest_sha256(manifest)
        m = read_json(manifest)
        label = f"{databin}: " + _data_label(m.get("experiment"), m.get("level"), m.get("seed"))
    return {"max_update": max_update_of(args),
            "train_args_sha256": train_args_sha256(args), "data_manifest_sha256": sha,
            "data_label": label, "seed": seed,
            "extra_args_sha256": None if extra_args is None else
            train_args_sha256(list(extra_args)),
            "best_checkpoint_metric": best_metric}


def check_run_dir(run_dir: str | os.PathLike, option: str = "RUN_DIR") -> None:
    """Refuse a run directory that fairseq or the filesystem cannot take: one holding ``:``
    (fairseq-generate reads ``--path a:b`` as an ensemble of checkpoints ``a`` and ``b``), or
    a path that is an existing file.

    Raises:
        UserError: naming ``option``, the path, the cause and the fix.
    """
    if ":" in str(run_dir):
        raise UserError(f"{option} {run_dir}: holds ':', and fairseq-generate reads ':' in "
                        "--path as a list of checkpoints. Fix: choose a path without ':' "
                        "(other characters, spaces included, are fine)")
    p = Path(run_dir)
    if p.exists() and not p.is_dir():
        raise UserError(f"{option} {run_dir} is a file. Fix: pass a directory (new or "
                        "existing) for the run, or move the file away")
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{option} {run_dir}: {parent} is a file. Fix: choose a path "
                                "whose parent folders are directories")
            break


def check_device(device: Optional[str]) -> None:
    """Refuse ``device`` ``gpu`` where torch sees no CUDA device (fairseq-train would train
    on the CPU without a word).  Imports torch for ``gpu`` only.

    Raises:
        UserError: ``gpu`` without a GPU (names the option, the variable and the fix).
    """
    if device != "gpu":
        return
    import torch

    if not torch.cuda.is_available():
        raise UserError("--device gpu (DEVICE=gpu for train_level.sh): torch sees no GPU on "
                        "this machine (torch.cuda.is_available() is False). Fix: pass --device "
                        "cpu (DEVICE=cpu), or run on a machine with a GPU")
