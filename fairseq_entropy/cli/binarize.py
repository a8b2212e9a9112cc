"""``fairseq-entropy binarize``: a build directory or SCAN files into fairseq binary data
with the grammar's fixed dictionary (:mod:`fairseq_entropy.scan.binarize`)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from . import options


def add_parser(sub) -> None:
    """Add the ``binarize`` subcommand to the subparsers ``sub``."""
    z = sub.add_parser("binarize", help="fairseq-preprocess with the grammar's fixed dictionary")
    z.add_argument("build_dir", nargs="?", help="directory written by 'build' (or one level); "
                   "with --format cogs, the directory of the COGS files")
    z.add_argument("--out", required=True, help="output directory: the data-bin (one subdirectory "
                   "per level for a build with several levels)")
    z.add_argument("--grammar", choices=["paper", "scan"], default=None,
                   help="dictionary to use (default: from the build manifest; 'scan' for "
                        "SCAN files)")
    z.add_argument("--train", help="SCAN-format training file (IN: ... OUT: ...)")
    z.add_argument("--valid", help="SCAN-format validation file (default: held out of --train)")
    z.add_argument("--test", help="SCAN-format test file")
    z.add_argument("--experiment", choices=("exp1", "exp2"), default=None,
                   help="with --train/--test: state the experiment the files belong to (e.g. "
                        "the paper authors' own files), checked against them: exp1, the "
                        "restricted verb is never executed first in training; exp2, never "
                        "second. The level is then one of that experiment, which its presets "
                        "train on (default: a level of experiment 'scan')")
    z.add_argument("--restricted-verb", default=None, metavar="VERB",
                   help="with --experiment: the verb kept out of its slot in training "
                        "(default: jump for exp1, lunge for exp2)")
    z.add_argument("--support", type=options.positive_int, default=None, metavar="K",
                   help="with --experiment exp2: the support size k of the first slot, "
                        "checked against the training file (default: the verbs it holds)")
    z.add_argument("--valid-fraction", type=options.fraction, default=None,
                   help="without --valid: fraction of --train held out for validation "
                        "(default 0.05)")
    z.add_argument("--seed", type=options.seed, default=None,
                   help="with --train and no --valid: seed of the held-out validation draw "
                        "(default 1)")
    z.add_argument("--workers", type=options.processes, default=1,
                   help="fairseq-preprocess worker processes per level")
    z.add_argument("--jobs", type=options.processes, default=None,
                   help="levels binarized at once (default: one per CPU core)")
    z.add_argument("--spm-vocab", type=options.positive_int, default=None, metavar="N",
                   help="subword tokens: train an N-piece sentencepiece model on the training "
                        "commands and actions of the first level, cut every level with it "
                        "(one dictionary for all) and write spm.model beside the data; decode "
                        "with fairseq-generate --post-process sentencepiece (recipes/"
                        "train_level.sh does)")
    z.add_argument("--format", dest="data_format", choices=("pairs", "lm", "cogs"),
                   default="pairs",
                   help="pairs: commands and actions as fairseq translation data (the "
                        "systematicity task); lm: one sequence per command, 'command <sep> "
                        "actions </s>', for decoder-only models (the systematicity_lm task; "
                        "fairseq's language_modeling task loads it too); recorded in "
                        "manifest.json; cogs: BUILD_DIR holds COGS's train.tsv, dev.tsv, "
                        "test.tsv, gen.tsv (sentence, logical form, case), written as the "
                        "splits train, valid, test, gen with dictionaries from train and the "
                        "cases in <split>.case")
    z.add_argument("--spm-side", choices=("both", "source"), default="both",
                   help="with --spm-vocab, the sides cut into pieces: both (commands and "
                        "actions, one joint dictionary) or source (commands only: the model is "
                        "trained on the commands and the actions stay whole words, so decoding "
                        "is the word-level task)")


def check_out_apart(out: str, inputs: dict) -> None:
    """Refuse an ``--out`` that is an input, lies inside one or holds one: the output replaces
    ``--out`` as a whole when it is complete, so the input would be lost or written into.

    Args:
        out: the ``--out`` path.
        inputs: option name -> path (or None when not given).

    Raises:
        UserError: names the option, both paths and the fix.
    """
    o = Path(out).resolve()
    for option, path in inputs.items():
        if not path:
            continue
        i = Path(path).resolve()
        how = ("is" if o == i else "is inside" if i in o.parents else
               "holds" if o in i.parents else None)
        if how:
            raise UserError(f"--out {out} {how} the input {option} {path}; binarizing replaces "
                            "--out as a whole, so the input would be lost. Fix: choose an "
                            "--out outside the input, e.g. data-bin/" + (Path(path).name or "out"))


def run(args) -> None:
    """``binarize``: a build directory or SCAN files into fairseq binary data."""
    if args.data_format == "cogs":
        return run_cogs(args)
    from ..files import check_fairseq_path, read_json
    from ..scan.binarize import binarize_build_in_parallel, binarize_scan_files, level_dirs
    from ..scan.grammar import Grammar
    from ..scan.scan_files import scan_files_summary
    from ..scan.subword import train_sentencepiece

    if args.spm_vocab and not args.build_dir:
        raise UserError("--spm-vocab applies to a build directory (its first level's training "
                        "split trains the model). Fix: pass the --out of 'fairseq-entropy "
                        "build', or drop --spm-vocab")
    if args.spm_vocab and args.data_format == "lm":
        raise UserError("--format lm writes word-level data. Fix: drop --spm-vocab, or use "
                        "--format pairs")
    if args.spm_side != "both" and not args.spm_vocab:
        raise UserError("--spm-side applies with --spm-vocab N (the subword model's size). "
                        "Fix: add --spm-vocab, or drop --spm-side")
    if args.build_dir and (args.train or args.valid or args.test):
        raise UserError("pass either a build directory or --train/--valid/--test, not both. "
                        "Fix: drop BUILD_DIR to binarize SCAN files, or drop --train/--valid/"
                        "--test to binarize a build")
    if args.seed is not None and (args.build_dir or args.valid):
        raise UserError(f"--seed {args.seed} draws the validation split held out of --train; "
                        + ("a build directory has its validation split" if args.build_dir
                           else "--valid gives it") + ". Fix: drop --seed")
    if args.build_dir and args.valid_fraction is not None:
        raise UserError("--valid-fraction applies to --train files; a build directory has "
                        "its validation split. Fix: drop --valid-fraction (or rebuild with "
                        "'build ... --valid-fraction')")
    stated = [o for o, v in (("--experiment", args.experiment),
                             ("--restricted-verb", args.restricted_verb),
                             ("--support", args.support)) if v is not None]
    if args.build_dir and stated:
        raise UserError(f"{', '.join(stated)} states the experiment of --train/--test files; "
                        "a build directory records its own. Fix: drop "
                        f"{', '.join(stated)}")
    if not (args.build_dir or args.train or args.valid or args.test):
        raise UserError("nothing to binarize. Fix: pass BUILD_DIR (the --out of "
                        "'fairseq-entropy build', or one of its levels) or SCAN files with "
                        "--train/--valid/--test FILE")
    check_fairseq_path(args.out, "--out")
    check_out_apart(args.out, {"BUILD_DIR": args.build_dir, "--train": args.train,
                               "--valid": args.valid, "--test": args.test})
    if args.build_dir:
        check_fairseq_path(args.build_dir, "BUILD_DIR", ",")
        g = Grammar.by_name(args.grammar) if args.grammar else None
        spm_model = None
        if args.spm_vocab:
            first = level_dirs(args.build_dir)[0]
            spm_model = train_sentencepiece(first, args.spm_vocab, args.spm_side)
            files = "train.{in,out}" if args.spm_side == "both" else "train.in"
            print(f"sentencepiece: {args.spm_vocab} pieces trained on {first}/{files}")
        outs = binarize_build_in_parallel(
            args.build_dir, args.out, g, args.workers, args.jobs, spm_model, args.spm_side,
            fmt=args.data_format,
            each=lambda done, total: options.progress(done, "binarize", "level", total))
    else:
        g = Grammar.by_name(args.grammar or "scan")
        outs = [binarize_scan_files(args.out, g, args.train, args.valid, args.test,
                                    args.workers, args.valid_fraction,
                                    1 if args.seed is None else args.seed,
                                    fmt=args.data_format, experiment=args.experiment,
                                    restricted_verb=args.restricted_verb,
                                    support=args.support)]
        print(scan_files_summary(read_json(Path(args.out) / "manifest.json"), args.train),
              end="")
    for o in outs:
        print(f"binarized {o}")


def run_cogs(args) -> None:
    """``binarize --format cogs``: COGS files into fairseq binary data
    (:func:`fairseq_entropy.cogs.binarize.binarize_cogs`)."""
    from ..cogs.binarize import binarize_cogs
    from ..files import check_fairseq_path

    given = [o for o, v in (("--train", args.train), ("--valid", args.valid),
                            ("--test", args.test), ("--spm-vocab", args.spm_vocab),
                            ("--grammar", args.grammar),
                            ("--experiment", args.experiment),
                            ("--restricted-verb", args.restricted_verb),
                            ("--support", args.support),
                            ("--valid-fraction", args.valid_fraction),
                            ("--seed", args.seed is not None)) if v]
    if given or not args.build_dir:
        raise UserError(f"--format cogs reads the COGS files of one directory"
                        f"{' and takes no ' + ', '.join(given) if given else ''}. Fix: "
                        "fairseq-entropy binarize --format cogs DIR --out OUT, DIR holding "
                        "train.tsv, dev.tsv, test.tsv, gen.tsv")
    check_fairseq_path(args.out, "--out")
    check_out_apart(args.out, {"BUILD_DIR": args.build_dir})
    m = binarize_cogs(args.build_dir, args.out, args.workers)
    sizes = ", ".join(f"{k} {v}" for k, v in m["sizes"].items())
    print(f"COGS ({m['lf_format']} logical forms): {sizes}")
    if m.get("case"):
        print(f"{m['level']} of build cogs: case {m['case']}, {m['entropy_bits']:.4f} bits in "
              f"{m['held_out']['slot']} (target {m['target_entropy_bits']:g}); its "
              f"{m['sizes']['gen_case']} gen sentences are the split gen_case")
    for split, u in m["unknown_tokens"].items():
        if u["sentences"]:
            print(f"{split}: {u['source']} source and {u['target']} target tokens outside the "
                  f"training dictionaries (<unk>), in {u['sentences']} sentences")
    print(f"binarized {args.out}")
