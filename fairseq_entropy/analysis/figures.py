"""The figures of an aggregate, after the paper's (Wold et al., arXiv 2505.13089, Figures 2-4):
one PNG per paper figure and the overview plot, all drawn by :func:`plot_figure`.

* ``fig_exp1.png``: Experiment 1 at N = 6000 (or N not recorded), one panel per model;
* ``fig_exp1_train_size.png``: Experiment 1 curves at other training sizes, one panel per
  model, one line per N;
* ``fig_exp2.png``: Experiment 2, one panel per model;
* ``fig_<experiment>+<variant>.png``: each data variant (another component class, subword
  tokens, a COGS case of ``build cogs`` and its split; :func:`.provenance.data_variant`),
  which the paper does not report, on its own.

Each panel shows our mean (with its 95% bootstrap CI where a cell has 2 seeds or more) and its
logistic fit (dotted, with its 95% bootstrap band over seeds) beside the paper's mean +- std in
grey, the legend under the panel and a caption giving N and the checkpoint.  One checkpoint
is drawn (:func:`drawn_checkpoint`); the overview ``accuracy_vs_entropy.png`` has one panel
per (figure, curve) of all of them.
"""

from __future__ import annotations

import io
import math
import os
import textwrap
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from ..files import atomic_write_bytes
from . import keys
from .columns import CHECKPOINT_LABELS, DECODER_ONLY, ENCODER_DECODER
from .paper import DEFAULT_EXP1_TRAIN_SIZE, paper_lookup


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
                 "exp2": "Experiment 2 (support): accuracy against first-slot entropy",
                 "cogs": "COGS (build cogs): accuracy against the tested slot's entropy"}


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
    """The caption under a figure: its training sizes N (in sentences where every cell is a
    COGS one, in commands otherwise) and checkpoint(s), and what the points and lines are
    (the paper's curves when ``paper``, the logistic fits when ``fit``)."""
    # n_train: the cell's recorded training size (Experiment 2's grows with the support)
    size = [c.get("n_train") or c["train_size"] for c in cells]
    sizes = sorted({int(n) for n in size if n})
    unknown = not all(size)
    cogs = bool(cells) and all(keys.base_experiment(c["experiment"]) == "cogs" for c in cells)
    unit = "training sentences" if cogs else "training commands"
    if len(sizes) > 3:
        n_text = f"N = {sizes[0]}-{sizes[-1]} {unit} (by level)"
    elif sizes:
        n_text = "N = " + ", ".join(str(n) for n in sizes) + f" {unit}" + (
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
    maps a curve key (:func:`~.keys.curve_key`) to the ``fit`` of
    :func:`~.statistics.curve_statistics`: its logistic is drawn dotted over the curve, in
    its colour, with its bootstrap band shaded, and each of its optional ``marks``
    (``{"x", "y", "low", "high", "label"}``: a predicted or measured accuracy at an entropy,
    with an interval or NaN) as a diamond. ``cells``
    are agreement-table rows (:func:`~.statistics.agreement_table`) of one figure
    (:func:`figure_of`, whose title ``name`` gives) or, with ``panel=panel_of_figure`` and a
    ``title``, of all of them; each panel draws one line per :func:`lines_of` (cells of
    several checkpoints are several lines, labelled by checkpoint); accuracies are fractions,
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
    drew_paper = False  # the caption names the paper's curve only where one is drawn
    for ax, panel_name in zip(axes.flat, models):
        mine = [c for c in cells if panel(c) == panel_name]
        lines_ = lines_of(mine)
        sizes = sorted({line[0] for line in lines_})
        schedules = {line[1] for line in lines_}
        ckpts = {line[4] for line in lines_}
        for i, ((n, schedule, family, model, ckpt), rs) in enumerate(lines_.items()):
            xs = [c["entropy_bits"] for c in rs]
            ys = [c["mean"] for c in rs]
            # a CI only where a cell has 2 seeds or more
            ci = [int(c["n"]) >= 2 and not math.isnan(c["ci_low"]) for c in rs]
            lo = [c["mean"] - c["ci_low"] if ok else 0.0 for c, ok in zip(rs, ci)]
            hi = [c["ci_high"] - c["mean"] if ok else 0.0 for c, ok in zip(rs, ci)]
            label = f"ours (N={n})" if len(sizes) > 1 else "ours"
            if len(schedules) > 1:
                label += f" [{schedule}]"
            if len(ckpts) > 1:
                label += f" [{ckpt} checkpoint]"
            if family == DECODER_ONLY:
                label += f", decoder-only {model}"
            counts = sorted({int(c["n"]) for c in rs})
            only = family == DECODER_ONLY
            ax.errorbar(xs, ys, yerr=[lo, hi] if any(ci) else None, marker="s" if only else "o",
                        linestyle=":" if only else "-", color=f"C{i}", capsize=3,
                        linewidth=1.8, zorder=3, label=f"{label}, {_seeds_label(counts, any(ci))}")
            _plot_fit(ax, (fits or {}).get(keys.curve_key(rs[0])), f"C{i}")
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
            drew_paper = True
        ax.set_title(panel_name, fontsize=10)
        ax.set_xlabel("entropy (bits)")
        ax.set_ylabel("exact-match accuracy")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        # under the panel, outside the axes: the legend never covers a point
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1,
                  frameon=False)
    # wrapped to the figure's width (about 11 characters an inch at 11 pt)
    fig.suptitle(textwrap.fill(title or figure_title(name), int(fig.get_figwidth() * 11)),
                 fontsize=11)
    fig.text(0.5, 0.01, figure_caption(cells, paper=drew_paper, fit=bool(fits)),
             ha="center", va="bottom", fontsize=7.5,
             wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return _save_png(fig, path, dpi=110)


def lines_of(cells: Sequence[dict]) -> Dict[tuple, List[dict]]:
    """The lines of a panel of :func:`plot_figure`: its ``cells`` by (N, schedule
    (:func:`~.statistics.curve_schedule`), model family, model, checkpoint), in that order,
    each line's cells sorted by entropy; a line is one curve, so cells of two checkpoints
    are never one line."""
    lines: Dict[tuple, List[dict]] = {}
    for c in cells:
        lines.setdefault((c["train_size"] or 0, keys.curve_schedule(c), _family(c), c["model"],
                          str(c["checkpoint"])), []).append(c)
    return {k: sorted(lines[k], key=lambda c: c["entropy_bits"]) for k in sorted(lines)}


def drawn_checkpoint(cells: Sequence[dict], checkpoint: str = "last") -> Optional[str]:
    """The one checkpoint the figures of :func:`write_report` draw: ``checkpoint`` when a
    cell has it, else the first of :data:`~.columns.CHECKPOINT_LABELS` (last, best,
    test-loss) that a cell has, else the first label in sorted order; None without cells."""
    have = {str(c["checkpoint"]) for c in cells}
    for label in (checkpoint, *CHECKPOINT_LABELS, *sorted(have)):
        if label in have:
            return label
    return None


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
