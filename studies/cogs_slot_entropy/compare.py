"""Slot entropy per COGS case beside published per-case accuracies, and the rank correlation
over the lexical cases.

    python studies/cogs_slot_entropy/compare.py ENTROPY_TSV LOGS_DIR OUT_DIR \
        [CASES_TSV ...]

ENTROPY_TSV: ``fairseq-entropy measure --format cogs --tsv`` of gen.tsv
(results/cogs_slot_entropy/gen_variable_free.tsv).  LOGS_DIR: the per-seed, per-case result
logs of Wu, Manning & Potts (2023) from github.com/frankaging/ReCOGS (commit 1b6eca8,
``logs/{transformer,lstm}/*_{cogs,variable_free}_cogs.json``: models trained on COGS's
training set, decoded on its gen set; accuracies in percent, 5 seeds).  CASES_TSV: optional
``cases.tsv`` files of ``fairseq-entropy aggregate`` (this product's runs; split gen, last
checkpoint).  Beside the script, published.tsv holds the per-case accuracies of Akyürek &
Andreas (2021, "Lexicon Learning for Few-Shot Neural Sequence Modeling", ACL): their LSTM,
LSTM + copy and LexLSTM, mean and std over 10 seeds, all 21 cases, read from the stored output
of cell 113 of analyze.ipynb in github.com/ekinakyurek/lexical at commit 3956fa2.

Writes OUT_DIR/comparison.tsv (one row per case: entropies, then each model's mean accuracy
over its seeds, empty where the source does not report the case), OUT_DIR/sources.tsv (the
citation of every accuracy column) and OUT_DIR/spearman.tsv (Spearman's rho between each
entropy and each model's accuracy over the lexical cases that model reports, all of them and
those whose word was seen inside a sentence rather than as a primitive, with the
two-sided permutation p-value of scipy.stats.permutation_test, exact over all pairings).
"""
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

ENTROPIES = ("seen_slot_entropy_bits", "tested_slot_entropy_bits")
LOGS = {  # file -> (column, citation)
    "Mar-07-2023_ende_transformer_cogs_cogs.json": (
        "wu2023_transformer_cogs",
        "Wu, Manning & Potts (2023), ReCOGS (TACL 11), Transformer trained on COGS (original "
        "LFs); github.com/frankaging/ReCOGS@1b6eca8 logs/transformer/"
        "Mar-07-2023_ende_transformer_cogs_cogs.json, mean of seeds 42,66,77,88,99"),
    "Mar-07-2023_ende_lstm_cogs_cogs.json": (
        "wu2023_lstm_cogs",
        "Wu, Manning & Potts (2023), ReCOGS, LSTM trained on COGS (original LFs); "
        "github.com/frankaging/ReCOGS@1b6eca8 logs/lstm/Mar-07-2023_ende_lstm_cogs_cogs.json, "
        "mean of seeds 42,66,77,88,99"),
    "Mar-07-2023_ende_transformer_variable_free_cogs.json": (
        "wu2023_transformer_variable_free",
        "Wu, Manning & Potts (2023), ReCOGS, Transformer trained on variable-free COGS; "
        "github.com/frankaging/ReCOGS@1b6eca8 logs/transformer/"
        "Mar-07-2023_ende_transformer_variable_free_cogs.json, mean of seeds 42,66,77,88,99"),
    "Mar-06-2023_ende_lstm_variable_free_cogs.json": (
        "wu2023_lstm_variable_free",
        "Wu, Manning & Potts (2023), ReCOGS, LSTM trained on variable-free COGS; "
        "github.com/frankaging/ReCOGS@1b6eca8 logs/lstm/"
        "Mar-06-2023_ende_lstm_variable_free_cogs.json, mean of seeds 42,66,77,88,99"),
}
AKYUREK = ("Akyürek & Andreas (2021), Lexicon Learning for Few-Shot Neural Sequence Modeling "
           "(ACL), {model} trained on COGS; github.com/ekinakyurek/lexical@3956fa2 "
           "analyze.ipynb, cell 113 (cogs_cat_results['{key}']), mean of 10 seeds")
