"""Exact-match scoring of ``fairseq-generate`` output and entropy-binned aggregation.

:func:`read_generate_output` matches ``S-``/``T-``/``H-`` lines by sample id (fairseq prints
samples in batch order, not id order).  :func:`score_generate_output` computes exact-match
accuracy (Wold et al., arXiv 2505.13089, Sec. 4: a prediction counts only if the whole action
sequence is right), broken down by conjunction and by whether the two slots share a verb.
:func:`write_score` checks the output against the decoded split, command by command, and
records where the result comes from (:func:`provenance`).  :func:`aggregate` turns many
``score.json`` files into ``results.tsv``, a per-level summary and a plot of accuracy against
entropy beside the paper's curve for the same architecture and training-set size.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..scan.binarize import detokenize_sentencepiece
from ..errors import UserError, DataFormatError
from ..files import atomic_write_bytes, atomic_write_text, iter_text_lines, read_json, read_lines
from ..scan.grammar import CONJUNCTIONS
from .statistics import curve_size

#: columns of ``results.tsv``, one row per score.json
RESULT_COLUMNS = ("experiment", "preset", "model", "n_train", "level", "entropy_bits",
                  "checkpoint", "seed", "data_seed", "accuracy")
#: result columns a score may lack (None in its row)
OPTIONAL_RESULT_COLUMNS = ("entropy_bits", "data_seed")
#: graded metrics of ``score.json`` (its ``graded`` record) and the exact match of the
#: commands of each conjunction (its ``by_conjunction`` record: ``accuracy_and``,
#: ``accuracy_after``), carried into ``results.tsv`` and averaged over seeds in
#: ``summary.tsv``; empty for score files written without them
GRADED_COLUMNS = ("clause_accuracy", "correct_except_restricted_clause", "chrf", "bleu",
                  *(f"accuracy_{c}" for c in CONJUNCTIONS))
#: what identifies a group of runs that differ only by their seed (:func:`group_key`)
GROUP_COLUMNS = ("experiment", "preset", "n_train", "level", "checkpoint")
#: checkpoint labels a run is scored with: the last one, the best on the validation split
#: (seq_acc), and the one with the lowest loss on the test split (the paper authors'
#: selection: their validation file was the test set; ``SELECT=test-loss`` in
#: ``recipes/train_level.sh``), a diagnostic of the paper's numbers, not an estimate of
#: generalization
CHECKPOINT_LABELS = ("last", "best", "test-loss")
#: model names of the presets whose architecture the paper reports under another name
PAPER_MODEL_OF = {"transformer_exp2_l2": "transformer_sinusoidal",
                  "transformer_exp2_l3": "transformer_sinusoidal",
                  "transformer_rope_authors": "transformer_rope",
                  "cnn_authors": "cnn"}


class ScoreError(UserError, ValueError):
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

    Only the first ``H-`` line of an id is kept (the best hypothesis). A line of
    sentencepiece pieces (it holds U+2581, the word-start mark, which no word of the grammars
    has) is joined back into words as ``--post-process sentencepiece`` does: the ``S-`` lines
    of commands cut into pieces on the source side only (``binarize --spm-side source``), or
    any line of subword data decoded without ``--post-process``.

    Raises:
        ScoreError: a missing file, a directory or a line that is not UTF-8; no samples; an id
            without its ``S-``, ``T-`` or ``H-`` line; or an output
            cut off while it was written (the last line has no newline, or the file has
            ``D-`` lines and an ``H-`` line lacks its ``D-`` line); names the file, the line
            or sample, and the fix.
    """
    samples: Dict[int, Dict[str, str]] = defaultdict(dict)
    detokenized = set()  # ids with a D- line (fairseq-generate prints one after every H-)
    try:
        for lineno, line in iter_text_lines(path):
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
            if "\u2581" in text:
                text = detokenize_sentencepiece(text)
            samples[sid].setdefault(kind, " ".join(text.split()))
    except DataFormatError as e:
        raise ScoreError(str(e)) from None
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


