"""Exact-match scoring of ``fairseq-generate`` output and entropy-binned aggregation.

:func:`read_generate_output` matches ``S-``/``T-``/``H-`` lines by sample id (fairseq prints
samples in batch order, not id order).  :func:`score_generate_output` computes exact-match
accuracy (Wold et al., arXiv 2505.13089, Sec. 4: a prediction counts only if the whole action
sequence is right), broken down by conjunction and by whether the two slots share a verb.
:func:`aggregate` turns many ``score.json`` files into ``results.tsv``, a per-level summary and
a plot of accuracy against entropy beside the paper's curve.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..scan.datafiles import atomic_write_text
from ..scan.grammar import CONJUNCTIONS

RESULT_COLUMNS = ("experiment", "model", "seed", "level", "entropy_bits", "accuracy", "checkpoint")


class ScoreError(ValueError):
    """Unreadable or inconsistent generate output / result files."""


@dataclass
class Scored:
    """One scored test example."""

    id: int
    source: str
    target: str
    hypothesis: str
    correct: bool
    conjunction: str
    shared_verb: bool


def read_generate_output(path: str | os.PathLike) -> Dict[int, Dict[str, str]]:
    """Read ``fairseq-generate`` output: sample id -> {"S": src, "T": ref, "H": hyp}.

    Only the first ``H-`` line of an id is kept (the best hypothesis).

    Raises:
        ScoreError: no samples; an id without its ``S-``, ``T-`` or ``H-`` line; or an output
            cut off while it was written (the last line has no newline, or the file has
            ``D-`` lines and an ``H-`` line lacks its ``D-`` line); names the file, the line
            or sample, and the fix.
    """
    samples: Dict[int, Dict[str, str]] = defaultdict(dict)
    detokenized = set()  # ids with a D- line (fairseq-generate prints one after every H-)
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line[:2] not in ("S-", "T-", "H-", "D-", "P-"):
                continue
            if not line.endswith("\n"):
                raise ScoreError(f"{path}:{lineno}: the last line is cut off (no newline at the "
                                 "end): the decode was interrupted while writing. Fix: run "
                                 "fairseq-generate again and keep its whole output")
            tag, _, rest = line.rstrip("\n").partition("\t")
            try:
                sid = int(tag[2:])
            except ValueError:
                continue
            kind = tag[0]
            if kind == "D":
                detokenized.add(sid)
            if kind not in "STH":
                continue
            if kind == "H":
                parts = rest.split("\t", 1)
                text = parts[1] if len(parts) == 2 else ""
            else:
                text = rest
            samples[sid].setdefault(kind, " ".join(text.split()))
    if not samples:
        raise ScoreError(f"{path}: no S-/T-/H- lines. Fix: pass the stdout of fairseq-generate")
    for sid, s in samples.items():
        missing = [k + "-" for k in "STH" if k not in s]
        if missing:
            raise ScoreError(f"{path}: sample {sid} has no {' or '.join(missing)} line. Fix: run "
                             "fairseq-generate on a split with references and keep its whole "
                             "output")
        if detokenized and sid not in detokenized:
            raise ScoreError(f"{path}: sample {sid} has an H- line but no D- line after it: the "
                             "output is cut off. Fix: run fairseq-generate again and keep its "
                             "whole output")
    return dict(samples)


def clause_verbs(source: str) -> Tuple[str, Optional[str], Optional[str]]:
    """(conjunction, first-slot verb, second-slot verb) of a command, by execution order."""
    words = source.split()
    conj = next((w for w in words if w in CONJUNCTIONS), None)
    if conj is None:
        return "none", words[0] if words else None, None
    i = words.index(conj)
    left, right = words[0], words[i + 1] if i + 1 < len(words) else None
    return (conj, left, right) if conj == "and" else (conj, right, left)


def score_generate_output(path: str | os.PathLike) -> Tuple[List[Scored], dict]:
    """Score a generate output; returns the per-example records and a summary dict.

    Summary keys: ``accuracy`` (fraction in [0, 1]), ``n``, ``correct``, ``by_conjunction``
    and ``by_shared_verb`` (each ``{key: {"accuracy", "n"}}``).
    """
    samples = read_generate_output(path)
    rows = []
    for sid in sorted(samples):
        s = samples[sid]
        conj, v1, v2 = clause_verbs(s.get("S", ""))
        rows.append(Scored(sid, s.get("S", ""), s["T"], s["H"], s["H"] == s["T"], conj,
                           v1 is not None and v1 == v2))

    def acc(subset: List[Scored]) -> dict:
        n = len(subset)
        return {"accuracy": (sum(r.correct for r in subset) / n) if n else None, "n": n}

    summary = {"n": len(rows), "correct": sum(r.correct for r in rows),
               "accuracy": acc(rows)["accuracy"]}
    by_conj = defaultdict(list)
    by_shared = defaultdict(list)
    for r in rows:
        by_conj[r.conjunction].append(r)
        by_shared["same_verb" if r.shared_verb else "different_verbs"].append(r)
    summary["by_conjunction"] = {k: acc(v) for k, v in sorted(by_conj.items())}
    summary["by_shared_verb"] = {k: acc(v) for k, v in sorted(by_shared.items())}
    return rows, summary


def write_score(gen_path: str | os.PathLike, out_dir: str | os.PathLike,
                metadata: Optional[dict] = None, expected_n: Optional[int] = None,
                split: str = "test") -> dict:
    """Score ``gen_path`` and write ``examples.tsv`` and ``score.json`` into ``out_dir``.

    Args:
        expected_n: size of the decoded split (from the level's manifest); when given, the
            output must hold exactly the sample ids ``0 .. expected_n - 1``.
        split: name of that split, for the error message.

    Raises:
        ScoreError: the output is unreadable (:func:`read_generate_output`), or it does not
            cover the ``expected_n`` samples of the split (nothing is written).
    """
    rows, summary = score_generate_output(gen_path)
    if expected_n is not None and len(rows) != expected_n:
        raise ScoreError(
            f"{gen_path} holds {len(rows)} samples but the {split} split has {expected_n}. "
            f"Fix: if you decoded another split, pass its name with --split (e.g. --split "
            f"valid); otherwise decode the whole {split} split (fairseq-generate "
            "--required-batch-size-multiple 1 keeps the last sentences that the default "
            "multiple of 8 drops)")
    if expected_n is not None and rows and rows[-1].id != expected_n - 1:
        raise ScoreError(
            f"{gen_path}: sample ids run up to {rows[-1].id} but the {split} split has ids "
            f"0..{expected_n - 1}. Fix: pass the --split (and --data level) that was decoded")
    out = Path(out_dir)
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(["id", "correct", "conjunction", "shared_verb", "source", "target", "hypothesis"])
    for r in rows:
        w.writerow([r.id, int(r.correct), r.conjunction, int(r.shared_verb), r.source,
                    r.target, r.hypothesis])
    atomic_write_text(out / "examples.tsv", buf.getvalue())
    record = {**(metadata or {}), **summary, "generate_output": str(gen_path)}
    atomic_write_text(out / "score.json", json.dumps(record, indent=2) + "\n")
    return record


# ----------------------------------------------------------------------------- aggregation
def paper_results() -> List[dict]:
    """The paper's accuracies (mean, std over 5 seeds) from the packaged TSV."""
    text = resources.files("fairseq_entropy").joinpath("data/paper_results.tsv").read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def collect_scores(roots: Iterable[str | os.PathLike]) -> List[dict]:
    """Every ``score.json`` under ``roots`` as result rows (columns :data:`RESULT_COLUMNS`).

    Raises:
        ScoreError: a score file without the metadata an aggregate needs.
    """
    rows = []
    for root in roots:
        root = Path(root)
        files = [root] if root.is_file() else sorted(root.rglob("score.json"))
        for f in files:
            rec = json.loads(f.read_text())
            missing = [c for c in RESULT_COLUMNS if c != "accuracy" and rec.get(c) is None]
            if missing:
                raise ScoreError(f"{f}: missing {', '.join(missing)}. Fix: score with "
                                 "--data LEVEL_DIR --model NAME --seed S --checkpoint NAME")
            rows.append({c: rec[c] for c in RESULT_COLUMNS})
    if not rows:
        raise ScoreError(f"no score.json under {', '.join(map(str, roots))}")
    rows.sort(key=lambda r: (r["experiment"], r["model"], r["checkpoint"],
                             float(r["entropy_bits"]), str(r["level"]), int(r["seed"])))
    return rows


def summarize(rows: Sequence[dict]) -> List[dict]:
    """Mean, sample std (0 for one seed) and n of accuracy per
    (experiment, model, checkpoint, level)."""
    groups: Dict[tuple, List[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["experiment"], r["model"], r["checkpoint"], r["level"])].append(r)
    out = []
    for (exp, model, ckpt, level), rs in groups.items():
        accs = [float(r["accuracy"]) for r in rs]
        mean = sum(accs) / len(accs)
        std = math.sqrt(sum((a - mean) ** 2 for a in accs) / (len(accs) - 1)) \
            if len(accs) > 1 else 0.0
        out.append({"experiment": exp, "model": model, "checkpoint": ckpt, "level": level,
                    "entropy_bits": float(rs[0]["entropy_bits"]), "mean": mean, "std": std,
                    "n": len(accs)})
    out.sort(key=lambda r: (r["experiment"], r["model"], r["checkpoint"], r["entropy_bits"]))
    return out


def spearman(summary: Sequence[dict]) -> Dict[tuple, Optional[float]]:
    """Spearman rank correlation between entropy and mean accuracy per
    (experiment, model, checkpoint); ``None`` when undefined (< 3 levels or constant)."""
    from scipy.stats import spearmanr

    groups = defaultdict(list)
    for r in summary:
        groups[(r["experiment"], r["model"], r["checkpoint"])].append(r)
    out = {}
    for key, rs in groups.items():
        xs = [r["entropy_bits"] for r in rs]
        ys = [r["mean"] for r in rs]
        if len(rs) < 3 or len(set(ys)) < 2 or len(set(xs)) < 2:
            out[key] = None
        else:
            out[key] = float(spearmanr(xs, ys).statistic)
    return out


def format_table(summary: Sequence[dict]) -> str:
    """A plain-text table of the summary, one line per level."""
    lines = [f"{'experiment':<10} {'model':<26} {'ckpt':<5} {'level':<13} {'H(bits)':>7} "
             f"{'acc_mean':>8} {'acc_std':>7} {'n':>2}"]
    for r in summary:
        lines.append(f"{r['experiment']:<10} {r['model']:<26} {r['checkpoint']:<5} "
                     f"{r['level']:<13} {r['entropy_bits']:>7.3f} {r['mean']:>8.4f} "
                     f"{r['std']:>7.4f} {r['n']:>2}")
    return "\n".join(lines) + "\n"


def plot(summary: Sequence[dict], path: str | os.PathLike, checkpoint: str = "last") -> Path:
    """Plot accuracy (mean +- std over seeds) against entropy, one panel per experiment,
    with the paper's curve for the same model name drawn dashed beside it."""
    import logging

    import matplotlib

    matplotlib.use("Agg")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib.pyplot as plt

    rows = [r for r in summary if r["checkpoint"] == checkpoint] or list(summary)
    experiments = sorted({r["experiment"] for r in rows})
    paper = paper_results()
    fig, axes = plt.subplots(1, len(experiments), figsize=(5.5 * len(experiments), 4.2),
                             squeeze=False)
    for ax, exp in zip(axes[0], experiments):
        models = sorted({r["model"] for r in rows if r["experiment"] == exp})
        for i, model in enumerate(models):
            color = f"C{i}"
            rs = [r for r in rows if r["experiment"] == exp and r["model"] == model]
            ax.errorbar([r["entropy_bits"] for r in rs], [r["mean"] for r in rs],
                        yerr=[r["std"] for r in rs], marker="o", color=color, capsize=3,
                        label=f"{model} (this run, {checkpoint})")
            ref = [p for p in paper if p["experiment"] == exp and p["model"] == model
                   and (exp != "exp1" or p["train_size"] == "6000")]
            if ref:
                ax.errorbar([float(p["entropy_bits"]) for p in ref],
                            [float(p["accuracy_mean"]) for p in ref],
                            yerr=[float(p["accuracy_std"]) for p in ref], color=color,
                            linestyle="--", marker="x", alpha=0.6, capsize=2,
                            label=f"{model} (paper, 5 seeds)")
        ax.set_title({"exp1": "Experiment 1 (mixing)", "exp2": "Experiment 2 (support)"}
                     .get(exp, exp))
        ax.set_xlabel("training-set entropy of the seen slot (bits)")
        ax.set_ylabel("exact-match accuracy")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def aggregate(roots: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> dict:
    """Write ``results.tsv``, ``accuracy_vs_entropy.png`` and the report
    (:func:`.report.write_report`: ``summary.tsv``, ``curves.tsv``, ``fig_*.png``,
    ``report.md``) into ``out_dir``.

    Returns:
        ``{"results", "summary", "plot", "report", "table", "spearman"}``.
    """
    rows = collect_scores(roots)
    summary = summarize(rows)
    out = Path(out_dir)

    def tsv(records, columns):
        buf = io.StringIO()
        w = csv.writer(buf, delimiter="\t", lineterminator="\n")
        w.writerow(columns)
        for r in records:
            w.writerow([f"{r[c]:.6f}" if isinstance(r[c], float) else r[c] for c in columns])
        return buf.getvalue()

    atomic_write_text(out / "results.tsv", tsv(rows, RESULT_COLUMNS))
    # summary.tsv (seed statistics, CIs, agreement), curves.tsv, fig_*.png and report.md
    from .report import write_report

    report = write_report(rows, out)
    png = plot(summary, out / "accuracy_vs_entropy.png")
    return {"results": out / "results.tsv", "summary": report["summary"], "plot": png,
            "report": report["report"], "table": format_table(summary),
            "spearman": spearman(summary)}