PUBLISHED = {  # column of published.tsv -> citation
    "akyurek2021_lstm": AKYUREK.format(model="LSTM", key="lstm"),
    "akyurek2021_lstm_copy": AKYUREK.format(model="LSTM + copy", key="lstmcopy"),
    "akyurek2021_lexlstm": AKYUREK.format(model="LexLSTM (simple lexicon)", key="simple"),
}
#: subsets of the lexical cases the rank correlation is taken over: all of them, and those
#: whose word was seen inside a sentence (not only as a one-word primitive example)
SUBSETS = {
    "all": lambda r: True,
    "seen_in_a_sentence": lambda r: r.get("seen_slot") != "word@primitive",
}
#: keys of the logs that are summaries, not cases
NOT_CASES = {"lex_acc", "overall_acc", "test_acc"}


def read_tsv(path):
    with open(path) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def published(logs_dir):
    """column -> {case: mean accuracy (fraction)}, column -> citation."""
    acc, cite = {}, {}
    for name, (column, citation) in LOGS.items():
        runs = json.loads((Path(logs_dir) / name).read_text())
        cases = {}
        for run in runs.values():
            for case, value in run.items():
                if case not in NOT_CASES:
                    cases.setdefault(case, []).append(value / 100)
        acc[column] = {c: float(np.mean(v)) for c, v in cases.items()}
        cite[column] = citation
    return acc, cite


def published_table(path=Path(__file__).with_name("published.tsv")):
    """column -> {case: accuracy (fraction)}, column -> citation, from published.tsv."""
    acc = {}
    for r in read_tsv(path):
        acc.setdefault(r["column"], {})[r["case"]] = float(r["accuracy"])
    return acc, {column: PUBLISHED[column] for column in acc}


def ours(paths):
    acc, cite = {}, {}
    for path in paths:
        for r in read_tsv(path):
            if r["split"] != "gen" or r["checkpoint"] != "last" or r["case"].startswith("type:"):
                continue
            column = f"ours_{r['preset']}_{r['level']}"
            acc.setdefault(column, {})[r["case"]] = float(r["mean"])
            cite[column] = f"this product: {path}, seeds {r['seeds']}, last checkpoint"
    return acc, cite


def spearman_permutation(x, y):
    """(rho, two-sided permutation p) of Spearman's rho; (nan, nan) when either side is
    constant or fewer than 3 pairs."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    rho = stats.spearmanr(x, y).statistic
    res = stats.permutation_test((x, y), lambda a, b: stats.spearmanr(a, b).statistic,
                                 permutation_type="pairings", alternative="two-sided",
                                 n_resamples=math.inf if len(x) <= 8 else 99999,
                                 random_state=0)
    return float(rho), float(res.pvalue)


def main(entropy_tsv, logs_dir, out_dir, *cases_tsv):
    entropy = read_tsv(entropy_tsv)
    acc, cite = published(logs_dir)
    for a2, c2 in (published_table(), ours(cases_tsv)):
        acc.update(a2)
        cite.update(c2)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    columns = ["case", "type", "word", "held_out_slot", *ENTROPIES, *acc]
    with open(out / "comparison.tsv", "w") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(columns)
        for r in sorted(entropy, key=lambda r: (r["type"], r["case"])):
            w.writerow([r["case"], r["type"], r["word"], r["held_out_slot"],
                        *(r[e] for e in ENTROPIES),
                        *("" if r["case"] not in acc[m] else f"{acc[m][r['case']]:.4f}"
                          for m in acc)])
    with open(out / "sources.tsv", "w") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["column", "source"])
        for m in acc:
            w.writerow([m, cite[m]])
    with open(out / "spearman.tsv", "w") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["model", "entropy", "cases", "lexical_cases", "rho", "p_permutation"])
        for m in acc:
            for subset, keep in SUBSETS.items():
                for e in ENTROPIES:
                    pairs = [(float(r[e]), acc[m][r["case"]]) for r in entropy
                             if r["type"] == "lexical" and r["case"] in acc[m] and r[e]
                             and keep(r)]
                    rho, p = spearman_permutation([x for x, _ in pairs],
                                                  [y for _, y in pairs])
                    w.writerow([m, e, subset, len(pairs),
                                "" if math.isnan(rho) else f"{rho:.4f}",
                                "" if math.isnan(p) else f"{p:.4f}"])
    for name in ("comparison.tsv", "spearman.tsv"):
        print(f"{out / name}:\n{(out / name).read_text()}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
