"""One aggregation path: score files (and earlier ``results.tsv``) to ``results.tsv``, the
seed summary, the curves, the plots and the report.

:func:`collect_scores` reads every ``score.json`` under the given roots (and any
``results.tsv`` among them, :func:`read_results_tsv`) as result rows (:mod:`.columns`);
:func:`aggregate` writes ``results.tsv`` and hands the rows to :func:`.statistics.summarize`
(the printed table and the overview plot) and :func:`.report.write_report` (``summary.tsv``,
``curves.tsv``, the paper figures and ``report.md``).
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import re
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

from ..errors import UserError
from ..files import atomic_write_text, read_json, read_lines
from ..scan.grammar import PAPER_VERBS
from ..scan.mixing import ENTROPY_TOLERANCE_BITS
from .cases import write_cases_tsv
from .columns import (CHECKPOINT_LABELS, GRADED_COLUMNS, GROUP_COLUMNS,
                      OPTIONAL_RESULT_COLUMNS, RESULT_COLUMNS, SCHEDULE_COLUMNS,
                      UNKNOWN_SCHEDULE, ScoreError)
from .paper import paper_model_name
from .schedules import schedule_label
from .report import format_table, write_report
from .runs import check_runs
from .keys import order_key
from .statistics import spearman, summarize


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
               if c not in (reader.fieldnames or []) and c not in SCHEDULE_COLUMNS
               and c != "model_family"]
    if missing:
        known = "experiment" in (reader.fieldnames or []) and "accuracy" in \
            (reader.fieldnames or [])
        raise ScoreError(f"{path}:1: missing column(s) {', '.join(missing)}" + (
            " (a results.tsv of an older aggregate, before runs recorded them). Fix: aggregate "
            "the run directories it was made from" if known else
            ". Fix: pass a results.tsv written by fairseq-entropy aggregate, or the run "
            "directories themselves"))
    rows = []
    for lineno, rec in enumerate(reader, start=2):
        if None in rec or any(rec[c] is None for c in reader.fieldnames or []):
            fields = len([v for k, v in rec.items() if k is not None and v is not None]) + \
                len(rec.get(None) or [])
            raise ScoreError(f"{path}:{lineno}: {fields} tab-separated field(s), but the "
                             f"header has {len(reader.fieldnames or [])}. Fix: restore the "
                             "line from the run's score.json, or drop the line")
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
        check_row(row, row["path"], "restore the line from the run's score.json, or drop it")
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
    columns come from the score's ``schedule`` record (:func:`.schedules.schedule_label`;
    ``unknown`` for a score written before schedules were recorded).  A root that is a
    ``.tsv`` file is read as an earlier aggregate's ``results.tsv``
    (:func:`read_results_tsv`).  A file reached through several roots (a root given twice,
    or one inside another) is read once.

    Raises:
        DataFormatError: an unreadable score or results file.
        ScoreError: a root that does not exist, no score file, a score file without the
            provenance an aggregate needs, one with an unknown checkpoint label, or a value of
            the wrong type or out of range (:func:`check_row`); names the file and the fix.
    """
    rows, read = [], set()
    for root in roots:
        root = Path(root)
        if not root.exists():
            raise ScoreError(f"{root}: not found. Fix: pass run directories, score.json "
                             "files or results.tsv files")
        if root.is_file() and root.suffix == ".tsv":
            if root.resolve() not in read:
                read.add(root.resolve())
                rows.extend(read_results_tsv(root))
            continue
        if root.is_file() and root.suffix != ".json":
            raise ScoreError(f"{root}: not a score.json, a run directory or a results table "
                             "named *.tsv (a file is read by its name). Fix: "
                             "pass a score.json, a run directory, or a results table under a "
                             ".tsv name")
        files = [root] if root.is_file() else sorted(root.rglob("score.json"))
        for f in files:
            if f.resolve() in read:  # a root given twice, or inside another root
                continue
            read.add(f.resolve())
            rec = read_json(f)
            if not isinstance(rec, dict):
                raise ScoreError(f"{f}:1: expected a JSON object, got a JSON "
                                 f"{type(rec).__name__}. Fix: {_RESCORE}")
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
            check_counts(rec, str(f))
            graded = dict(rec.get("graded") or {})
            for key in ("by_conjunction", "by_shared_verb"):
                for name, stats in (rec.get(key) or {}).items():
                    graded[f"accuracy_{name}"] = stats.get("accuracy")
            row = {**{c: rec.get(c) for c in RESULT_COLUMNS},
                   **{c: graded.get(c) for c in GRADED_COLUMNS}, "path": str(f)}
            sched = rec.get("schedule") if isinstance(rec.get("schedule"), dict) else {}
            row.update(schedule=schedule_label(sched, rec["checkpoint"], rec.get("decoding")),
                       updates=sched.get("updates"),
                       epochs=sched.get("epochs"),
                       preset_max_update=sched.get("preset_max_update"),
                       preset_config=(sched.get("preset_config_sha256") or "")[:8] or None)
            if rec.get("variant"):
                row["experiment"] = f"{rec['experiment']}+{rec['variant']}"
            if rec.get("split") not in (None, "test"):  # e.g. COGS's gen: a curve of its own
                row["experiment"] = f"{row['experiment']}+{rec['split']}"
            if rec.get("test_sample"):  # a smoke test's score: never averaged with full ones
                row["experiment"] = f"{row['experiment']}+{TEST_SAMPLE}"
            check_row(row, str(f), _RESCORE, rec)
            rows.append(row)
    if not rows:
        tsv = [str(r) for r in roots if Path(r).suffix == ".tsv"]
        dirs = [str(r) for r in roots if Path(r).suffix != ".tsv"]
        found = "; ".join(filter(None, [
            f"no score.json under {', '.join(dirs)}" if dirs else "",
            f"no result rows in {', '.join(tsv)} (a header only)" if tsv else ""]))
        raise ScoreError(f"{found}. Fix: pass run directories that hold scored runs (fairseq-"
                         "entropy score writes RUN_DIR/<checkpoint>/score.json), or a "
                         "results.tsv with rows")
    rows.sort(key=lambda r: (*order_key([r[c] for c in GROUP_COLUMNS]), int(r["seed"])))
    return rows


