"""Which scored runs are seeds of one cell: :func:`check_runs` refuses a run read twice (COGS
included), a cell whose runs trained on different training sets, and a run both with and
without its recorded schedule; :func:`group_runs` then gives the rows of each cell
(:func:`.keys.cell_key`) and refuses two cells at one level of one curve.

Works on plain result rows (the rows of ``results.tsv``, see :mod:`.statistics`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Sequence

from .columns import GROUP_COLUMNS, UNKNOWN_SCHEDULE, ScoreError
from .keys import (OWN_SCHEDULE_PER_LEVEL, cell_key, curve_key, curve_schedule, model_of,
                   order_key, schedule_of)


def _fix_for_twice(*rows: dict) -> str:
    """The fix for one run read twice: a ``results.tsv`` line (``FILE:LINE``) already holds a
    run that a score file gives again (an earlier aggregate passed beside its run
    directories), or two score files of one run."""
    if any(".tsv:" in str(r.get("path", "")) for r in rows):
        return ("pass either the earlier results.tsv or the run directories it was made from, "
                "not both (to add runs, pass the results.tsv and only the new run "
                "directories), or drop the line from the results.tsv")
    return "aggregate only one of them (move or remove the other score.json)"


def check_runs(rows: Sequence[dict]) -> None:
    """Check that every run of ``rows`` (result rows of any experiment, COGS included) is
    read once and that the runs of a cell (:func:`cell_key`) can be averaged.

    Raises:
        ScoreError: naming both files and the fix, for two rows with the same cell and seed
            (a run scored twice into different directories, or an earlier ``results.tsv``
            passed with the run directories it was made from); two rows of one cell with
            different ``n_train`` (Experiment 2, whose cell has no N: levels built with
            another ``--valid-fraction``, whose runs train on other commands); or a row of
            schedule ``unknown`` (an older ``results.tsv`` or score) and a row with a
            recorded schedule that agree on every other field of the cell and the seed (the
            same run recorded before and after schedules were recorded, or two runs that
            cannot be told apart).
    """
    seen: Dict[tuple, dict] = {}
    first_of_cell: Dict[tuple, dict] = {}
    by_run: Dict[tuple, Dict[bool, dict]] = defaultdict(dict)  # unknown schedule? -> row
    for r in rows:
        key = cell_key(r)
        where = r.get("path", "?")
        dup = seen.setdefault((key, r["seed"]), r)
        if dup is not r:
            raise ScoreError(
                f"{where} and {dup.get('path', '?')} are both seed {r['seed']} of "
                f"{ {c: r[c] for c in GROUP_COLUMNS} }. Fix: {_fix_for_twice(r, dup)}")
        first = first_of_cell.setdefault(key, r)
        if first.get("n_train") != r.get("n_train"):
            raise ScoreError(
                f"{where} (n_train {r.get('n_train')}) and {first.get('path', '?')} (n_train "
                f"{first.get('n_train')}) are runs of one cell, {r['experiment']} "
                f"{model_of(r)} {r['level']} {r['checkpoint']}, trained on different "
                "training sets (levels built with another --valid-fraction?): "
                "their accuracies cannot be averaged. Fix: aggregate the runs of each build "
                "apart (one aggregate per build)")
        # the same run with and without its schedule: the cell key but its schedule, the seed
        unknown = schedule_of(r) == UNKNOWN_SCHEDULE
        runs = by_run[(*key[:-1], r["seed"])]
        runs.setdefault(unknown, r)
        twin = runs.get(not unknown)
        if twin is not None:
            old, new = (r, twin) if unknown else (twin, r)
            raise ScoreError(
                f"{old.get('path', '?')} (schedule unknown) and {new.get('path', '?')} "
                f"(schedule {schedule_of(new)}) are both seed {r['seed']} of "
                f"{r['experiment']} {model_of(r)} N={r.get('n_train')} {r['level']} "
                f"{r['checkpoint']}: the same run before and after its schedule was recorded "
                "would be counted twice. Fix: aggregate only one of them (leave out the older "
                "results.tsv or score); if they are different runs, score the older one again "
                "so that it records its schedule (fairseq-entropy score ... --force)")


def group_runs(rows: Sequence[dict]) -> Dict[tuple, List[dict]]:
    """Rows by :func:`cell_key`, in a fixed order.

    Raises:
        ScoreError: see :func:`check_runs` (a run twice, a cell of different training sets,
            a run with and without its schedule); or two cells of one curve at one level
            (Experiment 2 runs at their preset's own schedule but with other arguments,
            :func:`curve_schedule`), naming a file of each; or two levels of such a curve
            trained with different preset arguments (``preset_config``: the preset edited
            between the runs).
    """
    check_runs(rows)
    groups: Dict[tuple, List[dict]] = defaultdict(list)
    points: Dict[tuple, dict] = {}
    configs: Dict[tuple, dict] = {}
    for r in rows:
        key = cell_key(r)
        other = points.setdefault((curve_key(r), str(r["level"])), r)
        if schedule_of(other) != schedule_of(r):
            raise ScoreError(
                f"{r.get('path', '?')} ({schedule_of(r)}) and {other.get('path', '?')} "
                f"({schedule_of(other)}) both train {r['level']} of {model_of(r)} at the "
                "preset's own number of updates, with different arguments: one curve cannot "
                "hold both. Fix: aggregate the runs of each argument set apart")
        if curve_schedule(r) == OWN_SCHEDULE_PER_LEVEL and r.get("preset_config"):
            first = configs.setdefault(curve_key(r), r)
            if first["preset_config"] != r["preset_config"]:
                raise ScoreError(
                    f"{r.get('path', '?')} ({r['level']}, preset arguments "
                    f"{r['preset_config']}) and {first.get('path', '?')} ({first['level']}, "
                    f"{first['preset_config']}) were trained with different arguments of "
                    f"preset {model_of(r)} (edited between the runs?): one curve at the "
                    "preset's own per-level schedule cannot hold both. Fix: re-train the "
                    "levels of one argument set, or aggregate the runs of each apart")
        groups[key].append(r)
    return {k: groups[k] for k in sorted(groups, key=order_key)}
