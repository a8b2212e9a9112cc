"""``fairseq-entropy predict``: a logistic in the entropy fitted to each curve of committed
results, H50 and H90 with bootstrap CIs over seeds, the leave-one-level-out error, and a
prediction at a split's slot entropy beside the accuracy measured there."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import UserError
from . import options

#: the measures of SCAN's splits and of Experiment 1 and 2 levels (recipes/measure_splits.sh)
PACKAGED_MEASURES = Path(__file__).resolve().parents[1] / "analysis" / "split_measures.tsv"

#: an entropy in bits (no upper bound: it depends on the number of verbs)
bits = options.number(float, 0.0, what="a number of bits >= 0")


def add_parser(sub) -> None:
    """Add the ``predict`` subcommand to the subparsers ``sub``."""
    from ..analysis.columns import CHECKPOINT_LABELS

    p = sub.add_parser("predict", help="fit accuracy against entropy per curve (H50, H90, "
                       "leave-one-level-out error) and predict a split's accuracy")
    p.add_argument("results", nargs="+", help="results.tsv files of fairseq-entropy aggregate "
                   "(e.g. results/exp1_cnn_authors/results.tsv), run directories or score.json "
                   "files: the curves to fit, 3 levels or more each")
    p.add_argument("--checkpoint", default="last", choices=CHECKPOINT_LABELS,
                   help="the checkpoint of the curves (and of --measured-accuracy)")
    p.add_argument("--preset", help="fit only this preset's curves (default: every curve)")
    p.add_argument("--split", help="predict at this split's slot entropy, read from "
                   "--split-measures: the training entropy of the verb slot in which its held-out "
                   "verb was seen (e.g. addprim_jump: jump held out of the second slot, seen "
                   "in the first)")
    p.add_argument("--split-measures", default=str(PACKAGED_MEASURES),
                   help="split_measures.tsv (fairseq-entropy measure --tsv) that --split is "
                   "read from (default: the packaged measures of SCAN's splits and of "
                   "Experiment 1 and 2 levels, written by recipes/measure_splits.sh)")
    p.add_argument("--entropy", type=bits, help="predict at this entropy (bits) instead of a "
                   "split's")
    p.add_argument("--measured-accuracy", help="the measured accuracy to compare with the "
                   "prediction, for the curve of the same preset (or, when no measured "
                   "preset has a curve, of the same model): a run directory, a score.json or a "
                   "results.tsv of the predicted split (one level, any number of seeds)")
    p.add_argument("--plot", help="also draw the curves, their fits with the 95%% bootstrap "
                   "band and the prediction into this PNG file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--tsv", action="store_true", help="print one tab-separated row per curve "
                   "and level (the curve's fit and prediction repeated on each)")


def _target(args) -> dict | None:
    """The entropy to predict at, with what it is (None when neither --split nor --entropy).

    Raises:
        UserError: both --split and --entropy; see :func:`.analysis.prediction.split_entropy`.
    """
    from ..analysis.prediction import split_entropy

    if args.split is not None and args.entropy is not None:
        raise UserError(f"--split {args.split} and --entropy {args.entropy:g}: both give the "
                        "entropy to predict at. Fix: give one of them")
    if args.entropy is not None:
        return {"entropy_bits": args.entropy, "what": "given by --entropy"}
    if args.split is None:
        if args.measured_accuracy is not None:
            raise UserError(f"--measured-accuracy {args.measured_accuracy}: there is no "
                            "prediction to compare it with. Fix: give --split NAME or "
                            "--entropy BITS")
        return None
    s = split_entropy(args.split_measures, args.split)
    return {**s, "what": f"{args.split} (training entropy of the {s['seen_slot']} verb slot, "
                         f"where {s['word']} was seen; held out of the {s['held_out_slot']}, "
                         f"{s['held_out_bits']:.3f} bits there; {s['source']})"}


def run(args) -> None:
    """``predict``: the fits, leave-one-level-out errors and prediction of
    :func:`fairseq_entropy.analysis.prediction.predict`, as a table, JSON or TSV, and with
    ``--plot`` their figure (:func:`fairseq_entropy.analysis.figures.plot_figure`)."""
    from ..analysis.aggregate import collect_scores
    from ..analysis.prediction import (measured_accuracy, predict, predict_json, predict_text,
                                predict_tsv)

    options.check_one_format(args)
    if args.plot and not args.plot.lower().endswith(".png"):
        raise UserError(f"--plot {args.plot}: the figure is a PNG image. Fix: give a file "
                        "name ending in .png")
    target = _target(args)
    rows = collect_scores(args.results)
    measured = None
    if args.measured_accuracy is not None:
        measured = measured_accuracy(collect_scores([args.measured_accuracy]), args.checkpoint,
                                     f"--measured-accuracy {args.measured_accuracy}")
    records = predict(rows, args.checkpoint, args.preset,
                      None if target is None else target["entropy_bits"], measured,
                      where=" ".join(args.results))
    if args.plot:
        _plot(rows, records, args)
        print(f"figure: {args.plot}", file=sys.stderr)  # stdout keeps the table or JSON
    if args.json:
        print(json.dumps(predict_json(records, target), indent=2))
    elif args.tsv:
        print(predict_tsv(records), end="")
    else:
        print(predict_text(records, target), end="")


def _plot(rows, records, args) -> None:
    """Draw the fitted curves of ``records`` into ``args.plot`` (one panel per curve)."""
    from ..analysis import statistics as st
    from ..analysis.figures import plot_figure
    from ..analysis.keys import curve_key

    wanted = {c["key"] for c in records}
    cells = [c for c in st.cell_statistics([r for r in rows if r["entropy_bits"] is not None])
             if curve_key(c) in wanted]
    fits = {c["key"]: c["fit"] for c in records}
    plot_figure(cells, [], "predict", args.plot, fits=fits,
                panel=lambda c: f"{c['experiment']}: {c['model']} N={c['train_size']}",
                title=f"Accuracy against entropy: logistic fit ({args.checkpoint} checkpoint)")