# ----------------------------------------------------------------------------- provenance
def load_data_manifest(data_dir: str | os.PathLike) -> Tuple[dict, str]:
    """The ``manifest.json`` of a level directory (raw or binarized) and its SHA-256.

    Raises:
        ScoreError: no manifest, or an unreadable one (names the file and the fix).
    """
    path = Path(data_dir) / "manifest.json"
    if not path.is_file():
        raise ScoreError(f"{path} not found. Fix: --data must be a level directory written by "
                         "'fairseq-entropy build' or 'fairseq-entropy binarize'")
    try:
        manifest = read_json(path)
    except DataFormatError as e:
        raise ScoreError(str(e)) from None
    return manifest, hashlib.sha256(path.read_bytes()).hexdigest()


def read_fairseq_dictionary(path: str | os.PathLike) -> List[str]:
    """The symbols of a fairseq ``dict.txt`` by id: fairseq's four special symbols
    (``<s> <pad> </s> <unk>``, ids 0-3), then one symbol per line (``word count``).

    Raises:
        ScoreError: the file is missing or a line has no symbol.
    """
    symbols = ["<s>", "<pad>", "</s>", "<unk>"]
    try:
        for i, line in enumerate(read_lines(path), 1):
            parts = line.split()
            if not parts:
                raise ScoreError(f"{path}:{i}: empty line. Fix: binarize the level again")
            symbols.append(parts[0])
    except DataFormatError as e:
        raise ScoreError(str(e)) from None
    return symbols


def split_commands(data_dir: str | os.PathLike, split: str) -> List[str]:
    """The commands of ``split`` of a level, in sample-id order.

    Reads ``<split>.in`` of a raw level, or decodes ``<split>.in-out.in`` of a binarized one
    with its ``dict.in.txt`` (as fairseq-generate prints them on its ``S-`` lines; subword data,
    with ``spm.model`` beside it, detokenized as ``--post-process sentencepiece`` does).

    Raises:
        ScoreError: the level holds neither form of the split.
    """
    data_dir = Path(data_dir)
    raw = data_dir / f"{split}.in"
    if raw.is_file():
        try:
            return [" ".join(line.split()) for line in read_lines(raw)]
        except DataFormatError as e:
            raise ScoreError(str(e)) from None
    prefix = data_dir / f"{split}.in-out.in"
    if Path(f"{prefix}.bin").is_file() and (data_dir / "dict.in.txt").is_file():
        from ..scan.binarize import SPM_MODEL, BinarizeError, read_mmap_sequences

        subword = (data_dir / SPM_MODEL).is_file()
        try:
            symbols = read_fairseq_dictionary(data_dir / "dict.in.txt")
            lines = [" ".join(symbols[i] for i in seq[:-1]) for seq in read_mmap_sequences(prefix)]
            return [detokenize_sentencepiece(x) for x in lines] if subword else lines
        except (BinarizeError, IndexError) as e:
            raise ScoreError(f"{prefix}: {e if str(e) else 'a token id beyond dict.in.txt'}. "
                             "Fix: binarize the level again") from None
    raise ScoreError(f"{data_dir} holds no {split} split ({raw.name} or {prefix.name}.bin). "
                     "Fix: pass the --data level that was decoded, and its --split")


