"""One aggregation path: score files (and earlier ``results.tsv``) to ``results.tsv``, the
seed summary, the curves, the plots and the report.

:func:`collect_scores` reads every ``score.json`` under the given roots (and any
``results.tsv`` among them, :func:`read_results_tsv`) as result rows (:mod:`.columns`);
:func:`aggregate` writes ``results.tsv`` and hands the rows to :func:`.statistics.summarize`
(the printed table and the overview plot) and :func:`.report.write_report` (``summary.tsv``,
``curves.tsv``, the paper figures and ``report.md``).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Iterable, List, Sequence

from ..files import atomic_write_text, read_json, read_lines
from .columns import (CHECKPOINT_LABELS, GRADED_COLUMNS, GROUP_COLUMNS,
                      OPTIONAL_RESULT_COLUMNS, RESULT_COLUMNS, SCHEDULE_COLUMNS,
                      UNKNOWN_SCHEDULE, ScoreError)
from .paper import paper_model_name
from .provenance import schedule_label
from .report import format_table, write_report
from .statistics import order_key, spearman, summarize


#: the mark of a score of a sample of the test split (``score.json`` field ``test_sample``):
#: its rows get the experiment ``<experiment>+test-sample``, a curve of their own
TEST_SAMPLE = "test-sample"
#: types of the result columns read back from a ``results.tsv`` (the others are strings)
_RESULT_TYPES = {"n_train": int, "entropy_bits": float, "seed": int, "data_seed": int,
                 "accuracy": float, "updates": int, "epochs": float, "preset_max_update": int,
                 **{c: float for c in GRADED_COLUMNS}}


def read_results_tsv(path: str | os.PathLike) -> List[dict]:
    """The rows of a ``results.tsv`` that :func:`aggregate` wrote, as result rows (see
    :func:`collect_scores`; ``path`` is ``FILE:LINE``), so that committed results can be
    aggregated together with new runs.  Graded and schedule columns the file lacks (older
    aggregates) are None, the schedule ``unknown``.

    Raises:
        DataFormatError: the file is missing or unreadable.
        ScoreError: the file lacks a column of :data:`RESULT_COLUMNS`, a value does not parse,
            or a checkpoint label is unknown; names the file, line and fix.
    """
    lines = read_lines(path)
    reader = csv.DictReader(lines, delimiter="\t")
    missing = [c for c in RESULT_COLUMNS
               if c not in (reader.fieldnames or []) and c not in SCHEDULE_COLUMNS]
    if missing:
        raise ScoreError(f"{path}:1: missing column(s) {', '.join(missing)}. Fix: pass a "
                         "results.tsv written by fairseq-entropy aggregate, or the run "
                         "directories themselves")
    rows = []
    for lineno, rec in enumerate(reader, start=2):
        row = {}
        for c in RESULT_COLUMNS + GRADED_COLUMNS:
            value = rec.get(c)
            if value in (None, ""):
                if c in RESULT_COLUMNS and c not in OPTIONAL_RESULT_COLUMNS:
                    raise ScoreError(f"{path}:{lineno}: empty {c}. Fix: restore the line "
                                     "from the run's score.json, or drop the line")
                row[c] = None
                continue
            try:
                row[c] = _RESULT_TYPES.get(c, str)(value)
            except ValueError:
                raise ScoreError(f"{path}:{lineno}: {c} {value!r} is not a number. Fix: "
                                 "restore the line from the run's score.json") from None
        if row["checkpoint"] not in CHECKPOINT_LABELS:
            raise ScoreError(f"{path}:{lineno}: unknown checkpoint label "
                             f"{row['checkpoint']!r}. Fix: use "
                             f"{', '.join(CHECKPOINT_LABELS)}")
        row["schedule"] = row["schedule"] or UNKNOWN_SCHEDULE
        row["path"] = f"{path}:{lineno}"
        rows.append(row)
    return rows


def collect_scores(roots: Iterable[str | os.PathLike]) -> List[dict]:
    """Every ``score.json`` under ``roots`` as result rows (columns :data:`RESULT_COLUMNS`,
    :data:`GRADED_COLUMNS` (None when the file has no graded metrics) and ``path``, the file
    it came from), sorted by :data:`~.columns.GROUP_COLUMNS`, then seed.  A score of a data
    variant (:func:`.provenance.data_variant`) gets the experiment
    ``<experiment>+<variant>``, a curve of its own without paper values; so does a score of a
    sample of the test split (``test_sample`` in its ``score.json``), as
    ``<experiment>+test-sample``, which is never averaged with full-split scores.  The schedule
    columns come from the score's ``schedule`` record (:func:`.provenance.schedule_label`;
    ``unknown`` for a score written before schedules were recorded).  A root that is a
    ``.tsv`` file is read as an earlier aggregate's ``results.tsv``
    (:func:`read_results_tsv`).

    Raises:
        DataFormatError: an unreadable score or results file.
        ScoreError: a root that does not exist, no score file, a score file without the
            provenance an aggregate needs, or one with an unknown checkpoint label; names the
            file and the fix.
    """
    rows = []
    for root in roots:
        root = Path(root)
        if not root.exists():
            raise ScoreError(f"{root}: not found. Fix: pass run directories, score.json "
                             "files or results.tsv files")
        if root.is_file() and root.suffix == ".tsv":
            rows.extend(read_results_tsv(root))
            continue
        files = [root] if root.is_file() else sorted(root.rglob("score.json"))
        for f in files:
            rec = read_json(f)
            missing = [c for c in RESULT_COLUMNS
                       if c not in OPTIONAL_RESULT_COLUMNS and rec.get(c) is None]
            if missing:
                raise ScoreError(f"{f}: missing {', '.join(missing)}. Fix: score again with "
                                 "fairseq-entropy score --data LEVEL_DIR --preset NAME "
                                 "--seed S --checkpoint last|best --force")
            if rec["checkpoint"] not in CHECKPOINT_LABELS:
                raise ScoreError(f"{f}: unknown checkpoint label {rec['checkpoint']!r}. Fix: "
                                 f"score again with --checkpoint "
                                 f"{', '.join(CHECKPOINT_LABELS)} --force")
            graded = dict(rec.get("graded") or {})
            for conj, stats in (rec.get("by_conjunction") or {}).items():
                graded[f"accuracy_{conj}"] = stats.get("accuracy")
            row = {**{c: rec.get(c) for c in RESULT_COLUMNS},
                   **{c: graded.get(c) for c in GRADED_COLUMNS}, "path": str(f)}
            sched = rec.get("schedule") if isinstance(rec.get("schedule"), dict) else {}
            row.update(schedule=schedule_label(sched), updates=sched.get("updates"),
                       epochs=sched.get("epochs"),
                       preset_max_update=sched.get("preset_max_update"))
            if rec.get("variant"):
                row["experiment"] = f"{rec['experiment']}+{rec['variant']}"
            if rec.get("test_sample"):  # a smoke test's score: never averaged with full ones
                row["experiment"] = f"{row['experiment']}+{TEST_SAMPLE}"
            rows.append(row)
    if not rows:
        raise ScoreError(f"no score.json under {', '.join(map(str, roots))}")
    rows.sort(key=lambda r: (*order_key([r[c] for c in GROUP_COLUMNS]), int(r["seed"])))
    return rows


def _tsv(records: Sequence[dict], columns: Sequence[str]) -> str:
    """``results.tsv`` text: floats with 6 decimals, None as an empty field."""
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(columns)
    for r in records:
        w.writerow(["" if r[c] is None else f"{r[c]:.6f}" if isinstance(r[c], float)
                    else r[c] for c in columns])
    return buf.getvalue()


def aggregate(roots: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> dict:
    """Write ``results.tsv``, the report (:func:`.report.write_report`: ``summary.tsv``,
    ``curves.tsv``, ``fig_*.png``, ``report.md``) and the overview
    ``accuracy_vs_entropy.png``) into ``out_dir``.

    Returns:
        ``{"results", "summary", "plot", "report"}`` paths, ``"agreement"`` (lines of
        :func:`.report.agreement_lines`), ``"table"`` (:func:`.report.format_table` of
        :func:`.statistics.summarize`) and ``"spearman"`` (:func:`.statistics.spearman`:
        curve key -> rho or None).

    Raises:
        ScoreError: see :func:`collect_scores` and :func:`.statistics.group_runs`.
        DataFormatError: an unreadable input, or an output that cannot be written.
    """
    rows = collect_scores(roots)
    summary = summarize(rows)
    out = Path(out_dir)
    atomic_write_text(out / "results.tsv", _tsv(rows, RESULT_COLUMNS + GRADED_COLUMNS))
    # curves are named by preset; the paper's model of a preset comes from its runs' model
    paper_of_preset = {r["preset"]: paper_model_name(r["model"]) for r in rows}
    report = write_report(rows, out,
                          paper_model=lambda name: paper_of_preset.get(name, name))
    return {"results": out / "results.tsv", "summary": report["summary"],
            "plot": report["overview"],
            "report": report["report"], "agreement": report["agreement"],
            "table": format_table(summary),
            "spearman": spearman(summary)}
