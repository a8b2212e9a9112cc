"""Per-seed tables of one row of the paper's grid, beside the paper's mean and std.

Reads the ``results.tsv`` files that ``fairseq-entropy aggregate`` writes (one row per run and
checkpoint) and prints a Markdown table: one row per seed, the mean +- std over seeds (bold
when outside the paper's mean +- max(2 std, 0.10)), the paper's mean +- std and that band.
The paper's level and the agreement rule are the ones ``aggregate``'s report uses
(:func:`fairseq_entropy.analysis.paper.paper_lookup`, the level nearest the measured entropy;
:func:`fairseq_entropy.analysis.statistics.agrees`).

Usage (from the repository root)::

    python studies/paper_grid/seed_table.py results/exp1_transformer_train_size/results.tsv \
        --preset exp1_transformer_sinusoidal --n 4000

Exits with status 2 naming the file and the fix when a file lacks a column, a run is listed
twice with different accuracies, or the paper has no curve of the preset's model and N.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path
from typing import Callable, Optional

from fairseq_entropy.analysis.paper import (DEFAULT_EXP1_TRAIN_SIZE, paper_curve, paper_lookup,
                                            paper_model_name, paper_results)
from fairseq_entropy.analysis.statistics import agreement_tolerance, agrees

NEEDED = ("experiment", "preset", "model", "n_train", "level", "entropy_bits", "checkpoint", "seed",
          "accuracy")


class TableError(ValueError):
    """A results file that cannot give the table (the message names the file and the fix)."""


def paper_at(experiment: str, model: str,
             n: str | None) -> Callable[[float], Optional[tuple[float, float]]]:
    """The paper's (mean, std) at an entropy in bits (None: no paper level near it) of a
    preset's model (``results.tsv``'s ``model`` column, named as the paper names it by
    :func:`paper_model_name`) and N, looked up as ``aggregate`` does (:func:`paper_lookup`).

    Raises TableError when the paper has no such curve.
    """
    if not paper_curve(experiment, model, int(n) if n else None):
        raise TableError(f"the paper has no {experiment} curve of model {model} "
                         f"({paper_model_name(model)}) at N = {n}. Fix: pass another --n")
    find = paper_lookup(paper_results(), paper_model_name)

    def at(bits: float) -> Optional[tuple[float, float]]:
        row, _ = find(experiment, model, n, bits)
        return None if row is None else (float(row["accuracy_mean"]),
                                         float(row["accuracy_std"]))
    return at


def read_runs(paths: list[Path], preset: str, n: str | None, checkpoint: str):
    """The runs of one preset and checkpoint: ``(runs, bits, experiment, model)``.

    ``runs`` maps seed -> level name -> accuracy (fraction), ``bits`` each level's measured
    entropy. Experiment 1 runs are those of training-set size ``n`` (None:
    DEFAULT_EXP1_TRAIN_SIZE, the paper's main figure); Experiment 2's N is its level's own.
    Later files may repeat a run of an earlier one only with the same accuracy (to 1e-6);
    otherwise TableError names both files, as it does for runs of two experiments or models
    under one preset.
    """
    runs: dict[int, dict[str, tuple[float, Path]]] = {}
    bits: dict[str, float] = {}
    kinds: set[tuple[str, str]] = set()
    n = n or str(DEFAULT_EXP1_TRAIN_SIZE)
    for path in paths:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh, delimiter="\t")
            missing = [c for c in NEEDED if c not in (reader.fieldnames or [])]
            if missing:
                raise TableError(f"{path}: no column {', '.join(missing)}. Fix: pass the "
                                 "results.tsv that fairseq-entropy aggregate writes")
            for line, row in enumerate(reader, start=2):
                if row["preset"] != preset or row["checkpoint"] != checkpoint or \
                        (row["experiment"] == "exp1" and row["n_train"] != n):
                    continue
                kinds.add((row["experiment"], row["model"]))
                if len(kinds) > 1:
                    raise TableError(f"{path}:{line}: preset {preset} has runs of "
                                     f"{sorted(kinds)}. Fix: pass one experiment's files")
                seed, level, acc = int(row["seed"]), row["level"], float(row["accuracy"])
                bits[level] = float(row["entropy_bits"])
                seen = runs.setdefault(seed, {}).get(level)
                if seen and abs(seen[0] - acc) > 1e-6:
                    raise TableError(f"{path}:{line}: seed {seed} at {level} has accuracy "
                                     f"{acc}, {seen[1]} has {seen[0]}. Fix: pass only one of "
                                     "the two runs' files")
                runs[seed][level] = (acc, path)
    if not runs:
        raise TableError(f"no run of preset {preset} ({checkpoint} checkpoint, N = "
                         f"{n} in Experiment 1) in {', '.join(map(str, paths))}. "
                         "Fix: check --preset, --n and --checkpoint")
    (experiment, model), = kinds
    return ({s: {lv: a for lv, (a, _) in levels.items()} for s, levels in runs.items()},
            bits, experiment, model)


def band(mean: float, std: float) -> tuple[float, float]:
    """The agreement band mean +- max(2 std, 0.10), clipped to [0, 1]."""
    tol = agreement_tolerance(std)
    return max(0.0, mean - tol), min(1.0, mean + tol)


def heading(level: str) -> str:
    """A column's heading: the nominal bits of ``entropy_X``, ``k = K`` of ``support_K``."""
    kind, _, value = level.partition("_")
    return f"k = {value}" if kind == "support" else value


def table(runs: dict[int, dict[str, float]], bits: dict[str, float],
          paper: Callable[[float], Optional[tuple[float, float]]], label: str,
          seeds: list[int] | None = None) -> str:
    """The Markdown table: a row per seed, mean +- std, the paper and its band."""
    levels = sorted(bits, key=bits.get)
    seeds = seeds or sorted(runs, key=lambda s: (-len(runs[s]), s))
    head = "| level | " + " | ".join(heading(lv) for lv in levels) + " |"
    lines = [head, "| --- |" + " --- |" * len(levels)]
    for s in seeds:
        cells = [f"{runs[s][b]:.4f}" if b in runs.get(s, {}) else "" for b in levels]
        lines.append(f"| seed {s} | " + " | ".join(cells) + " |")
    means, papers, bands = [], [], []
    for b in levels:
        vals = [runs[s][b] for s in seeds if b in runs.get(s, {})]
        m = statistics.mean(vals)
        sd = statistics.stdev(vals) if len(vals) > 1 else None
        text = f"{m:.3f} ± {sd:.3f}" if sd is not None else f"{m:.3f}"
        if len(vals) < 3:
            text += f" ({len(vals)})"
        ref = paper(bits[b])
        if ref is None:
            papers.append("")
            bands.append("")
        else:
            lo, hi = band(*ref)
            papers.append(f"{ref[0]:.3f} ± {ref[1]:.3f}")
            bands.append(f"{lo:.3f}-{hi:.3f}")
            if not agrees(m, *ref):
                text = f"**{text}**"
        means.append(text)
    lines.append("| mean ± std | " + " | ".join(means) + " |")
    lines.append(f"| paper, {label} | " + " | ".join(papers) + " |")
    lines.append("| band | " + " | ".join(bands) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path, help="results.tsv files of aggregate")
    ap.add_argument("--preset", required=True,
                    help="the preset of the runs, e.g. exp2_transformer_l2")
    ap.add_argument("--n", default=None,
                    help="Experiment 1's training-set size in commands (default 6000, the "
                         "paper's main figure); Experiment 2's N is each level's own")
    ap.add_argument("--checkpoint", default="last", choices=["last", "best"],
                    help="which checkpoint's accuracy (default last)")
    ap.add_argument("--seed", type=int, action="append",
                    help="a seed's row, in the order given (repeatable; default every seed)")
    args = ap.parse_args(argv)
    try:
        runs, bits, experiment, model = read_runs(args.results, args.preset, args.n,
                                                  args.checkpoint)
        n = None if experiment == "exp2" else (args.n or str(DEFAULT_EXP1_TRAIN_SIZE))
        paper = paper_at(experiment, model, n)
    except (TableError, OSError) as err:
        print(f"seed_table: {err}", file=sys.stderr)
        return 2
    label = "Experiment 2" if n is None else f"N = {n}"
    print(table(runs, bits, paper, label, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
