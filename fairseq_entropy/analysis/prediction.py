"""A model of the entropy curve and a prediction from it: ``fairseq-entropy predict``.

Per curve (:func:`.keys.curve_key`: one architecture's preset, N, checkpoint and
schedule over its levels) the logistic ``acc(H) = 1 / (1 + exp(-k (H - H50)))`` of the mean
accuracy per level (:func:`.statistics.fit_logistic`, the package's one fit) gives

* H50 and H90, the entropies (bits) where it crosses 0.5 and 0.9, with 95% bootstrap CIs
  over seeds (:func:`.statistics.logistic_bootstrap` resamples whole per-seed curves);
* the leave-one-level-out error (:func:`leave_one_level_out`): the curve refit without a
  level, its prediction at that level against the level's measured mean;
* a prediction at an entropy (:func:`predict`) with the bootstrap band's interval there, and
  the measured accuracy of the same preset beside it (:func:`measured_accuracy`).

The entropy of a SCAN split (:func:`split_entropy`) is read from ``split_measures.tsv``
(``fairseq-entropy measure --tsv``, ``recipes/measure_splits.sh``): the training entropy of
the verb slot in which the held-out verb *was* seen, i.e. the slot other than the one of the
split's single held-out (verb, slot) pair. That is the x-axis of the curves: in Experiment 1
the restricted verb is held out of the first slot and the level's entropy is the second
slot's (the first stays at log2 7 = 2.81 bits at every level), in Experiment 2 it is held out
of the second slot and the level's entropy is the first slot's; the same rule applied to the
levels' rows of ``split_measures.tsv`` gives back their ``entropy_bits``. For SCAN's
add-primitive jump split, jump is held out of the second slot and seen only in the first (as
the one-word command ``jump``): the quantity is ``H_verb_first`` of
``tasks_train_addprim_jump.txt`` (2.266 bits), not the held-out slot's entropy (1.997 bits)
that ``binarize`` records as the split's ``entropy_bits``.
"""

from __future__ import annotations

import csv
import math
import os
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..errors import UserError
from ..files import read_lines
from . import keys
from . import statistics as st
from .report import tsv

#: the slots of the measured verb entropies (execution order)
SLOTS = ("first", "second")
#: the columns of ``split_measures.tsv`` that :func:`split_entropy` reads
MEASURE_COLUMNS = ("file", "unseen_pairs", *(f"H_verb_{s}" for s in SLOTS))
#: the least number of levels a curve needs to be fitted (two parameters, and one more)
MIN_LEVELS = 3


class FitError(UserError, ValueError):
    """A curve that cannot be fitted, or a prediction input that does not fit the curves."""


def leave_one_level_out(entropy: Sequence[float], means: Sequence[float]) -> List[dict]:
    """Each level predicted by the logistic fitted to the other levels.

    Args:
        entropy: the levels (bits), ascending; means: their mean accuracies (fractions).

    Returns:
        one dict per level: ``entropy_bits, measured, predicted, error`` (predicted -
        measured; NaN where the other levels have no fit, e.g. fewer than 3 of them or no
        crossing of 0.5 among them).
    """
    out = []
    for i, (h, m) in enumerate(zip(entropy, means)):
        rest = [j for j in range(len(entropy)) if j != i]
        k, h50 = st.fit_logistic([entropy[j] for j in rest], [means[j] for j in rest])
        pred = st.NAN if math.isnan(h50) else float(st.logistic(h, k, h50))
        out.append({"entropy_bits": float(h), "measured": float(m), "predicted": pred,
                    "error": pred - m})
    return out


