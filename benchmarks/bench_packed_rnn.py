"""Benchmark packed RNN runs against separate runs, side by side, on one core.

For the RNN presets (batch 1, teacher-forcing ratio 0, loss up to the first predicted
end-of-sentence, AdamW) prints model-updates/s per core of

- ``separate``: K ordinary ``rnn_seq2seq`` models, each updated on its own sample with the
  ordinary ``teacher_forcing_cross_entropy`` criterion and its own ``torch.optim.AdamW``;
- ``packed``: the same K runs in one :class:`~fairseq_entropy.models.packed_rnn.PackedRNNSeq2Seq`
  (one forward, one backward, one AdamW over the stacked parameters per K model-updates);

measured in alternation in one process on the same per-run sample sequences (Experiment 1
training data), so load on the machine hits both alike.  Only model, criterion and optimiser
are timed: fairseq's ``Trainer.train_step`` adds a per-update cost that a pack pays once per K
updates, so through fairseq-train the ratio is larger.

The pack computes each run only up to its own target (and each encoder direction only over
its own source): its runs are sorted by length and a step computes the runs still decoding.
Two decoding regimes: ``full`` (``--stop-at-predicted-eos`` off: every run decodes its whole
target, as a trained model that ends its output at the right place does) and ``init`` (the
preset's criterion on freshly initialised models, which often predict end-of-sentence early:
the pack then also leaves a run once its rows have ended and so have the runs sorted after
it, while the ordinary criterion always decodes the whole target).  ``mean T`` is the mean
target length of the runs' samples (tokens, </s> included), ``max T`` the mean over updates
of the pack's longest target: a pack that computed every run as long as its longest would do
``max T / mean T`` times the decoder steps.

Not a test.  Usage::

    python benchmarks/bench_packed_rnn.py [--data LEVEL_DATABIN] [--presets exp1_rnn_h64]
        [--ks 1,4,16,35] [--seconds 6] [--profile K]

Without ``--data`` it builds and binarizes Experiment 1 at 3 bits (seed 1) in a temporary
directory with the ``fairseq-entropy`` CLI.  ``--profile K`` prints the operator profile of one
packed update and one separate update.
"""

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import USER_DIR, build_exp1_level, cli, quiet_logging  # noqa: E402


