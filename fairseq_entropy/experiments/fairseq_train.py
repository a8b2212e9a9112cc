"""The fairseq-train command of a run or pack (:func:`train_command`) and the options that
``fairseq-entropy run`` owns in it (:data:`RUN_OWNED_ARGS`, refused among a run's extra
arguments by :func:`check_extra_args`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

from ..analysis.checkpoint_labels import SELECTIONS
from ..errors import UserError
from .presets import train_args_sha256


def tool_path(name: str) -> str:
    """The console script ``name`` beside this Python (its environment), else from PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else name


def train_command(data: str | os.PathLike, out_dir: Path, args: Sequence[str], plugin: str,
                  device: str, valid_batch: int = 512, select: str = "valid",
                  subword: bool = False, extra_args: Sequence[str] = ()) -> list:
    """The fairseq-train command of a run (or of a pack: ``data`` is then the pack directory
    and ``args`` end with ``--task packed_systematicity``), without ``--seed``.

    Args:
        data: fairseq-train's data argument.
        out_dir: where ``checkpoints/`` and ``tensorboard/`` go.
        args: the preset's arguments (:func:`~.presets.train_args`); their hash is recorded
            as ``--train-args-sha256`` (of the arguments up to a trailing ``--task`` pair).
        plugin: the ``--user-dir``.
        device: ``cpu`` (adds ``--cpu``) or ``gpu``.
        valid_batch, select: as :func:`~.run.run_level`.
        subword: the level's actions are sentencepiece pieces (longer decodes).
        extra_args: the fairseq-train arguments the caller appends after ``--seed``; their
            hash is recorded as ``--train-extra-args-sha256`` (the hash of none without).
    """
    args = list(args)
    own = args[:-2] if args[-2:-1] == ["--task"] else args
    # fairseq's default multiple of 8 silently drops the last sentences of a split whose size
    # is not a multiple of 8 (e.g. 6 of 174 validation commands at 0 bits)
    return [tool_path("fairseq-train"), str(data), "--user-dir", plugin, *args,
            *(["--cpu"] if device == "cpu" else []), "--save-dir", str(out_dir / "checkpoints"),
            "--tensorboard-logdir", str(out_dir / "tensorboard"), "--no-epoch-checkpoints",
            "--num-workers", "0", "--log-format", "simple", "--log-interval", "100",
            "--required-batch-size-multiple", "1", "--batch-size-valid", str(valid_batch),
            "--eval-seq-acc", "--eval-seq-acc-max-len-b", "400" if subword else "60",
            *SELECTIONS[select].train_args, "--train-args-sha256", train_args_sha256(own),
            "--train-extra-args-sha256", train_args_sha256(list(extra_args))]


def best_metric(select: str) -> str:
    """fairseq's ``--best-checkpoint-metric`` of a checkpoint selection (``seq_acc`` for
    ``valid``, ``loss`` for ``test-loss``)."""
    return SELECTIONS[select].metric


#: fairseq-train options that ``run`` sets and records itself, with the way to ask for them:
#: among the extra arguments they would train another run than the one recorded (its seed,
#: schedule or best-checkpoint selection) or write where decoding does not look
RUN_OWNED_ARGS = {
    "--user-dir": "pass it as 'fairseq-entropy run --user-dir DIR' (USER_DIR=DIR for "
                  "train_level.sh): here it would reach fairseq-train but not fairseq-generate",
    "--seed": "pass 'fairseq-entropy run --seed S' (SEED=S for train_level.sh), which the "
              "run's score records",
    "--max-update": "pass 'fairseq-entropy run --max-update U' (MAX_UPDATE=U), which the "
                    "schedule check and the score record",
    "--max-epoch": "pass 'fairseq-entropy run --epochs E' (EPOCHS=E), which the schedule "
                   "check and the score record",
    "--save-dir": "leave it out: the checkpoints go to RUN_DIR/checkpoints, where decoding "
                  "reads them",
    "--tensorboard-logdir": "leave it out: the run logs to RUN_DIR/tensorboard",
    "--best-checkpoint-metric": "pass 'fairseq-entropy run --select' (SELECT=): the label of "
                                "the best checkpoint's score follows from it",
    "--maximize-best-checkpoint-metric": "pass 'fairseq-entropy run --select' (SELECT=)",
    "--valid-subset": "pass 'fairseq-entropy run --select' (SELECT=)",
    "--train-args-sha256": "leave it out: the run records it",
    "--train-extra-args-sha256": "leave it out: the run records it",
}


def check_extra_args(extra_args: Sequence[str]) -> None:
    """Refuse an option of :data:`RUN_OWNED_ARGS` among the extra fairseq-train arguments
    (``--seed 5`` or ``--seed=5``): the run would train with it, and record its own value.

    Raises:
        UserError: naming the option and how to ask for it.
    """
    for a in extra_args:
        name = a.split("=", 1)[0]
        if name in RUN_OWNED_ARGS:
            raise UserError(f"{name} among the extra fairseq-train arguments (after --): "
                            "fairseq-entropy run sets it itself. Fix: "
                            f"{RUN_OWNED_ARGS[name]}")