def check_sources(samples: Dict[int, Dict[str, str]], commands: Sequence[str],
                  gen_path: str | os.PathLike, data_dir: str | os.PathLike, split: str) -> None:
    """Refuse a decode that is not of ``commands``: same number of samples, ids
    ``0 .. len(commands) - 1``, and each ``S-`` line equal to the command of its id.

    Raises:
        ScoreError: naming the first sample that differs and the fix.
    """
    n = len(commands)
    if len(samples) != n:
        raise ScoreError(
            f"{gen_path} holds {len(samples)} samples but the {split} split has {n}. "
            f"Fix: if you decoded another split, pass its name with --split (e.g. --split "
            f"valid); otherwise decode the whole {split} split (fairseq-generate "
            "--required-batch-size-multiple 1 keeps the last sentences that the default "
            "multiple of 8 drops)")
    last = max(samples)
    if last != n - 1:
        raise ScoreError(
            f"{gen_path}: sample ids run up to {last} but the {split} split has ids "
            f"0..{n - 1}. Fix: pass the --split (and --data level) that was decoded")
    for sid in sorted(samples):
        if samples[sid]["S"] != commands[sid]:
            raise ScoreError(
                f"{gen_path}: sample {sid} is {samples[sid]['S']!r} but command {sid} of the "
                f"{split} split of {data_dir} is {commands[sid]!r}: the output is a decode of "
                "other data. Fix: pass the --data level and --split that were decoded")


def read_checkpoint_info(path: str | os.PathLike) -> dict:
    """Architecture, training seed and training data of a fairseq checkpoint.

    Returns:
        ``{"path": absolute path, "arch": str | None, "seed": int | None, "data": str | None}``
        from the checkpoint's ``cfg`` (or legacy ``args``).

    Raises:
        ScoreError: the file cannot be loaded as a checkpoint.
    """
    import torch

    from ..checkpoint import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure means: not a readable checkpoint
        raise ScoreError(f"{path}: not a readable fairseq checkpoint ({type(e).__name__}: "
                         f"{e}). Fix: pass --path with the checkpoint that was decoded") from None

    def get(section, key):
        cfg = state.get("cfg") or {}
        part = cfg.get(section) if isinstance(cfg, dict) else None
        value = part.get(key) if isinstance(part, dict) else getattr(part, key, None)
        if value is None and state.get("args") is not None:
            value = getattr(state["args"], key, None)
        return value

    arch = get("model", "arch") or get("model", "_name")
    seed = get("common", "seed")
    return {"path": str(Path(path).resolve()), "arch": arch,
            "seed": None if seed is None else int(seed), "data": get("task", "data")}


def data_variant(manifest: dict) -> str:
    """How a level's data departs from the paper's setup (restricted verbs, word tokens), as
    recorded in its manifest: ``""`` for the paper's setup, else ``+``-joined parts,
    ``<component>=<restricted value>`` for another component class (``build --component``)
    and ``spm<N>`` (``spm<N>-source`` for commands only) for subword tokens
    (``binarize --spm-vocab``), e.g. ``direction=left`` or ``spm48``.

    Aggregates keep each variant a curve of its own, named ``<experiment>+<variant>``, which
    the paper's tables (verbs, word tokens) do not cover."""
    parts = []
    component = manifest.get("component", "verb")
    if component != "verb":
        parts.append(f"{component}={manifest.get('restricted_value')}")
    subword = manifest.get("subword")
    if subword:
        side = subword.get("side", "both")
        parts.append(f"spm{subword.get('vocab_size')}" + ("" if side == "both" else f"-{side}"))
    return "+".join(parts)


def provenance(manifest: dict, manifest_sha256: str, data_dir: str | os.PathLike,
               split: str, checkpoint: str, preset: str, model: str, seed: int,
               checkpoint_path: Optional[str] = None) -> dict:
    """The metadata a ``score.json`` records about where its number comes from.

    Keys: experiment, variant (:func:`data_variant`), level, entropy_bits,
    target_entropy_bits, grammar, data_seed, n_train (training-set size N), split, data
    (absolute path), data_manifest_sha256, preset, model, seed (training seed), checkpoint
    (label) and checkpoint_path.

    Raises:
        ScoreError: an unknown checkpoint label.
    """
    if checkpoint not in CHECKPOINT_LABELS:
        raise ScoreError(f"unknown checkpoint label {checkpoint!r}. Fix: pass --checkpoint "
                         f"{', '.join(CHECKPOINT_LABELS)}")
    sizes = manifest.get("sizes", {})
    return {"experiment": manifest.get("experiment"), "variant": data_variant(manifest),
            "level": manifest.get("level"),
            "entropy_bits": manifest.get("entropy_bits"),
            "target_entropy_bits": manifest.get("target_entropy_bits"),
            "grammar": manifest.get("grammar"), "data_seed": manifest.get("seed"),
            "n_train": sizes.get("train"), "split": split,
            "data": str(Path(data_dir).resolve()), "data_manifest_sha256": manifest_sha256,
            "preset": preset, "model": model, "seed": seed, "checkpoint": checkpoint,
            "checkpoint_path": checkpoint_path}


