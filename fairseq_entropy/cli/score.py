"""``fairseq-entropy score``: exact-match accuracy of one ``fairseq-generate`` output, with
its provenance (data, preset, model, seed, checkpoint) checked against the checkpoint."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from . import options


def add_parser(sub) -> None:
    """Add the ``score`` subcommand to the subparsers ``sub``."""
    from ..analysis.scoring import CHECKPOINT_LABELS

    sc = sub.add_parser("score", help="exact-match accuracy of fairseq-generate output")
    sc.add_argument("generate_output")
    sc.add_argument("--out", required=True, help="directory for examples.tsv and score.json")
    sc.add_argument("--data", help="level directory (raw or binarized) with manifest.json "
                    "(default: the training data recorded in the checkpoint)")
    sc.add_argument("--preset", help="preset the run was trained with (default: the one "
                    "preset of the checkpoint's architecture and the data's experiment)")
    sc.add_argument("--model", help="model name (default: the preset's)")
    sc.add_argument("--seed", type=options.seed, help="training seed (default: the checkpoint's)")
    sc.add_argument("--checkpoint", default="last", choices=CHECKPOINT_LABELS,
                    help="which checkpoint was decoded: the last, the best on validation "
                    "(seq_acc), or the one with the lowest test loss (the paper authors' "
                    "selection, recipes/train_level.sh with SELECT=test-loss)")
    sc.add_argument("--path", help="the checkpoint that was decoded (default: "
                    "checkpoints/checkpoint_<label>.pt beside the generate output, if present)")
    sc.add_argument("--split", default="test", help="split that was decoded; the output must "
                    "be a decode of exactly that split's commands, id by id")
    sc.add_argument("--force", action="store_true", help="replace an existing score.json")


def _score_provenance(args) -> dict:
    """Resolve the data, preset, model and seed of a decode for ``score``.

    Each comes from its option, else from the decoded checkpoint (``--path``, or
    ``checkpoints/checkpoint_<label>.pt`` beside the generate output): its training data, its
    architecture (the one preset of that architecture and the data's experiment) and its seed.

    Raises:
        ValueError: a value that cannot be known, or options that contradict the checkpoint.
    """
    from ..analysis.scoring import (load_data_manifest, provenance, read_checkpoint_info)
    from ..experiments.presets import PresetError, load_presets

    ckpt = Path(args.path) if args.path else \
        Path(args.generate_output).parent / "checkpoints" / f"checkpoint_{args.checkpoint}.pt"
    if args.path and not ckpt.is_file():
        raise UserError(f"{ckpt}: checkpoint not found. Fix: pass --path with the checkpoint "
                         "that was decoded")
    info = read_checkpoint_info(ckpt) if ckpt.is_file() else None
    where = f"checkpoint {ckpt}" if info else f"no checkpoint at {ckpt}"

    data = args.data or (info or {}).get("data")
    if not data or not Path(data).is_dir():
        raise UserError(f"the decoded data is unknown (no --data; {where}"
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
            raise UserError(f"{ckpt} was trained with --arch {info['arch']}, but preset "
                             f"{preset} uses {presets[preset].get('arch')}. Fix: pass the "
                             f"preset of the run (one of: {', '.join(same_arch) or 'none'})")
        if preset is None:
            fits = [n for n in same_arch
                    if presets[n].get("experiment") == manifest.get("experiment")]
            if len(fits) != 1:
                raise UserError(f"cannot tell the preset of {ckpt} (arch {info['arch']}, "
                                 f"experiment {manifest.get('experiment')}): candidates "
                                 f"{', '.join(fits or same_arch) or 'none'}. Fix: pass --preset")
            preset = fits[0]
    if preset is None:
        raise UserError(f"the preset is unknown (no --preset; {where}). Fix: pass --preset "
                         "NAME (fairseq-entropy train-args lists them) or --path CHECKPOINT")
    model = presets[preset].get("model", preset)
    if args.model is not None and args.model != model:
        raise UserError(f"--model {args.model} contradicts preset {preset}, whose model is "
                         f"{model}. Fix: drop --model (it is read from the preset)")

    seed = args.seed
    if info and info["seed"] is not None:
        if seed is not None and seed != info["seed"]:
            raise UserError(f"--seed {seed} contradicts {ckpt}, trained with seed "
                             f"{info['seed']}. Fix: drop --seed (it is read from the checkpoint)")
        seed = info["seed"]
    if seed is None:
        raise UserError(f"the training seed is unknown (no --seed; {where}). Fix: pass --seed "
                         "S or --path CHECKPOINT")
    return {"data": data, "meta": provenance(manifest, sha, data, args.split, args.checkpoint,
                                             preset, model, seed,
                                             info["path"] if info else None)}


def run(args) -> None:
    """``score``: exact-match accuracy of one fairseq-generate output, with its provenance."""
    from ..analysis.scoring import write_score

    if (Path(args.out) / "score.json").exists() and not args.force:
        raise UserError(f"{Path(args.out) / 'score.json'} already exists. Fix: pass --force "
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
