"""``fairseq-entropy build exp1|exp2|scan``: generate an entropy-controlled data set
(:mod:`fairseq_entropy.scan.builders`)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from . import options


def add_parser(sub) -> None:
    """Add the ``build`` subcommand to the subparsers ``sub``."""
    from ..scan.builders import AUTHORS_SUPPORT_ORDER
    from ..scan.grammar import PAPER_VERBS

    b = sub.add_parser("build", help="generate an entropy-controlled data set")
    bsub = b.add_subparsers(dest="experiment", required=True)
    for name, help_ in (("exp1", "Experiment 1 (mixing)"), ("exp2", "Experiment 2 (support)")):
        e = bsub.add_parser(name, help=help_)
        e.add_argument("--out", required=True, help="output directory (one subdir per level)")
        e.add_argument("--seed", type=options.seed, default=1, help="data seed")
        e.add_argument("--verbs", type=options.names, default=list(PAPER_VERBS),
                       help="comma-separated verbs (default: the paper's 8)")
        e.add_argument("--valid-fraction", type=options.fraction, default=0.05,
                       help="validation size as a fraction, in (0, 1)")
        e.add_argument("--force", action="store_true", help="replace a different build in --out")
        if name == "exp1":
            e.add_argument("--levels", type=options.floats, default=[0, 0.5, 1, 1.5, 2, 2.5, 3],
                           help="target second-slot entropies in bits (default 0,0.5,...,3)")
            e.add_argument("--n", type=options.positive_int, default=6000,
                           help="training commands per level")
            e.add_argument("--restricted-verb", default="jump",
                           help="the verb never executed first in training")
            e.add_argument("--component", default="verb",
                           choices=["verb", "direction", "modifier", "repetition"],
                           help="component class whose second-slot entropy is controlled "
                                "(default verb, the paper's; others apply the same mixing to "
                                "directions, modifiers or repetitions)")
            e.add_argument("--restricted", default=None,
                           help="with --component other than verb: the value never executed "
                                "first in training (default: left, around or twice)")
        else:
            e.add_argument("--support", type=options.ints, default=list(range(1, 9)),
                           help="support sizes k, e.g. 1..8 or 1,2,4")
            e.add_argument("--restricted-verb", default="lunge",
                           help="the verb never executed second in training")
            e.add_argument("--support-order", type=options.names,
                           default=list(AUTHORS_SUPPORT_ORDER),
                           help="order in which verbs join the support (the restricted verb "
                                "always comes first)")
    s = bsub.add_parser("scan", help="the whole original SCAN language as IN:/OUT: lines")
    s.add_argument("--out", required=True, help="output file")
    s.add_argument("--actions", choices=["scan", "paper"], default="scan",
                   help="action vocabulary: SCAN's (I_WALK, I_TURN_LEFT, ...) or the paper's "
                        "(WALK, LTURN, ...)")


DEFAULT_RESTRICTED_VALUE = {"direction": "left", "modifier": "around", "repetition": "twice"}


def run(args) -> None:
    """``build exp1|exp2|scan``: generate data (see :mod:`fairseq_entropy.scan.builders`)."""
    from ..scan.builders import build_exp1, build_exp2, write_scan_language
    from ..scan.components import build_exp1_component
    from ..scan.manifests import write_build
    from ..scan.grammar import Grammar

    if args.experiment == "scan":
        if Path(args.out).is_dir():
            raise UserError(f"{args.out} is a directory. Fix: --out names the file to write")
        n = write_scan_language(args.out, args.actions)
        print(f"wrote {n} SCAN commands to {args.out}")
        return
    grammar = Grammar.paper(args.verbs)
    if args.experiment == "exp1" and args.component != "verb":
        restricted = args.restricted or DEFAULT_RESTRICTED_VALUE[args.component]
        levels = [lv for target in options.progress(args.levels, "build exp1", "level")
                  for lv in build_exp1_component(grammar, args.component, restricted, [target],
                                                 args.n, args.seed, args.valid_fraction)]
        params = {"builder": "exp1-mixing", "seed": args.seed, "n_train": args.n,
                  "component": args.component, "restricted_value": restricted,
                  "valid_fraction": args.valid_fraction}
    elif args.experiment == "exp1":
        if args.restricted is not None:
            raise UserError("--restricted applies to --component direction|modifier|repetition."
                            " Fix: use --restricted-verb for verbs")
        # one call per level (each level has its own seeded generator, so the data are the
        # same as from one call with every level)
        levels = [lv for target in options.progress(args.levels, "build exp1", "level")
                  for lv in build_exp1(grammar, [target], args.n, args.restricted_verb,
                                       args.seed, args.valid_fraction)]
        params = {"builder": "exp1-mixing", "seed": args.seed, "n_train": args.n,
                  "restricted_verb": args.restricted_verb,
                  "valid_fraction": args.valid_fraction}
    else:
        levels = [lv for k in options.progress(args.support, "build exp2", "level")
                  for lv in build_exp2(grammar, [k], args.restricted_verb, args.seed,
                                       args.support_order, args.valid_fraction)]
        params = {"builder": "exp2-support", "seed": args.seed,
                  "restricted_verb": args.restricted_verb, "support_order": args.support_order,
                  "valid_fraction": args.valid_fraction}
    write_build(args.out, grammar, levels, params, force=args.force)
    for lv in levels:
        man = lv.manifest(grammar)
        print(f"{lv.name}: target {lv.target_bits:.3f} bits, measured {man['entropy_bits']:.4f} "
              f"bits ({lv.controlled_slot} slot); train {man['sizes']['train']}, valid "
              f"{man['sizes']['valid']}, test {man['sizes']['test']}")
    print(f"wrote {len(levels)} level(s) to {args.out}")