HELD_OUT_SLOT = {"exp1": "first", "exp2": "second"}
"""The slot in which the test set executes the restricted verb (never seen there in training)."""


def graded_summary(rows: Sequence[Scored], metadata: dict) -> dict:
    """Graded metrics of scored examples (:func:`~fairseq_entropy.analysis.metrics.graded_scores`):
    clause exact match, the share right except in the held-out slot's clause, chrF and BLEU.

    The grammar is the metadata's (``paper`` or ``scan``), else guessed from the words
    (``turn`` or ``I_`` actions mean original SCAN); the held-out slot follows the experiment
    (:data:`HELD_OUT_SLOT`; none for other data).

    Raises:
        ScoreError: a reference that is not its command's interpretation.
    """
    from ..scan.grammar import Grammar
    from .metrics import graded_scores

    name = metadata.get("grammar")
    if name not in ("paper", "scan"):
        scan_like = any(r.source.split()[:1] == ["turn"] or " turn " in f" {r.source} "
                        or r.target.startswith("I_") for r in rows)
        name = "scan" if scan_like else "paper"
    try:
        graded = graded_scores([(r.source, r.target, r.hypothesis) for r in rows],
                               Grammar.by_name(name),
                               HELD_OUT_SLOT.get(metadata.get("experiment")))
    except ValueError as e:
        raise ScoreError(f"graded metrics: {e}") from None
    return graded.as_dict()


def write_score(gen_path: str | os.PathLike, out_dir: str | os.PathLike,
                metadata: Optional[dict] = None, data_dir: Optional[str | os.PathLike] = None,
                split: str = "test", force: bool = False) -> dict:
    """Score ``gen_path`` and write ``examples.tsv`` and ``score.json`` into ``out_dir``.

    Args:
        metadata: provenance recorded in ``score.json`` (:func:`provenance`).
        data_dir: the decoded level; when given, the output must be a decode of exactly the
            commands of its ``split`` (:func:`check_sources`).
        force: replace an existing ``score.json``.

    Raises:
        ScoreError: the output is unreadable (:func:`read_generate_output`), not a decode of
            the split, or ``out_dir`` already holds a score and not ``force`` (nothing is
            written).
    """
    out = Path(out_dir)
    if (out / "score.json").exists() and not force:
        raise ScoreError(f"{out / 'score.json'} already exists. Fix: pass --force to replace "
                         "it, or choose another --out")
    if out.exists() and not out.is_dir():
        raise ScoreError(f"{out} is a file. Fix: --out names a directory")
    rows, summary = score_generate_output(gen_path)
    if data_dir is not None:
        check_sources(read_generate_output(gen_path), split_commands(data_dir, split),
                      gen_path, data_dir, split)
    summary["graded"] = graded_summary(rows, metadata or {})
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(["id", "correct", "conjunction", "shared_verb", "source", "target", "hypothesis"])
    for r in rows:
        w.writerow([r.id, int(r.correct), r.conjunction, int(r.shared_verb), r.source,
                    r.target, r.hypothesis])
    atomic_write_text(out / "examples.tsv", buf.getvalue())
    record = {**(metadata or {}), **summary, "generate_output": str(Path(gen_path).resolve())}
    atomic_write_text(out / "score.json", json.dumps(record, indent=2) + "\n")
    return record


