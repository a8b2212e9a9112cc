"""Benchmark the plugin's presets on this machine: size, training and decoding speed.

For each preset of the packaged presets file whose ``--arch`` is registered, prints

- ``params``: trainable parameters (on the Experiment 1 dictionary);
- ``tgt tok/s`` and ``real``: real target tokens trained on per second (padding not counted)
  and the share of real tokens among the target positions of the batches as the task hands
  them to the model (after ``--length-chunks``); the Transformer and CNN decoders then run
  their position-wise layers on the real tokens only, and only attention on that layout;
- ``upd/s``: training updates per second at the preset's batch size, measured through fairseq's
  ``Trainer.train_step`` with the preset's own optimiser, schedule and criterion (for the RNN:
  teacher-forcing ratio 0, the decoder unrolled on its own predictions);
- ``gen sent/s``: sentences per second reported by ``fairseq-generate --beam 1 --batch-size 512``
  on the 7056-command Experiment 1 test set, and the mean hypothesis length (an untrained model
  may decode to the length limit, so pass trained checkpoints with ``--checkpoint`` for figures
  that match real use).

Not a test.  Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_models.py [--data LEVEL_DATABIN]
        [--presets exp1_rnn_h64,exp1_fconv] [--seconds 10] [--checkpoint PRESET=CKPT ...]
        [--variant pool16='--batch-pool 16' ...] [--no-generate]

Without ``--data`` it builds and binarizes Experiment 1 at 3 bits (seed 1) in a temporary
directory with the ``fairseq-entropy`` CLI.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
USER_DIR = REPO / "fairseq_entropy"


def quiet_logging() -> None:
    """Warnings and errors only: fairseq's and the plugin's INFO lines are not the
    benchmark's output."""
    import logging

    logging.basicConfig(level=logging.WARNING)
    for name in ("fairseq", "fairseq_entropy"):
        logging.getLogger(name).setLevel(logging.WARNING)


def console_script(name: str) -> str:
    """The path of console script ``name`` beside this interpreter (so that a virtual
    environment's python finds its own scripts without being activated), else ``name``."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


def cli(*args, env=None) -> str:
    proc = subprocess.run([console_script("fairseq-entropy"), *args], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"fairseq-entropy {' '.join(args)} failed: {proc.stderr[-2000:]}")
    return proc.stdout


def build_exp1_level(root: Path) -> Path:
    """Build and binarize Experiment 1 at 3 bits, seed 1, under ``root``; return the level."""
    cli("build", "exp1", "--out", str(root / "build"), "--levels", "3", "--seed", "1")
    cli("binarize", str(root / "build"), "--out", str(root / "databin"), "--workers", "1")
    levels = sorted((root / "databin").iterdir())
    return levels[0]


def build_trainer(preset_name: str, data: Path, extra_args=()):
    """Build task, model, criterion and fairseq ``Trainer`` from the preset's fairseq-train
    arguments (plus ``extra_args``); returns (trainer, endless batch iterator, parameters)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    # --epochs 1: Experiment 2 presets compute their epochs from the support size, which an
    # Experiment 1 level has not; the schedule length does not change the speed measured here
    line = cli("train-args", preset_name, "--data", str(data), "--epochs", "1")
    args = shlex.split(line.strip().splitlines()[-1])
    parser = options.get_training_parser()
    ns = options.parse_args_and_arch(parser, [str(data), "--user-dir", str(USER_DIR), *args,
                                              "--cpu", "--num-workers", "0", "--seed", "1",
                                              "--max-update", "1000000", *extra_args])
    cfg = convert_namespace_to_omegaconf(ns)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train", combine=False, epoch=1)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    trainer = Trainer(cfg, task, model, criterion)

    def endless_batches():  # a fast model can outrun one epoch within the timed window
        epoch = 1
        while True:
            epoch_itr = trainer.get_train_iterator(epoch=epoch, load_dataset=False)
            yield from epoch_itr.next_epoch_itr(shuffle=True)
            epoch += 1

    return trainer, endless_batches(), params


def measure_training(preset_name: str, data: Path, seconds: float, save_to: Path,
                     extra_args=()):
    """Time ``Trainer.train_step`` for the preset (plus ``extra_args``) and save a checkpoint
    for decoding.  Returns (params, updates/s, real target tokens/s, share of the target
    positions of the (chunked) batches that are real tokens rather than padding)."""
    from fairseq_entropy.data import split_by_length

    trainer, batches, params = build_trainer(preset_name, data, extra_args)
    cfg = trainer.task.cfg
    pad = trainer.task.tgt_dict.pad()
    for _ in range(3):  # warm-up
        trainer.train_step([next(batches)])
    n, real, computed, start = 0, 0, 0, time.perf_counter()
    while time.perf_counter() - start < seconds or n < 5:
        sample = next(batches)
        real += int(sample["ntokens"])
        computed += sum(part["target"].numel()  # the positions the model computes
                        for part in split_by_length(sample, cfg.length_chunks, pad))
        trainer.train_step([sample])
        n += 1
    wall = time.perf_counter() - start
    trainer.consolidate_optimizer()
    trainer.save_checkpoint(str(save_to), {})
    return params, n / wall, real / wall, real / max(computed, 1)


