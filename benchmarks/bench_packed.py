"""Benchmark packed runs against separate runs: model-updates/s per core, side by side.

For each preset and each K, K models of the preset (seeds 1..K) train on their own random
batches of the preset's batch size (Experiment 1-like data of the paper grammar, built here):

- ``separate``: the K models one after another, each an ordinary training step (its
  criterion, backward, clipping to the preset's --clip-norm, its own AdamW step);
- ``packed``: one step of the K models packed (:class:`~fairseq_entropy.models.packed.
  PackedModel`, :class:`~fairseq_entropy.criterions.packed.PackedCriterion`, per-run
  clipping, one AdamW step over the stacked parameters).

The two are timed alternately in the same process (``--rounds`` rounds of ``--seconds`` each,
best round kept), so both see the same machine load.  ``model-upd/s`` counts one update of one
run as one; fairseq's own per-update work (logging, metrics, scheduler) is left out of both,
and a separate run pays it K times where a pack pays it once.  ``target positions``: the
target positions a packed step computes over those of its runs alone (:func:`padding`).
``MB/run``: the run's
parameters, gradients and two Adam moments (fp32), and the growth of the process's resident
memory over the packed steps divided by K (activations and workspace; allocator caching makes
it rough; on a GPU, the growth of the peak allocated memory instead).

``--device cuda`` runs both on the GPU (each timed loop ends with a synchronisation), as
``benchmarks/gpu_check.sh`` does at K = 1, 16, 64.

Not a test.  Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_packed.py [--presets exp1_cnn_authors,...]
        [--ks 1,4,16,35] [--seconds 3] [--rounds 2] [--n 2000] [--device cpu|cuda]
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT_PRESETS = ("exp1_cnn_authors,exp1_fconv,exp1_transformer_sinusoidal,"
                   "exp1_transformer_relative,exp1_transformer_rope,exp1_equivariant,"
                   "exp1_rnn_h64")


def write_level(root: Path, n: int) -> Path:
    """n random two-clause commands of the paper grammar as train/valid/test, binarized in
    this process with the grammar's fixed dictionary."""
    from fairseq.data import indexed_dataset

    from fairseq_entropy.data import SymbolDictionary
    from fairseq_entropy.scan.dictionary import write_dictionary
    from fairseq_entropy.scan.grammar import Grammar

    grammar = Grammar.paper()
    pool = []
    for c in grammar.commands(one_clause=False):
        pool.append(c)
        if len(pool) == 20 * n:
            break
    pick = np.random.RandomState(0).choice(len(pool), n, replace=False)
    pairs = [(str(pool[i]), " ".join(grammar.interpret(pool[i]))) for i in pick]
    for side in ("in", "out"):
        write_dictionary(root / f"dict.{side}.txt", grammar)
    d = SymbolDictionary.load(str(root / "dict.in.txt"))
    for split in ("train", "valid", "test"):
        for side, col in (("in", 0), ("out", 1)):
            prefix = str(root / f"{split}.in-out.{side}")
            builder = indexed_dataset.make_builder(prefix + ".bin", "mmap", vocab_size=len(d))
            for pair in pairs:
                builder.add_item(d.encode_line(pair[col], add_if_not_exist=False))
            builder.finalize(prefix + ".idx")
    (root / "manifest.json").write_text(json.dumps({"experiment": "exp1", "level": "bench",
                                                    "sizes": {"train": n}}))
    return root


