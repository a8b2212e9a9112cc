"""Statistics over seeds: mean and std, bootstrap CIs, Spearman rho, the logistic fit and its
entropy thresholds H50 and H90, agreement with the paper.

Everything here works on plain result rows (dicts) with the keys ``experiment``, ``model``
(or ``preset``), ``level``, ``entropy_bits``, ``seed``, ``checkpoint``, ``accuracy`` and
optionally ``train_size`` (N) and ``schedule`` (``unknown`` when absent) -- the rows of
``results.tsv``.  Runs of different schedules are different cells and curves.

* :func:`.runs.check_runs`: every run read once (COGS included), the runs of a cell trained on
  one training set, a run never both with and without its schedule; :func:`.runs.group_runs`
  (the rows of each cell) checks it first.
* :func:`summarize`: per cell (:func:`cell_key`) the mean, sample std (0 for one seed) and
  number of seeds: the table ``fairseq-entropy aggregate`` prints; :func:`spearman` the rank
  correlation of its curves (:func:`curve_key`).
* :func:`cell_statistics`: per cell (:func:`cell_key`) the mean, sample std,
  number of seeds and a 95% bootstrap CI of the mean accuracy (``scipy.stats.bootstrap``,
  percentile method, resampling seeds). One seed has no spread: std and CI are NaN and the row
  says so.
* :func:`curve_statistics`: per curve (:func:`curve_key`: all levels of one experiment, model,
  N, checkpoint and schedule) the
  Spearman rank correlation between entropy and mean accuracy, and the logistic fit
  ``acc(H) = 1 / (1 + exp(-k (H - H50)))`` (:func:`fit_logistic`, the one fit:
  ``scipy.optimize.curve_fit``): H50 and H90, the entropies (bits) at which it crosses 0.5
  and 0.9, with bootstrap CIs over seeds and a band around the fitted line
  (:func:`logistic_bootstrap`: whole per-seed curves are resampled and refit).
* :func:`agrees`: a cell agrees with the paper (Wold et al., arXiv 2505.13089, reported as mean
  and std over 5 seeds) when ``|ours - paper mean| <= max(2 x paper std, 0.10)``.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .columns import (DECODER_ONLY, GRADED_COLUMNS, GROUP_COLUMNS, PAPER_IS_ENCODER_DECODER)
from .keys import cell_key, curve_key, order_key, schedule_of, train_size_of
from .paper import paper_lookup
from .runs import group_runs

#: confidence level of every interval here
CONFIDENCE = 0.95
#: bootstrap resamples (fixed seed: the same rows give the same intervals)
N_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
#: agreement tolerance: max(AGREE_STDS x paper std, AGREE_FLOOR)
AGREE_STDS = 2.0
AGREE_FLOOR = 0.10

NAN = float("nan")


def summarize(rows: Sequence[dict]) -> List[dict]:
    """Mean, sample std (0 for one seed) and n of accuracy per cell (:func:`.runs.group_runs`).

    Args:
        rows: result rows (the columns of ``results.tsv``).

    Returns:
        one dict per cell with the keys of :data:`~.columns.GROUP_COLUMNS` (from the cell's
        first row), ``model``, ``entropy_bits`` (None when not recorded), ``mean``, ``std``
        and ``n``, sorted by experiment, preset, N, checkpoint, entropy, level.

    Raises:
        ScoreError: see :func:`.runs.group_runs`.
    """
    out = []
    for rs in group_runs(rows).values():
        accs = [float(r["accuracy"]) for r in rs]
        mean = sum(accs) / len(accs)
        std = math.sqrt(sum((a - mean) ** 2 for a in accs) / (len(accs) - 1)) \
            if len(accs) > 1 else 0.0
        h = rs[0]["entropy_bits"]
        out.append({**{c: rs[0].get(c) for c in GROUP_COLUMNS}, "model": rs[0]["model"],
                    "schedule": schedule_of(rs[0]), "updates": _common(rs, "updates"),
                    "preset_max_update": _common(rs, "preset_max_update"),
                    "entropy_bits": None if h is None else float(h), "mean": mean, "std": std,
                    "n": len(accs)})
    out.sort(key=lambda r: (*order_key((r["experiment"], r["preset"], r["n_train"],
                                        r["checkpoint"], r["schedule"])),
                            math.inf if r["entropy_bits"] is None else r["entropy_bits"],
                            str(r["level"])))
    return out


def spearman(summary: Sequence[dict]) -> Dict[tuple, Optional[float]]:
    """:func:`spearman_rho` between entropy and mean accuracy of each curve
    (:func:`curve_key`) of :func:`summarize` rows; levels without an entropy are left out.

    Returns:
        curve key -> rho in [-1, 1], or None when undefined (< 3 levels or constant).
    """
    groups: Dict[tuple, List[dict]] = defaultdict(list)
    for r in summary:
        groups[curve_key(r)].append(r)
    out: Dict[tuple, Optional[float]] = {}
    for key, rs in groups.items():
        rs = [r for r in rs if r["entropy_bits"] is not None]
        rho = spearman_rho([r["entropy_bits"] for r in rs], [r["mean"] for r in rs])
        out[key] = None if math.isnan(rho) else rho
    return out


def bootstrap_mean_ci(values: Sequence[float], confidence: float = CONFIDENCE,
                      seed: int = BOOTSTRAP_SEED) -> Tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``values`` (``scipy.stats.bootstrap``).

    Returns:
        (low, high); (NaN, NaN) for fewer than 2 values (one seed has no spread); (v, v) when
        all values are equal.
    """
    from scipy.stats import bootstrap

    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return NAN, NAN
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    res = bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=N_RESAMPLES,
                    method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def cell_statistics(rows: Sequence[dict]) -> List[dict]:
    """Mean, std, n and bootstrap CI of accuracy per cell (:func:`cell_key`: experiment, model,
    N, level, checkpoint, schedule).

    Returns:
        one dict per cell with ``experiment, model, train_size, level, checkpoint, schedule,
        updates, preset_max_update, model_family`` (the updates done, the preset's own
        max_update and the model family when every run of the cell records the same, else
        None), ``entropy_bits, mean, std, n,
        ci_low, ci_high, note`` (``note`` says when a CI is undefined; ``entropy_bits`` is
        None for a cell whose runs record none, which has no point on a curve and sorts
        last), plus the seed mean of
        each graded metric of :data:`~.columns.GRADED_COLUMNS` that every run of the cell has
        (else None), sorted by experiment, model, N, checkpoint, schedule, entropy.
    """
    groups: Dict[tuple, List[dict]] = defaultdict(list)
    for r in rows:
        groups[cell_key(r)].append(r)
    out = []
    for (exp, model, n, level, ckpt, schedule), rs in groups.items():
        accs = np.array([float(r["accuracy"]) for r in rs])
        std = float(np.std(accs, ddof=1)) if len(accs) > 1 else NAN
        low, high = bootstrap_mean_ci(accs)
        out.append({"experiment": exp, "model": model, "train_size": n, "level": level,
                    "checkpoint": ckpt, "schedule": schedule,
                    "updates": _common(rs, "updates"),
                    "preset_max_update": _common(rs, "preset_max_update"),
                    "model_family": _common(rs, "model_family"),
                    "entropy_bits": _bits(rs[0]),
                    "mean": float(accs.mean()), "std": std, "n": len(accs),
                    "ci_low": low, "ci_high": high,
                    "note": "one seed: no std, no CI" if len(accs) < 2 else "",
                    **{g: (float(np.mean([float(r[g]) for r in rs]))
                           if all(r.get(g) not in (None, "") for r in rs) else None)
                       for g in GRADED_COLUMNS}})
    out.sort(key=lambda r: (r["experiment"], r["model"], r["train_size"] or 0,
                            r["checkpoint"], r["schedule"],
                            math.inf if r["entropy_bits"] is None else r["entropy_bits"]))
    return out


