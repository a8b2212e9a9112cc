"""The report of an aggregate: ``summary.tsv``, ``curves.tsv``, one PNG per paper figure,
``report.md`` (the figures, the per-curve statistics and the agreement table), the overview
plot ``accuracy_vs_entropy.png`` and the table ``fairseq-entropy aggregate`` prints.

Works on plain result rows (see :mod:`.statistics`); the paper's numbers come from
``paper_results.tsv`` (Wold et al., arXiv 2505.13089, mean and std over 5 seeds).

Figures, after the paper's:

* ``fig_exp1.png``: Experiment 1 at N = 6000 (or N not recorded), one panel per model;
* ``fig_exp1_train_size.png``: Experiment 1 curves at other training sizes, one panel per
  model, one line per N;
* ``fig_exp2.png``: Experiment 2, one panel per model;
* ``fig_<experiment>+<variant>.png``: each data variant (another component class, subword
  tokens; :func:`.provenance.data_variant`), which the paper does not report, on its own.

Each panel shows our mean (with its 95% bootstrap CI where a cell has 2 seeds or more) and its
logistic fit (dotted, with its 95% bootstrap band over seeds) beside the paper's mean +- std in
grey, the legend under the panel and a caption giving N and the
checkpoint (:func:`plot_figure`, which draws every figure).  The overview
``accuracy_vs_entropy.png`` has one panel per (figure, curve) of all of them.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from ..files import atomic_write_bytes, atomic_write_text
from .columns import DECODER_ONLY, ENCODER_DECODER
from . import statistics as st
from .paper import (DEFAULT_EXP1_TRAIN_SIZE, paper_lookup, paper_results)

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


def figure_of(record: dict) -> str:
    """Name of the paper figure a cell or curve belongs to (see the module docstring)."""
    if "+" in str(record["experiment"]):  # a data variant: a figure of its own
        return str(record["experiment"])
    if record["experiment"] == "exp2":
        return "exp2"
    n = record.get("train_size")
    return "exp1" if n in (None, DEFAULT_EXP1_TRAIN_SIZE) else "exp1_train_size"


FIGURE_TITLES = {"exp1": "Experiment 1 (mixing): accuracy against second-slot entropy",
                 "exp1_train_size": "Experiment 1: other training-set sizes",
                 "exp2": "Experiment 2 (support): accuracy against first-slot entropy"}


def figure_title(name: str) -> str:
    """Title of a figure of :func:`figure_of`; a data variant's names its variant."""
    base, _, variant = name.partition("+")
    return f"{FIGURE_TITLES.get(base, base)} ({variant})" if variant else FIGURE_TITLES[name]


def _pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (matplotlib is imported on
    first use: scoring and the tables do not need it), its INFO logging silenced."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # before the import logs
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_png(fig, path: str | os.PathLike, dpi: int) -> Path:
    """Write ``fig`` as a PNG to ``path`` atomically and close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    path = Path(path)
    atomic_write_bytes(path, buf.getvalue())
    return path


def panels_of_models(cells: Sequence[dict]) -> Callable[[dict], str]:
    """The panel of a cell among ``cells``: its curve name (``model``: the preset), except
    that a decoder-only preset ``<exp>_lm_<name>`` (``model_family``) is drawn in the panel
    of the encoder-decoder ``<exp>_transformer_<name>`` when ``cells`` hold that one."""
    models = {c["model"] for c in cells}

    def panel(cell: dict) -> str:
        model = cell["model"]
        if cell.get("model_family") == DECODER_ONLY:
            beside = model.replace("_lm_", "_transformer_", 1)
            if beside != model and beside in models:
                return beside
        return model
    return panel


def panel_of_figure(cells: Sequence[dict]) -> Callable[[dict], str]:
    """The panel of a cell in the overview figure: its figure's name and its panel
    (:func:`panels_of_models` of ``cells``)."""
    panel = panels_of_models(cells)
    return lambda cell: f"{figure_of(cell)}: {panel(cell)}"


def _family(cell: dict) -> str:
    """The cell's ``model_family`` (``encoder-decoder`` when not recorded)."""
    return cell.get("model_family") or ENCODER_DECODER


#: colours of the paper's curves (greys, one per N of a panel), never one of ours (C0, C1...)
PAPER_COLOURS = ("0.35", "0.6", "0.15", "0.75")
PAPER_MARKERS = ("x", "+", "^", "s")


