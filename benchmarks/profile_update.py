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
from bench_models import build_exp1_level, build_trainer  # noqa: E402


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
    args = p.parse_args(argv)

    import logging
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("fairseq").setLevel(logging.WARNING)
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
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    return 0


if __name__ == "__main__":
    sys.exit(main())
