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
    fairseq-entropy sweep GRID [--root DIR] [--jobs N] [--dry-run] [--executor local|slurm]
    fairseq-entropy lock RUN_DIR -- COMMAND...

Errors are printed as one line ``fairseq-entropy: error: ...`` with exit status 2; nothing is
written when a command fails.
"""

from __future__ import annotations

import argparse
import json
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
    t.add_argument("--presets", help="presets file (default recipes/presets.json)")
    t.add_argument("--epochs", type=float)
    t.add_argument("--max-update", type=int)
    t.add_argument("--field", help="print one field of the preset instead (e.g. model)")
    _add_sweep_parsers(sub)
    return p


def _add_sweep_parsers(sub) -> None:
    w = sub.add_parser("sweep", help="run every cell of a grid file (recipes/experiments/)")
    w.add_argument("grid", help="grid file (.toml or .json)")
    w.add_argument("--root", help="directory for data, data-bin, runs and the status file "
                                  "(default: sweeps/<grid name>)")
    w.add_argument("--preset", action="append", help="run only this preset of the grid "
                                                     "(repeatable)")
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
        levels = build_exp1(grammar, args.levels, args.n, args.restricted_verb, args.seed,
                            args.valid_fraction)
        params = {"builder": "exp1-mixing", "seed": args.seed, "n_train": args.n,
                  "restricted_verb": args.restricted_verb,
                  "valid_fraction": args.valid_fraction}
    else:
        levels = build_exp2(grammar, args.support, args.restricted_verb, args.seed,
                            args.support_order, args.valid_fraction)
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
    from .scan.binarize import binarize_build, binarize_scan_files
    from .scan.grammar import Grammar

    if args.build_dir and (args.train or args.valid or args.test):
        raise ValueError("pass either a build directory or --train/--valid/--test, not both")
    if args.build_dir:
        g = Grammar.by_name(args.grammar) if args.grammar else None
        outs = binarize_build(args.build_dir, args.out, g, args.workers)
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


def cmd_sweep(args) -> None:
    """``sweep``: expand a grid into cells and run them (see experiments/sweep.py)."""
    from .experiments import sweep
    from .experiments.grids import load_grid

    grid = load_grid(args.grid)
    cells = grid.cells(args.preset)
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
             f"{len(grid.levels)} levels x {len(grid.seeds)} seeds")
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
            "sweep": cmd_sweep, "lock": cmd_lock}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``fairseq-entropy``; returns the exit status (2 on a user error)."""
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