def _bits(row: dict) -> Optional[float]:
    """The row's ``entropy_bits`` as a float (None when not recorded: a SCAN split without
    one restricted pair has no controlled slot)."""
    h = row.get("entropy_bits")
    return None if h in (None, "") else float(h)


def _common(rows: Sequence[dict], column: str):
    """The value of ``column`` shared by all ``rows`` (None when absent or when they
    differ)."""
    values = {r.get(column) for r in rows}
    return values.pop() if len(values) == 1 else None


def logistic(h, k, h50):
    """``1 / (1 + exp(-k (h - h50)))``: accuracy against entropy ``h`` (bits)."""
    return 1.0 / (1.0 + np.exp(-k * (np.asarray(h, dtype=float) - h50)))


def fit_logistic(entropy: Sequence[float], accuracy: Sequence[float]) -> Tuple[float, float]:
    """The logistic fit of ``accuracy`` against ``entropy``: the one fit of the package
    (``scipy.optimize.curve_fit`` of :func:`logistic`, k bounded to [-100, 100] per bit, H50
    to the measured range widened by its width on each side).

    Args:
        entropy: the levels' entropies (bits); accuracy: their accuracies (fractions), same
            length.

    Returns:
        (k, H50): the slope (per bit) and the crossing of 0.5 (bits); (NaN, NaN) when there
        are fewer than 3 levels, every accuracy lies on the same side of 0.5 (the curve does
        not cross it), the fit fails, or the fitted crossing lies outside the measured entropy
        range.
    """
    from scipy.optimize import OptimizeWarning, curve_fit

    h = np.asarray(entropy, dtype=float)
    a = np.asarray(accuracy, dtype=float)
    if len(h) < 3 or np.ptp(h) == 0 or np.all(a > 0.5) or np.all(a < 0.5):
        return NAN, NAN
    lo, hi = float(h.min()), float(h.max())
    start = float(h[np.argmin(np.abs(a - 0.5))])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            (k, h50), _ = curve_fit(logistic, h, a, p0=(4.0, start),
                                    bounds=([-100.0, lo - (hi - lo)], [100.0, hi + (hi - lo)]),
                                    maxfev=5000)
    except (RuntimeError, ValueError):
        return NAN, NAN
    return (float(k), float(h50)) if lo <= h50 <= hi else (NAN, NAN)


