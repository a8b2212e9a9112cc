"""The report of an aggregate: ``summary.tsv``, ``curves.tsv``, one PNG per paper figure,
``report.md`` (the figures, the per-curve statistics and the agreement table), the overview
plot ``accuracy_vs_entropy.png`` and the table ``fairseq-entropy aggregate`` prints.

Works on plain result rows (see :mod:`.statistics`); the paper's numbers come from
``paper_results.tsv`` (Wold et al., arXiv 2505.13089, mean and std over 5 seeds).

The figures (one PNG per paper figure and the overview ``accuracy_vs_entropy.png``) are
drawn by :mod:`.figures`.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import math
import os
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from ..files import atomic_write_text
from . import keys
from . import statistics as st
from .figures import (FIGURE_TITLES, drawn_checkpoint, figure_of, figure_title,
                      panel_of_figure, plot_figure)
from .paper import paper_lookup, paper_results
from .runs import check_runs

def matplotlib_available() -> bool:
    """Whether matplotlib can be imported here (the figures need it; the tables do not)."""
    return importlib.util.find_spec("matplotlib") is not None


#: what the report and ``aggregate`` say when matplotlib cannot be imported
NOT_DRAWN = ("not drawn: matplotlib is not installed here. Fix: pip install matplotlib, or "
             "run aggregate again where it is")

#: columns of ``summary.tsv``: the cell (curve name = preset, N, checkpoint, level), the seed
#: statistics and the agreement with the paper
SUMMARY_COLUMNS = ("experiment", "preset", "n_train", "checkpoint", "schedule", "updates",
                   "preset_max_update", "level", "entropy_bits",
                   "mean", "std", "n", "ci_low", "ci_high", "paper_mean", "paper_std", "diff",
                   "tolerance", "agree", "clause_accuracy", "correct_except_restricted_clause",
                   "chrf", "bleu", "accuracy_and", "accuracy_after", "accuracy_same_verb",
                   "accuracy_different_verbs", "note")
CURVE_COLUMNS = ("experiment", "model", "train_size", "checkpoint", "schedule", "levels",
                 "seeds", "rho", "k",
                 "h50", "h50_ci_low", "h50_ci_high", "h90", "h90_ci_low", "h90_ci_high",
                 "paper_h50", "note")


def _fmt(v, digits=4) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{digits}f}"
    return str(v)


def tsv(records: Sequence[dict], columns: Sequence[str]) -> str:
    """Tab-separated text of ``records`` (floats with 6 decimals, NaN as ``nan``)."""
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(columns)
    for r in records:
        w.writerow([_fmt(r.get(c), 6) for c in columns])
    return buf.getvalue()


def format_table(summary: Sequence[dict]) -> str:
    """A plain-text table of :func:`~.statistics.summarize` rows, one line per cell (mean and
    std of accuracy as fractions, entropy in bits)."""
    lines = [f"{'experiment':<10} {'preset':<34} {'N':>6} {'ckpt':<5} {'level':<13} "
             f"{'H(bits)':>7} {'acc_mean':>8} {'acc_std':>7} {'n':>2}  schedule"]
    for r in summary:
        h = "n/a" if r["entropy_bits"] is None else f"{r['entropy_bits']:.3f}"
        lines.append(f"{r['experiment']:<10} {r['preset']:<34} {r['n_train']:>6} "
                     f"{r['checkpoint']:<5} {r['level']:<13} {h:>7} {r['mean']:>8.4f} "
                     f"{r['std']:>7.4f} {r['n']:>2}  {keys.schedule_of(r)}")
    return "\n".join(lines) + "\n"


def _md_table(records: Sequence[dict], columns: Sequence[str], headers: Sequence[str]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in records:
        lines.append("| " + " | ".join(_fmt(r.get(c), 3) if c != "level" else str(r[c])
                                       for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _interval(low: float, high: float) -> str:
    return "n/a" if math.isnan(low) or math.isnan(high) else f"[{low:.3f}, {high:.3f}]"


def write_report(rows: Sequence[dict], out_dir: str | os.PathLike,
                 paper_rows: Optional[Sequence[dict]] = None,
                 paper_model: Callable[[str], str] = lambda m: m,
                 checkpoint: str = "last", command: str = "") -> Dict[str, Path]:
    """Write ``summary.tsv``, ``curves.tsv``, ``fig_<figure>.png``, the overview of every
    curve ``accuracy_vs_entropy.png`` and ``report.md``.

    Args:
        rows: result rows (one per run and checkpoint).
        paper_rows: the paper's results (default: the packaged ``paper_results.tsv``).
        paper_model: maps a curve name (model or preset) to the paper's model name.
        checkpoint: the checkpoint the figures draw when a cell has it, else the first of
            last, best, test-loss that one has (:func:`drawn_checkpoint`; ``report.md``
            names it; the tables hold every checkpoint).
        command: the command that produced the report (quoted in ``report.md``).

    Returns:
        ``{"summary", "curves", "report", "overview", "figures": [...]}`` paths (no
        figures and ``overview`` None when no cell records an entropy, or when matplotlib
        cannot be imported: then ``"not_drawn"`` says so, else it is None), and
        ``"agreement"``:
        :func:`agreement_lines` of the cells.

    Raises:
        ScoreError: rows that cannot be averaged (:func:`~.runs.check_runs`: a run
            twice, a cell of runs with different ``n_train``), before anything is written.
    """
    check_runs(rows)
    if paper_rows is None:
        paper_rows = paper_results()
    out = Path(out_dir)
    cells = st.agreement_table(st.cell_statistics(rows), paper_rows, paper_model)
    curves = st.curve_statistics(rows)
    find = paper_lookup(paper_rows, paper_model)
    for c in curves:  # H50 of the paper's mean curve at the same levels, for comparison
        mine = [x for x in cells
                if keys.curve_key(x) == c["key"] and x["entropy_bits"] is not None]
        ref = [find(x["experiment"], x["model"], x["train_size"], x["entropy_bits"])[0]
               for x in mine]
        c["paper_h50"] = st.fit_h50([float(p["entropy_bits"]) for p in ref],
                                    [float(p["accuracy_mean"]) for p in ref]) \
            if ref and all(p is not None for p in ref) else st.NAN
    # summary.tsv names a curve by its preset and gives the training size N of each cell (for
    # Experiment 2 it grows with the support), as results.tsv does
    # (the cell's first row's, as in statistics.summarize: the runs of a cell record one N,
    # runs.check_runs)
    n_of: Dict[tuple, object] = {}
    for r in rows:
        n_of.setdefault(keys.cell_key(r), r.get("n_train", r.get("train_size")))
    for c in cells:
        c["preset"] = c["model"]
        c["n_train"] = n_of.get((c["experiment"], c["model"], c["train_size"], str(c["level"]),
                                 c["checkpoint"], c["schedule"]))
    paths: Dict[str, object] = {}
    atomic_write_text(out / "summary.tsv", tsv(cells, SUMMARY_COLUMNS))
    atomic_write_text(out / "curves.tsv", tsv(curves, CURVE_COLUMNS))
    paths["summary"], paths["curves"] = out / "summary.tsv", out / "curves.tsv"

    # one checkpoint (drawn_checkpoint); cells without an entropy have no point to draw
    points = [c for c in cells if c["entropy_bits"] is not None]
    shown = drawn_checkpoint(points, checkpoint)
    drawn = [c for c in points if c["checkpoint"] == shown]
    fits = {c["key"]: c["fit"] for c in curves}
    figures = []
    # a machine without matplotlib (e.g. a GPU node installed from the wheelhouse) writes the
    # tables and the report, and the report says that the figures are not drawn
    can_draw = matplotlib_available()
    variants = sorted({figure_of(c) for c in drawn} - set(FIGURE_TITLES))
    for name in ("exp1", "exp1_train_size", "exp2", *variants):
        mine = [c for c in drawn if figure_of(c) == name]
        if mine and can_draw:
            figures.append((name, plot_figure(mine, paper_rows, name, out / f"fig_{name}.png",
                                              paper_model, fits=fits)))
    paths["figures"] = [p for _, p in figures]
    paths["overview"] = plot_figure(
        drawn, paper_rows, "overview", out / "accuracy_vs_entropy.png", paper_model,
        panel=panel_of_figure(drawn), fits=fits,
        title=f"Accuracy against entropy, every curve ({shown} checkpoint)") \
        if drawn and can_draw else None
    paths["not_drawn"] = NOT_DRAWN if drawn and not can_draw else None

    agree = [c for c in cells if c["agree"] in ("yes", "no")]
    n_yes = sum(c["agree"] == "yes" for c in agree)
    md = ["# Results against the paper\n",
          f"Produced by `{command or 'fairseq-entropy aggregate'}` from {len(rows)} scored "
          f"run(s) (one row per run and checkpoint in `results.tsv`). Paper: Wold, "
          "Charpentier and Simon, *Systematic Generalization in Language Models Scales with "
          "Information Entropy* (ACL Findings 2025), mean +- std over 5 seeds.\n",
          f"Agreement: a cell agrees when |ours - paper mean| <= max({st.AGREE_STDS:g} x "
          f"paper std, {st.AGREE_FLOOR:.2f}). **{n_yes} of {len(agree)}** cells with a paper "
          "value agree. CIs are 95% percentile bootstrap intervals over seeds "
          "(`scipy.stats.bootstrap`); with one seed there is no CI.\n",
          schedule_note(cells),
          figures_note(cells, shown)]
    if paths["not_drawn"]:
        md.append(f"Figures: {paths['not_drawn']}\n")
    for name, p in figures:
        md.append(f"## {figure_title(name)}\n\n![{name}]({p.name})\n")
    md.append("## Curves: Spearman rho, H50 and H90\n")
    md.append("H50 and H90 are the entropies (bits) at which a logistic fit of accuracy "
              "against entropy crosses 0.5 and 0.9 (`scipy.optimize.curve_fit`, the dotted "
              "line of the figures); their CIs resample whole per-seed curves. The paper's H50 "
              "is the same fit of its mean curve at our levels.\n")
    md.append(_md_table(
        [{**c, "h50_ci": _interval(c["h50_ci_low"], c["h50_ci_high"]),
          "h90_ci": _interval(c["h90_ci_low"], c["h90_ci_high"])} for c in curves],
        ("experiment", "model", "train_size", "checkpoint", "schedule", "levels", "seeds",
         "rho", "h50", "h50_ci", "h90", "h90_ci", "paper_h50", "note"),
        ("experiment", "model", "N", "ckpt", "schedule", "levels", "seeds", "Spearman rho",
         "H50 (bits)", "H50 95% CI", "H90 (bits)", "H90 95% CI", "paper H50", "note")))
    md.append("\n## Agreement with the paper, per cell\n")
    md.append(_md_table(
        [{**c, "ci": _interval(c["ci_low"], c["ci_high"])} for c in cells],
        ("experiment", "model", "train_size", "checkpoint", "schedule", "updates", "level",
         "entropy_bits", "n", "mean", "std", "ci", "paper_mean", "paper_std", "diff",
         "tolerance", "agree", "note"),
        ("experiment", "model", "N", "ckpt", "schedule", "updates", "level", "H (bits)",
         "seeds", "mean", "std", "95% CI", "paper mean", "paper std", "ours - paper",
         "tolerance", "agree", "note")))
    atomic_write_text(out / "report.md", "\n".join(md))
    paths["report"] = out / "report.md"
    paths["agreement"] = agreement_lines(cells)
    return paths  # type: ignore[return-value]


def figures_note(cells: Sequence[dict], shown: Optional[str]) -> str:
    """The sentence of ``report.md`` that names the checkpoint the figures draw
    (:func:`drawn_checkpoint`; None: no figure) and the checkpoints only the tables
    hold."""
    if shown is None:
        return "Figures: none (no cell records an entropy).\n"
    others = sorted({str(c["checkpoint"]) for c in cells} - {shown})
    return (f"Figures: the {shown} checkpoint" + (
        f"; the tables below also hold the {', '.join(others)} checkpoint(s), not drawn"
        if others else "") + ".\n")


def schedule_comparison(cells: Sequence[dict]) -> str:
    """How the schedule of a curve's ``cells`` compares with its preset's own (the paper's
    epochs, for the paper's presets): e.g. ``schedule max_update=40 args=1a2b3c4d (40
    updates), shorter than the preset's own 4500 updates``; ``schedule unknown`` when not
    recorded; the preset's part is left out when the cells do not record it."""
    c = cells[0]
    if keys.curve_schedule(c) == keys.OWN_SCHEDULE_PER_LEVEL:
        steps = ", ".join(f"{x['level']} {x['updates']}" for x in
                          sorted(cells, key=lambda x: float(x["entropy_bits"])))
        return f"the preset's own schedule at each level (updates: {steps})"
    text = f"schedule {keys.schedule_of(c)}"
    updates = {x.get("updates") for x in cells}
    if len(updates) == 1 and None not in updates:
        text += f" ({updates.pop()} updates)"
    own = {x.get("preset_max_update") for x in cells}
    mine = c.get("updates")
    if len(own) == 1 and None not in own and mine is not None:
        own_updates = own.pop()
        if mine != own_updates:
            text += (f", {'shorter' if mine < own_updates else 'longer'} than the preset's own "
                     f"{own_updates} updates: not the paper's schedule")
        else:
            text += ", the preset's own schedule"
    return text


