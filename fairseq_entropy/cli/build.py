"""``fairseq-entropy build exp1|exp2|scan|cogs``: generate an entropy-controlled data set
(:mod:`fairseq_entropy.scan.build_requests`; COGS: :mod:`fairseq_entropy.cogs.builder`)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..files import check_fairseq_path
from . import options


def add_parser(sub) -> None:
    """Add the ``build`` subcommand to the subparsers ``sub``."""
    from ..scan.builders import AUTHORS_SUPPORT_ORDER, RESTRICTED_VERB
    from ..scan.grammar import PAPER_VERBS

    b = sub.add_parser("build", help="generate an entropy-controlled data set")
    bsub = b.add_subparsers(dest="experiment", required=True)
    for name, help_ in (("exp1", "Experiment 1 (mixing)"), ("exp2", "Experiment 2 (support)")):
        e = bsub.add_parser(name, help=help_)
        e.add_argument("--out", required=True, help="output directory (one subdir per level)")
        e.add_argument("--seed", type=options.seed, default=1, help="data seed")
        e.add_argument("--verbs", type=options.names, default=",".join(PAPER_VERBS),
                       help="comma-separated verbs (the paper's 8)")
        e.add_argument("--valid-fraction", type=options.fraction, default=0.05,
                       help="validation size as a fraction, in (0, 1)")
        e.add_argument("--force", action="store_true", help="replace a different build in --out")
        if name == "exp1":
            e.add_argument("--levels", type=options.entropies, default="0,0.5,1,1.5,2,2.5,3",
                           help="target second-slot entropies in bits, comma-separated")
            e.add_argument("--n", type=options.positive_int, default=6000,
                           help="training commands per level")
            e.add_argument("--restricted-verb",
                           help=f"the verb never executed first in training (default "
                                f"{RESTRICTED_VERB[name]}; verbs' class only)")
            e.add_argument("--component", default="verb",
                           choices=["verb", "direction", "modifier", "repetition"],
                           help="component class whose second-slot entropy is controlled "
                                "(default verb, the paper's; others apply the same mixing to "
                                "directions, modifiers or repetitions)")
            e.add_argument("--restricted", default=None,
                           help="with --component other than verb: the value never executed "
                                "first in training (default: left, around or twice)")
        else:
            e.add_argument("--support", type=options.ints, default="1..8",
                           help="support sizes k, e.g. 1..8 or 1,2,4")
            e.add_argument("--restricted-verb", default=RESTRICTED_VERB[name],
                           help="the verb never executed second in training")
            e.add_argument("--support-order", type=options.names,
                           default=",".join(AUTHORS_SUPPORT_ORDER),
                           help="order in which verbs join the support, every verb once, "
                                "comma-separated (the restricted verb always comes first)")
    s = bsub.add_parser("scan", help="the whole original SCAN language as IN:/OUT: lines")
    s.add_argument("--out", required=True, help="output file")
    s.add_argument("--force", action="store_true", help="replace an existing --out file")
    s.add_argument("--actions", choices=["scan", "paper"], default="scan",
                   help="action vocabulary: SCAN's (I_WALK, I_TURN_LEFT, ...) or the paper's "
                        "(WALK, LTURN, ...)")
    c = bsub.add_parser("cogs", help="COGS training sets whose tested slot of a lexical case "
                                     "has a requested entropy (COGS's own sentences)")
    c.add_argument("cogs_dir", help="directory with COGS's train.tsv, dev.tsv, gen.tsv (and "
                                    "test.tsv), e.g. the data/ folder of COGS")
    c.add_argument("--case", required=True,
                   help="the lexical case whose held-out (word, slot) pair is tested, e.g. "
                        "subj_to_obj_common (theme@object) or prim_to_obj_proper")
    c.add_argument("--levels", type=options.entropies, default="0,1,2,3,4",
                   help="target entropies (bits) of the words in the tested slot, "
                        "comma-separated")
    c.add_argument("--seed", type=options.seed, default=1, help="data seed")
    c.add_argument("--out", required=True, help="output directory (one subdir per level)")
    c.add_argument("--slot-sentences", type=options.positive_int, default=None,
                   help="sentences filling the tested slot at every level (default: those of "
                        "its commonest word, so the range starts at 0 bits)")
    c.add_argument("--size", type=options.positive_int, default=None,
                   help="training sentences at every level (default: those holding the "
                        "held-out word, the slot sentences and every sentence without the "
                        "slot)")
    c.add_argument("--force", action="store_true", help="replace a different build in --out")


def requested_levels(args):
    """The levels ``build exp1|exp2`` would write for ``args``, built in memory.

    Returns:
        ``(grammar, levels, params)``: the grammar of ``--verbs``, one
        :class:`~fairseq_entropy.scan.levels.Level` per requested level, and the build
        manifest's params (:func:`~fairseq_entropy.scan.build_requests.request_exp1`,
        :func:`~fairseq_entropy.scan.build_requests.request_exp2`).

    Raises:
        BuildError: an option the builders refuse (unknown verb, unreachable level, ``--n``
            larger than the commands at a level, an empty split, ...).
    """
    from ..scan.build_requests import (check_restricted_class, check_verbs, request_exp1,
                                       request_exp2)
    from ..scan.builders import RESTRICTED_VERB
    from ..scan.grammar import Grammar

    grammar = Grammar.paper(check_verbs(args.verbs))
    if args.experiment == "exp1":
        check_restricted_class(args.component, args.restricted_verb)
        levels, params = request_exp1(
            grammar, args.levels, args.n, args.seed, args.valid_fraction,
            args.restricted_verb or RESTRICTED_VERB["exp1"],
            args.component, args.restricted,
            each=lambda xs: options.progress(xs, "build exp1", "level"))
    else:
        levels, params = request_exp2(
            grammar, args.support, args.seed, args.valid_fraction, args.restricted_verb,
            args.support_order, each=lambda xs: options.progress(xs, "build exp2", "level"))
    return grammar, levels, params


def run(args) -> None:
    """``build exp1|exp2|scan``: generate data (:func:`requested_levels`,
    :func:`fairseq_entropy.scan.builders.write_scan_language`)."""
    from ..scan.build_requests import level_summary
    from ..scan.builders import write_scan_language
    from ..scan.manifests import write_build

    if args.experiment == "cogs":
        return run_cogs(args)
    if args.experiment == "scan":
        if Path(args.out).is_dir():
            raise UserError(f"{args.out} is a directory. Fix: --out names the file to write")
        if Path(args.out).exists() and not args.force:
            raise UserError(f"{args.out} exists. Fix: pass --force to replace it, or choose "
                            "another --out")
        n = write_scan_language(args.out, args.actions)
        print(f"wrote {n} SCAN commands to {args.out}")
        return
    # the build is binarized next: fairseq-preprocess and fairseq-train would split its path
    check_fairseq_path(args.out, "--out")
    grammar, levels, params = requested_levels(args)
    write_build(args.out, grammar, levels, params, force=args.force)
    asked = round(args.valid_fraction * args.n) if args.experiment == "exp1" else None
    for lv in levels:
        print(level_summary(lv, grammar, asked))
    print(f"wrote {len(levels)} level(s) to {args.out}")


def run_cogs(args) -> None:
    """``build cogs``: plan every level (:func:`fairseq_entropy.cogs.builder.plan_cogs_build`;
    an unreachable level is refused before anything is written), then write them
    (:func:`fairseq_entropy.cogs.build_files.write_cogs_build`)."""
    from ..cogs.build_files import write_cogs_build
    from ..cogs.builder import plan_cogs_build

    check_fairseq_path(args.out, "--out")
    build = plan_cogs_build(args.cogs_dir, args.case, args.levels, args.seed,
                            args.slot_sentences, args.size)
    write_cogs_build(args.out, build, force=args.force)
    r = build.record
    low, high = r["reachable_bits"]
    print(f"{args.case}: {r['held_out']['word']} held out of {r['held_out']['slot']}; "
          f"{r['slot_sentences']} slot sentences of {r['size']}; reachable "
          f"[{low:.3f}, {high:.3f}] bits")
    for lv in build.levels:
        f = lv.fields
        print(f"{lv.name}: H = {f['entropy_bits']:.4f} bits (target "
              f"{f['target_entropy_bits']:g}), {f['slot_words']} words in the slot, "
              f"{len(lv.lines)} sentences")
    print(f"wrote {len(build.levels)} level(s) to {args.out}")