def fit_h50(entropy: Sequence[float], accuracy: Sequence[float]) -> float:
    """H50 (bits) of :func:`fit_logistic` (NaN where it has no fit)."""
    return fit_logistic(entropy, accuracy)[1]


def entropy_at(k: float, h50: float, accuracy: float) -> float:
    """The entropy (bits) at which the logistic (k, H50) reaches ``accuracy`` (in (0, 1)):
    ``H50 + ln(a / (1 - a)) / k``; H90 is ``entropy_at(k, h50, 0.9)`` = H50 + ln 9 / k."""
    return h50 + math.log(accuracy / (1.0 - accuracy)) / k


def h90_in_range(k: float, h50: float, entropy: Sequence[float]) -> float:
    """H90 (bits) of the logistic (k, H50), or NaN when it has no fit or the crossing of 0.9
    lies outside the measured entropy range (as for H50, no extrapolation)."""
    if math.isnan(k) or math.isnan(h50) or k == 0:
        return NAN
    h90 = entropy_at(k, h50, 0.9)
    return h90 if min(entropy) <= h90 <= max(entropy) else NAN


def spearman_rho(entropy: Sequence[float], accuracy: Sequence[float]) -> float:
    """Spearman rank correlation of accuracy with entropy (``scipy.stats.spearmanr``), in
    [-1, 1]; NaN when undefined (fewer than 3 levels, or a constant entropy or accuracy)."""
    from scipy.stats import spearmanr

    if len(entropy) < 3 or len(set(accuracy)) < 2 or len(set(entropy)) < 2:
        return NAN
    return float(spearmanr(entropy, accuracy).statistic)