def _seeds_label(counts: Sequence[int], has_ci: bool) -> str:
    """``3 seeds, 95% CI``, ``1 seed``, ``1-3 seeds per level, 95% CI where >= 2``: the
    legend's account of our points (a CI only exists over 2 seeds or more)."""
    if len(counts) == 1:
        text = f"{counts[0]} seed" + ("s" if counts[0] != 1 else "")
    else:
        text = f"{counts[0]}-{counts[-1]} seeds per level"
    if has_ci:
        text += ", 95% CI" + ("" if counts[0] >= 2 else " where >= 2")
    return text


def figure_caption(cells: Sequence[dict], paper: bool = True, fit: bool = False) -> str:
    """The caption under a figure: its training sizes N and checkpoint(s), and what the
    points and lines are (the paper's curves when ``paper``, the logistic fits when
    ``fit``)."""
    # n_train: the cell's recorded training size (Experiment 2's grows with the support)
    size = [c.get("n_train") or c["train_size"] for c in cells]
    sizes = sorted({int(n) for n in size if n})
    unknown = not all(size)
    if len(sizes) > 3:
        n_text = f"N = {sizes[0]}-{sizes[-1]} training commands (by level)"
    elif sizes:
        n_text = "N = " + ", ".join(str(n) for n in sizes) + " training commands" + (
            " (and N not recorded)" if unknown else "")
    else:
        n_text = "N not recorded"
    ckpts = sorted({str(c["checkpoint"]) for c in cells})
    most = max((int(c["n"]) for c in cells), default=0)
    return (f"{n_text}; {', '.join(ckpts)} checkpoint. Ours: mean over seeds"
            + (" with its 95% bootstrap CI (2 seeds or more)" if most >= 2 else
               " (1 seed: no CI)")
            + ("; dotted: logistic fit of the mean (shaded: its 95% bootstrap band over seeds, "
               "2 seeds or more)" if fit else "")
            + ("; paper: mean +- std over 5 seeds (grey, dashed, shaded)." if paper else "."))