def measure_generation(data: Path, checkpoint: Path):
    """Run fairseq-generate on the test set; return (sentences/s, mean hypothesis length)."""
    cmd = [console_script("fairseq-generate"), str(data), "--user-dir", str(USER_DIR),
           "--path", str(checkpoint),
           "--gen-subset", "test", "--beam", "1", "--max-len-a", "0", "--max-len-b", "60",
           "--batch-size", "512", "--required-batch-size-multiple", "1", "--cpu",
           "--num-workers", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"fairseq-generate failed: {proc.stderr[-2000:]}")
    m = re.search(r"Translated ([\d,]+) sentences .*?\(([\d.]+) sentences/s", proc.stderr)
    hyp_lens = [len(line.split("\t")[2].split()) for line in proc.stdout.splitlines()
                if line.startswith("H-")]
    mean_len = sum(hyp_lens) / max(len(hyp_lens), 1)
    return (float(m.group(2)) if m else float("nan")), mean_len, len(hyp_lens)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, help="binarized Experiment 1 level (default: build one)")
    p.add_argument("--presets", help="comma-separated preset names (default: all registered)")
    p.add_argument("--presets-file", type=Path,
                   help="presets file (default: the one shipped in fairseq_entropy.experiments)")
    p.add_argument("--seconds", type=float, default=10.0, help="timed training per preset")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                   help="also measure every preset with these extra fairseq-train arguments, "
                        "e.g. pool16='--batch-pool 16'; variants run one after another per "
                        "preset, side by side with the preset as it is ('preset')")
    p.add_argument("--no-generate", action="store_true", help="skip fairseq-generate")
    p.add_argument("--checkpoint", action="append", default=[], metavar="PRESET=CKPT",
                   help="decode this trained checkpoint for PRESET instead of the benchmark's")
    args = p.parse_args(argv)

    quiet_logging()
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    import fairseq_entropy  # noqa: F401  (registers the archs)
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_entropy.experiments.presets import load_presets

    presets = load_presets(args.presets_file)
    names = args.presets.split(",") if args.presets else sorted(presets)
    names = [n for n in names if presets.get(n, {}).get("arch") in ARCH_MODEL_REGISTRY]
    trained = dict(c.split("=", 1) for c in args.checkpoint)

    with tempfile.TemporaryDirectory(prefix="bench_models_") as tmp:
        tmp = Path(tmp)
        data = args.data or build_exp1_level(tmp)
        print(f"# data {data}; torch threads {args.threads}; {args.seconds:.0f}s of training "
              f"per preset", flush=True)
        variants = [("preset", [])] + [
            (v.split("=", 1)[0], shlex.split(v.split("=", 1)[1] if "=" in v else ""))
            for v in args.variant]
        header = (f"{'preset':30} {'variant':10} {'arch':26} {'params':>9} {'batch':>5} "
                  f"{'upd/s':>7} {'ex/s':>7} {'tgt tok/s':>9} {'real':>5} {'gen sent/s':>10} "
                  f"{'hyp len':>7} {'ckpt':>7}")
        print(header, flush=True)
        for name in names:
            preset = presets[name]
            for variant, extra in variants:
                ckpt = tmp / f"{name}.pt"
                try:
                    params, ups, tps, real = measure_training(name, data, args.seconds, ckpt,
                                                              extra)
                    source = "trained" if name in trained else "bench"
                    sps, hyp_len = float("nan"), float("nan")
                    if not args.no_generate:
                        sps, hyp_len, _ = measure_generation(data,
                                                             Path(trained.get(name, ckpt)))
                except Exception as e:  # report and go on with the next preset
                    print(f"{name:30} {variant:10} failed: "
                          f"{(str(e) or repr(e)).splitlines()[0][:200]}", flush=True)
                    continue
                batch = int(preset.get("batch_size", 32))
                print(f"{name:30} {variant:10} {preset['arch']:26} {params:9,d} {batch:5d} "
                      f"{ups:7.1f} {ups * batch:7.0f} {tps:9.0f} {real:5.2f} {sps:10.1f} "
                      f"{hyp_len:7.1f} {source:>7}", flush=True)
                if ckpt.exists():
                    ckpt.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