#: the fix for a score.json that aggregate cannot use
_RESCORE = ("score again with fairseq-entropy score --data LEVEL_DIR --preset NAME --seed S "
            "--checkpoint last|best --force (or restore the file's value)")
#: experiments a score may come from (before any ``+variant``)
SCORE_EXPERIMENTS = ("exp1", "exp2", "scan", "cogs")
#: graded columns that are fractions (the others, chrF and BLEU, are percentages)
_PERCENT_COLUMNS = ("chrf", "bleu")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _entropy_cap(rec: Optional[dict]) -> float:
    """The most bits a level's controlled slot can hold: log2 of its verbs, read from the
    score's level manifest (``data``) when it is there, else the paper's 8 verbs (3 bits)."""
    verbs = len(PAPER_VERBS)
    manifest = Path(str((rec or {}).get("data") or "")) / "manifest.json"
    if (rec or {}).get("data") and manifest.is_file():
        with contextlib.suppress(UserError, OSError):
            verbs = max(verbs, len(read_json(manifest).get("verbs") or ()))
    return math.log2(verbs) + 1e-6


def check_counts(rec: dict, where: str) -> None:
    """Check that a ``score.json``'s accuracy is its count of exact matches over its test
    commands, and that its breakdowns are tables.

    Checked, where present (older scores lack ``n`` and ``correct``): ``n`` a positive
    integer, ``correct`` an integer in 0..n, ``accuracy`` equal to ``correct / n``;
    ``graded`` an object; ``by_conjunction`` and ``by_shared_verb`` objects of
    ``{"accuracy", "n"}`` objects.

    Raises:
        ScoreError: ``where: key = value ...`` naming what it must be and the fix.
    """
    def fail(key, value, valid):
        return ScoreError(f"{where}: {key} = {value!r}, but it must be {valid}. Fix: "
                          f"{_RESCORE}")

    n, correct = rec.get("n"), rec.get("correct")
    if n is not None and not (_is_int(n) and n > 0):
        raise fail("n", n, "the number of test commands scored, a positive integer")
    if correct is not None:
        if not (_is_int(correct) and 0 <= correct <= (n if n is not None else correct)):
            raise fail("correct", correct, f"an integer in 0..n ({n})")
        acc = rec.get("accuracy")
        if n is not None and _is_real(acc) and abs(acc - correct / n) > 1e-9:
            raise fail("accuracy", acc, f"correct / n = {correct}/{n} = {correct / n:.6f}")
    if rec.get("graded") is not None and not isinstance(rec["graded"], dict):
        raise fail("graded", rec["graded"], "an object of graded metrics")
    for key in ("by_conjunction", "by_shared_verb"):
        table = rec.get(key)
        if table is None:
            continue
        if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
            raise fail(key, table, 'an object of {"accuracy": ..., "n": ...} objects')
        for name, stats in table.items():
            acc = stats.get("accuracy")
            if acc is not None and not (_is_real(acc) and 0 <= acc <= 1):
                raise fail(f"{key}.{name}.accuracy", acc, "a number in [0, 1]")


