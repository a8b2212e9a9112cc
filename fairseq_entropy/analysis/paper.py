"""The paper's numbers: Wold, Charpentier and Simon, *Systematic Generalization in Language
Models Scales with Information Entropy* (ACL Findings 2025, arXiv 2505.13089).

``paper_results.tsv`` (package data beside this module) holds the exact-match test accuracy
of the paper's figures, mean and std over 5 seeds, as fractions in [0, 1], one row per
(experiment, model, train_size, entropy_bits); ``train_size`` is ``support`` for
Experiment 2, whose N grows with the support.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from importlib import resources
from typing import Callable, Dict, List, Optional, Sequence

#: model names of the presets whose architecture the paper reports under another name
PAPER_MODEL_OF = {"transformer_exp2_l2": "transformer_sinusoidal",
                  "transformer_exp2_l3": "transformer_sinusoidal",
                  "transformer_rope_authors": "transformer_rope",
                  "transformer_relative_authors": "transformer_relative",
                  "cnn_authors": "cnn",
                  "stock_transformer": "transformer_sinusoidal",
                  "stock_transformer_exp2": "transformer_sinusoidal"}
#: suffix of a decoder-only preset's model name; the paper trains no decoder-only model, so
#: such a model is compared with the paper's encoder-decoder of the same block and positions
DECODER_ONLY_SUFFIX = "_lm"
#: the training size of the paper's Experiment 1 figure (the default of ``build exp1``)
DEFAULT_EXP1_TRAIN_SIZE = 6000
#: a cell is compared with the paper's level nearest its measured entropy, within this many bits
PAPER_LEVEL_TOLERANCE_BITS = 0.05


def paper_results() -> List[dict]:
    """The rows of ``paper_results.tsv`` as string dicts with the keys ``experiment, model,
    train_size, entropy_bits, accuracy_mean, accuracy_std`` (accuracies as fractions; mean
    and std over 5 seeds)."""
    text = resources.files(__package__).joinpath("paper_results.tsv").read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def paper_model_name(model: str) -> str:
    """The paper's name of a preset's model (:data:`PAPER_MODEL_OF`, else unchanged).

    A decoder-only model ``<name>_lm`` (:data:`DECODER_ONLY_SUFFIX`) gets the paper's name of
    ``<name>``, the encoder-decoder it is matched to: ``transformer_rope_lm`` ->
    ``transformer_rope``, ``stock_transformer_lm`` (fairseq's sinusoidal ``transformer_lm``) ->
    ``transformer_sinusoidal``.
    """
    if model.endswith(DECODER_ONLY_SUFFIX):
        model = model[:-len(DECODER_ONLY_SUFFIX)]
    return PAPER_MODEL_OF.get(model, model)


def paper_curve(experiment: str, model: str, n_train: Optional[int]) -> List[dict]:
    """Rows of :func:`paper_results` for a preset's model and training-set size.

    Experiment 1 is matched on N (6000, 4000, 3000); Experiment 2 rows (whose N grows with
    the support) on the model alone.  Empty when the paper has no such curve.
    """
    name = paper_model_name(model)
    return [p for p in paper_results() if p["experiment"] == experiment and p["model"] == name
            and (experiment != "exp1" or p["train_size"] == str(n_train))]


def paper_lookup(paper_rows: Sequence[dict],
                 paper_model: Callable[[str], str] = lambda m: m) -> Callable:
    """A function ``(experiment, model, N, entropy_bits) -> (paper row or None, note)`` over
    the rows of ``paper_results.tsv``.

    Args:
        paper_model: maps a curve name (model or preset) to the paper's model name.

    A level is matched to the paper's level nearest its entropy, within
    :data:`PAPER_LEVEL_TOLERANCE_BITS` (the paper lists levels rounded to 0.1 bit, e.g.
    log2 3 = 1.585 as 1.6; manifests record the measured entropy). Experiment 1 rows without a
    recorded N are matched to the paper's N = 6000 figure, and the note says so; Experiment 2
    is matched by support size (its entropy).
    """
    index: Dict[tuple, List[dict]] = defaultdict(list)
    for p in paper_rows:
        index[(p["experiment"], p["model"], str(p["train_size"]))].append(p)

    def nearest(key, bits):
        rows = index.get(key, [])
        best = min(rows, key=lambda p: abs(float(p["entropy_bits"]) - bits), default=None)
        return best if best is not None and \
            abs(float(best["entropy_bits"]) - bits) <= PAPER_LEVEL_TOLERANCE_BITS else None

    def find(experiment, model, n, bits):
        note = ""
        if experiment == "exp2":
            size = "support"
        elif n is None:
            size, note = str(DEFAULT_EXP1_TRAIN_SIZE), \
                f"N not recorded: compared with the paper's N = {DEFAULT_EXP1_TRAIN_SIZE}"
        else:
            size = str(n)
        return nearest((experiment, paper_model(model), size), float(bits)), note
    return find
