"""``fairseq-entropy binarize``: a build directory or SCAN files into fairseq binary data
with the grammar's fixed dictionary (:mod:`fairseq_entropy.scan.binarize`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import UserError
from . import options


def add_parser(sub) -> None:
    """Add the ``binarize`` subcommand to the subparsers ``sub``."""
    z = sub.add_parser("binarize", help="fairseq-preprocess with the grammar's fixed dictionary")
    z.add_argument("build_dir", nargs="?", help="directory written by 'build' (or one level)")
    z.add_argument("--out", required=True, help="output directory: the data-bin (one subdirectory "
                   "per level for a build with several levels)")
    z.add_argument("--grammar", choices=["paper", "scan"], default=None,
                   help="dictionary to use (default: from the build manifest; 'scan' for "
                        "SCAN files)")
    z.add_argument("--train", help="SCAN-format training file (IN: ... OUT: ...)")
    z.add_argument("--valid", help="SCAN-format validation file (default: held out of --train)")
    z.add_argument("--test", help="SCAN-format test file")
    z.add_argument("--valid-fraction", type=options.fraction, default=None,
                   help="without --valid: fraction of --train held out for validation "
                        "(default 0.05)")
    z.add_argument("--seed", type=options.seed, default=1,
                   help="seed of the held-out validation draw")
    z.add_argument("--workers", type=options.positive_int, default=1,
                   help="fairseq-preprocess worker processes per level")
    z.add_argument("--jobs", type=options.positive_int, default=None,
                   help="levels binarized at once (default: one per CPU core)")
    z.add_argument("--spm-vocab", type=options.positive_int, default=None, metavar="N",
                   help="subword tokens: train an N-piece sentencepiece model on the training "
                        "commands and actions of the first level, cut every level with it "
                        "(one dictionary for all) and write spm.model beside the data; decode "
                        "with fairseq-generate --post-process sentencepiece (recipes/"
                        "train_level.sh does)")
    z.add_argument("--spm-side", choices=("both", "source"), default="both",
                   help="with --spm-vocab, the sides cut into pieces: both (commands and "
                        "actions, one joint dictionary) or source (commands only: the model is "
                        "trained on the commands and the actions stay whole words, so decoding "
                        "is the word-level task)")


def run(args) -> None:
    """``binarize``: a build directory or SCAN files into fairseq binary data."""
    from ..scan.binarize import binarize_build, binarize_scan_files, level_dirs
    from ..scan.preprocess import preprocess_processes
    from ..scan.subword import train_sentencepiece
    from ..scan.grammar import Grammar

    if args.spm_vocab and not args.build_dir:
        raise UserError("--spm-vocab applies to a build directory (its first level's training "
                        "split trains the model). Fix: pass the --out of 'fairseq-entropy "
                        "build', or drop --spm-vocab")
    if args.spm_side != "both" and not args.spm_vocab:
        raise UserError("--spm-side applies with --spm-vocab N (the subword model's size). "
                        "Fix: add --spm-vocab, or drop --spm-side")
    if args.build_dir and (args.train or args.valid or args.test):
        raise UserError("pass either a build directory or --train/--valid/--test, not both")
    if args.build_dir and args.valid_fraction is not None:
        raise UserError("--valid-fraction applies to --train files; a build directory has "
                        "its validation split. Fix: drop --valid-fraction (or rebuild with "
                        "'build ... --valid-fraction')")
    if args.build_dir:
        g = Grammar.by_name(args.grammar) if args.grammar else None
        dirs = level_dirs(args.build_dir)
        spm_model = (train_sentencepiece(dirs[0], args.spm_vocab, args.spm_side)
                     if args.spm_vocab else None)
        if spm_model is not None:
            files = "train.{in,out}" if args.spm_side == "both" else "train.in"
            print(f"sentencepiece: {args.spm_vocab} pieces trained on {dirs[0]}/{files}")
        if dirs == [Path(args.build_dir)]:
            outs = binarize_build(args.build_dir, args.out, g, args.workers, spm_model,
                                  args.spm_side)
        else:  # levels in parallel, with a progress bar; fairseq is imported once per process
            from concurrent.futures import ThreadPoolExecutor, as_completed

            jobs = min(args.jobs or os.cpu_count() or 1, len(dirs))
            with preprocess_processes(jobs), ThreadPoolExecutor(jobs) as pool:
                futures = {pool.submit(binarize_build, d, Path(args.out) / d.name, g,
                                       args.workers, spm_model, args.spm_side): i
                           for i, d in enumerate(dirs)}
                done = {}
                for f in options.progress(as_completed(futures), "binarize", "level", len(futures)):
                    done[futures[f]] = f.result()  # the first error is raised here
            outs = [o for i in sorted(done) for o in done[i]]
    else:
        g = Grammar.by_name(args.grammar or "scan")
        outs = [binarize_scan_files(args.out, g, args.train, args.valid, args.test,
                                    args.workers, args.valid_fraction, args.seed)]
        man = json.loads((Path(args.out) / "manifest.json").read_text())
        held = man["valid"]
        if "fraction" in held:
            print(f"no --valid file: held out {man['sizes']['valid']} of the "
                  f"{man['sizes']['train'] + man['sizes']['valid']} commands of {args.train} "
                  f"for validation (fraction {held['fraction']}, seed {held['seed']})")
        pairs = ", ".join(f"({v}, {slot})" for v, slot in man["restricted_pairs"]) or "none"
        print(f"splits: {', '.join(f'{k} {v}' for k, v in man['sizes'].items())}; "
              f"(verb, slot) pairs in test but not in train: {pairs}")
    for o in outs:
        print(f"binarized {o}")