def check_row(row: dict, where: str, fix: str, rec: Optional[dict] = None) -> None:
    """Check the values of a result row that :func:`aggregate` groups and averages.

    Checked: ``experiment`` (``exp1``/``exp2``/``scan``/``cogs``, then any ``+variant``),
    ``preset`` and ``model`` (names), ``n_train`` (a positive integer), ``level``
    (``entropy_<bits>`` for exp1, ``support_<k>`` for exp2), ``entropy_bits`` and the level's
    bits (in [0, log2 of the verbs], :func:`_entropy_cap`; a COGS level's bits are >= 0, its
    slot holding hundreds of words; within the builder's tolerance of the bits the level
    names, ``log2 k`` for ``support_<k>``, ``entropy_<bits>`` for a ``build cogs`` level;
    required for exp1 and exp2, None allowed for SCAN splits and COGS's own training set,
    whose cells then have no point on a curve),
    ``seed`` and ``data_seed`` (integers in 0..2**32-1), ``accuracy`` and the graded
    fractions (in [0, 1]; chrF and BLEU in [0, 100]), and the schedule's ``updates``,
    ``epochs``, ``preset_max_update`` (positive).

    Args:
        row: a result row (:func:`collect_scores`).
        where: the file (and line) it came from; fix: the fix to name.
        rec: the ``score.json`` record, when the row came from one (for its data manifest).

    Raises:
        ScoreError: ``where: key = value ...`` with the valid values and ``fix``.
    """
    def fail(key, valid):
        return ScoreError(f"{where}: {key} = {row.get(key)!r}, but it must be {valid}. "
                          f"Fix: {fix}")

    base = row["experiment"].split("+", 1)[0] if isinstance(row["experiment"], str) else None
    if base not in SCORE_EXPERIMENTS:
        raise fail("experiment", f"one of {', '.join(SCORE_EXPERIMENTS)}")
    for key in ("preset", "model", "level"):
        if not isinstance(row[key], str) or not row[key]:
            raise fail(key, "a name (text)")
    if not _is_int(row["n_train"]) or row["n_train"] < 1:
        raise fail("n_train", "a positive integer")
    for key in ("seed", "data_seed"):
        if not (row[key] is None and key == "data_seed") and \
                not (_is_int(row[key]) and 0 <= row[key] < 2 ** 32):
            raise fail(key, "an integer in 0..2**32-1 (a JSON number, not text)")
    bits = row["entropy_bits"]
    if bits is None and base in ("exp1", "exp2"):
        raise fail("entropy_bits", "the measured entropy of the level in bits (every exp1 and "
                                   "exp2 level records it; its curve needs it)")
    need_cap = bits is not None and _is_real(bits) and bits > 3
    m = re.fullmatch(r"entropy_(\d+(?:\.\d+)?)", row["level"])
    if base == "exp1":
        if not m:
            raise fail("level", "entropy_<bits> for exp1, e.g. entropy_1.5")
        need_cap = need_cap or float(m.group(1)) > 3
    if base == "exp2" and not re.fullmatch(r"support_[1-9]\d*", row["level"]):
        raise fail("level", "support_<k> for exp2, e.g. support_3")
    cap = math.inf if base == "cogs" else _entropy_cap(rec) if need_cap else 3.0 + 1e-6
    if bits is not None and not (_is_real(bits) and 0 <= bits <= cap):
        raise fail("entropy_bits", f"a number of bits in [0, {cap:.3g}] (log2 of the verbs)"
                   if base != "cogs" else "a finite number of bits >= 0")
    if m and base == "exp1" and float(m.group(1)) > cap:
        raise fail("level", f"a level of at most {cap:.3g} bits (log2 of the verbs)")
    named = float(m.group(1)) if m and base == "exp1" else \
        math.log2(int(row["level"][len("support_"):])) if base == "exp2" else \
        float(m.group(1)) if m and base == "cogs" and bits is not None else None
    if named is not None and bits is not None and \
            abs(bits - named) > ENTROPY_TOLERANCE_BITS + 1e-6:
        raise fail("entropy_bits", f"within {ENTROPY_TOLERANCE_BITS} bits of the "
                                   f"{named:.3f} bits that level {row['level']} names (the "
                                   "builder's tolerance)")
    for key in ("accuracy", *GRADED_COLUMNS):
        top = 100 if key in _PERCENT_COLUMNS else 1
        if (row.get(key) is not None or key == "accuracy") and \
                not (_is_real(row.get(key)) and 0 <= row[key] <= top):
            raise fail(key, f"a finite number in [0, {top}]")
    for key in ("updates", "preset_max_update", "epochs"):
        ok = _is_real if key == "epochs" else _is_int
        if row.get(key) is not None and not (ok(row[key]) and row[key] > 0):
            raise fail(key, "a positive number" if key == "epochs" else "a positive integer")


