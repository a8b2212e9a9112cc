"""Where one training update's time goes, for one preset on one core.

Splits ``Trainer.train_step`` of fairseq into: data loading (the next batch from the epoch
iterator), the model's forward pass, the criterion (loss on the model output), the backward
pass, the optimizer (gradient clipping and the parameter update) and fairseq's per-update
bookkeeping (everything else inside ``train_step``: logging outputs, metrics, learning-rate
schedule, checks).  Each phase is timed with ``time.perf_counter`` around the function that
does it; the percentages are of the total wall time of the timed updates.  With ``--trace``,
also prints torch.profiler's table of the most expensive operators.

Not a test.  Usage::

    OMP_NUM_THREADS=1 python benchmarks/profile_update.py [--preset exp1_transformer_sinusoidal]
        [--data LEVEL_DATABIN] [--updates 200] [--trace] [-- EXTRA FAIRSEQ-TRAIN ARGS]

Without ``--data`` it builds and binarizes Experiment 1 at 3 bits (seed 1) in a temporary
directory.  Figures depend on the machine and its load: compare variants side by side in one
run (pass the variant's fairseq-train options after ``--``).
"""

import argparse
import contextlib
import functools
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import build_exp1_level, build_trainer, quiet_logging  # noqa: E402


class PhaseTimer:
    """Accumulates wall seconds per phase; nested phases are subtracted from their parent."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self._stack = []

    @contextlib.contextmanager
    def phase(self, name):
        start = time.perf_counter()
        self._stack.append(0.0)
        try:
            yield
        finally:
            inner = self._stack.pop()
            spent = time.perf_counter() - start
            self.seconds[name] += spent - inner
            if self._stack:
                self._stack[-1] += spent

    def wrap(self, obj, attr, name):
        fn = getattr(obj, attr)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            with self.phase(name):
                return fn(*args, **kwargs)
        setattr(obj, attr, timed)


def matmul_gflops(m: int, k: int, n: int, seconds: float = 2.0) -> float:
    """Measured GFLOP/s of float32 ``[m, k] @ [k, n]`` on this core (2 m k n per product)."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(5):
        a @ b
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    return 2 * m * k * n * count / (time.perf_counter() - start) / 1e9


def print_ceiling(trainer, batches, measured: float, updates: int = 20) -> None:
    """FLOPs per update (mean over ``updates`` batches) and the compute-bound ceiling."""
    from torch.utils.flop_counter import FlopCounterMode

    flops = 0
    for _ in range(updates):
        counter = FlopCounterMode(display=False)
        with counter:
            trainer.train_step([next(batches)])
        flops += counter.get_total_flops()
    flops /= updates
    model_dim = getattr(trainer.model.cfg if hasattr(trainer.model, "cfg") else None,
                        "embed_dim", None) or 128
    # the dominant products: [tokens of a batch, d] @ [d, 4d] (feed-forward, projections)
    speed = matmul_gflops(512, model_dim, 4 * model_dim)
    floor = flops / (speed * 1e9)
    print(f"# compute: {flops / 1e9:.2f} GFLOP per update (forward + backward); this core "
          f"multiplies [512, {model_dim}] @ [{model_dim}, {4 * model_dim}] at {speed:.1f} "
          f"GFLOP/s; at that speed the products alone take {1000 * floor:.0f} ms/update, a "
          f"ceiling of {1 / floor:.1f} updates/s (measured: {measured:.2f}, "
          f"{100 * measured * floor:.0f}% of the ceiling)")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="exp1_transformer_sinusoidal")
    p.add_argument("--data", type=Path, help="binarized Experiment 1 level (default: build one)")
    p.add_argument("--updates", type=int, default=200, help="timed updates (after 10 warm-up)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--trace", action="store_true", help="also print torch.profiler's op table")
    p.add_argument("--ceiling", action="store_true",
                   help="also count the floating-point operations of an update (forward and "
                        "backward, torch.utils.flop_counter) and divide them by this core's "
                        "measured matrix-product speed: the updates/s no implementation of "
                        "the same computation can exceed here")
    args = p.parse_args(argv)

    quiet_logging()
    torch.set_num_threads(args.threads)
    import fairseq_entropy  # noqa: F401  (registers the archs)

    with tempfile.TemporaryDirectory(prefix="profile_update_") as tmp:
        data = args.data or build_exp1_level(Path(tmp))
        trainer, batches, params = build_trainer(args.preset, data, extra)
        for _ in range(10):  # warm-up
            trainer.train_step([next(batches)])
        timer = PhaseTimer()
        model, criterion, task = trainer.model, trainer.criterion, trainer.task
        timer.wrap(model, "forward", "model forward")
        timer.wrap(criterion, "forward", "criterion")
        timer.wrap(trainer.optimizer, "backward", "backward")
        timer.wrap(trainer.optimizer, "step", "optimizer")
        timer.wrap(trainer.optimizer, "clip_grad_norm", "optimizer")
        real = padded = 0
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) \
            if args.trace else contextlib.nullcontext()
        start = time.perf_counter()
        with prof:
            for _ in range(args.updates):
                with timer.phase("data loading"):
                    batch = next(batches)
                target = batch["target"]
                real += int(target.ne(task.target_dictionary.pad()).sum())
                padded += target.numel()
                with timer.phase("fairseq bookkeeping"):
                    trainer.train_step([batch])
        total = time.perf_counter() - start
        print(f"# preset {args.preset} ({params:,} parameters), {args.updates} updates, "
              f"{args.threads} thread(s), extra args: {' '.join(extra) or '-'}")
        print(f"# {args.updates / total:.2f} updates/s; real target tokens "
              f"{real / total:.0f}/s; {100 * real / padded:.1f}% of target positions are real")
        for name in ("data loading", "model forward", "criterion", "backward", "optimizer",
                     "fairseq bookkeeping"):
            s = timer.seconds.get(name, 0.0)
            print(f"{name:22} {1000 * s / args.updates:8.2f} ms/update {100 * s / total:6.1f}%")
        if args.trace:
            averages = prof.key_averages()
            print(averages.table(sort_by="self_cpu_time_total", row_limit=25))
            traced = sum(e.self_cpu_time_total for e in averages) / 1e3 / args.updates
            gemm = ("aten::mm", "aten::addmm", "aten::bmm")
            products = sum(e.self_cpu_time_total for e in averages
                           if e.key in gemm) / 1e3 / args.updates
            print(f"# matrix products (aten::mm, addmm, bmm) take {products:.1f} of the "
                  f"{traced:.1f} ms/update the profiler saw ({100 * products / traced:.0f}%): "
                  f"with nothing else costing anything, an update could not beat "
                  f"{1000 / products:.1f} updates/s at these products' measured speed")
        if args.ceiling:
            print_ceiling(trainer, batches, args.updates / total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
