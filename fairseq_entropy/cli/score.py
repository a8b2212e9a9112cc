"""``fairseq-entropy score``: exact-match accuracy of one ``fairseq-generate`` output, with
its provenance (data, preset, model, seed, checkpoint, schedule) checked against the
checkpoint, or against the checkpoint record in the decode's log when the checkpoint is gone."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from . import options


def add_parser(sub) -> None:
    """Add the ``score`` subcommand to the subparsers ``sub``."""
    from ..analysis.columns import CHECKPOINT_LABELS

    sc = sub.add_parser("score", help="exact-match accuracy of fairseq-generate output")
    sc.add_argument("generate_output", help="the output of fairseq-generate (its stdout)")
    sc.add_argument("--out", required=True, help="directory for examples.tsv and score.json")
    sc.add_argument("--data", help="level directory (raw or binarized) with manifest.json "
                    "(default: the training data recorded in the checkpoint)")
    sc.add_argument("--preset", help="preset the run was trained with; refused when its "
                    "fairseq-train arguments' hash differs from the checkpoint's (default: the "
                    "preset of the checkpoint's architecture and the data's experiment whose "
                    "arguments' hash is the checkpoint's)")
    sc.add_argument("--model", help="model name (default: the preset's)")
    sc.add_argument("--seed", type=options.seed, help="training seed (default: the checkpoint's)")
    sc.add_argument("--checkpoint", choices=CHECKPOINT_LABELS,
                    help="which checkpoint was decoded: the last, the best on validation "
                    "(seq_acc), or the one with the lowest test loss (the paper authors' "
                    "selection, recipes/train_level.sh with SELECT=test-loss) (default: the "
                    "label in the output's name, generate-<label>.txt, else that of the "
                    "checkpoint's name in --path or in the output's log; refused when none "
                    "tells); refused "
                    "when the output's or the checkpoint's name, the checkpoint that "
                    "fairseq-generate's log beside the output (OUTPUT.log) says it loaded, or "
                    "the metric its training kept the best checkpoint by, says otherwise")
    sc.add_argument("--path", help="the checkpoint that was decoded (default: "
                    "checkpoints/checkpoint_last.pt, or checkpoint_best.pt for best and test-loss, "
                    "beside the generate output, if present)")
    sc.add_argument("--split", default="test", help="split that was decoded; the output must "
                    "be a decode of exactly that split's commands, id by id")
    sc.add_argument("--unverified", action="store_true", help="score a decode whose "
                    "checkpoint is gone and whose fairseq-generate log (OUTPUT.log, with "
                    "the checkpoint record) is not beside it, taking --data, --preset and "
                    "--seed on trust; score.json records that the training data and schedule "
                    "were not verified")
    sc.add_argument("--force", action="store_true", help="replace an existing score.json")
    options.add_presets_option(sc, "needed when the run used one of your presets")


def run(args) -> None:
    """``score``: exact-match accuracy of one fairseq-generate output, with its provenance."""
    from ..analysis.checkpoint_labels import decoded_label
    from ..analysis.provenance import resolve_provenance
    from ..analysis.scoring import score_lines, write_score
    from ..experiments.presets import (check_fits_data, check_preset, load_presets, own_schedule,
                                       preset_args_sha256)

    if (Path(args.out) / "score.json").exists() and not args.force:
        raise UserError(f"{Path(args.out) / 'score.json'} already exists. Fix: pass --force "
                        "to replace it, or choose another --out")
    generated = Path(args.generate_output)
    if not generated.is_file():  # before the provenance, which the decode's place suggests
        raise UserError(f"{generated}" + (" is a directory, not a file" if generated.is_dir()
                                          else ": file not found") +
                        " (the fairseq-generate output to score). Fix: pass the file "
                        "fairseq-generate wrote (e.g. RUN_DIR/generate-last.txt)")
    presets = load_presets(args.presets)
    if args.preset is not None:
        check_preset(presets, args.preset)
    label = args.checkpoint or decoded_label(args.generate_output, args.path)
    run = resolve_provenance(args.generate_output, label, presets, path=args.path,
                             data=args.data, preset=args.preset, model=args.model,
                             seed=args.seed, split=args.split, unverified=args.unverified,
                             own_schedule=own_schedule, args_sha256=preset_args_sha256)
    if run["meta"].get("preset") in presets:
        check_fits_data(presets[run["meta"]["preset"]], run["data"])
    rec = write_score(args.generate_output, args.out, run["meta"], run["data"], args.split,
                      args.force)
    print(score_lines(rec, args.split, args.out))
    print(f"training data: {rec['training_data_check']}; schedule: {rec['schedule_label']}")
    if "unfinished=" in rec["schedule_label"]:
        sched = rec["schedule"]
        print(f"note: the last checkpoint was saved after {sched.get('updates')} of "
              f"{sched.get('max_update') or sched.get('max_epoch')} "
              f"{'updates' if sched.get('max_update') else 'epochs'}: its training was cut "
              "off, so aggregate keeps it apart from finished runs (schedule label "
              "unfinished=...). Fix: resume the training and decode again")
