"""Training speed of a preset beside the paper's own plain-PyTorch training loop, in one run.

The reference is the authors' ``train.py`` (github.com/ltgoslo/systematicity-entropy), run
unchanged on the same Experiment 1 level (3 bits, seed 1, written in its ``IN: ... OUT: ...``
format) with the same model size (3+3 layers, d = 128, batch 32, lr 3e-4, dropout 0.1).  The
two are timed alternately, ``--rounds`` times each, on one thread, so that both see the same
machine load; the ratio is the figure to quote, not either speed alone.

- ``ours``: updates per second through fairseq's ``Trainer.train_step`` with the preset's
  batching, optimiser and criterion (as ``bench_models.py``), after 3 warm-up updates.
- ``reference``: updates per second of the reference's training loop, from the times at which
  it advances its per-update progress bar (its ``tqdm``), after the same 3 warm-up updates of
  its first epoch; its per-epoch validation is not counted.

Not a test.  Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_reference.py --authors-repo PATH
        [--preset exp1_transformer_sinusoidal] [--rounds 2] [--seconds 30]

``PATH`` is a checkout of the authors' repository; its ``wandb`` import is served by a no-op
stand-in, so nothing is logged anywhere.  The reference's ``--type`` follows the preset's
position scheme (sinusoidal ``van``, learned ``learn``, RoPE ``rope``, relative ``rel``).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import build_exp1_level, measure_training, quiet_logging  # noqa: E402

# the reference's --type for each Experiment 1 Transformer preset
REFERENCE_TYPE = {"exp1_transformer_sinusoidal": "van", "exp1_transformer_sinusoidal_pool16": "van",
                  "exp1_transformer_learned": "learn",
                  "exp1_transformer_rope_authors": "rope", "exp1_transformer_relative": "rel"}

WANDB_STAND_IN = '''"""No-op stand-in for wandb (the reference logs to it)."""
class _Run:
    def __getattr__(self, name):
        return lambda *a, **k: None
wandb = _Run()
def __getattr__(name):
    return getattr(wandb, name)
'''

# Runs the reference's train.py as __main__ with tqdm's progress bar recording the time of
# every update of its training bar (the first bar it creates: one epoch's training batches);
# prints those times as JSON on the last line.
DRIVER = '''
import json, runpy, sys, time
import tqdm
times, first = [], []
class Timed(tqdm.tqdm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not first:
            first.append(self)
    def update(self, n=1):
        if first and self is first[0]:
            times.append(time.perf_counter())
        return super().update(n)
tqdm.tqdm = Timed
sys.argv = ARGV
try:
    runpy.run_path(SCRIPT, run_name="__main__")
finally:
    print("\\nUPDATE_TIMES " + json.dumps(times))
'''


def write_reference_format(raw_level: Path, split: str, out: Path) -> int:
    """The SCAN-format (``IN: ... OUT: ...``) file of ``split.in`` / ``split.out``; returns
    the number of examples."""
    from fairseq_entropy.scan.datafiles import read_pair, write_scan_file

    examples = read_pair(raw_level / split)
    write_scan_file(out, examples)
    return len(examples)


def measure_reference(repo: Path, train: Path, valid: Path, n_train: int, batch: int,
                      ref_type: str, work: Path, threads: int, warmup: int = 3) -> float:
    """Updates per second of the reference's training loop over one epoch (after ``warmup``
    updates).  Raises RuntimeError with the end of its output if it fails."""
    stub = work / "stub"
    stub.mkdir(exist_ok=True)
    (stub / "wandb.py").write_text(WANDB_STAND_IN)
    argv = [str(repo / "systematicity_entropy" / "train.py"), "--train_path", str(train),
            "--val_path", str(valid), "--save_path", str(work / "reference_model"),
            "--batch_size", str(batch), "--epochs", "1", "--learning_rate", "3e-4",
            "--layers", "3", "--hidden_size", "128", "--task", "scan", "--patience", "999",
            "--dropout", "0.1", "--seed", "1", "--type", ref_type, "--wandb", "bench"]
    driver = f"ARGV = {argv!r}\nSCRIPT = {argv[0]!r}\n" + DRIVER
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(repo), str(repo / "systematicity_entropy"),
                                          str(stub)])}
    proc = subprocess.run([sys.executable, "-c", driver], cwd=repo, env=env,
                          capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("UPDATE_TIMES ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the reference's train.py failed (exit {proc.returncode}): "
                           f"{(proc.stderr or proc.stdout)[-2000:]}")
    times = json.loads(lines[-1].split(" ", 1)[1])
    if len(times) < warmup + 2:
        raise RuntimeError(f"the reference advanced its training bar {len(times)} times; "
                           f"expected about {n_train // batch}")
    steady = times[warmup:]
    return (len(steady) - 1) / (steady[-1] - steady[0])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--authors-repo", type=Path, required=True,
                   help="checkout of github.com/ltgoslo/systematicity-entropy")
    p.add_argument("--preset", default="exp1_transformer_sinusoidal",
                   choices=sorted(REFERENCE_TYPE), help="our preset to time")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    p.add_argument("--seconds", type=float, default=30.0,
                   help="timed training of ours per round (the reference: one epoch)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = p.parse_args()
    train_py = args.authors_repo / "systematicity_entropy" / "train.py"
    if not train_py.exists():
        sys.exit(f"{train_py} not found: --authors-repo must be a checkout of "
                 "github.com/ltgoslo/systematicity-entropy")
    import torch
    quiet_logging()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="bench_reference_") as tmp:
        work = Path(tmp)
        level = build_exp1_level(work)
        raw = work / "build" / level.name
        train, valid = work / "train.txt", work / "valid.txt"
        n_train = write_reference_format(raw, "train", train)
        write_reference_format(raw, "valid", valid)
        print(f"# data {level} ({n_train} training commands); {args.threads} thread(s); "
              f"machine load {os.getloadavg()[0]:.2f}", flush=True)
        ours, ref = [], []
        for r in range(1, args.rounds + 1):
            ref.append(measure_reference(args.authors_repo, train, valid, n_train, 32,
                                         REFERENCE_TYPE[args.preset], work, args.threads))
            print(f"round {r}: reference {ref[-1]:.2f} updates/s", flush=True)
            _, ups, _, _ = measure_training(args.preset, level, args.seconds,
                                            work / "ours.pt")
            ours.append(ups)
            print(f"round {r}: {args.preset} {ours[-1]:.2f} updates/s", flush=True)
        ratio = statistics.mean(ours) / statistics.mean(ref)
        print(f"reference (authors' train.py)  {', '.join(f'{v:.2f}' for v in ref)} updates/s")
        print(f"{args.preset:30s} {', '.join(f'{v:.2f}' for v in ours)} updates/s")
        print(f"ratio (mean over rounds)       {ratio:.2f}x")


if __name__ == "__main__":
    main()