def read_split_measures(path: str | os.PathLike) -> Dict[str, dict]:
    """The rows of a ``split_measures.tsv`` by their ``file``, each with ``line``, its
    ``FILE:LINE``.

    Raises:
        DataFormatError: the file is missing, a directory or not UTF-8 text.
        FitError: it lacks a column of :data:`MEASURE_COLUMNS` or an entropy is not a number
            (names the file and line).
    """
    reader = csv.DictReader(read_lines(path), delimiter="\t")
    missing = [c for c in MEASURE_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise FitError(f"{path}:1: missing column(s) {', '.join(missing)}. Fix: pass the "
                       "table of fairseq-entropy measure --tsv (e.g. the packaged "
                       "fairseq_entropy/analysis/split_measures.tsv)")
    rows = {}
    for lineno, rec in enumerate(reader, start=2):
        for c in MEASURE_COLUMNS[2:]:
            try:
                float(rec[c])
            except (TypeError, ValueError):
                raise FitError(f"{path}:{lineno}: {c} {rec[c]!r} is not a number. Fix: "
                               "measure the file again with fairseq-entropy measure --tsv") \
                    from None
        rows[rec["file"]] = {**rec, "line": f"{path}:{lineno}"}
    return rows


def _split_files(split: str) -> tuple:
    """The (train, test) file names a split has in ``split_measures.tsv``: SCAN's
    ``tasks_{train,test}_<split>.txt`` or a level's ``<split>/{train,test}.in``."""
    return ((f"tasks_train_{split}.txt", f"tasks_test_{split}.txt"),
            (f"{split}/train.in", f"{split}/test.in"))


def split_entropy(path: str | os.PathLike, split: str) -> dict:
    """The slot entropy of a split measured in ``split_measures.tsv`` (see the module
    docstring for the choice of quantity).

    Args:
        path: a ``split_measures.tsv``; split: ``addprim_jump`` (SCAN's files
            ``tasks_{train,test}_addprim_jump.txt``) or a level, e.g. ``exp1/entropy_1.5``.

    Returns:
        ``{"split", "word", "held_out_slot", "seen_slot", "entropy_bits", "held_out_bits",
        "source"}``: the held-out verb, its slots, the training entropy (bits) of the slot it
        was seen in and of the slot it is tested in, and the ``FILE:LINE`` read.

    Raises:
        FitError: the split is not in the file, or its test file holds out no verb slot or
            more than one (names ``--split`` and the file).
    """
    rows = read_split_measures(path)
    pair = next((p for p in _split_files(split) if p[0] in rows and p[1] in rows), None)
    if pair is None:
        known = sorted({f.split("tasks_test_", 1)[-1].removesuffix(".txt").removesuffix(
            "/test.in") for f in rows if "test" in f})
        raise FitError(f"--split {split}: no training and test rows of it in {path} (it has "
                       f"{', '.join(known) or 'none'}). Fix: choose one of those, or measure "
                       "the split's files with recipes/measure_splits.sh")
    train, test = rows[pair[0]], rows[pair[1]]
    pairs = [p.split(":", 1)[1] for p in (test["unseen_pairs"] or "").split()
             if p.startswith("verb:")]
    if len(pairs) != 1:
        raise FitError(f"--split {split}: {test['line']} holds out "
                       f"{'no' if not pairs else len(pairs)} (verb, slot) pair(s)"
                       f"{' (' + ', '.join(pairs) + ')' if pairs else ''}, so no one slot's "
                       "entropy measures it. Fix: choose a split with one held-out verb slot "
                       "(addprim_jump), or give --entropy BITS")
    word, _, held_out = pairs[0].partition("@")
    if held_out not in SLOTS:
        raise FitError(f"--split {split}: {test['line']}: unknown slot {held_out!r} in "
                       f"{pairs[0]!r}. Fix: measure with --slot-order execution")
    seen = next(s for s in SLOTS if s != held_out)
    return {"split": split, "word": word, "held_out_slot": held_out, "seen_slot": seen,
            "entropy_bits": float(train[f"H_verb_{seen}"]),
            "held_out_bits": float(train[f"H_verb_{held_out}"]), "source": train["line"]}


def measured_accuracy(rows: Sequence[dict], checkpoint: str, where: str) -> Dict[str, dict]:
    """The measured accuracy per preset of scored runs of one split.

    Args:
        rows: result rows (:func:`.aggregate.collect_scores` of ``--measured-accuracy``).
        checkpoint: the checkpoint label to use; where: the option and path, for errors.

    Returns:
        preset -> ``{"preset", "model", "mean", "n", "experiment", "level", "entropy_bits"}``
        (the mean over seeds of the rows of ``checkpoint``; ``model``: the runs' model, the
        architecture; ``entropy_bits`` as the score records it).

    Raises:
        FitError: no row of ``checkpoint``, or a preset's rows span several levels.
    """
    mine = [r for r in rows if r["checkpoint"] == checkpoint]
    if not mine:
        raise FitError(f"{where}: no score of the {checkpoint} checkpoint (it has "
                       f"{', '.join(sorted({r['checkpoint'] for r in rows}))}). Fix: pass "
                       "--checkpoint with one of those, or score that checkpoint")
    by_preset: Dict[str, List[dict]] = defaultdict(list)
    for r in mine:
        by_preset[keys.model_of(r)].append(r)
    out = {}
    for preset, rs in by_preset.items():
        levels = sorted({(r["experiment"], str(r["level"])) for r in rs})
        if len(levels) > 1:
            raise FitError(f"{where}: preset {preset} has scores of {len(levels)} levels "
                           f"({', '.join(f'{e} {lv}' for e, lv in levels)}), not of one "
                           "split. Fix: pass the run directory or score.json of the "
                           "predicted split only")
        out[preset] = {"preset": preset, "model": str(rs[0]["model"]),
                       "mean": float(np.mean([float(r["accuracy"]) for r in rs])),
                       "n": len(rs), "experiment": levels[0][0], "level": levels[0][1],
                       "entropy_bits": rs[0].get("entropy_bits")}
    return out


def predict(rows: Sequence[dict], checkpoint: str = "last", preset: Optional[str] = None,
            entropy: Optional[float] = None,
            measured: Optional[Dict[str, dict]] = None,
            where: str = "the results") -> List[dict]:
    """Fit, leave-one-level-out error and prediction per curve of ``rows``.

    Args:
        rows: result rows (``results.tsv`` or scores); checkpoint: the curves' checkpoint;
        preset: only this preset's curves (None: all); entropy: where to predict (bits;
        None: no prediction); measured: :func:`measured_accuracy`, set beside the curve of
        the same preset or, where no measured preset has a curve, of the same model (the
        architecture, e.g. a SCAN preset that extends ``exp1_cnn_authors``); where: the
        inputs, for errors.

    Returns:
        one record per curve with 3 levels or more: the keys of
        :func:`.statistics.curve_statistics` (``params``, ``fit`` and ``key`` included),
        ``loo`` (:func:`leave_one_level_out`, each with its ``level``), ``loo_mae`` (mean
        absolute error over the levels predicted), ``skipped`` (the curves of fewer levels
        left out, by name, on every record) and, with ``entropy``, ``predicted``,
        ``predicted_ci_low``, ``predicted_ci_high`` (the band at ``entropy``),
        ``extrapolated`` (``entropy`` outside the levels) and ``measured`` (the record of
        :func:`measured_accuracy` or None) with ``difference`` (measured - predicted) and
        ``inside`` (``yes``/``no``/``n/a``: the measured value inside the interval).

    Raises:
        FitError: no curve of ``checkpoint`` (and ``preset``), every such curve has fewer
            than 3 levels, or ``measured`` names no preset (nor model) of the curves.
    """
    mine = [r for r in rows if r["checkpoint"] == checkpoint
            and (preset is None or keys.model_of(r) == preset)]
    no_bits = sorted({f"{r['experiment']} {keys.model_of(r)} {r['level']} (no entropy recorded)"
                      for r in mine if r["entropy_bits"] is None})
    mine = [r for r in mine if r["entropy_bits"] is not None]
    if not mine:
        have = sorted({f"{keys.model_of(r)} ({r['checkpoint']})" for r in rows})
        raise FitError(f"{where}: no curve of {preset or 'any preset'} at the "
                       f"{checkpoint} checkpoint among {', '.join(have)}. Fix: choose one of "
                       "those with --preset and --checkpoint")
    arch_of = {keys.model_of(r): str(r["model"]) for r in mine}  # preset -> its model
    match = _match_measured(measured, arch_of)
    curves = st.curve_statistics(mine)
    fitted = [c for c in curves if c["levels"] >= MIN_LEVELS]
    skipped = [f"{c['experiment']} {c['model']} N={c['train_size']} ({c['levels']} level"
               f"{'s' if c['levels'] != 1 else ''})" for c in curves if c not in fitted] \
        + no_bits
    if not fitted:
        raise FitError(f"{where}: every curve has fewer than {MIN_LEVELS} levels: "
                       f"{', '.join(skipped)}; a logistic in the entropy needs at least 3. "
                       "Fix: pass results with 3 levels or more per curve (e.g. "
                       "results/exp1_cnn_authors/results.tsv)")
    levels_of = {(keys.curve_key(r), float(r["entropy_bits"])): str(r["level"]) for r in mine}
    for c in fitted:
        c["loo"] = [{**x, "level": levels_of[(c["key"], x["entropy_bits"])]}
                    for x in leave_one_level_out(c["entropy"], c["means"])]
        errs = [abs(x["error"]) for x in c["loo"] if not math.isnan(x["error"])]
        c["loo_mae"] = float(np.mean(errs)) if errs else st.NAN
        c["skipped"] = skipped
        if entropy is not None:
            _predict_at(c, entropy, match.get(c["model"]))
    return fitted


def _match_measured(measured: Optional[Dict[str, dict]],
                    arch_of: Dict[str, str]) -> Dict[str, dict]:
    """Curve preset -> its measured record: by preset, else (no measured preset has a curve)
    by model, the record's ``matched_by`` saying which.

    Raises:
        FitError: a measurement that matches no curve, or one model measured under several
            presets none of which has a curve.
    """
    if measured is None:
        return {}
    if set(measured) & set(arch_of):
        return {p: {**m, "matched_by": "preset"} for p, m in measured.items() if p in arch_of}
    by_model: Dict[str, List[dict]] = defaultdict(list)
    for m in measured.values():
        by_model[m["model"]].append(m)
    out = {}
    for preset, model in arch_of.items():
        ms = by_model.get(model, [])
        if len(ms) > 1:
            raise FitError(f"--measured-accuracy: presets {', '.join(m['preset'] for m in ms)} of "
                           f"model {model} and none has a curve here. Fix: pass the scores "
                           "of one preset")
        if ms:
            out[preset] = {**ms[0], "matched_by": "model"}
    if not out:
        raise FitError(f"--measured-accuracy: its preset(s) {', '.join(sorted(measured))} "
                       f"(model(s) "
                       f"{', '.join(sorted(by_model))}) have no curve here (curves: "
                       f"{', '.join(f'{p} ({m})' for p, m in sorted(arch_of.items()))}). "
                       "Fix: measure a preset or model that has a curve, or pass its curve")
    return out


def _predict_at(curve: dict, entropy: float, measured: Optional[dict]) -> None:
    """Add the prediction at ``entropy`` and the measured value to ``curve`` (see
    :func:`predict`)."""
    k, h50 = curve["k"], curve["h50"]
    pred = st.NAN if math.isnan(h50) else float(st.logistic(entropy, k, h50))
    low, high = st.logistic_band(curve["params"], [entropy]) if not math.isnan(h50) \
        else ([st.NAN], [st.NAN])
    curve.update(entropy_bits=entropy, predicted=pred, predicted_ci_low=float(low[0]),
                 predicted_ci_high=float(high[0]), measured=measured,
                 extrapolated=not curve["entropy"][0] <= entropy <= curve["entropy"][-1])
    diff = st.NAN if measured is None else measured["mean"] - pred
    inside = "n/a" if measured is None or math.isnan(low[0]) else \
        "yes" if low[0] <= measured["mean"] <= high[0] else "no"
    curve.update(difference=diff, inside=inside)
    if curve["fit"] is not None:
        marks = [{"x": entropy, "y": pred, "low": float(low[0]), "high": float(high[0]),
                  "label": f"predicted at {entropy:.3f} bits"}]
        if measured is not None:
            marks.append({"x": entropy, "y": measured["mean"], "low": st.NAN, "high": st.NAN,
                          "label": f"measured ({measured['n']} seed"
                                   f"{'s' if measured['n'] != 1 else ''})"})
        curve["fit"]["marks"] = marks


def _num(v, digits: int = 4) -> str:
    return "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _ci(low: float, high: float, digits: int = 3) -> str:
    return "no CI" if math.isnan(low) or math.isnan(high) else \
        f"[{low:.{digits}f}, {high:.{digits}f}]"


def curve_name(c: dict) -> str:
    """``exp1 exp1_cnn_authors N=6000 last [schedule unknown]``: a curve of :func:`predict`."""
    return (f"{c['experiment']} {c['model']} N={c['train_size']} {c['checkpoint']} "
            f"[schedule {c['schedule']}]")


def predict_text(records: Sequence[dict], target: Optional[dict] = None) -> str:
    """The table ``fairseq-entropy predict`` prints: per curve the fit, H50 and H90 with
    their CIs, the leave-one-level-out errors and, with a ``target`` (``{"entropy_bits",
    "what"}``), the prediction and the measured value."""
    lines = []
    for c in records:
        lines += [f"curve {curve_name(c)}: {c['levels']} levels, {c['seeds']} seed"
                  f"{'s' if c['seeds'] != 1 else ''}",
                  f"  logistic acc = 1/(1+exp(-k(H-H50))): k = {_num(c['k'], 3)} per bit, "
                  f"H50 = {_num(c['h50'], 3)} bits {_ci(c['h50_ci_low'], c['h50_ci_high'])}, "
                  f"H90 = {_num(c['h90'], 3)} bits {_ci(c['h90_ci_low'], c['h90_ci_high'])} "
                  "(95% bootstrap over seeds)" + (f"; {c['note']}" if c["note"] else ""),
                  "  leave one level out (fit without the level, predicted at it):",
                  f"    {'level':<14} {'H(bits)':>7} {'measured':>8} {'predicted':>9} "
                  f"{'error':>7}"]
        for x in c["loo"]:
            lines.append(f"    {x['level']:<14} {x['entropy_bits']:>7.3f} {x['measured']:>8.4f} "
                         f"{_num(x['predicted']):>9} {_num(x['error']):>7}")
        lines.append(f"    mean absolute error: {_num(c['loo_mae'])}" + (
            f" (a refit needs {MIN_LEVELS} other levels)" if c["levels"] <= MIN_LEVELS else ""))
        if target is not None:
            lines.append(f"  predicted at H = {target['entropy_bits']:.3f} bits, "
                         f"{target['what']}: {_num(c['predicted'])} "
                         f"{_ci(c['predicted_ci_low'], c['predicted_ci_high'], 4)}"
                         + (" (extrapolated: outside the levels)" if c["extrapolated"] else ""))
            m = c["measured"]
            if m is not None:
                lines.append(f"  measured: {m['mean']:.4f} ({m['experiment']} {m['level']}, "
                             f"preset {m['preset']}"
                             + (f", same model {m['model']}" if m["matched_by"] == "model"
                                else "")
                             + f", {m['n']} seed{'s' if m['n'] != 1 else ''}); measured - "
                             f"predicted = {_num(c['difference'])}; inside the interval: "
                             f"{c['inside']}")
    if records and records[0]["skipped"]:
        lines.append(f"not fitted (fewer than {MIN_LEVELS} levels): "
                     + ", ".join(records[0]["skipped"]))
    return "\n".join(lines) + "\n"


#: columns of ``predict --tsv``: one row per curve and level (the curve's values repeated)
TSV_COLUMNS = ("experiment", "model", "train_size", "checkpoint", "schedule", "levels",
               "seeds", "k", "h50", "h50_ci_low", "h50_ci_high", "h90", "h90_ci_low",
               "h90_ci_high", "loo_mae", "level", "level_bits", "level_measured",
               "loo_predicted", "loo_error", "entropy_bits", "predicted", "predicted_ci_low",
               "predicted_ci_high", "extrapolated", "measured", "measured_n", "difference",
               "inside")


def predict_tsv(records: Sequence[dict]) -> str:
    """``predict --tsv``: :data:`TSV_COLUMNS`, one row per curve and level (floats with 6
    decimals, NaN as ``nan``, no prediction as empty fields)."""
    flat = []
    for c in records:
        m = c.get("measured")
        for x in c["loo"]:
            flat.append({**c, "level": x["level"], "level_bits": x["entropy_bits"],
                         "level_measured": x["measured"], "loo_predicted": x["predicted"],
                         "loo_error": x["error"], "measured": None if m is None else m["mean"],
                         "measured_n": None if m is None else m["n"],
                         "extrapolated": None if "extrapolated" not in c else
                         ("yes" if c["extrapolated"] else "no")})
    return tsv(flat, TSV_COLUMNS)


def predict_json(records: Sequence[dict], target: Optional[dict] = None) -> dict:
    """``predict --json``: ``{"target": target, "curves": [...]}``, each curve's record
    without its bootstrap parameters and figure line, NaN as null."""
    def clean(v):
        if isinstance(v, float):
            return None if math.isnan(v) else v
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    drop = ("params", "fit", "key", "skipped")
    return clean({"target": target, "skipped": list(records[0]["skipped"]) if records else [],
                  "curves": [{k: v for k, v in c.items() if k not in drop} for c in records]})
