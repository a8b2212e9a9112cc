"""The keys that group result rows: a row's curve name (:func:`model_of`), N
(:func:`train_size_of`, :func:`curve_size`), schedule (:func:`schedule_of`,
:func:`curve_schedule`), its cell (:func:`cell_key`: the rows of one cell differ only by their
training seed) and its curve (:func:`curve_key`: the levels of one accuracy-against-entropy
curve).  Rows are the dicts of ``results.tsv`` (see :mod:`.statistics`)."""

from __future__ import annotations

from typing import Optional, Sequence

from .columns import UNKNOWN_SCHEDULE


def model_of(row: dict) -> str:
    """The curve name of a row: its ``preset`` when recorded, else its ``model``."""
    return str(row.get("preset") or row["model"])


def base_experiment(experiment: Optional[str]) -> Optional[str]:
    """``exp1`` or ``exp2`` of an aggregate's experiment name (``exp1+direction=left`` is a
    data variant of Experiment 1; see :func:`.provenance.data_variant`)."""
    return None if experiment is None else str(experiment).split("+", 1)[0]


def train_size_of(row: dict) -> Optional[int]:
    """The row's training size N (``train_size``, else ``n_train``; None when not recorded,
    and for Experiment 2)."""
    n = row.get("train_size", row.get("n_train"))
    if n in (None, "", "support") or base_experiment(row.get("experiment")) == "exp2":
        return None
    return int(n)


def curve_size(row: dict):
    """The N that names a row's curve: its training-set size (:func:`train_size_of`) in
    Experiment 1, ``"support"`` in Experiment 2, whose N grows with the level (about 5866
    commands per verb of the support), so that one curve holds every level of a preset."""
    return "support" if base_experiment(row["experiment"]) == "exp2" else train_size_of(row)


def schedule_of(row: dict) -> str:
    """The row's schedule label (``schedule``; ``unknown`` when not recorded), see
    :func:`.schedules.schedule_label`."""
    return str(row.get("schedule") or UNKNOWN_SCHEDULE)


#: the schedule part of the curve key of Experiment 2 rows trained at their preset's own
#: schedule: the paper trains 64 - 8(k - 1) epochs at support size k, so the updates (and
#: the schedule label) change with the level
OWN_SCHEDULE_PER_LEVEL = "preset's own per level"


def curve_schedule(row: dict) -> str:
    """The schedule part of a row's curve key: :func:`schedule_of`, except for an Experiment
    2 row that records its updates equal to its preset's own ``max_update`` on its level
    (``updates`` = ``preset_max_update``), which gets :data:`OWN_SCHEDULE_PER_LEVEL`, so that
    the support sizes trained at the paper's per-level schedule form one curve.  Rows of any
    other schedule keep their label: a shortened or lengthened run is never a point of the
    paper-schedule curve."""
    label = schedule_of(row)
    if base_experiment(row.get("experiment")) != "exp2" or label == UNKNOWN_SCHEDULE:
        return label
    updates, own = row.get("updates"), row.get("preset_max_update")
    if updates in (None, "") or own in (None, "") or int(updates) != int(own):
        return label
    return OWN_SCHEDULE_PER_LEVEL


def cell_key(row: dict) -> tuple:
    """(experiment, model, N, level, checkpoint, schedule) of a row (N:
    :func:`train_size_of`, schedule: :func:`schedule_of`); the rows of a cell differ only by
    their training seed, so runs of different schedules are never averaged."""
    return (row["experiment"], model_of(row), train_size_of(row), str(row["level"]),
            row["checkpoint"], schedule_of(row))


def curve_key(row: dict) -> tuple:
    """(experiment, model, N, checkpoint, schedule) of a row (N: :func:`curve_size`,
    schedule: :func:`curve_schedule`): the curve of accuracy against entropy that its level
    is a point of."""
    return (row["experiment"], model_of(row), curve_size(row), row["checkpoint"],
            curve_schedule(row))


def order_key(values: Sequence) -> tuple:
    """A sort key for tuples that mix numbers, strings and None: numbers first, by value,
    then everything else by its ``str``."""
    return tuple((0, v) if isinstance(v, (int, float)) else (1, str(v)) for v in values)