def _tsv(records: Sequence[dict], columns: Sequence[str]) -> str:
    """``results.tsv`` text: floats with 6 decimals, None as an empty field."""
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(columns)
    for r in records:
        w.writerow(["" if r[c] is None else f"{r[c]:.6f}" if isinstance(r[c], float)
                    else r[c] for c in columns])
    return buf.getvalue()


#: the files an aggregate writes (globs in its output directory): another aggregate into the
#: same directory replaces them all, the ones it does not write again removed
AGGREGATE_OUTPUTS = ("results.tsv", "summary.tsv", "curves.tsv", "report.md", "fig_*.png",
                     "accuracy_vs_entropy.png", "cases.tsv", "cases.md")


def _remove_stale(earlier: set, written: set) -> None:
    """Remove the earlier aggregate's outputs that this one did not write again."""
    for path in earlier - {Path(p) for p in written if p}:
        path.unlink(missing_ok=True)


def aggregate(roots: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
              force: bool = False) -> dict:
    """Write ``results.tsv``, the report (:func:`.report.write_report`: ``summary.tsv``,
    ``curves.tsv``, ``fig_*.png``, ``report.md``) and the overview
    ``accuracy_vs_entropy.png``) into ``out_dir``.

    An ``out_dir`` that holds an aggregate already (its ``results.tsv``) is replaced only with
    ``force``; then the outputs of the earlier aggregate (:data:`AGGREGATE_OUTPUTS`) that this
    one does not write (a figure of a curve no longer there) are removed, and other files
    (e.g. ``predict --plot`` figures) are kept.

    Returns:
        ``{"results", "summary", "curves", "plot", "report"}`` paths, ``"figures"`` (the
        ``fig_*.png`` paths), ``"experiments"`` (the rows' experiments, sorted),
        ``"cases"`` (``cases.tsv``
        of :mod:`.cases`, accuracy per case over seeds; None when no score has cases; scores
        of COGS's own training set, which have no entropy level, are left out of the curves
        and the report, and with only those the report's entries are None; the levels of
        ``build cogs`` are curves, one per case, preset, split and checkpoint),
        ``"agreement"`` (lines of
        :func:`.report.agreement_lines`), ``"table"`` (:func:`.report.format_table` of
        :func:`.statistics.summarize`) and ``"spearman"`` (:func:`.statistics.spearman`:
        curve key -> rho or None).

    Raises:
        ScoreError: ``out_dir`` is (inside) an input directory, or holds an aggregate and
            ``force`` is not given; see :func:`collect_scores`,
            :func:`.runs.check_runs` (on every row, COGS included: a run passed twice,
            e.g. an earlier ``results.tsv`` beside the run directories it was made from) and
            :func:`.runs.group_runs`; nothing is written then.
        DataFormatError: an unreadable input, or an output that cannot be written.
    """
    out = Path(out_dir)
    for root in map(Path, roots):
        if root.is_dir() and (out.resolve() == root.resolve()
                              or root.resolve() in out.resolve().parents):
            raise ScoreError(f"--out {out}: inside the input {root}, so the report would be "
                             "written among the runs (and read back as input by the next "
                             "aggregate). Fix: choose an --out outside every input directory, "
                             f"e.g. {root.resolve().parent / 'results'}")
    if (out / "results.tsv").exists() and not force:
        raise ScoreError(f"--out {out} holds an aggregate already ({out / 'results.tsv'}). "
                         "Fix: pass --force to replace it (its tables, figures and report), "
                         "or choose another --out; to add runs to it, pass its results.tsv "
                         "as an input")
    earlier = {p for pattern in AGGREGATE_OUTPUTS for p in out.glob(pattern)}
    rows = collect_scores(roots)
    check_runs(rows)  # every row, COGS included: a run twice is refused before any write
    # COGS's own training set has no entropy level: its rows go to results.tsv and cases.tsv
    # only; the levels of build cogs record theirs and are points of their case's curves
    curve_rows = [r for r in rows if r["experiment"].split("+", 1)[0] != "cogs"
                  or r["entropy_bits"] is not None]
    summary = summarize(curve_rows) if curve_rows else None  # refuses before any write
    atomic_write_text(out / "results.tsv", _tsv(rows, RESULT_COLUMNS + GRADED_COLUMNS))
    cases = write_cases_tsv(rows, out)
    written = {out / "results.tsv", cases, cases and cases.with_suffix(".md")}
    experiments = sorted({r["experiment"] for r in rows})
    if not curve_rows:
        _remove_stale(earlier, written)
        return {"cases": cases, "results": out / "results.tsv", "summary": None,
                "experiments": experiments, "curves": None,
                "figures": [], "plot": None, "not_drawn": None, "report": None,
                "agreement": [], "table": "",
                "spearman": {}}
    # curves are named by preset; the paper's model of a preset comes from its runs' model
    paper_of_preset = {r["preset"]: paper_model_name(r["model"]) for r in curve_rows}
    report = write_report(curve_rows, out,
                          paper_model=lambda name: paper_of_preset.get(name, name))
    _remove_stale(earlier, {*written, report["summary"], report["curves"], report["report"],
                            report["overview"], *report["figures"]})
    return {"cases": cases, "results": out / "results.tsv", "summary": report["summary"],
            "experiments": experiments,
            "curves": report["curves"], "figures": report["figures"],
            "plot": report["overview"], "not_drawn": report["not_drawn"],
            "report": report["report"], "agreement": report["agreement"],
            "table": format_table(summary),
            "spearman": spearman(summary)}