def setup(preset: str, data: Path):
    """The preset's task (train split loaded), model config and criterion."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    line = cli("train-args", preset, "--data", str(data), "--epochs", "1")
    args = shlex.split(line.strip().splitlines()[-1])
    parser = options.get_training_parser()
    ns = options.parse_args_and_arch(parser, [str(data), "--user-dir", str(USER_DIR), *args,
                                              "--cpu", "--num-workers", "0", "--seed", "1"])
    cfg = convert_namespace_to_omegaconf(ns)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train", combine=False, epoch=1)
    return task, cfg


def sample_streams(task, runs: int, count: int):
    """``runs`` sequences of ``count`` single-example batches of the training set."""
    dataset = task.datasets["train"]
    generator = torch.Generator().manual_seed(0)
    streams = []
    for _ in range(runs):
        order = torch.randint(len(dataset), (count,), generator=generator).tolist()
        streams.append([dataset.collater([dataset[i]]) for i in order])
    return streams


def measure(preset: str, task, cfg, k: int, seconds: float, stop: bool):
    """Model-updates/s (separate, packed) for ``k`` runs, and mean target length and mean
    decoded steps of the pack."""
    from fairseq_entropy.models.packed_rnn import PackedRNNSeq2Seq

    criterion = task.build_criterion(cfg.criterion)
    criterion.stop_at_predicted_eos = stop
    models = []
    for seed in range(1, k + 1):
        torch.manual_seed(seed)
        models.append(task.build_model(cfg.model).train())
    packed = PackedRNNSeq2Seq(models).train()
    lr, wd = 1e-4, 0.01
    optimisers = [torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=wd) for m in models]
    packed_opt = torch.optim.AdamW(packed.parameters(), lr=lr, weight_decay=wd)
    streams = sample_streams(task, k, 64)

    def separate(step):
        for model, opt, stream in zip(models, optimisers, streams):
            opt.zero_grad()
            loss, size, _ = criterion(model, stream[step % len(stream)])
            (loss / size).backward()
            opt.step()

    def pack(step):
        packed_opt.zero_grad()
        outs = packed.run_losses([s[step % len(s)] for s in streams], criterion)
        sum(o["loss"] / o["sample_size"] for o in outs).backward()
        packed_opt.step()

    for step in range(2):  # warm-up
        separate(step)
        pack(step)
    times = {"separate": 0.0, "packed": 0.0}
    step = 0
    while times["separate"] + times["packed"] < seconds or step < 3:
        for name, fn in (("separate", separate), ("packed", pack)):
            start = time.perf_counter()
            fn(step)
            times[name] += time.perf_counter() - start
        step += 1
    lengths = [s[i % len(s)]["target"].size(1) for i in range(step) for s in streams]
    longest = [max(s[i % len(s)]["target"].size(1) for s in streams) for i in range(step)]
    return (k * step / times["separate"], k * step / times["packed"],
            sum(lengths) / len(lengths), sum(longest) / len(longest))


def profile(task, cfg, k: int) -> None:
    """Print the top operators of one packed update of ``k`` runs and of one separate update."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    from fairseq_entropy.models.packed_rnn import PackedRNNSeq2Seq

    criterion = task.build_criterion(cfg.criterion)
    criterion.stop_at_predicted_eos = False
    models = [task.build_model(cfg.model).train() for _ in range(k)]
    packed = PackedRNNSeq2Seq(models).train()
    samples = [s[0] for s in sample_streams(task, k, 1)]
    for label, fn in (
        ("packed", lambda: sum(o["loss"] for o in packed.run_losses(samples, criterion))),
        ("separate (run 0)", lambda: criterion(models[0], samples[0])[0]),
    ):
        fn().backward()  # warm-up
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            fn().backward()
            wall = time.perf_counter() - start
        events = prof.key_averages()
        calls = sum(e.count for e in events if e.key.startswith("aten::"))
        print(f"\n{label}: {wall * 1e3:.1f} ms forward+backward (profiled), {calls} aten calls")
        print(events.table(sort_by="self_cpu_time_total", row_limit=12))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="a binarized level (default: build Exp1 "
                        "at 3 bits, seed 1, in a temporary directory)")
    parser.add_argument("--presets", default="exp1_rnn_h64",
                        help="comma-separated RNN presets to measure")
    parser.add_argument("--ks", default="1,4,16,35", help="comma-separated pack sizes K")
    parser.add_argument("--seconds", type=float, default=6.0,
                        help="measuring time per preset, K and regime (both sides together)")
    parser.add_argument("--regimes", default="full,init",
                        help="comma-separated: full (whole targets), init (preset criterion)")
    parser.add_argument("--profile", type=int, default=0, metavar="K",
                        help="also print the operator profile of a pack of K runs")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    quiet_logging()
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or build_exp1_level(Path(tmp))
        print(f"data: {data}; one thread; model-updates/s per core")
        print(f"{'preset':<20} {'regime':<6} {'K':>3} {'separate':>9} {'packed':>9} "
              f"{'ratio':>6} {'mean T':>7} {'max T':>6}")
        for preset in args.presets.split(","):
            task, cfg = setup(preset, data)
            for regime in args.regimes.split(","):
                for k in (int(x) for x in args.ks.split(",")):
                    sep, packed, mean_t, max_t = measure(preset, task, cfg, k, args.seconds,
                                                         stop=regime == "init")
                    print(f"{preset:<20} {regime:<6} {k:>3} {sep:>9.1f} {packed:>9.1f} "
                          f"{packed / sep:>5.2f}x {mean_t:>7.1f} {max_t:>6.1f}", flush=True)
            if args.profile:
                profile(task, cfg, args.profile)


if __name__ == "__main__":
    main()
