"""``fairseq-entropy``: build, measure, binarize, score and aggregate.

Subcommands::

    fairseq-entropy build exp1 --out DIR [--levels 0,0.5,...] [--n N] [--restricted-verb jump]
                               [--component direction --restricted left]
    fairseq-entropy build exp2 --out DIR [--support 1..8] [--restricted-verb lunge]
    fairseq-entropy build scan --out FILE [--actions scan|paper]
    fairseq-entropy measure FILE... [--train FILE] [--components C,...] [--slot-order O]
    fairseq-entropy binarize BUILD_DIR --out DATABIN
    fairseq-entropy binarize --train F [--valid F | --valid-fraction P] --test F --out DIR
    fairseq-entropy score GENERATE_OUTPUT --out DIR [--data LEVEL_DIR] [--preset P] [--seed S]
                          [--checkpoint last|best] [--path CHECKPOINT] [--force]
    fairseq-entropy aggregate RUNS_DIR... --out DIR
    fairseq-entropy train-args PRESET --data LEVEL_DATABIN [--epochs E]
    fairseq-entropy recipes-dir
    fairseq-entropy user-dir
    fairseq-entropy sweep GRID [--root DIR] [--jobs N] [--dry-run] [--executor local|slurm]
    fairseq-entropy lock RUN_DIR -- COMMAND...

Errors are printed as one line ``fairseq-entropy: error: ...`` with exit status 2; nothing is
written when a command fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
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


def _number(kind, low=None, high=None, low_open=False, high_open=False, what="a number"):
    """An argparse type: ``kind(text)`` within [low, high] (open where asked)."""
    def parse(text: str):
        try:
            x = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if (low is not None and (x < low or (low_open and x == low))) or \
                (high is not None and (x > high or (high_open and x == high))):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return x
    return parse


_fraction = _number(float, 0.0, 1.0, True, True, "a fraction strictly between 0 and 1")
_positive_int = _number(int, 1, what="a positive integer")
_positive_float = _number(float, 0.0, low_open=True, what="a positive number")
_seed = _number(int, 0, 2 ** 32 - 1, what="a seed between 0 and 2**32-1")


def _verbs(text: str) -> List[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _progress(items, desc: str, unit: str, total=None):
    """``items`` wrapped in a tqdm bar on stderr, shown only when stderr is a terminal."""
    from tqdm import tqdm

    # mininterval 0: every level is drawn, however fast (a handful of updates per command)
    return tqdm(items, desc=desc, unit=unit, disable=None, leave=False, file=sys.stderr,
                mininterval=0, total=total)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    from .analysis.scoring import CHECKPOINT_LABELS
    from .scan.builders import AUTHORS_SUPPORT_ORDER
    from .scan.grammar import PAPER_VERBS

    p = argparse.ArgumentParser(prog="fairseq-entropy", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="generate an entropy-controlled data set")
    bsub = b.add_subparsers(dest="experiment", required=True)
    for name, help_ in (("exp1", "Experiment 1 (mixing)"), ("exp2", "Experiment 2 (support)")):
        e = bsub.add_parser(name, help=help_)
        e.add_argument("--out", required=True, help="output directory (one subdir per level)")
        e.add_argument("--seed", type=_seed, default=1, help="data seed")
        e.add_argument("--verbs", type=_verbs, default=list(PAPER_VERBS),
                       help="comma-separated verbs (default: the paper's 8)")
        e.add_argument("--valid-fraction", type=_fraction, default=0.05,
                       help="validation size as a fraction, in (0, 1)")
        e.add_argument("--force", action="store_true", help="replace a different build in --out")
        if name == "exp1":
            e.add_argument("--levels", type=_floats, default=[0, 0.5, 1, 1.5, 2, 2.5, 3],
                           help="target second-slot entropies in bits (default 0,0.5,...,3)")
            e.add_argument("--n", type=_positive_int, default=6000,
                           help="training commands per level")
            e.add_argument("--restricted-verb", default="jump")
            e.add_argument("--component", default="verb",
                           choices=["verb", "direction", "modifier", "repetition"],
                           help="component class whose second-slot entropy is controlled "
                                "(default verb, the paper's; others apply the same mixing to "
                                "directions, modifiers or repetitions)")
            e.add_argument("--restricted", default=None,
                           help="with --component other than verb: the value never executed "
                                "first in training (default: left, around or twice)")
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
    m.add_argument("--tsv", action="store_true",
                   help="print one tab-separated row per file: sizes, the entropy (bits) of "
                        "every (component class, slot), unseen pairs and, with --train, the "
                        "atom and compound divergences")
    m.add_argument("--components", type=_verbs, default=None,
                   help="comma-separated component classes to measure besides the verb slots: "
                        "verb, direction, modifier, repetition, conjunction (default: all)")
    m.add_argument("--slot-order", choices=["execution", "surface"], default="execution",
                   help="slots of the component classes: by execution order (the paper's) or "
                        "by surface position")

    z = sub.add_parser("binarize", help="fairseq-preprocess with the grammar's fixed dictionary")
    z.add_argument("build_dir", nargs="?", help="directory written by 'build' (or one level)")
    z.add_argument("--out", required=True)
    z.add_argument("--grammar", choices=["paper", "scan"], default=None,
                   help="dictionary to use (default: from the build manifest; 'scan' for "
                        "SCAN files)")
    z.add_argument("--train", help="SCAN-format training file (IN: ... OUT: ...)")
    z.add_argument("--valid", help="SCAN-format validation file (default: held out of --train)")
    z.add_argument("--test", help="SCAN-format test file")
    z.add_argument("--valid-fraction", type=_fraction, default=None,
                   help="without --valid: fraction of --train held out for validation "
                        "(default 0.05)")
    z.add_argument("--seed", type=_seed, default=1, help="seed of the held-out validation draw")
    z.add_argument("--workers", type=_positive_int, default=1,
                   help="fairseq-preprocess worker processes per level")
    z.add_argument("--jobs", type=_positive_int, default=None,
                   help="levels binarized at once (default: one per CPU core)")
    z.add_argument("--spm-vocab", type=_positive_int, default=None, metavar="N",
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

    sc = sub.add_parser("score", help="exact-match accuracy of fairseq-generate output")
    sc.add_argument("generate_output")
    sc.add_argument("--out", required=True, help="directory for examples.tsv and score.json")
    sc.add_argument("--data", help="level directory (raw or binarized) with manifest.json "
                    "(default: the training data recorded in the checkpoint)")
    sc.add_argument("--preset", help="preset the run was trained with (default: the one "
                    "preset of the checkpoint's architecture and the data's experiment)")
    sc.add_argument("--model", help="model name (default: the preset's)")
    sc.add_argument("--seed", type=_seed, help="training seed (default: the checkpoint's)")
    sc.add_argument("--checkpoint", default="last", choices=CHECKPOINT_LABELS,
                    help="which checkpoint was decoded: the last, the best on validation "
                    "(seq_acc), or the one with the lowest test loss (the paper authors' "
                    "selection, recipes/train_level.sh with SELECT=test-loss)")
    sc.add_argument("--path", help="the checkpoint that was decoded (default: "
                    "checkpoints/checkpoint_<label>.pt beside the generate output, if present)")
    sc.add_argument("--split", default="test", help="split that was decoded; the output must "
                    "be a decode of exactly that split's commands, id by id")
    sc.add_argument("--force", action="store_true", help="replace an existing score.json")

    a = sub.add_parser("aggregate", help="results.tsv, summary and plot from score.json files")
    a.add_argument("roots", nargs="+", help="run directories (searched for score.json), "
                   "score.json files, or results.tsv files of earlier aggregates (to add new "
                   "seeds or levels to committed results)")
    a.add_argument("--out", required=True)

    t = sub.add_parser("train-args", help="print fairseq-train arguments of a preset")
    t.add_argument("preset")
    t.add_argument("--data", required=True, help="binarized level directory")
    t.add_argument("--presets", help="presets file (default: the presets.json shipped in "
                                     "fairseq_entropy/experiments)")
    t.add_argument("--epochs", type=_positive_float)
    t.add_argument("--max-update", type=_positive_int)
    t.add_argument("--field", help="print one field of the preset instead (e.g. model)")

    sub.add_parser("recipes-dir", help="print the directory of the shell recipes "
                                       "(train_level.sh, quickstart.sh)")
    sub.add_parser("user-dir", help="print the absolute path to pass to fairseq's --user-dir")
    _add_sweep_parsers(sub)
    return p


def _add_sweep_parsers(sub) -> None:
    w = sub.add_parser("sweep", help="run every cell of a grid file (recipes/experiments/)")
    w.add_argument("grid", help="grid file (.toml or .json)")
    w.add_argument("--root", help="directory for data, data-bin, runs and the status file "
                                  "(default: sweeps/<grid name>)")
    w.add_argument("--preset", action="append", help="run only this preset of the grid "
                                                     "(repeatable)")
    w.add_argument("--seed", type=int, action="append", help="run only this seed of the grid "
                                                          "(repeatable)")
    w.add_argument("--level", type=float, action="append",
                   help="run only this level of the grid: entropy in bits (exp1) or support "
                        "size k (exp2) (repeatable)")
    w.add_argument("--jobs", type=int, help="cells at once (default: one per CPU core; on "
                                            "GPUs, GPUs x --per-gpu)")
    w.add_argument("--dry-run", action="store_true", help="print every command, run nothing")
    w.add_argument("--executor", choices=["local", "slurm", "submitit-local", "submitit-debug"],
                   default="local", help="local worker processes, or a submitit job array "
                   "(slurm; submitit-local / submitit-debug run it without Slurm)")
    w.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    w.add_argument("--gpus", type=int, help="number of GPUs (default: "
                                            "torch.cuda.device_count())")
    w.add_argument("--per-gpu", type=int, default=8, help="runs packed on each GPU")
    w.add_argument("--recipe", help="train recipe (default recipes/train_level.sh)")

    lk = sub.add_parser("lock", help="run a command while holding RUN_DIR/.lock (exit 75 "
                                     "when another process holds it)")
    lk.add_argument("run_dir")
    lk.add_argument("lock_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                    help="the command and its arguments")


def _guess_grammar(examples):
    from .scan.grammar import Grammar

    words = {w for e in examples for w in e.command.split()}
    return Grammar.scan() if "turn" in words or any(
        e.actions.startswith("I_") for e in examples[:50]) else Grammar.paper()


DEFAULT_RESTRICTED_VALUE = {"direction": "left", "modifier": "around", "repetition": "twice"}


def cmd_build(args) -> None:
    """``build exp1|exp2|scan``: generate data (see :mod:`fairseq_entropy.scan.builders`)."""
    from .scan.builders import (build_exp1, build_exp1_component, build_exp2, write_build,
                                write_scan_language)
    from .scan.grammar import Grammar

    if args.experiment == "scan":
        if Path(args.out).is_dir():
            raise ValueError(f"{args.out} is a directory. Fix: --out names the file to write")
        n = write_scan_language(args.out, args.actions)
        print(f"wrote {n} SCAN commands to {args.out}")
        return
    grammar = Grammar.paper(args.verbs)
    if args.experiment == "exp1" and args.component != "verb":
        restricted = args.restricted or DEFAULT_RESTRICTED_VALUE[args.component]
        levels = [lv for target in _progress(args.levels, "build exp1", "level")
                  for lv in build_exp1_component(grammar, args.component, restricted, [target],
                                                 args.n, args.seed, args.valid_fraction)]
        params = {"builder": "exp1-mixing", "seed": args.seed, "n_train": args.n,
                  "component": args.component, "restricted_value": restricted,
                  "valid_fraction": args.valid_fraction}
    elif args.experiment == "exp1":
        if args.restricted is not None:
            raise ValueError("--restricted applies to --component direction|modifier|repetition."
                             " Fix: use --restricted-verb for verbs")
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
    """``measure``: verb counts and entropy of each slot, the same for every component class,
    unseen (component, slot) pairs and, with ``--train``, atom and compound divergence."""
    from .scan.datafiles import read_any
    from .scan.divergence import divergences
    from .scan.entropy import (COMPONENT_CLASSES, SLOTS, ComponentStatistics, SlotStatistics,
                               unseen_component_pairs, unseen_pairs)
    from .scan.grammar import Grammar

    components = args.components or list(COMPONENT_CLASSES)
    unknown = [c for c in components if c not in COMPONENT_CLASSES]
    if unknown:
        raise ValueError(f"unknown component class(es) {', '.join(unknown)}. Fix: --components "
                         f"takes {', '.join(COMPONENT_CLASSES)}")

    def load(path):
        ex = read_any(path)
        g = Grammar.by_name(args.grammar) if args.grammar else _guess_grammar(ex)
        cmds = [g.parse(e.command) for e in read_any(path, g)]
        return (cmds, SlotStatistics.of(cmds, g.verbs),
                ComponentStatistics.of(cmds, g.verbs, components, args.slot_order))

    report = {}
    train = load(args.train) if args.train else None
    for f in args.files:
        cmds, st, comp = load(f)
        rec = st.as_dict()
        rec.update({k: v for k, v in comp.as_dict().items() if k != "n_commands"})
        if train is not None:
            rec["unseen_in_train"] = [list(p) for p in unseen_pairs(train[1], st)]
            rec["unseen_components_in_train"] = [
                list(p) for p in unseen_component_pairs(train[2], comp)]
            rec.update(divergences(train[0], cmds).as_dict())
        report[f] = rec
    if args.json:
        print(json.dumps(report, indent=2))
        return
    if args.tsv:
        print(measure_tsv(report), end="")
        return
    for f, rec in report.items():
        print(f"{f}: {rec['n_commands']} commands")
        for slot in SLOTS:
            h = rec["entropy_bits"][slot]
            counts = " ".join(f"{v}={n}" for v, n in rec["verb_counts"][slot].items())
            print(f"  {slot:<6} slot  H = {'n/a' if h is None else f'{h:.4f}'} bits  {counts}")
        print(f"  component classes, slots by {rec['slot_order']} order:")
        for component, slots in rec["components"].items():
            for slot, val in slots.items():
                h = val["entropy_bits"]
                counts = " ".join(f"{v}={n}" for v, n in val["counts"].items())
                print(f"    {component:<11} {slot:<14} H = "
                      f"{'n/a' if h is None else f'{h:.4f}'} bits  {counts}")
        if "unseen_in_train" in rec:
            pairs = ", ".join(f"({v}, {s})" for v, s in rec["unseen_in_train"]) or "none"
            print(f"  (verb, slot) pairs absent from {args.train}: {pairs}")
            triples = ", ".join(f"({c} {v}, {s})" for c, v, s in
                                rec["unseen_components_in_train"]) or "none"
            print(f"  (component, slot) pairs absent from {args.train}: {triples}")
            kinds = " ".join(f"{k}={'n/a' if v is None else f'{v:.4f}'}"
                             for k, v in rec["compound_divergence_by_kind"].items())
            print(f"  divergence from {args.train} (Keysers et al. 2020): atom "
                  f"{rec['atom_divergence']:.4f}, compound {rec['compound_divergence']:.4f} "
                  f"({kinds})")


def measure_tsv(report: dict) -> str:
    """``measure --tsv``: a header and one row per file of the ``measure --json`` report.

    Columns: file, n_commands, ``H_<class>_<slot>`` (bits, 4 decimals) for every measured
    (class, slot), and with a training file ``unseen_pairs`` (the unseen (class, value, slot)
    triples, ``class:value@slot`` separated by spaces), ``atom_divergence``,
    ``compound_divergence`` and ``compound_divergence_<kind>``.
    """
    rows = []
    for f, rec in report.items():
        row = {"file": f, "n_commands": rec["n_commands"]}
        for component, slots in rec["components"].items():
            for slot, val in slots.items():
                h = val["entropy_bits"]
                row[f"H_{component}_{slot}"] = "" if h is None else f"{h:.4f}"
        if "atom_divergence" in rec:
            row["unseen_pairs"] = " ".join(f"{c}:{v}@{s}"
                                           for c, v, s in rec["unseen_components_in_train"])
            row["atom_divergence"] = f"{rec['atom_divergence']:.4f}"
            row["compound_divergence"] = f"{rec['compound_divergence']:.4f}"
            for kind, d in rec["compound_divergence_by_kind"].items():
                row[f"compound_divergence_{kind}"] = "" if d is None else f"{d:.4f}"
        rows.append(row)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["\t".join(columns)] + ["\t".join(str(r.get(c, "")) for c in columns) for r in rows]
    return "\n".join(lines) + "\n"


def cmd_binarize(args) -> None:
    """``binarize``: a build directory or SCAN files into fairseq binary data."""
    from .scan.binarize import (binarize_build, binarize_scan_files, level_dirs,
                                preprocess_processes, train_sentencepiece)
    from .scan.grammar import Grammar

    if args.spm_vocab and not args.build_dir:
        raise ValueError("--spm-vocab applies to a build directory (its first level's training "
                         "split trains the model). Fix: pass the --out of 'fairseq-entropy "
                         "build', or drop --spm-vocab")
    if args.spm_side != "both" and not args.spm_vocab:
        raise ValueError("--spm-side applies with --spm-vocab N (the subword model's size). "
                         "Fix: add --spm-vocab, or drop --spm-side")
    if args.build_dir and (args.train or args.valid or args.test):
        raise ValueError("pass either a build directory or --train/--valid/--test, not both")
    if args.build_dir and args.valid_fraction is not None:
        raise ValueError("--valid-fraction applies to --train files; a build directory has "
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
                for f in _progress(as_completed(futures), "binarize", "level", len(futures)):
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


def _score_provenance(args) -> dict:
    """Resolve the data, preset, model and seed of a decode for ``score``.

    Each comes from its option, else from the decoded checkpoint (``--path``, or
    ``checkpoints/checkpoint_<label>.pt`` beside the generate output): its training data, its
    architecture (the one preset of that architecture and the data's experiment) and its seed.

    Raises:
        ValueError: a value that cannot be known, or options that contradict the checkpoint.
    """
    from .analysis.scoring import (load_data_manifest, provenance, read_checkpoint_info)
    from .experiments.presets import PresetError, load_presets

    ckpt = Path(args.path) if args.path else \
        Path(args.generate_output).parent / "checkpoints" / f"checkpoint_{args.checkpoint}.pt"
    if args.path and not ckpt.is_file():
        raise ValueError(f"{ckpt}: checkpoint not found. Fix: pass --path with the checkpoint "
                         "that was decoded")
    info = read_checkpoint_info(ckpt) if ckpt.is_file() else None
    where = f"checkpoint {ckpt}" if info else f"no checkpoint at {ckpt}"

    data = args.data or (info or {}).get("data")
    if not data or not Path(data).is_dir():
        raise ValueError(f"the decoded data is unknown (no --data; {where}"
                         f"{', whose data ' + repr(data) + ' is not a directory' if data else ''}"
                         "). Fix: pass --data LEVEL_DIR")
    manifest, sha = load_data_manifest(data)

    presets = load_presets()
    preset = args.preset
    if preset is not None and preset not in presets:
        raise PresetError(f"unknown preset {preset!r}; known: {', '.join(sorted(presets))}")
    if info and info["arch"]:
        same_arch = sorted(n for n, p in presets.items() if p.get("arch") == info["arch"])
        if preset is not None and preset not in same_arch:
            raise ValueError(f"{ckpt} was trained with --arch {info['arch']}, but preset "
                             f"{preset} uses {presets[preset].get('arch')}. Fix: pass the "
                             f"preset of the run (one of: {', '.join(same_arch) or 'none'})")
        if preset is None:
            fits = [n for n in same_arch
                    if presets[n].get("experiment") == manifest.get("experiment")]
            if len(fits) != 1:
                raise ValueError(f"cannot tell the preset of {ckpt} (arch {info['arch']}, "
                                 f"experiment {manifest.get('experiment')}): candidates "
                                 f"{', '.join(fits or same_arch) or 'none'}. Fix: pass --preset")
            preset = fits[0]
    if preset is None:
        raise ValueError(f"the preset is unknown (no --preset; {where}). Fix: pass --preset "
                         "NAME (fairseq-entropy train-args lists them) or --path CHECKPOINT")
    model = presets[preset].get("model", preset)
    if args.model is not None and args.model != model:
        raise ValueError(f"--model {args.model} contradicts preset {preset}, whose model is "
                         f"{model}. Fix: drop --model (it is read from the preset)")

    seed = args.seed
    if info and info["seed"] is not None:
        if seed is not None and seed != info["seed"]:
            raise ValueError(f"--seed {seed} contradicts {ckpt}, trained with seed "
                             f"{info['seed']}. Fix: drop --seed (it is read from the checkpoint)")
        seed = info["seed"]
    if seed is None:
        raise ValueError(f"the training seed is unknown (no --seed; {where}). Fix: pass --seed "
                         "S or --path CHECKPOINT")
    return {"data": data, "meta": provenance(manifest, sha, data, args.split, args.checkpoint,
                                             preset, model, seed,
                                             info["path"] if info else None)}


def cmd_score(args) -> None:
    """``score``: exact-match accuracy of one fairseq-generate output, with its provenance."""
    from .analysis.scoring import write_score

    if (Path(args.out) / "score.json").exists() and not args.force:
        raise ValueError(f"{Path(args.out) / 'score.json'} already exists. Fix: pass --force "
                         "to replace it, or choose another --out")
    run = _score_provenance(args)
    rec = write_score(args.generate_output, args.out, run["meta"], run["data"], args.split,
                      args.force)
    print(f"exact-match accuracy {rec['accuracy']:.4f} ({rec['correct']}/{rec['n']}) on "
          f"{rec['experiment']} {rec['level']} {args.split}, preset {rec['preset']}, seed "
          f"{rec['seed']}, {rec['checkpoint']} checkpoint; wrote {args.out}/score.json")
    g = rec["graded"]
    held = g["correct_except_restricted_clause"]
    print(f"graded: clause exact match {g['clause_accuracy']:.4f}, chrF {g['chrf']:.2f}, BLEU "
          f"{g['bleu']:.2f}" + ("" if held is None else
                                f", right except the held-out slot's clause {held:.4f}"))


def cmd_aggregate(args) -> None:
    """``aggregate``: results.tsv, summary.tsv and the plot from score.json files."""
    from .analysis.scoring import aggregate

    res = aggregate(args.roots, args.out)
    print(res["table"], end="")
    for (exp, preset, n_train, ckpt), rho in sorted(res["spearman"].items(), key=str):
        print(f"Spearman(entropy, accuracy) {exp} {preset} N={n_train} {ckpt}: "
              f"{'n/a' if rho is None else f'{rho:.3f}'}")
    for line in res["agreement"]:
        print(line)
    print(f"results: {res['results']}\nsummary: {res['summary']}\nplot:    {res['plot']}")
    print(f"report:  {res['report']}")


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


def cmd_user_dir(args) -> None:
    """``user-dir``: the absolute path of this package, for ``fairseq-* --user-dir``."""
    print(Path(__file__).resolve().parent)


def cmd_sweep(args) -> None:
    """``sweep``: expand a grid into cells and run them (see experiments/sweep.py)."""
    from .experiments import sweep
    from .experiments.grids import load_grid

    grid = load_grid(args.grid)
    cells = grid.cells(args.preset, args.seed, args.level)
    root = Path(args.root or Path("sweeps") / grid.name)
    device, gpus = args.device, args.gpus
    if device == "auto":
        if gpus is None:
            import torch

            gpus = torch.cuda.device_count()
        device = "gpu" if gpus else "cpu"
    elif device == "gpu" and gpus is None:
        import torch

        gpus = torch.cuda.device_count()
    slots = sweep.device_slots(args.jobs, device, gpus or 0, args.per_gpu) \
        if args.executor == "local" else [{}]
    shape = (f"{len(set(c.preset for c in cells))} preset(s) x {len(grid.n)} N x "
             f"{len(set(c.level for c in cells))} levels x {len(set(c.seed for c in cells))} "
             "seeds")
    print(f"# grid {grid.path}: {len(cells)} cells ({shape}), schedule "
          f"{grid.schedule.label}, root {root}, executor {args.executor}, "
          f"{len(slots)} worker slot(s)")
    if args.dry_run:
        seen = set()
        for i, cell in enumerate(cells):
            if cell.data_key not in seen:
                seen.add(cell.data_key)
                for cmd in sweep.data_commands(cell, root):
                    print(" ".join(cmd))
            state = " (scored: skipped)" if sweep.scored(cell, root) is not None else ""
            env = sweep.cell_env(cell, slots[i % len(slots)])
            print(f"# cell {i + 1}/{len(cells)} {cell.name}{state}")
            print(" ".join([f"{k}={v}" for k, v in env.items()]
                           + sweep.recipe_command(cell, root, args.recipe)))
        return
    if args.executor == "local":
        results = sweep.run_local(cells, root, slots,
                                  lambda c, s: sweep.run_cell(c, root, s, args.recipe))
    else:
        cluster = {"slurm": "slurm", "submitit-local": "local",
                   "submitit-debug": "debug"}[args.executor]
        results = sweep.run_submitit(cells, root, grid.resources, cluster, args.recipe)
    status = sweep.write_status(results, root / "sweep-status.tsv")
    print(sweep.format_summary(results), end="")
    print(f"status: {status}\nnext: fairseq-entropy aggregate {root / 'runs'} --out "
          f"{root / 'results'}")
    bad = sweep.summarize(results)
    if bad["failed"] or bad["locked"]:
        raise RuntimeError(f"{bad['failed']} cell(s) failed and {bad['locked']} locked; "
                           f"see {status}. Fix: correct the reason given and re-run the same "
                           "command (finished cells are skipped)")


def cmd_lock(args) -> int:
    """``lock``: run a command while holding the run directory's lock."""
    from .experiments.sweep import run_locked

    command = args.lock_command
    command = command[1:] if command[:1] == ["--"] else command
    if not command:
        raise ValueError("no command given. Fix: fairseq-entropy lock RUN_DIR -- COMMAND ...")
    return run_locked(args.run_dir, command)


COMMANDS = {"build": cmd_build, "measure": cmd_measure, "binarize": cmd_binarize,
            "score": cmd_score, "aggregate": cmd_aggregate, "train-args": cmd_train_args,
            "recipes-dir": cmd_recipes_dir, "user-dir": cmd_user_dir,
            "sweep": cmd_sweep, "lock": cmd_lock}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``fairseq-entropy``; returns the exit status (2 on a user error)."""
    quiet_libraries()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = COMMANDS[args.command](args)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"fairseq-entropy: error: {e}", file=sys.stderr)
        return 2
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