def logistic_bootstrap(curves: np.ndarray, entropy: Sequence[float],
                       confidence: float = CONFIDENCE, seed: int = BOOTSTRAP_SEED) -> dict:
    """Bootstrap of the logistic fit over seeds: whole per-seed curves are drawn with
    replacement (``scipy.stats.bootstrap`` over seed indices, percentile method) and
    :func:`fit_logistic` refits the mean curve of each resample.

    Args:
        curves: accuracies, shape (seeds, levels), one row per seed's whole curve.
        entropy: the levels' entropies (bits), length = levels.

    Returns:
        ``{"params": array (resamples, 2) of (k, H50) per resample (NaN where a resample
        has no fit), "h50_ci": (low, high), "h90_ci": (low, high)}`` (H90:
        :func:`h90_in_range`); the CIs are (NaN, NaN) with one seed, or when a resample has
        no crossing in range. With one seed ``params`` is empty; when every seed has the same
        curve it is that curve's fit, once.
    """
    from scipy.stats import bootstrap

    curves = np.asarray(curves, dtype=float)
    if curves.ndim != 2 or curves.shape[0] < 2:
        return {"params": np.empty((0, 2)), "h50_ci": (NAN, NAN), "h90_ci": (NAN, NAN)}

    def stat(idx):
        k, h50 = fit_logistic(entropy, curves[np.asarray(idx, dtype=int)].mean(axis=0))
        return np.array([k, h50, h90_in_range(k, h50, entropy)])

    idx = np.arange(curves.shape[0])
    if np.all(curves == curves[0]):
        k, h50, h90 = stat(idx)
        return {"params": np.array([[k, h50]]), "h50_ci": (h50, h50), "h90_ci": (h90, h90)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns about NaN statistics; we report NaN
        res = bootstrap((idx,), stat, vectorized=False, confidence_level=confidence,
                        n_resamples=N_RESAMPLES // 4, method="percentile",
                        rng=np.random.default_rng(seed))
    low, high = res.confidence_interval
    return {"params": np.asarray(res.bootstrap_distribution[:2]).T,
            "h50_ci": (float(low[1]), float(high[1])), "h90_ci": (float(low[2]), float(high[2]))}


def logistic_band(params: np.ndarray, entropy: Sequence[float],
                  confidence: float = CONFIDENCE) -> Tuple[np.ndarray, np.ndarray]:
    """Pointwise percentile band of the fitted logistic over bootstrap resamples.

    Args:
        params: (k, H50) per resample, shape (resamples, 2) (:func:`logistic_bootstrap`).
        entropy: where to evaluate (bits), length m.

    Returns:
        (low, high), arrays of length m: the (1 - confidence) / 2 and (1 + confidence) / 2
        percentiles of :func:`logistic` over the resamples; NaN when there are no resamples
        or one of them has no fit (as for the H50 CI).
    """
    x = np.asarray(entropy, dtype=float)
    params = np.asarray(params, dtype=float).reshape(-1, 2)
    if len(params) == 0 or np.isnan(params).any():
        return np.full(len(x), NAN), np.full(len(x), NAN)
    ys = 1.0 / (1.0 + np.exp(-params[:, :1] * (x[None, :] - params[:, 1:])))
    tail = (1 - confidence) / 2 * 100
    return np.percentile(ys, tail, axis=0), np.percentile(ys, 100 - tail, axis=0)


#: points of a fitted curve's line and band in the figures
FIT_POINTS = 61


def curve_statistics(rows: Sequence[dict]) -> List[dict]:
    """Spearman rho, the logistic fit and H50 and H90 (with bootstrap CIs over seeds) per
    curve.

    A curve (:func:`curve_key`) is (experiment, model, N, checkpoint) over its levels; rows
    without ``entropy_bits`` (a SCAN split without a controlled slot) are left out. The
    fit is :func:`fit_logistic` of the mean accuracy per level (every seed of a level); only
    seeds that have every level of the curve enter the bootstrap (:func:`logistic_bootstrap`).

    Returns:
        one dict per curve: ``experiment, model, train_size, checkpoint, schedule, levels,
        seeds, rho, k, h50, h50_ci_low, h50_ci_high, h90, h90_ci_low, h90_ci_high, note``
        (``train_size``: :func:`train_size_of`, None for Experiment 2; H90:
        :func:`h90_in_range`), and for the figures and predictions ``key`` (the curve key),
        ``entropy`` and ``means`` (the levels, bits, and their mean accuracies), ``params``
        (the bootstrap's (k, H50) per resample, shape (resamples, 2)) and ``fit``: the fitted
        line over the levels' range (``x``, ``y``) with its 95% band (``low``, ``high``;
        :func:`logistic_band`), or None without a fit.
    """
    curves: Dict[tuple, List[dict]] = defaultdict(list)
    for r in rows:
        if _bits(r) is not None:  # a run without an entropy is no point of a curve
            curves[curve_key(r)].append(r)
    out = []
    for key, rs in curves.items():
        exp, model, _size, ckpt, schedule = key
        n = train_size_of(rs[0])
        levels = sorted({float(r["entropy_bits"]) for r in rs})
        by_seed: Dict[str, Dict[float, float]] = defaultdict(dict)
        for r in rs:
            by_seed[str(r["seed"])][float(r["entropy_bits"])] = float(r["accuracy"])
        means = [float(np.mean([r["accuracy"] for r in rs if float(r["entropy_bits"]) == h],
                               dtype=float)) for h in levels]
        full = np.array([[c[h] for h in levels] for c in by_seed.values()
                         if len(c) == len(levels)])
        k, h50 = fit_logistic(levels, means)
        h90 = h90_in_range(k, h50, levels)
        boot = logistic_bootstrap(full, levels)
        notes = []
        if math.isnan(h50):
            notes.append("no 0.5 crossing within the levels" if len(levels) >= 3
                         else "fewer than 3 levels")
        elif math.isnan(h90):
            notes.append("no 0.9 crossing within the levels")
        if len(full) < 2:
            notes.append("fewer than 2 complete seeds: no CI")
        fit = None
        if not math.isnan(h50):
            xs = np.linspace(levels[0], levels[-1], FIT_POINTS)
            low, high = logistic_band(boot["params"], xs)
            fit = {"x": xs.tolist(), "y": logistic(xs, k, h50).tolist(),
                   "low": low.tolist(), "high": high.tolist()}
        out.append({"experiment": exp, "model": model, "train_size": n, "checkpoint": ckpt,
                    "schedule": schedule, "levels": len(levels), "seeds": len(by_seed),
                    "rho": spearman_rho(levels, means), "k": k, "h50": h50,
                    "h50_ci_low": boot["h50_ci"][0], "h50_ci_high": boot["h50_ci"][1],
                    "h90": h90, "h90_ci_low": boot["h90_ci"][0],
                    "h90_ci_high": boot["h90_ci"][1], "note": "; ".join(notes),
                    "key": key, "entropy": levels, "means": means, "params": boot["params"],
                    "fit": fit})
    out.sort(key=lambda r: (r["experiment"], r["model"], r["train_size"] or 0,
                            r["checkpoint"], r["schedule"]))
    return out


def agrees(ours: float, paper_mean: float, paper_std: float) -> bool:
    """``|ours - paper_mean| <= max(2 x paper_std, 0.10)`` (accuracies as fractions)."""
    return abs(ours - paper_mean) <= agreement_tolerance(paper_std) + 1e-12


def agreement_tolerance(paper_std: float) -> float:
    """``max(2 x paper_std, 0.10)``."""
    return max(AGREE_STDS * paper_std, AGREE_FLOOR)


def agreement_table(cells: Sequence[dict], paper_rows: Sequence[dict],
                    paper_model: Callable[[str], str] = lambda m: m) -> List[dict]:
    """Each cell of :func:`cell_statistics` beside the paper's mean and std
    (:func:`~.paper.paper_lookup` over ``paper_rows``, the rows of ``paper_results.tsv``).

    Returns:
        the cells with ``paper_mean, paper_std, diff, tolerance, agree`` added (``agree`` is
        ``yes``/``no``, or ``n/a`` where the paper reports no value or the cell records no
        entropy) and the lookup's note.
    """
    find = paper_lookup(paper_rows, paper_model)
    out = []
    for c in cells:
        p, note = (None, "no entropy recorded: no paper value, no point on a curve") \
            if c["entropy_bits"] is None else \
            find(c["experiment"], c["model"], c["train_size"], c["entropy_bits"])
        row = dict(c)
        if p is None:
            row.update(paper_mean=NAN, paper_std=NAN, diff=NAN, tolerance=NAN, agree="n/a")
        else:
            pm, ps = float(p["accuracy_mean"]), float(p["accuracy_std"])
            row.update(paper_mean=pm, paper_std=ps, diff=c["mean"] - pm,
                       tolerance=agreement_tolerance(ps),
                       agree="yes" if agrees(c["mean"], pm, ps) else "no")
            if c.get("model_family") == DECODER_ONLY:
                note = "; ".join(x for x in (note, PAPER_IS_ENCODER_DECODER) if x)
        row["note"] = "; ".join(x for x in (c.get("note", ""), note) if x)
        out.append(row)
    return out
