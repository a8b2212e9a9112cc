"""Accuracy per case over seeds: ``cases.tsv`` of ``aggregate``, for scores that have
``by_case`` (data with the case of every sentence beside it, such as COGS).

One row per (experiment, preset, level, checkpoint, schedule, split, case): the case type
(:func:`~fairseq_entropy.cogs.data.case_type`), the seeds, the sentences per seed, and the
mean, standard deviation (over seeds, ``ddof=1``; empty for one seed), minimum and maximum of
the exact-match accuracy.  Rows of a case type (``type:lexical``, ...) follow the cases of a
group.  ``cases.md`` holds the same numbers as one markdown table per group.
"""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Sequence

from ..cogs.data import case_type
from ..files import atomic_write_text, read_json
from .columns import ScoreError

#: the columns of ``cases.tsv``
CASE_COLUMNS = ("experiment", "preset", "level", "checkpoint", "schedule", "split", "case",
                "type", "seeds", "n", "mean", "std", "min", "max")


def case_rows(rows: Sequence[dict]) -> List[dict]:
    """The ``cases.tsv`` rows of the result rows ``rows`` (each with ``path``, its
    ``score.json``; rows from a ``results.tsv`` and scores without ``by_case`` add nothing).

    Raises:
        DataFormatError: a score file that cannot be read any more.
        ScoreError: two scores of one group with the same seed (names both files).
    """
    groups: Dict[tuple, Dict[str, list]] = defaultdict(lambda: defaultdict(list))
    seen: Dict[tuple, str] = {}
    for r in rows:
        path = r.get("path")
        if not path or not str(path).endswith(".json"):
            continue
        rec = read_json(path)
        key = (r["experiment"], r["preset"], r["level"], r["checkpoint"], r["schedule"],
               rec.get("split") or "test")
        if rec.get("by_case"):
            other = seen.setdefault((*key, r["seed"]), str(path))
            if other != str(path):
                raise ScoreError(f"{path} and {other} are both seed {r['seed']} of "
                                 f"{' '.join(map(str, key))}; their cases would be averaged "
                                 "as two seeds. Fix: pass one of them (e.g. remove the copy)")
        for part in ("by_case", "by_case_type"):
            for case, stats in (rec.get(part) or {}).items():
                name = case if part == "by_case" else f"type:{case}"
                groups[key][name].append((r["seed"], stats["accuracy"], stats["n"]))
    out = []
    for key in sorted(groups):
        names = sorted(groups[key], key=lambda c: (c.startswith("type:"), c))
        for case in names:
            runs = sorted(groups[key][case])
            accs = [a for _, a, _ in runs]
            out.append(dict(zip(CASE_COLUMNS[:6], key), case=case,
                            type=case[5:] if case.startswith("type:") else case_type(case),
                            seeds=",".join(str(s) for s, _, _ in runs),
                            n=",".join(sorted({str(n) for _, _, n in runs})),
                            mean=statistics.fmean(accs),
                            std=statistics.stdev(accs) if len(accs) > 1 else None,
                            min=min(accs), max=max(accs)))
    return out


def cases_markdown(table: Sequence[dict]) -> str:
    """``cases.md``: the rows of :func:`case_rows` as one markdown table per group
    (experiment, preset, level, checkpoint, schedule, split), accuracies to 3 decimals."""
    def num(v):
        return "" if v is None else f"{v:.3f}"

    lines = ["# Exact match per case", "",
             "Written by `fairseq-entropy aggregate` beside `cases.tsv`: per case, the seeds, "
             "the sentences per seed and the accuracy over seeds (std with ddof = 1; empty "
             "for one seed). `type:` rows pool the cases of a type."]
    group = None
    for t in table:
        key = tuple(t[c] for c in CASE_COLUMNS[:6])
        if key != group:
            group = key
            exp, preset, level, checkpoint, schedule, split = key
            lines += ["", f"## {preset}, {level}: {split} split, {checkpoint} checkpoint", "",
                      f"Experiment `{exp}`, schedule `{schedule}`.", "",
                      "| case | type | seeds | sentences | mean | std | min | max |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        name = f"**{t['case']}**" if t["case"].startswith("type:") else f"`{t['case']}`"
        lines.append(f"| {name} | {t['type']} | {t['seeds']} | {t['n']} | {num(t['mean'])} | "
                     f"{num(t['std'])} | {num(t['min'])} | {num(t['max'])} |")
    return "\n".join(lines) + "\n"


def write_cases_tsv(rows: Sequence[dict], out_dir: str | os.PathLike):
    """Write ``out_dir/cases.tsv`` (:func:`case_rows`) and ``out_dir/cases.md``
    (:func:`cases_markdown`) when any score has cases; returns the ``cases.tsv`` path, or
    None (nothing written)."""
    table = case_rows(rows)
    if not table:
        return None
    lines = ["\t".join(CASE_COLUMNS)]
    for t in table:
        lines.append("\t".join("" if t[c] is None else f"{t[c]:.6f}" if isinstance(t[c], float)
                               else str(t[c]) for c in CASE_COLUMNS))
    path = Path(out_dir) / "cases.tsv"
    atomic_write_text(path, "\n".join(lines) + "\n")
    atomic_write_text(Path(out_dir) / "cases.md", cases_markdown(table))
    return path