def setup(preset_name: str, data: Path, device: str = "cpu"):
    """The preset's task, criterion, model config, batch size, clip norm and AdamW options."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_entropy.experiments.presets import load_presets, train_args

    preset = load_presets()[preset_name]
    args = train_args(preset, data, max_update=1000)
    ns = options.parse_args_and_arch(options.get_training_parser(), [
        str(data), "--user-dir", str(REPO / "fairseq_entropy"), *args,
        *(["--cpu"] if device == "cpu" else [])])
    cfg = convert_namespace_to_omegaconf(ns)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    criterion = task.build_criterion(cfg.criterion)
    return task, criterion, cfg, int(ns.batch_size), float(ns.clip_norm), \
        {"fused": True} if getattr(ns, "adamw_fused", False) else {"foreach": True}


def batches(task, batch: int, k: int, steps: int, device: str = "cpu"):
    """``steps`` x ``k`` random batches (run j's drawn with seed j), on ``device``."""
    from fairseq import utils

    ds = task.dataset("train")
    out = []
    for j in range(k):
        rng = np.random.RandomState(j)
        out.append([ds.collater([ds[i] for i in rng.choice(len(ds), batch, replace=False)])
                    for _ in range(steps)])
        if device != "cpu":
            out[-1] = [utils.move_to_cuda(s) for s in out[-1]]
    return [[out[j][s] for j in range(k)] for s in range(steps)]


def padding(steps) -> float:
    """Target positions a packed step computes over those of the K runs alone: the pack pads
    every run's batch to the longest target of the K batches (``(K x max_k T_k) / sum_k T_k``
    summed over the steps); an arithmetic-bound model pays it in full."""
    packed = alone = 0
    for runs in steps:
        lengths = [int(r["target"].size(1)) for r in runs]
        packed += len(lengths) * max(lengths)
        alone += sum(lengths)
    return packed / alone


def rss_mb(device: str = "cpu") -> float:
    """Resident memory of this process (CPU), or the peak memory allocated on the GPU, MB."""
    if device != "cpu":
        return torch.cuda.max_memory_allocated() / 2**20
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def time_loop(step, samples, seconds: float, device: str = "cpu") -> float:
    """Steps per second of ``step`` over ``samples`` (cycled) for about ``seconds`` (on a GPU,
    the queued work is waited for before the clock is read)."""
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    step(samples[0])  # warm-up
    sync()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(samples[n % len(samples)])
        n += 1
        if n % 8 == 0:
            sync()
    sync()
    return n / (time.perf_counter() - start)


def bench(preset: str, data: Path, ks, seconds: float, rounds: int,
          device: str = "cpu") -> None:
    from fairseq_entropy.criterions.packed import PackedCriterion
    from fairseq_entropy.models.packed import PackedError, PackedModel
    from fairseq_entropy.tasks.packed import clip_runs

    task, criterion, cfg, batch, clip, impl = setup(preset, data, device)
    for k in ks:
        def build():
            out = []
            for seed in range(1, k + 1):
                torch.manual_seed(seed)
                out.append(task.build_model(cfg.model).train().to(device))
            return out

        models = build()
        samples = batches(task, batch, k, 8, device)
        opts = [torch.optim.AdamW(m.parameters(), lr=1e-4, **impl) for m in models]

        def separate(runs):
            for m, opt, sample in zip(models, opts, runs):
                opt.zero_grad(set_to_none=True)
                loss, size, _ = criterion(m, sample)
                (loss / size).backward()
                if clip > 0:
                    torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
                opt.step()

        try:
            packed = PackedModel(build()).train().to(device)
            pcrit = PackedCriterion(task, criterion)
            pcrit(packed, {"runs": samples[0]})
        except PackedError as e:
            print(f"{preset:28s} K={k:<3d} packed: n/a ({e})")
            return
        popt = torch.optim.AdamW(packed.parameters(), lr=1e-4, **impl)

        def packed_step(runs):
            popt.zero_grad(set_to_none=True)
            loss, _, _ = pcrit(packed, {"runs": runs})
            loss.backward()
            if clip > 0:
                clip_runs(list(packed.parameters()), clip)
            popt.step()

        before = rss_mb(device)
        sep = pk = 0.0
        for _ in range(rounds):
            sep = max(sep, k * time_loop(separate, samples, seconds, device))
            pk = max(pk, k * time_loop(packed_step, samples, seconds, device))
        grown = max(rss_mb(device) - before, 0.0) / k
        params = sum(p.numel() for p in models[0].parameters())
        state_mb = params * 4 * 4 / 2**20
        print(f"{preset:28s} K={k:<3d} separate {sep:8.1f}  packed {pk:8.1f} model-upd/s  "
              f"ratio {pk / sep:5.2f}x  MB/run {state_mb:.1f} + {grown:.1f}  "
              f"({params} params)  target positions x{padding(samples):.2f}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", default=DEFAULT_PRESETS, help="comma-separated presets")
    p.add_argument("--ks", default="1,4,16,35", help="pack sizes K, comma-separated")
    p.add_argument("--seconds", type=float, default=3.0, help="seconds per timed loop")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds; best kept")
    p.add_argument("--n", type=int, default=2000, help="training commands of the level")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where both train (cuda: the first GPU)")
    args = p.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.WARNING)
    for name in ("fairseq", "fairseq_entropy"):
        logging.getLogger(name).setLevel(logging.WARNING)
    import warnings

    warnings.filterwarnings("ignore")
    import fairseq_entropy  # noqa: F401  (registers the plugin)
    try:
        import fairseq_entropy.models.packed_rnn  # noqa: F401
    except ImportError:
        pass
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data = write_level(Path(tmp), args.n)
        for preset in args.presets.split(","):
            bench(preset, data, [int(k) for k in args.ks.split(",")], args.seconds,
                  args.rounds, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
