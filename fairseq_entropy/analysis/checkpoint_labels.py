"""Which checkpoint a decode is of: the label a decode's file name gives
(``generate-<label>.txt``), the label of a best checkpoint by the selection that kept it
(fairseq's ``--best-checkpoint-metric`` and ``--valid-subset``), and the checks that refuse a
label that the files or the selection contradict (:data:`~.columns.CHECKPOINT_LABELS`:
``last``, ``best`` = highest validation ``seq_acc``, ``test-loss`` = lowest test loss, the
paper authors' selection)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import UserError
from ..files import iter_text_lines
from .columns import CHECKPOINT_LABELS


@dataclass(frozen=True)
class Selection:
    """One way of keeping a run's best checkpoint (``checkpoint_best.pt``).

    Attributes:
        label: the checkpoint label of its decodes (``generate-<label>.txt``).
        metric: fairseq's ``--best-checkpoint-metric``.
        train_args: the fairseq-train options that make fairseq keep it.
        split: the split whose metric it is, when not the validation split alone (a best
            checkpoint kept on this metric without this split among fairseq's
            ``--valid-subset`` is not of this selection).
    """

    label: str
    metric: str
    train_args: tuple[str, ...]
    split: Optional[str] = None


#: checkpoint selections by their ``SELECT`` / ``--select`` name: ``valid`` keeps the highest
#: validation ``seq_acc``; ``test-loss`` the lowest loss over the test and validation splits
#: (the paper authors' selection)
SELECTIONS = {
    "valid": Selection("best", "seq_acc", ("--best-checkpoint-metric", "seq_acc",
                                           "--maximize-best-checkpoint-metric")),
    "test-loss": Selection("test-loss", "loss", ("--valid-subset", "test,valid",
                                                 "--best-checkpoint-metric", "loss"), "test"),
}
#: fairseq's ``--best-checkpoint-metric`` behind each label of a best checkpoint
SELECTION_METRIC = {s.label: s.metric for s in SELECTIONS.values()}
#: the selection name (``SELECT``) that keeps the best of each metric
SELECT_OF = {s.metric: name for name, s in SELECTIONS.items()}


def label_of_name(generate_output: str | os.PathLike) -> Optional[str]:
    """The checkpoint label that a decode's file name gives (``generate-<label>.txt``, as
    ``fairseq-entropy run`` names them: ``generate-best.txt`` -> ``best``), or None."""
    m = re.fullmatch(r"generate-(.+)\.txt", Path(generate_output).name)
    return m.group(1) if m and m.group(1) in CHECKPOINT_LABELS else None


#: the line fairseq-generate logs before it loads the checkpoint(s) of ``--path``
LOADING_MARK = "loading model(s) from "


def decoded_checkpoint(generate_output: str | os.PathLike) -> Optional[str]:
    """The checkpoint that fairseq-generate's log beside the decode (``OUTPUT.log``, e.g.
    ``generate-last.log``) says it loaded (its last ``loading model(s) from PATH`` line; the
    last path of an ensemble), or None when there is no such log or line.

    Raises:
        DataFormatError: the log is not UTF-8 text.
    """
    log = Path(generate_output).with_suffix(".log")
    if not log.is_file():
        return None
    found = None
    for _, line in iter_text_lines(log):
        if LOADING_MARK in line:
            found = line.split(LOADING_MARK, 1)[1].strip().split(":")[-1] or None
    return found


def label_of_checkpoint_name(path: Optional[str | os.PathLike]) -> Optional[str]:
    """The label a checkpoint's file name gives: ``last`` for ``checkpoint_last.pt``, ``best``
    for ``checkpoint_best.pt`` (a ``test-loss`` best checkpoint has the same name: the
    selection recorded in the checkpoint tells them apart), None for any other name."""
    name = Path(path).name if path else None
    return {"checkpoint_last.pt": "last", "checkpoint_best.pt": "best"}.get(name)


def check_checkpoint_label(generate_output: str | os.PathLike, label: str,
                           path: Optional[str | os.PathLike] = None) -> None:
    """Refuse a checkpoint label that the decode's file name (``generate-<label>.txt``), the
    decoded checkpoint's file name (``path``) or the checkpoint that fairseq-generate's log
    beside the decode says it loaded (:func:`decoded_checkpoint`) contradicts:
    ``checkpoint_last.pt`` is the ``last`` checkpoint, ``checkpoint_best.pt`` a ``best`` or
    ``test-loss`` one.

    Raises:
        UserError: naming both and the fix.
    """
    named = label_of_name(generate_output)
    if named is not None and named != label:
        raise UserError(f"{generate_output} is named as the decode of the {named} checkpoint, "
                        f"but the checkpoint label is {label}. Fix: pass --checkpoint {named} "
                        "(or rename the file if it is the decode of the other checkpoint)")
    def contradicts(checkpoint_file) -> Optional[tuple]:
        """``(the label checkpoint_file's name gives, the label to pass)`` when the name
        contradicts ``label``, else None."""
        of_file = label_of_checkpoint_name(checkpoint_file)
        if of_file is None or (of_file == "last") == (label == "last"):
            return None
        return of_file, "last" if of_file == "last" else "best (or test-loss)"

    decoded = decoded_checkpoint(generate_output)
    if wrong := contradicts(decoded):
        raise UserError(f"{Path(generate_output).with_suffix('.log')} says the decode loaded "
                        f"{decoded}, the {wrong[0]} checkpoint, but the checkpoint label is "
                        f"{label}. Fix: pass --checkpoint {wrong[1]}, or score the decode of "
                        f"the {label} checkpoint")
    if wrong := contradicts(path):
        raise UserError(f"--path {path} is the {wrong[0]} checkpoint, but the checkpoint label "
                        f"is {label}. Fix: pass --checkpoint {wrong[1]}, or --path with the "
                        "checkpoint that was decoded")


def decoded_label(generate_output: str | os.PathLike,
                  path: Optional[str | os.PathLike] = None) -> str:
    """The checkpoint label of a decode when none is given: the label of its file name
    (``generate-<label>.txt``), else the one the decoded checkpoint's file name gives (``path``,
    else the checkpoint fairseq-generate's log beside the decode says it loaded):
    ``checkpoint_last.pt`` -> ``last``, ``checkpoint_best.pt`` -> ``best``.

    Raises:
        UserError: nothing tells which checkpoint was decoded (the label is then not guessed:
            a decode of the best checkpoint scored as the last one would be mislabelled).
    """
    label = label_of_name(generate_output) or label_of_checkpoint_name(path) or \
        label_of_checkpoint_name(decoded_checkpoint(generate_output))
    if label is None:
        log = Path(generate_output).with_suffix(".log")
        raise UserError(
            f"{generate_output}: which checkpoint was decoded is not known: the file is not "
            "named generate-<label>.txt, "
            + (f"--path {path} is neither checkpoint_last.pt nor checkpoint_best.pt"
               if path else "no --path names the checkpoint")
            + f", and {log} (fairseq-generate's log) does not name a checkpoint_last.pt or "
            "checkpoint_best.pt it loaded. Fix: pass --checkpoint last (or best, test-loss), or "
            "name the output generate-last.txt")
    return label


def selection_label(metric: Optional[str], valid_subset: Optional[str]) -> Optional[str]:
    """The label of a best checkpoint kept by fairseq's ``--best-checkpoint-metric``
    ``metric`` over the splits ``valid_subset``: ``best`` for ``seq_acc``, ``test-loss`` for
    ``loss`` measured on the test split too (the paper authors' selection); None for any
    other selection (e.g. fairseq's default, the validation loss); read from
    :data:`SELECTIONS`."""
    splits = (valid_subset or "").split(",")
    for s in SELECTIONS.values():
        if s.metric == metric and (s.split is None or s.split in splits):
            return s.label
    return None


def check_selection(ckpt: str | os.PathLike, label: str, metric: Optional[str],
                    valid_subset: Optional[str] = None) -> None:
    """Refuse to label a best checkpoint ``best`` (highest validation ``seq_acc``) or
    ``test-loss`` (lowest test loss) when its training kept ``checkpoint_best.pt`` by another
    selection (``metric``: fairseq's ``--best-checkpoint-metric``, None when not recorded;
    ``valid_subset``: the splits it was measured on; :func:`selection_label`).

    Raises:
        UserError: naming the selection, the label and the fix.
    """
    if label not in SELECTION_METRIC or metric is None:
        return
    fits = selection_label(metric, valid_subset)
    if fits == label:
        return
    (wanted,) = [s for s in SELECTIONS.values() if s.label == label]
    raise UserError(f"{ckpt} was trained keeping its best checkpoint by {metric} on "
                    f"{valid_subset or 'valid'}, but the label {label} means the best "
                    f"{wanted.metric}" + (f" on the {wanted.split} split" if wanted.split
                                          else "")
                    + (f". Fix: pass --checkpoint {fits}" if fits else
                       ". Fix: score its last checkpoint (--checkpoint last), or train with "
                       "fairseq-entropy run --select"))