# ----------------------------------------------------------------------------- aggregation
def paper_results() -> List[dict]:
    """The paper's accuracies (mean, std over 5 seeds) from the packaged TSV."""
    text = resources.files("fairseq_entropy").joinpath("data/paper_results.tsv").read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def paper_model_name(model: str) -> str:
    """The paper's name of a preset's model (:data:`PAPER_MODEL_OF`, else unchanged)."""
    return PAPER_MODEL_OF.get(model, model)


def paper_curve(experiment: str, model: str, n_train: Optional[int]) -> List[dict]:
    """Rows of :func:`paper_results` for a preset's model and training-set size.

    Experiment 1 is matched on N (6000, 4000, 3000); Experiment 2 rows (whose N grows with
    the support) on the model alone.  Empty when the paper has no such curve.
    """
    name = paper_model_name(model)
    return [p for p in paper_results() if p["experiment"] == experiment and p["model"] == name
            and (experiment != "exp1" or p["train_size"] == str(n_train))]


#: types of the result columns read back from a ``results.tsv`` (the others are strings)
_RESULT_TYPES = {"n_train": int, "entropy_bits": float, "seed": int, "data_seed": int,
                 "accuracy": float, **{c: float for c in GRADED_COLUMNS}}


def read_results_tsv(path: str | os.PathLike) -> List[dict]:
    """The rows of a ``results.tsv`` that :func:`aggregate` wrote, as result rows (see
    :func:`collect_scores`; ``path`` is ``FILE:LINE``), so that committed results can be
    aggregated together with new runs.  Graded columns the file lacks (older aggregates)
    are None.

    Raises:
        ScoreError: the file lacks a column of :data:`RESULT_COLUMNS`, a value does not parse,
            or a checkpoint label is unknown; names the file, line and fix.
    """
    try:
        lines = read_lines(path)
    except DataFormatError as e:
        raise ScoreError(str(e)) from None
    reader = csv.DictReader(lines, delimiter="\t")
    missing = [c for c in RESULT_COLUMNS if c not in (reader.fieldnames or [])]
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
        row["path"] = f"{path}:{lineno}"
        rows.append(row)
    return rows


