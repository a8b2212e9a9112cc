"""Where one training update's time goes, for one preset on one core.

Splits ``Trainer.train_step`` of fairseq into: data loading (the next batch from the epoch
iterator), the model's forward pass, the criterion (loss on the model output), the backward
pass, the optimizer (gradient clipping and the parameter update) and fairseq's per-update
bookkeeping (everything else inside ``train_step``: logging outputs, metrics, learning-rate
schedule, checks).  Each phase is timed with ``time.perf_counter`` around the function that
does it; the percentages are of the total wall time of the timed updates.  With ``--trace``,
also prints torch.profiler's table of the most expensive operators.  With ``--floor``, the
time below which no eager PyTorch implementation of the same update can go on this core (see
:func:`print_floor`).

Not a test.  Usage::

    OMP_NUM_THREADS=1 python benchmarks/profile_update.py [--preset exp1_transformer_sinusoidal]
        [--data LEVEL_DATABIN] [--updates 200] [--trace] [--ceiling] [--floor]
        [-- EXTRA FAIRSEQ-TRAIN ARGS]

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


PHASE_PREFIX = "phase: "
GEMM = ("aten::mm", "aten::addmm", "aten::bmm")
# kernels of the model whose work is more than dispatching a call: random numbers for dropout,
# the GELU, softmax, log-softmax and layer norm, forward and backward
HEAVY_KERNELS = ("aten::uniform_", "aten::bernoulli_", "aten::gelu", "aten::gelu_backward",
                 "aten::_softmax", "aten::_softmax_backward_data", "aten::_log_softmax",
                 "aten::_log_softmax_backward_data", "aten::native_layer_norm",
                 "aten::native_layer_norm_backward")
MODEL_PHASES = ("model forward", "criterion", "backward")


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
            with torch.profiler.record_function(PHASE_PREFIX + name):
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
    flops = update_flops(trainer, batches, updates)
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


def update_flops(trainer, batches, updates: int = 20) -> float:
    """Floating-point operations of one update (forward and backward; mean over ``updates``
    batches), counted by ``torch.utils.flop_counter``."""
    from torch.utils.flop_counter import FlopCounterMode

    flops = 0
    for _ in range(updates):
        counter = FlopCounterMode(display=False)
        with counter:
            trainer.train_step([next(batches)])
        flops += counter.get_total_flops()
    return flops / updates


def call_seconds(seconds: float = 1.0) -> float:
    """The cost of one dispatched PyTorch operator call that does (almost) no work: an
    addition of two 4-element tensors without autograd, on this core."""
    a, b = torch.randn(4), torch.randn(4)
    with torch.no_grad():
        for _ in range(1000):
            torch.add(a, b)
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(1000):
                torch.add(a, b)
            count += 1000
    return (time.perf_counter() - start) / count


def op_calls(prof, updates: int) -> dict:
    """Per model phase (:data:`MODEL_PHASES`), the operator calls of the profiled updates that
    were dispatched from Python or from autograd (not from inside another operator):
    ``{phase: {op name: [calls per update, self ms per update]}}``."""
    by_phase = {}
    for event in prof.events():
        if not event.name.startswith("aten::"):
            continue
        parent, nested, phase = event.cpu_parent, False, None
        while parent is not None:
            if parent.name.startswith("aten::") and phase is None:
                nested = True
            if parent.name.startswith(PHASE_PREFIX):
                phase = parent.name[len(PHASE_PREFIX):]
                if phase in MODEL_PHASES:
                    break
            parent = parent.cpu_parent
        if phase not in MODEL_PHASES:
            continue
        ops = by_phase.setdefault(phase, defaultdict(lambda: [0.0, 0.0]))
        entry = ops[event.name]
        # nested calls add their kernel time, not another dispatch
        entry[0] += 0.0 if nested else 1.0 / updates
        entry[1] += event.self_cpu_time_total / 1e3 / updates
    return by_phase


def print_floor(trainer, batches, phase_ms: dict, updates: int, measured: float) -> None:
    """The time below which no eager implementation of the same update can go on this core.

    The sum of:

    * the matrix products' floating-point operations (``torch.utils.flop_counter``) at this
      core's best measured product speed (a 512 x 512 x 512 float32 product, measured three
      times across the run; a warning when they differ by more than 10%);
    * the measured time of the model's non-product kernels that do real work
      (:data:`HEAVY_KERNELS`: dropout's random numbers, GELU, softmax, log-softmax, layer
      norm; forward and backward), as torch.profiler sees them in the updates;
    * every other operator call of the model's forward, criterion and backward, each at the
      cost of a call that does no work (:func:`call_seconds`);
    * the optimizer, fairseq's per-update bookkeeping and data loading, as measured
      (``phase_ms``: ms per update of the timed updates).

    The bound assumes that the products run at the core's peak, the other kernels that do
    real work at the speed PyTorch's own kernels reach in the update, and that the optimizer
    step and fairseq's loop cost what they cost now; the copies, small element-wise kernels
    (residual additions, masks, dropout multiplications) and the Python and autograd work
    between calls, which a real update also spends time on, count as free.
    """
    # the core's product speed, measured before, between and after the other measurements: a
    # shared machine's speed drifts, and the best of them is the peak
    speeds = [matmul_gflops(512, 512, 512, seconds=1.0)]
    flops = update_flops(trainer, batches)
    speeds.append(matmul_gflops(512, 512, 512, seconds=1.0))
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with prof:
        for _ in range(updates):
            with torch.profiler.record_function(PHASE_PREFIX + "update"):
                trainer.train_step([next(batches)])
    calls = op_calls(prof, updates)
    dispatch = call_seconds()
    speeds.append(matmul_gflops(512, 512, 512, seconds=1.0))
    peak = max(speeds)
    if min(speeds) < 0.9 * peak:
        print(f"# floor: WARNING the core's product speed varied during the run "
              f"({', '.join(f'{v:.1f}' for v in speeds)} GFLOP/s): the machine is shared or "
              f"throttled, and the figures below do not belong to one state; rerun on an idle "
              f"machine")
    products = 1000 * flops / (peak * 1e9)
    heavy = sum(ms for ops in calls.values() for name, (_, ms) in ops.items()
                if name in HEAVY_KERNELS)
    other_calls = sum(n for ops in calls.values() for name, (n, _) in ops.items()
                      if name not in HEAVY_KERNELS and name not in GEMM)
    others = other_calls * dispatch * 1000
    fixed = {name: phase_ms.get(name, 0.0)
             for name in ("optimizer", "fairseq bookkeeping", "data loading")}
    floor = products + heavy + others + sum(fixed.values())
    print(f"# floor: matrix products {flops / 1e9:.2f} GFLOP at {peak:.1f} GFLOP/s = "
          f"{products:.1f} ms")
    print(f"# floor: dropout random numbers, GELU, softmax, layer norm as measured = "
          f"{heavy:.1f} ms")
    print(f"# floor: {other_calls:.0f} other operator calls of the model at "
          f"{1e6 * dispatch:.2f} us each (a call that does no work) = {others:.1f} ms")
    print("# floor: " + ", ".join(f"{name} {ms:.1f} ms" for name, ms in fixed.items())
          + " as measured")
    print(f"# floor: {floor:.1f} ms/update = {1000 / floor:.1f} updates/s at most on this core "
          f"(measured {measured:.2f} updates/s, {100 * measured * floor / 1000:.0f}% of it)")


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
    p.add_argument("--floor", action="store_true",
                   help="also print the time below which no eager PyTorch implementation of "
                        "the same update can go on this core: products at the core's peak, "
                        "the measured dropout/GELU/softmax/layer-norm kernels, every other "
                        "call at the cost of an empty one, and the optimizer, bookkeeping and "
                        "data loading as measured")
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
        phase_ms = {name: 1000 * s / args.updates for name, s in timer.seconds.items()}
        for name in ("data loading", "model forward", "criterion", "backward", "optimizer",
                     "fairseq bookkeeping"):
            s = timer.seconds.get(name, 0.0)
            print(f"{name:22} {1000 * s / args.updates:8.2f} ms/update {100 * s / total:6.1f}%")
        if args.trace:
            averages = prof.key_averages()
            print(averages.table(sort_by="self_cpu_time_total", row_limit=25))
            traced = sum(e.self_cpu_time_total for e in averages) / 1e3 / args.updates
            products = sum(e.self_cpu_time_total for e in averages
                           if e.key in GEMM) / 1e3 / args.updates
            print(f"# matrix products (aten::mm, addmm, bmm) take {products:.1f} of the "
                  f"{traced:.1f} ms/update the profiler saw ({100 * products / traced:.0f}%): "
                  f"with nothing else costing anything, an update could not beat "
                  f"{1000 / products:.1f} updates/s at these products' measured speed")
        if args.ceiling:
            print_ceiling(trainer, batches, args.updates / total)
        if args.floor:
            print_floor(trainer, batches, phase_ms, min(args.updates, 50), args.updates / total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