def schedule_note(cells: Sequence[dict]) -> str:
    """The sentence of ``report.md`` that names the schedules of the cells that have a
    paper value, and says which differ from their preset's own (the paper's) schedule."""
    curves: Dict[tuple, List[dict]] = {}
    for c in cells:
        if c["agree"] in ("yes", "no"):
            curves.setdefault(keys.curve_key(c), []).append(c)
    if not curves:
        return "Schedules: no cell has a paper value.\n"
    parts = [f"{exp} {preset} N={n} {ckpt}: {schedule_comparison(rows)}"
             for (exp, preset, n, ckpt, _), rows in sorted(curves.items(), key=str)]
    return ("Schedules (runs of different schedules are different cells; a schedule other "
            "than the preset's own does not reproduce the paper's): " + "; ".join(parts)
            + ".\n")


def agreement_lines(cells: Sequence[dict]) -> List[str]:
    """One line per curve (experiment, preset, N, checkpoint, schedule) of the
    agreement-table ``cells`` (``summary.tsv`` rows): how many of its levels agree with the
    paper (|ours - paper mean| <= max(2 paper std, 0.10)), which do not, and the schedule
    (:func:`schedule_comparison`); cells without a paper value are left out."""
    curves: Dict[tuple, List[dict]] = {}
    for c in cells:
        if c["agree"] in ("yes", "no"):
            curves.setdefault(keys.curve_key(c), []).append(c)
    lines = []
    for (exp, preset, n_train, ckpt, _), rows in sorted(curves.items(), key=str):
        out = [f"{r['level']} ({float(r['mean']):.3f} vs {float(r['paper_mean']):.3f})"
               for r in rows if r["agree"] == "no"]
        lines.append(f"agreement with the paper {exp} {preset} N={n_train} {ckpt}: "
                     f"{len(rows) - len(out)}/{len(rows)} levels inside max(2 std, 0.10)"
                     + (f"; outside: {', '.join(out)}" if out else "")
                     + f" ({schedule_comparison(rows)})")
    return lines
