"""``fairseq-entropy aggregate``: results.tsv, summary, curves, plots and report.md from
``score.json`` files (and earlier ``results.tsv``)."""

from __future__ import annotations


def add_parser(sub) -> None:
    """Add the ``aggregate`` subcommand to the subparsers ``sub``."""
    a = sub.add_parser("aggregate", help="results.tsv, summary and plot from score.json files")
    a.add_argument("roots", nargs="+", help="run directories (searched for score.json), "
                   "score.json files, or results.tsv files of earlier aggregates (to add new "
                   "seeds or levels to committed results)")
    a.add_argument("--out", required=True, help="output directory for results.tsv, summary.tsv, "
                   "curves.tsv, the figures and report.md (and cases.tsv and cases.md, accuracy "
                   "per case over seeds, for data with cases such as COGS)")
    a.add_argument("--force", action="store_true",
                   help="replace the aggregate --out holds (its tables, figures and report; "
                        "other files stay)")


def run(args) -> None:
    """``aggregate``: results.tsv, summary.tsv and the plot from score.json files."""
    from ..analysis.aggregate import aggregate

    res = aggregate(args.roots, args.out, force=args.force)
    print(res["table"], end="")
    for (exp, preset, n_train, ckpt, schedule), rho in sorted(res["spearman"].items(),
                                                              key=str):
        print(f"Spearman(entropy, accuracy) {exp} {preset} N={n_train} {ckpt} "
              f"[schedule {schedule}]: "
              f"{'n/a' if rho is None else f'{rho:.3f}'}")
    for line in res["agreement"]:
        print(line)
    print(f"results: {res['results']}")
    if res["report"] is not None:
        print(f"summary: {res['summary']}\ncurves:  {res['curves']}")
        for fig in res["figures"]:
            print(f"figure:  {fig}")
        if res["not_drawn"]:
            print(f"figures: {res['not_drawn']}")
        else:
            print(f"plot:    {res['plot']}")
        print(f"report:  {res['report']}")
    if res["cases"] is not None:
        print(f"cases:   {res['cases']} ({res['cases'].with_suffix('.md').name} beside it)")
    elif any(exp.split("+", 1)[0] == "cogs" for exp in res["experiments"]):
        print("cases:   not written: the per-case accuracies are in the runs' score.json, "
              "not in a results.tsv (aggregate the run directories for cases.tsv)")