def plot_figure(cells: Sequence[dict], paper_rows: Sequence[dict], name: str,
                path: str | os.PathLike,
                paper_model: Callable[[str], str] = lambda m: m,
                panel: Optional[Callable[[dict], str]] = None,
                title: Optional[str] = None,
                fits: Optional[Mapping[tuple, Optional[dict]]] = None) -> Path:
    """One PNG (110 dpi): a panel per ``panel(cell)`` (default: per model,
    :func:`panels_of_models`), our mean (solid, coloured, with its 95% CI as error bars where a
    cell has 2 seeds or more; a decoder-only model's dotted, square markers) beside the
    paper's mean +- std (grey, dashed, shaded), the legend under each panel (never over the
    data) and a caption (:func:`figure_caption`: N, checkpoint, what is drawn). ``fits``
    maps a curve key (:func:`~.statistics.curve_key`) to the ``fit`` of
    :func:`~.statistics.curve_statistics`: its logistic is drawn dotted over the curve, in
    its colour, with its bootstrap band shaded, and each of its optional ``marks``
    (``{"x", "y", "low", "high", "label"}``: a predicted or measured accuracy at an entropy,
    with an interval or NaN) as a diamond. ``cells``
    are agreement-table rows (:func:`~.statistics.agreement_table`) of one checkpoint, of
    one figure (:func:`figure_of`, whose title ``name`` gives) or, with
    ``panel=panel_of_figure`` and a ``title``, of all of them; accuracies are fractions,
    entropies bits.  The one plotting function of the package: every figure of
    :func:`write_report` is drawn by it.

    Raises:
        DataFormatError: ``path`` cannot be written.
    """
    plt = _pyplot()
    panel = panel or panels_of_models(cells)
    models = sorted({panel(c) for c in cells})
    cols = min(3, len(models))
    rows_ = math.ceil(len(models) / cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(max(4.6 * cols, 6.4), 4.4 * rows_ + 0.5),
                             squeeze=False)
    for ax in axes.flat[len(models):]:
        ax.set_visible(False)
    for ax, panel_name in zip(axes.flat, models):
        mine = [c for c in cells if panel(c) == panel_name]

        def line_of(c):
            return (c["train_size"] or 0, st.curve_schedule(c), _family(c), c["model"])

        lines_ = sorted({line_of(c) for c in mine})
        sizes = sorted({line[0] for line in lines_})
        schedules = {line[1] for line in lines_}
        for i, (n, schedule, family, model) in enumerate(lines_):
            rs = sorted((c for c in mine if line_of(c) == (n, schedule, family, model)),
                        key=lambda c: c["entropy_bits"])
            xs = [c["entropy_bits"] for c in rs]
            ys = [c["mean"] for c in rs]
            # a CI only where a cell has 2 seeds or more
            ci = [int(c["n"]) >= 2 and not math.isnan(c["ci_low"]) for c in rs]
            lo = [c["mean"] - c["ci_low"] if ok else 0.0 for c, ok in zip(rs, ci)]
            hi = [c["ci_high"] - c["mean"] if ok else 0.0 for c, ok in zip(rs, ci)]
            label = f"ours (N={n})" if len(sizes) > 1 else "ours"
            if len(schedules) > 1:
                label += f" [{schedule}]"
            if family == DECODER_ONLY:
                label += f", decoder-only {model}"
            counts = sorted({int(c["n"]) for c in rs})
            only = family == DECODER_ONLY
            ax.errorbar(xs, ys, yerr=[lo, hi] if any(ci) else None, marker="s" if only else "o",
                        linestyle=":" if only else "-", color=f"C{i}", capsize=3,
                        linewidth=1.8, zorder=3, label=f"{label}, {_seeds_label(counts, any(ci))}")
            _plot_fit(ax, (fits or {}).get(st.curve_key(rs[0])), f"C{i}")
            if only and any(line[2] != DECODER_ONLY for line in lines_):
                continue  # the paper's encoder-decoder is drawn with ours
            find = paper_lookup(paper_rows, paper_model)
            ref = [(c["entropy_bits"], find(c["experiment"], model, c["train_size"] or None,
                                            c["entropy_bits"])[0]) for c in rs]
            ref = [(x, p) for x, p in ref if p is not None]
            if not ref:
                continue
            # the paper's whole curve at that N, not only the levels we ran
            p0 = ref[0][1]
            full = sorted((float(p["entropy_bits"]), float(p["accuracy_mean"]),
                           float(p["accuracy_std"])) for p in paper_rows
                          if p["experiment"] == p0["experiment"] and p["model"] == p0["model"]
                          and p["train_size"] == p0["train_size"])
            px, pm, ps = zip(*full)
            grey = PAPER_COLOURS[i % len(PAPER_COLOURS)]
            ax.plot(px, pm, linestyle="--", marker=PAPER_MARKERS[i % len(PAPER_MARKERS)],
                    color=grey, linewidth=1.2, zorder=2,
                    label=f"paper{' encoder-decoder' if only else ''}"
                          f"{' (N=' + str(n) + ')' if len(sizes) > 1 else ''}, "
                          "mean +- std of 5 seeds")
            ax.fill_between(px, [m - s for m, s in zip(pm, ps)], [m + s for m, s in zip(pm, ps)],
                            color=grey, alpha=0.15, zorder=1, linewidth=0)
        ax.set_title(panel_name, fontsize=10)
        ax.set_xlabel("entropy (bits)")
        ax.set_ylabel("exact-match accuracy")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        # under the panel, outside the axes: the legend never covers a point
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1,
                  frameon=False)
    fig.suptitle(title or figure_title(name), fontsize=11)
    fig.text(0.5, 0.01, figure_caption(cells, paper=bool(paper_rows), fit=bool(fits)),
             ha="center", va="bottom", fontsize=7.5,
             wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return _save_png(fig, path, dpi=110)


def _plot_fit(ax, fit: Optional[dict], colour: str) -> None:
    """Draw a curve's logistic fit, its band and its marks (see :func:`plot_figure`)."""
    if not fit:
        return
    ax.plot(fit["x"], fit["y"], linestyle=":", color=colour, linewidth=1.5, zorder=2,
            label="logistic fit")
    if not any(math.isnan(v) for v in fit["low"]):
        ax.fill_between(fit["x"], fit["low"], fit["high"], color=colour, alpha=0.15,
                        zorder=1, linewidth=0, label="fit, 95% bootstrap band")
    for j, m in enumerate(fit.get("marks", ())):
        ok = not (math.isnan(m["low"]) or math.isnan(m["high"]))
        ax.errorbar([m["x"]], [m["y"]], marker="D", markersize=7, capsize=4, zorder=4,
                    yerr=[[m["y"] - m["low"]], [m["high"] - m["y"]]] if ok else None,
                    color=f"C{j + 3}", linestyle="none", label=m["label"])


def format_table(summary: Sequence[dict]) -> str:
    """A plain-text table of :func:`~.statistics.summarize` rows, one line per cell (mean and
    std of accuracy as fractions, entropy in bits)."""
    lines = [f"{'experiment':<10} {'preset':<34} {'N':>6} {'ckpt':<5} {'level':<13} "
             f"{'H(bits)':>7} {'acc_mean':>8} {'acc_std':>7} {'n':>2}  schedule"]
    for r in summary:
        h = "n/a" if r["entropy_bits"] is None else f"{r['entropy_bits']:.3f}"
        lines.append(f"{r['experiment']:<10} {r['preset']:<34} {r['n_train']:>6} "
                     f"{r['checkpoint']:<5} {r['level']:<13} {h:>7} {r['mean']:>8.4f} "
                     f"{r['std']:>7.4f} {r['n']:>2}  {st.schedule_of(r)}")
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
        checkpoint: the checkpoint drawn in the figures (tables hold every checkpoint).
        command: the command that produced the report (quoted in ``report.md``).

    Returns:
        ``{"summary", "curves", "report", "overview", "figures": [...]}`` paths, and
        ``"agreement"``:
        :func:`agreement_lines` of the cells.
    """
    if paper_rows is None:
        paper_rows = paper_results()
    out = Path(out_dir)
    cells = st.agreement_table(st.cell_statistics(rows), paper_rows, paper_model)
    curves = st.curve_statistics(rows)
    find = paper_lookup(paper_rows, paper_model)
    for c in curves:  # H50 of the paper's mean curve at the same levels, for comparison
        mine = [x for x in cells if st.curve_key(x) == c["key"]]
        ref = [find(x["experiment"], x["model"], x["train_size"], x["entropy_bits"])[0]
               for x in mine]
        c["paper_h50"] = st.fit_h50([float(p["entropy_bits"]) for p in ref],
                                    [float(p["accuracy_mean"]) for p in ref]) \
            if ref and all(p is not None for p in ref) else st.NAN
    # summary.tsv names a curve by its preset and gives the training size N of each cell (for
    # Experiment 2 it grows with the support), as results.tsv does
    n_of = {st.cell_key(r): r.get("n_train", r.get("train_size")) for r in rows}
    for c in cells:
        c["preset"] = c["model"]
        c["n_train"] = n_of.get((c["experiment"], c["model"], c["train_size"], str(c["level"]),
                                 c["checkpoint"], c["schedule"]))
    paths: Dict[str, object] = {}
    atomic_write_text(out / "summary.tsv", tsv(cells, SUMMARY_COLUMNS))
    atomic_write_text(out / "curves.tsv", tsv(curves, CURVE_COLUMNS))
    paths["summary"], paths["curves"] = out / "summary.tsv", out / "curves.tsv"

    drawn = [c for c in cells if c["checkpoint"] == checkpoint] or list(cells)
    fits = {c["key"]: c["fit"] for c in curves}
    figures = []
    variants = sorted({figure_of(c) for c in drawn} - set(FIGURE_TITLES))
    for name in ("exp1", "exp1_train_size", "exp2", *variants):
        mine = [c for c in drawn if figure_of(c) == name]
        if mine:
            figures.append((name, plot_figure(mine, paper_rows, name, out / f"fig_{name}.png",
                                              paper_model, fits=fits)))
    paths["figures"] = [p for _, p in figures]
    paths["overview"] = plot_figure(
        drawn, paper_rows, "overview", out / "accuracy_vs_entropy.png", paper_model,
        panel=panel_of_figure(drawn), fits=fits,
        title="Accuracy against entropy, every curve "
              f"({drawn[0]['checkpoint'] if drawn else checkpoint} checkpoint)")

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
          schedule_note(cells)]
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


def schedule_comparison(cells: Sequence[dict]) -> str:
    """How the schedule of a curve's ``cells`` compares with its preset's own (the paper's
    epochs, for the paper's presets): e.g. ``schedule max_update=40 args=1a2b3c4d (40
    updates), shorter than the preset's own 4500 updates``; ``schedule unknown`` when not
    recorded; the preset's part is left out when the cells do not record it."""
    c = cells[0]
    if st.curve_schedule(c) == st.OWN_SCHEDULE_PER_LEVEL:
        steps = ", ".join(f"{x['level']} {x['updates']}" for x in
                          sorted(cells, key=lambda x: float(x["entropy_bits"])))
        return f"the preset's own schedule at each level (updates: {steps})"
    text = f"schedule {st.schedule_of(c)}"
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
            curves.setdefault(st.curve_key(c), []).append(c)
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
            curves.setdefault(st.curve_key(c), []).append(c)
    lines = []
    for (exp, preset, n_train, ckpt, _), rows in sorted(curves.items(), key=str):
        out = [f"{r['level']} ({float(r['mean']):.3f} vs {float(r['paper_mean']):.3f})"
               for r in rows if r["agree"] == "no"]
        lines.append(f"agreement with the paper {exp} {preset} N={n_train} {ckpt}: "
                     f"{len(rows) - len(out)}/{len(rows)} levels inside max(2 std, 0.10)"
                     + (f"; outside: {', '.join(out)}" if out else "")
                     + f" ({schedule_comparison(rows)})")
    return lines
