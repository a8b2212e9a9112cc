"""``fairseq-entropy sweep``: run every cell of a grid file
(:mod:`fairseq_entropy.experiments.sweep`)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..files import check_fairseq_path
from . import options


def add_parser(sub) -> None:
    """Add the ``sweep`` subcommand to the subparsers ``sub``."""
    w = sub.add_parser("sweep", help="run every cell of a grid file (recipes/grids/)")
    w.add_argument("grid", help="grid file (.toml or .json)")
    w.add_argument("--root", help="directory for data, data-bin, runs and the status file "
                                  "(default: sweeps/<grid name>)")
    w.add_argument("--preset", action="append", help="run only this preset of the grid "
                                                     "(repeatable)")
    w.add_argument("--seed", type=options.seed, action="append",
                   help="run only this seed of the grid (repeatable)")
    w.add_argument("--level", type=options.any_float, action="append",
                   help="run only this level of the grid: entropy in bits (exp1) or support "
                        "size k (exp2) (repeatable)")
    w.add_argument("--n", type=options.positive_int, action="append", dest="n_train",
                   help="run only this training-set size N of the grid's n, in commands "
                        "(Experiment 1; repeatable)")
    w.add_argument("--case", action="append", dest="cases",
                   help="run only this case of a COGS grid's cases (repeatable)")
    w.add_argument("--jobs", type=options.positive_int,
                   help="cells at once (default: one per CPU core; on GPUs, GPUs x --per-gpu)")
    w.add_argument("--threads", type=options.positive_int,
                   help="torch threads of each cell training on this machine's CPU (default "
                   "1, and --jobs one cell per core: the fastest for the small models, which "
                   "per-operator overhead bounds); with fewer cells than cores, e.g. --jobs 1 "
                   "--threads 2, a model bound by arithmetic (the decoder-only and Experiment "
                   "2 Transformer presets) trains about 1.9x faster; --jobs x --threads may "
                   "not exceed the cores")
    w.add_argument("--dry-run", action="store_true", help="print every command, run nothing")
    w.add_argument("--executor", choices=["local", "slurm", "submitit-local", "submitit-debug"],
                   default="local", help="local worker processes, or a submitit job array "
                   "(slurm; submitit-local / submitit-debug run it without Slurm)")
    w.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto",
                   help="where the cells train: auto is gpu when torch sees one")
    w.add_argument("--gpus", type=options.count,
                   help="number of GPUs to use, at most those torch sees (default: all, "
                        "torch.cuda.device_count()); more only with --dry-run, to plan for "
                        "another machine")
    w.add_argument("--per-gpu", type=options.positive_int,
                   help="worker slots (runs, or packs with --pack) on each GPU (default 8; "
                        "refused when the cells train on the CPU: --jobs sets those)")
    w.add_argument("--pack", type=options.count, metavar="K",
                   help="train up to K compatible cells (same preset, N, schedule and "
                   "fairseq-train arguments but data and seed) in one fairseq-train --task "
                   "packed_systematicity, then decode and score each cell as usual; 0 or 1: no "
                   "packing (default: the grid's pack, else 0)")
    w.add_argument("--recipe", help="your own train recipe instead of fairseq-entropy run, "
                                    "called as RECIPE PRESET DATABIN RUN_DIR with the "
                                    "variables of recipes/train_level.sh (SEED, EPOCHS/"
                                    "MAX_UPDATE, DEVICE, SELECT, SCORE_BEST, GEN_BATCH, "
                                    "VALID_BATCH, PRESETS, USER_DIR) set from the sweep's "
                                    "options, never from your shell")
    options.add_run_options(w, "each cell's", sample_note=" (local executor only)",
                            grid=True)


def run(args) -> None:
    """``sweep``: expand a grid into cells and run them (see experiments/sweep.py)."""
    from ..experiments import executors, status, sweep
    from ..experiments.devices import DEFAULT_PER_GPU, detect_device, device_slots, gpu_count
    from ..experiments.grids import load_grid
    from ..experiments.run import RunOptions

    grid = load_grid(args.grid, args.presets, args.user_dir)
    cells = grid.cells(args.preset, args.seed, args.level, args.n_train, args.cases)
    root = Path(args.root or Path("sweeps") / grid.name)
    check_fairseq_path(root, "--root")
    for p in [root, *root.parents]:
        if p.exists():
            if not p.is_dir():
                raise UserError(f"--root {root}: {p} is a file. Fix: choose a directory")
            break
    if args.recipe and not Path(args.recipe).is_file():
        raise UserError(f"--recipe {args.recipe}: not a file. Fix: pass the train recipe "
                        "script, or leave --recipe out for the installed train_level.sh")
    if args.decode_sample and args.executor != "local":
        raise UserError(f"--decode-sample with --executor {args.executor}: sample decodes run "
                        "with the local executor only. Fix: add --executor local, or leave "
                        "--decode-sample out")
    device, gpus = detect_device(args.device, args.gpus)
    if args.executor == "local" and device == "gpu" and args.gpus and not args.dry_run:
        seen = gpu_count()
        if args.gpus > seen:
            raise UserError(f"--gpus {args.gpus}: torch sees {seen} GPU(s) on this machine, "
                            "and the local executor would hand the missing ones' slots to "
                            f"CUDA_VISIBLE_DEVICES that do not exist. Fix: --gpus {seen} or "
                            "fewer, leave --gpus out (every GPU torch sees), or add --dry-run "
                            "to plan for another machine")
    if args.per_gpu is not None and device == "cpu" and args.executor == "local":
        why = "--device cpu" if args.device == "cpu" else "torch sees no GPU"
        raise UserError(f"--per-gpu {args.per_gpu}: the cells train on the CPU ({why}), "
                        "where it would be ignored. Fix: drop --per-gpu (--jobs sets how many "
                        "cells run at once on the CPU), or run on a machine with a GPU")
    if args.threads is not None and (device != "cpu" or args.executor != "local"):
        where = "Slurm or submitit tasks (their threads are the grid's [resources] " \
            "cpus_per_task)" if args.executor != "local" else "GPUs"
        raise UserError(f"--threads {args.threads}: the cells train on {where}, where it "
                        "would be ignored. Fix: drop --threads (it sets the threads of cells "
                        "on this machine's CPU, --device cpu with the local executor)")
    slots = device_slots(args.jobs, device, gpus, args.per_gpu or DEFAULT_PER_GPU,
                         gpus_given=args.gpus is not None, threads=args.threads or 1) \
        if args.executor == "local" else [{}]
    if args.decode_sample:
        slots = [dict(s, DECODE_SAMPLE=str(args.decode_sample)) for s in slots]
    shape = status.grid_shape(cells)
    size = grid.pack_size(args.pack)
    run_options = RunOptions(args.select, args.score_best, args.gen_batch,
                             args.valid_batch)
    if size > 1 and args.select != "valid" and args.score_best:
        raise UserError(f"--select {args.select} with packed runs (--pack {size}): a pack keeps "
                        "each run's best checkpoint by its validation seq_acc (--select "
                        "valid). Fix: --pack 0 to train each cell on its own, or drop --select "
                        "(or add --no-score-best to score the last checkpoints only)")
    check_buildable(grid.path, cells, root)
    packing = f", packs of up to {size} cells" if size > 1 else ""
    print(f"# grid {grid.path}: {len(cells)} cells ({shape}), schedule "
          f"{grid.schedule.label}, root {root}, executor {args.executor}, "
          f"{len(slots)} worker slot(s){packing}")
    if args.dry_run:
        seen = set()
        for i, cell in enumerate(cells):
            if cell.data_key not in seen:
                seen.add(cell.data_key)
                pending = sweep.pending_data_commands(cell, root)
                for cmd in pending:
                    print(" ".join(cmd))
                if not pending:
                    print(f"# data {cell.databin(root)}: built (skipped)")
            state = " (scored: skipped)" if sweep.scored(cell, root) is not None else ""
            command, env = sweep.cell_command(cell, root, slots[i % len(slots)],
                                              args.recipe, run_options)
            print(f"# cell {i + 1}/{len(cells)} {cell.name}{state}")
            print(" ".join([f"{k}={v}" for k, v in env.items()] + command))
        if size > 1:
            from ..experiments.packs import dry_run_lines

            print("\n".join(dry_run_lines(cells, root, size, slots[0].get("DEVICE"))))
        return
    todo, known = executors.pending_cells(cells, root)
    status_path = root / "sweep-status.tsv"
    chosen = [cells[i] for i in todo]
    units, unplanned = chosen, []
    if size > 1 and chosen:
        from ..experiments.packs import plan

        units, unplanned = plan(chosen, root, size, workers=len(slots))
    if not chosen:
        print(executors.nothing_left(known))
        ran = []
    elif not units:  # every chosen cell's data failed
        ran = []
    elif args.executor == "local":
        def on_stop(sig, outcomes):  # the status file of a stopped sweep
            reason = executors.stopped_reason(sig)
            got = {c.name: r for c, r in zip(executors.flat_cells(units), outcomes)}
            got.update({r.cell: r for r in unplanned})
            status.write_status([known.get(i) or got.get(c.name) or
                                sweep.CellResult(c.name, "cancelled", reason)
                                for i, c in enumerate(cells)], status_path)

        ran = executors.run_local(units, root, slots,
                                  lambda u, s: executors.run_unit(u, root, s, args.recipe,
                                                                  run_options),
                                  on_stop=on_stop, status=status_path)
    else:
        cluster = {"slurm": "slurm", "submitit-local": "local",
                   "submitit-debug": "debug"}[args.executor]
        if known:
            print(f"{len(known)} of {len(cells)} cell(s) scored or locked: not submitted")
        ran = executors.run_submitit(units, root, grid.resources, cluster, args.recipe,
                                     status=status_path, options=run_options)
    got = {r.cell: r for r in [*ran, *unplanned]}
    results = [known[i] if i in known else got[c.name] for i, c in enumerate(cells)]
    table = status.write_status(results, status_path)
    print(status.format_summary(results), end="")
    print(f"status: {table}\nnext: fairseq-entropy aggregate {root / 'runs'} --out "
          f"{root / 'results'}")
    bad = status.summarize(results)
    if bad["failed"] or bad["locked"]:
        raise UserError(f"{bad['failed']} cell(s) failed, {bad['locked']} locked and "
                        f"{bad['cancelled']} cancelled; see {table}. Fix: correct the reason "
                        "given and re-run the same command (finished cells are skipped)")
    if bad["cancelled"]:
        raise UserError(f"{bad['cancelled']} cell(s) cancelled by Slurm (scancel, time limit or "
                        f"preemption); see {table}. Fix: re-run the same command to resume "
                        "them (finished cells are skipped)")


def check_buildable(grid_path, cells, root: Path) -> None:
    """Refuse a grid level that ``fairseq-entropy build`` would refuse (an entropy target out
    of reach at the grid's N, more commands than a level has, an empty split), before any
    cell trains and with ``--dry-run`` too.

    Each distinct (experiment, N, level, build arguments) whose data are not built under
    ``root`` yet is built once in memory, with the options of its sweep build command
    (:func:`fairseq_entropy.experiments.sweep.data_commands`) and the first of its seeds;
    nothing is written (COGS: :func:`~fairseq_entropy.experiments.sweep.check_cogs_levels`).

    Raises:
        UserError: naming the grid file, the cell and the builder's reason.
    """
    from ..experiments import sweep
    from . import build, build_parser

    if cells and cells[0].experiment == "cogs":
        return sweep.check_cogs_levels(grid_path, cells, root)
    parser, seen = build_parser(), set()
    for cell in cells:
        key = (cell.experiment, cell.n, cell.level, cell.build_args)
        if key in seen or (cell.databin(root) / "manifest.json").exists() or \
                (cell.build_dir(root) / cell.level_name / "manifest.json").exists():
            continue
        seen.add(key)
        command = sweep.data_commands(cell, root)[0]
        try:
            build.requested_levels(parser.parse_args(command[1:]))
        except UserError as e:
            size = f" at N = {cell.n}" if cell.n is not None else ""
            raise UserError(f"{grid_path}: level {cell.level:g}{size} cannot be built "
                            f"(cell {cell.name}): {e} (in the grid file: its n, levels or "
                            "build_args)") from None