def collect_scores(roots: Iterable[str | os.PathLike]) -> List[dict]:
    """Every ``score.json`` under ``roots`` as result rows (columns :data:`RESULT_COLUMNS`,
    :data:`GRADED_COLUMNS` (None when the file has no graded metrics) and ``path``, the file
    it came from).  A score of a data variant (:func:`data_variant`) gets the experiment
    ``<experiment>+<variant>``, a curve of its own without paper values.  A root that is a
    ``.tsv`` file is read as an earlier aggregate's ``results.tsv``
    (:func:`read_results_tsv`).

    Raises:
        ScoreError: an unreadable score file, one without the provenance an aggregate needs,
            or one with an unknown checkpoint label; names the file and the fix.
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
            try:
                rec = read_json(f)
            except DataFormatError as e:
                raise ScoreError(str(e)) from None
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
            if rec.get("variant"):
                row["experiment"] = f"{rec['experiment']}+{rec['variant']}"
            rows.append(row)
    if not rows:
        raise ScoreError(f"no score.json under {', '.join(map(str, roots))}")
    rows.sort(key=lambda r: (*_sort_key(group_key(r)), int(r["seed"])))
    return rows


def group_key(row: dict) -> tuple:
    """The group of a result row: (experiment, preset, N, level, checkpoint)
    (:data:`GROUP_COLUMNS`); rows of a group differ only by their training seed."""
    return tuple(row[c] for c in GROUP_COLUMNS)


def _sort_key(key: tuple) -> tuple:
    return tuple((0, v) if isinstance(v, (int, float)) else (1, str(v)) for v in key)


def group_runs(rows: Sequence[dict]) -> Dict[tuple, List[dict]]:
    """Rows by :func:`group_key`, in a fixed order.

    Raises:
        ScoreError: two rows with the same group and seed (e.g. a run scored twice into
            different directories), naming both files.
    """
    groups: Dict[tuple, List[dict]] = defaultdict(list)
    seen: Dict[tuple, dict] = {}
    for r in rows:
        key = group_key(r)
        dup = seen.get((key, r["seed"]))
        if dup is not None:
            raise ScoreError(
                f"{r.get('path', '?')} and {dup.get('path', '?')} are both seed {r['seed']} of "
                f"{dict(zip(GROUP_COLUMNS, key))}. Fix: aggregate only one of them (move or "
                "remove the other score.json)")
        seen[(key, r["seed"])] = r
        groups[key].append(r)
    return {k: groups[k] for k in sorted(groups, key=_sort_key)}


def summarize(rows: Sequence[dict]) -> List[dict]:
    """Mean, sample std (0 for one seed) and n of accuracy per group (:func:`group_runs`).

    Raises:
        ScoreError: see :func:`group_runs`.
    """
    out = []
    for key, rs in group_runs(rows).items():
        accs = [float(r["accuracy"]) for r in rs]
        mean = sum(accs) / len(accs)
        std = math.sqrt(sum((a - mean) ** 2 for a in accs) / (len(accs) - 1)) \
            if len(accs) > 1 else 0.0
        h = rs[0]["entropy_bits"]
        out.append({**dict(zip(GROUP_COLUMNS, key)), "model": rs[0]["model"],
                    "entropy_bits": None if h is None else float(h), "mean": mean, "std": std,
                    "n": len(accs)})
    out.sort(key=lambda r: (*_sort_key((r["experiment"], r["preset"], r["n_train"],
                                        r["checkpoint"])),
                            math.inf if r["entropy_bits"] is None else r["entropy_bits"],
                            str(r["level"])))
    return out


def _curve_key(r: dict) -> tuple:
    return (r["experiment"], r["preset"], curve_size(r), r["checkpoint"])


def spearman(summary: Sequence[dict]) -> Dict[tuple, Optional[float]]:
    """Spearman rank correlation between entropy and mean accuracy per
    (experiment, preset, N, checkpoint); ``None`` when undefined (< 3 levels or constant)."""
    from scipy.stats import spearmanr

    groups = defaultdict(list)
    for r in summary:
        groups[_curve_key(r)].append(r)
    out = {}
    for key, rs in groups.items():
        rs = [r for r in rs if r["entropy_bits"] is not None]
        xs = [r["entropy_bits"] for r in rs]
        ys = [r["mean"] for r in rs]
        if len(rs) < 3 or len(set(ys)) < 2 or len(set(xs)) < 2:
            out[key] = None
        else:
            out[key] = float(spearmanr(xs, ys).statistic)
    return out


def format_table(summary: Sequence[dict]) -> str:
    """A plain-text table of the summary, one line per group."""
    lines = [f"{'experiment':<10} {'preset':<34} {'N':>6} {'ckpt':<5} {'level':<13} "
             f"{'H(bits)':>7} {'acc_mean':>8} {'acc_std':>7} {'n':>2}"]
    for r in summary:
        h = "n/a" if r["entropy_bits"] is None else f"{r['entropy_bits']:.3f}"
        lines.append(f"{r['experiment']:<10} {r['preset']:<34} {r['n_train']:>6} "
                     f"{r['checkpoint']:<5} {r['level']:<13} {h:>7} {r['mean']:>8.4f} "
                     f"{r['std']:>7.4f} {r['n']:>2}")
    return "\n".join(lines) + "\n"


def plot(summary: Sequence[dict], path: str | os.PathLike, checkpoint: str = "last") -> Path:
    """Plot accuracy (mean +- std over seeds) against entropy, one panel per experiment and
    one curve per (preset, N), each with the paper's curve for the preset's architecture and
    N (:func:`paper_curve`) drawn dashed in the same colour.  Levels without an entropy are
    left out."""
    import logging

    import matplotlib

    matplotlib.use("Agg")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib.pyplot as plt

    rows = [r for r in summary if r["entropy_bits"] is not None]
    rows = [r for r in rows if r["checkpoint"] == checkpoint] or rows
    experiments = sorted({r["experiment"] for r in rows}) or ["(no entropy levels)"]
    fig, axes = plt.subplots(1, len(experiments), figsize=(5.5 * len(experiments), 4.2),
                             squeeze=False)
    for ax, exp in zip(axes[0], experiments):
        curves = sorted({(r["preset"], curve_size(r), r["model"], r["checkpoint"])
                         for r in rows if r["experiment"] == exp}, key=_sort_key)
        for i, (preset, n_train, model, ckpt) in enumerate(curves):
            color = f"C{i % 10}"
            rs = [r for r in rows if r["experiment"] == exp and r["preset"] == preset
                  and curve_size(r) == n_train and r["checkpoint"] == ckpt]
            rs.sort(key=lambda r: r["entropy_bits"])
            ax.errorbar([r["entropy_bits"] for r in rs], [r["mean"] for r in rs],
                        yerr=[r["std"] for r in rs], marker="o", color=color, capsize=3,
                        label=f"{preset}, N={n_train} ({ckpt})")
            ref = paper_curve(exp, model, n_train)
            if ref:
                ax.errorbar([float(p["entropy_bits"]) for p in ref],
                            [float(p["accuracy_mean"]) for p in ref],
                            yerr=[float(p["accuracy_std"]) for p in ref], color=color,
                            linestyle="--", marker="x", alpha=0.6, capsize=2,
                            label=f"paper {paper_model_name(model)}, N={ref[0]['train_size']}")
        ax.set_title({"exp1": "Experiment 1 (mixing)", "exp2": "Experiment 2 (support)"}
                     .get(exp, exp))
        ax.set_xlabel("training-set entropy of the seen slot (bits)")
        ax.set_ylabel("exact-match accuracy")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        if curves:
            ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    path = Path(path)
    atomic_write_bytes(path, buf.getvalue())
    return path


def aggregate(roots: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> dict:
    """Write ``results.tsv``, ``accuracy_vs_entropy.png`` and the report
    (:func:`.report.write_report`: ``summary.tsv``, ``curves.tsv``, ``fig_*.png``,
    ``report.md``) into ``out_dir``.

    Returns:
        ``{"results", "summary", "plot", "report", "table", "spearman"}``.

    Raises:
        ScoreError: see :func:`collect_scores` and :func:`group_runs`.
    """
    rows = collect_scores(roots)
    summary = summarize(rows)
    out = Path(out_dir)

    def tsv(records, columns):
        buf = io.StringIO()
        w = csv.writer(buf, delimiter="\t", lineterminator="\n")
        w.writerow(columns)
        for r in records:
            w.writerow(["" if r[c] is None else f"{r[c]:.6f}" if isinstance(r[c], float)
                        else r[c] for c in columns])
        return buf.getvalue()

    atomic_write_text(out / "results.tsv", tsv(rows, RESULT_COLUMNS + GRADED_COLUMNS))
    # summary.tsv (seed statistics, CIs, agreement), curves.tsv, fig_*.png and report.md
    from .report import write_report

    # curves are named by preset; the paper's model of a preset comes from its runs' model
    paper_of_preset = {r["preset"]: paper_model_name(r["model"]) for r in rows}
    report = write_report(rows, out,
                          paper_model=lambda name: paper_of_preset.get(name, name))
    png = plot(summary, out / "accuracy_vs_entropy.png")
    return {"results": out / "results.tsv", "summary": report["summary"], "plot": png,
            "report": report["report"], "agreement": report["agreement"],
            "table": format_table(summary),
            "spearman": spearman(summary)}
