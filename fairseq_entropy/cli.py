"""``fairseq-entropy``: build, measure, binarize, score and aggregate.

Subcommands::

    fairseq-entropy build exp1 --out DIR [--levels 0,0.5,...] [--n N] [--restricted-verb jump]
    fairseq-entropy build exp2 --out DIR [--support 1..8] [--restricted-verb lunge]
    fairseq-entropy build scan --out FILE [--actions scan|paper]
    fairseq-entropy measure FILE... [--train FILE]
    fairseq-entropy binarize BUILD_DIR --out DATABIN | --train F --valid F --test F --out DIR
    fairseq-entropy score GENERATE_OUTPUT --out DIR [--data LEVEL_DIR --model M --seed S]
    fairseq-entropy aggregate RUNS_DIR... --out DIR
    fairseq-entropy train-args PRESET --data LEVEL_DATABIN [--epochs E]
    fairseq-entropy recipes-dir

Errors are printed as one line ``fairseq-entropy: error: ...`` with exit status 2; nothing is
written when a command fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import List, Optional, Sequence


def _floats(text: str) -> List[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")


def _ints(text: str) -> List[int]:
    out = []
    try:
        for part in text.split(","):
            part = part.strip()
            if ".." in part:
                a, b = part.split("..")
                out += list(range(int(a), int(b) + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 1,2,4 or 1..8, got {text!r}")
    return out


def _verbs(text: str) -> List[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _progress(items, desc: str, unit: str):
    """``items`` wrapped in a tqdm bar on stderr, shown only when stderr is a terminal."""
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit=unit, disable=None, leave=False, file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    from .scan.builders import AUTHORS_SUPPORT_ORDER
    from .scan.grammar import PAPER_VERBS

    p = argparse.ArgumentParser(prog="fairseq-entropy", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="generate an entropy-controlled data set")
    bsub = b.add_subparsers(dest="experiment", required=True)
    for name, help_ in (("exp1", "Experiment 1 (mixing)"), ("exp2", "Experiment 2 (support)")):
        e = bsub.add_parser(name, help=help_)
        e.add_argument("--out", required=True, help="output directory (one subdir per level)")
        e.add_argument("--seed", type=int, default=1)
        e.add_argument("--verbs", type=_verbs, default=list(PAPER_VERBS),
                       help="comma-separated verbs (default: the paper's 8)")
        e.add_argument("--valid-fraction", type=float, default=0.05)
        e.add_argument("--force", action="store_true", help="replace a different build in --out")
        if name == "exp1":
            e.add_argument("--levels", type=_floats, default=[0, 0.5, 1, 1.5, 2, 2.5, 3],
                           help="target second-slot entropies in bits (default 0,0.5,...,3)")
            e.add_argument("--n", type=int, default=6000, help="training commands per level")
            e.add_argument("--restricted-verb", default="jump")
        else:
            e.add_argument("--support", type=_ints, default=list(range(1, 9)),
                           help="support sizes k, e.g. 1..8 or 1,2,4")
            e.add_argument("--restricted-verb", default="lunge")
            e.add_argument("--support-order", type=_verbs, default=list(AUTHORS_SUPPORT_ORDER),
                           help="order in which verbs join the support (the restricted verb "
                                "always comes first)")
    s = bsub.add_parser("scan", help="the whole original SCAN language as IN:/OUT: lines")
    s.add_argument("--out", required=True, help="output file")
    s.add_argument("--actions", choices=["scan", "paper"], default="scan")

    m = sub.add_parser("measure", help="verb counts and entropy of each slot")
    m.add_argument("files", nargs="+", help="SCAN-format files or .in/.out pairs (either file)")
    m.add_argument("--train", help="training file: list (verb, slot) pairs the files have "
                                   "and it lacks")
    m.add_argument("--grammar", choices=["paper", "scan"], default=None,
                   help="grammar to validate with (default: guessed from the words)")
    m.add_argument("--json", action="store_true", help="print JSON")

    z = sub.add_parser("binarize", help="fairseq-preprocess with the grammar's fixed dictionary")
    z.add_argument("build_dir", nargs="?", help="directory written by 'build' (or one level)")
    z.add_argument("--out", required=True)
    z.add_argument("--grammar", choices=["paper", "scan"], default=None,
                   help="dictionary to use (default: from the build manifest; 'scan' for "
                        "SCAN files)")
    z.add_argument("--train"), z.add_argument("--valid"), z.add_argument("--test")
    z.add_argument("--workers", type=int, default=1)

    sc = sub.add_parser("score", help="exact-match accuracy of fairseq-generate output")
    sc.add_argument("generate_output")
    sc.add_argument("--out", required=True, help="directory for examples.tsv and score.json")
    sc.add_argument("--data", help="level directory (raw or binarized) with manifest.json")
    sc.add_argument("--model"), sc.add_argument("--seed", type=int)
    sc.add_argument("--checkpoint", default="last", help="label: last or best")
    sc.add_argument("--split", default="test", help="split that was decoded; with --data the "
                    "output must cover exactly that split's samples (without --data the sample "
                    "count is not checked)")

    a = sub.add_parser("aggregate", help="results.tsv, summary and plot from score.json files")
    a.add_argument("roots", nargs="+")
    a.add_argument("--out", required=True)

    t = sub.add_parser("train-args", help="print fairseq-train arguments of a preset")
    t.add_argument("preset")
    t.add_argument("--data", required=True, help="binarized level directory")
    t.add_argument("--presets", help="presets file (default: the presets.json shipped in "
                                     "fairseq_entropy/experiments)")
    t.add_argument("--epochs", type=float)
    t.add_argument("--max-update", type=int)
    t.add_argument("--field", help="print one field of the preset instead (e.g. model)")

    sub.add_parser("recipes-dir", help="print the directory of the shell recipes "
                                       "(train_level.sh, quickstart.sh)")
    return p


def _guess_grammar(examples):
    from .scan.grammar import Grammar

    words = {w for e in examples for w in e.command.split()}
    return Grammar.scan() if "turn" in words or any(
        e.actions.startswith("I_") for e in examples[:50]) else Grammar.paper()


def cmd_build(args) -> None:
    """``build exp1|exp2|scan``: generate data (see :mod:`fairseq_entropy.scan.builders`)."""
    from .scan.builders import build_exp1, build_exp2, write_build, write_scan_language
    from .scan.grammar import Grammar

    if args.experiment == "scan":
        if Path(args.out).is_dir():
            raise ValueError(f"{args.out} is a directory. Fix: --out names the file to write")
        n = write_scan_language(args.out, args.actions)
        print(f"wrote {n} SCAN commands to {args.out}")
        return
    grammar = Grammar.paper(args.verbs)
    if args.experiment == "exp1":
        # one call per level (each level has its own seeded generator, so the data are the
        # same as from one call with every level)
        levels = [lv for target in _progress(args.levels, "build exp1", "level")
                  for lv in build_exp1(grammar, [target], args.n, args.restricted_verb,
                                       args.seed, args.valid_fraction)]
        params = {"builder": "exp1-mixing", "seed": args.seed, "n_train": args.n,
                  "restricted_verb": args.restricted_verb,
                  "valid_fraction": args.valid_fraction}
    else:
        levels = [lv for k in _progress(args.support, "build exp2", "level")
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


def cmd_measure(args) -> None:
    """``measure``: verb counts and entropy of each slot, and unseen (verb, slot) pairs."""
    from .scan.datafiles import read_any
    from .scan.entropy import SLOTS, SlotStatistics, unseen_pairs
    from .scan.grammar import Grammar

    def load(path):
        ex = read_any(path)
        g = Grammar.by_name(args.grammar) if args.grammar else _guess_grammar(ex)
        ex = read_any(path, g)
        return g, SlotStatistics.of([g.parse(e.command) for e in ex], g.verbs)

    report = {}
    train_stats = load(args.train)[1] if args.train else None
    for f in args.files:
        g, st = load(f)
        rec = st.as_dict()
        if train_stats is not None:
            rec["unseen_in_train"] = [list(p) for p in unseen_pairs(train_stats, st)]
        report[f] = rec
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for f, rec in report.items():
        print(f"{f}: {rec['n_commands']} commands")
        for slot in SLOTS:
            h = rec["entropy_bits"][slot]
            counts = " ".join(f"{v}={n}" for v, n in rec["verb_counts"][slot].items())
            print(f"  {slot:<6} slot  H = {'n/a' if h is None else f'{h:.4f}'} bits  {counts}")
        if "unseen_in_train" in rec:
            pairs = ", ".join(f"({v}, {s})" for v, s in rec["unseen_in_train"]) or "none"
            print(f"  (verb, slot) pairs absent from {args.train}: {pairs}")


def cmd_binarize(args) -> None:
    """``binarize``: a build directory or SCAN files into fairseq binary data."""
    from .scan.binarize import binarize_build, binarize_scan_files, level_dirs
    from .scan.grammar import Grammar

    if args.build_dir and (args.train or args.valid or args.test):
        raise ValueError("pass either a build directory or --train/--valid/--test, not both")
    if args.build_dir:
        g = Grammar.by_name(args.grammar) if args.grammar else None
        dirs = level_dirs(args.build_dir)
        if dirs == [Path(args.build_dir)]:
            outs = binarize_build(args.build_dir, args.out, g, args.workers)
        else:  # level by level, for the progress bar
            outs = [o for d in _progress(dirs, "binarize", "level")
                    for o in binarize_build(d, Path(args.out) / d.name, g, args.workers)]
    else:
        g = Grammar.by_name(args.grammar or "scan")
        outs = [binarize_scan_files(args.out, g, args.train, args.valid, args.test,
                                    args.workers)]
    for o in outs:
        print(f"binarized {o}")


def cmd_score(args) -> None:
    """``score``: exact-match accuracy of one fairseq-generate output."""
    from .analysis.scoring import write_score

    meta = {"model": args.model, "seed": args.seed, "checkpoint": args.checkpoint,
            "split": args.split}
    expected = None
    if args.data:
        manifest = Path(args.data) / "manifest.json"
        if not manifest.exists():
            raise ValueError(f"{manifest} not found. Fix: --data must be a level directory "
                             "written by 'build' or 'binarize'")
        info = json.loads(manifest.read_text())
        meta.update(experiment=info.get("experiment"), level=info.get("level"),
                    entropy_bits=info.get("entropy_bits"),
                    target_entropy_bits=info.get("target_entropy_bits"))
        sizes = info.get("sizes", {})
        if args.split not in sizes:
            raise ValueError(f"{manifest} has no split {args.split!r}; it has "
                             f"{', '.join(sorted(sizes)) or 'none'}. Fix: pass one of them "
                             "with --split")
        expected = sizes[args.split]
    rec = write_score(args.generate_output, args.out, meta, expected, args.split)
    print(f"exact-match accuracy {rec['accuracy']:.4f} ({rec['correct']}/{rec['n']}); "
          f"wrote {args.out}/score.json")


def cmd_aggregate(args) -> None:
    """``aggregate``: results.tsv, summary.tsv and the plot from score.json files."""
    from .analysis.scoring import aggregate

    res = aggregate(args.roots, args.out)
    print(res["table"], end="")
    for (exp, model, ckpt), rho in sorted(res["spearman"].items()):
        print(f"Spearman(entropy, accuracy) {exp} {model} {ckpt}: "
              f"{'n/a' if rho is None else f'{rho:.3f}'}")
    print(f"results: {res['results']}\nsummary: {res['summary']}\nplot:    {res['plot']}")


def cmd_train_args(args) -> None:
    """``train-args``: print the fairseq-train arguments of a preset."""
    from .experiments.presets import PresetError, load_presets, train_args

    presets = load_presets(args.presets)
    if args.preset not in presets:
        raise PresetError(f"unknown preset {args.preset!r}; known: {', '.join(sorted(presets))}")
    preset = presets[args.preset]
    if args.field:
        value = preset.get(args.field, args.preset if args.field == "model" else None)
        print(value if value is not None else "")
        return
    # every token is checked free of spaces, quotes and globs: plain joining makes the line
    # usable both as an unquoted $(...) and with shlex.split / read -a
    print(" ".join(train_args(preset, args.data, args.epochs, args.max_update)))


def recipes_dir() -> Path:
    """The shell recipes: ``fairseq_entropy/recipes/`` of an installed package (setup.py
    installs the top-level ``recipes/`` there), else ``recipes/`` of the source checkout.

    Raises:
        FileNotFoundError: neither holds ``train_level.sh``.
    """
    from importlib import resources

    package = Path(str(resources.files("fairseq_entropy")))
    for candidate in (package / "recipes", package.parent / "recipes"):
        if (candidate / "train_level.sh").is_file():
            return candidate
    raise FileNotFoundError(f"no recipes beside {package}. Fix: install the package with pip "
                            "(they are package data) or run from a source checkout")


def cmd_recipes_dir(args) -> None:
    """``recipes-dir``: print the directory of the shell recipes."""
    print(recipes_dir())


def quiet_libraries() -> None:
    """Keep the output to this command's own lines and library warnings.

    Importing fairseq runs ``logging.basicConfig(level=DEBUG)`` (in a wav2vec2 module), so every
    library's debug and info records would be printed, e.g. a block of ``DEBUG:matplotlib``
    lines when ``aggregate`` plots.  The root logger goes back to WARNING and matplotlib and
    PIL (its image writer) are held at WARNING; warnings and errors of every library, fairseq
    included, are still printed.  The tensorboardX notice is dropped in ``fairseq_entropy``.
    """
    logging.getLogger().setLevel(logging.WARNING)
    for name in ("matplotlib", "PIL"):
        logging.getLogger(name).setLevel(logging.WARNING)


COMMANDS = {"build": cmd_build, "measure": cmd_measure, "binarize": cmd_binarize,
            "score": cmd_score, "aggregate": cmd_aggregate, "train-args": cmd_train_args,
            "recipes-dir": cmd_recipes_dir}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``fairseq-entropy``; returns the exit status (2 on a user error)."""
    quiet_libraries()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"fairseq-entropy: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
