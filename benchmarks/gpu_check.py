"""The parts of ``benchmarks/gpu_check.sh``: correctness of a pack at one level, and the
Experiment 1 curve of one seed trained as one pack through the product's own sweep.

``correctness``: one level (``fairseq-entropy build`` + ``binarize``), K runs of a preset
(seeds 1..K, dropout 0) trained alone and as one pack (``--task packed_systematicity``) for
``--updates`` updates with the fairseq-train command of ``fairseq-entropy run``
(:func:`fairseq_entropy.experiments.fairseq_train.train_command`); prints, per run, the
difference of all its parameters from the run alone, ``||packed - alone|| / ||alone||`` (L2
over every parameter), and exits 1 when it exceeds ``--tol``.  ``k_proj.bias``, whose gradient
is zero in exact arithmetic, is rounding noise amplified by Adam and is left out, as in
``tests/test_packed.py``; an element whose gradient is near zero can also take Adam steps of
either sign (~lr each), which is why the largest difference of one tensor, printed beside, is
not the criterion.  A run of another seed differs by far more; that is printed too.

``curve``: a grid of one preset, the 7 levels of Experiment 1, one seed, swept with
``--pack 7`` (one fairseq-train for the 7 runs, then decode and score per cell) and
aggregated; prints the accuracies.

Not a test.  Usage::

    python benchmarks/gpu_check.py correctness --out DIR [--device gpu] [--updates 200]
    python benchmarks/gpu_check.py curve --out DIR [--device gpu] [--max-update U]
        [--decode-sample S] [--n 6000]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BIN = Path(sys.executable).parent
ZERO_GRADIENT = re.compile(r"k_proj\.bias$")


def cli(*args) -> None:
    """``fairseq-entropy ARGS`` in a subprocess; its output is shown on failure."""
    res = subprocess.run([sys.executable, "-m", "fairseq_entropy.cli", *map(str, args)],
                         capture_output=True, text=True, env=env())
    if res.returncode != 0:
        sys.exit(f"fairseq-entropy {' '.join(map(str, args))} failed:\n{res.stderr[-3000:]}")


def env() -> dict:
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def train(cmd, log: Path) -> float:
    """Run a fairseq-train command, its output in ``log``; returns the seconds it took."""
    start = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT,
                            env=env()).returncode
    if rc != 0:
        sys.exit(f"fairseq-train failed (exit {rc}): see {log}")
    return time.monotonic() - start


def params(path: Path) -> dict:
    import torch

    from fairseq_entropy.checkpoint import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def distance(a: dict, b: dict) -> tuple:
    """``(||a - b|| / ||a||`` over all parameters, the largest ``max|a - b| / max|a|`` of one
    tensor and its name)``, zero-gradient tensors left out."""
    diff = norm = worst = 0.0
    name_of = ""
    for name, t in a.items():
        if ZERO_GRADIENT.search(name) or not t.is_floating_point():
            continue
        d = (t.double() - b[name].double())
        diff += float(d.pow(2).sum())
        norm += float(t.double().pow(2).sum())
        rel = float(d.abs().max()) / (float(t.abs().max()) or 1.0)
        if rel > worst:
            worst, name_of = rel, name
    return (diff / norm) ** 0.5, worst, name_of


def correctness(args) -> int:
    from fairseq_entropy.experiments.presets import load_presets, train_args
    from fairseq_entropy.experiments.fairseq_train import train_command
    from fairseq_entropy.experiments.run import user_dir
    from fairseq_entropy.tasks.packed_runs import write_pack

    out = Path(args.out).resolve()
    build, databin = out / "build", out / "bin"
    if not (databin / "manifest.json").exists():
        cli("build", "exp1", "--out", build, "--levels", "3", "--n", args.n, "--seed", 1)
        cli("binarize", build / "entropy_3.0", "--out", databin)
    spec = load_presets()[args.preset]
    targs = train_args(spec, databin, max_update=args.updates)
    plugin = str(user_dir())
    seeds = list(range(1, args.k + 1))
    extra = ["--dropout", "0"]
    start = time.monotonic()  # the runs alone side by side (on a GPU, they share it)
    procs = []
    for s in seeds:
        cmd = [*train_command(databin, out / f"alone{s}", targs, plugin, args.device),
               "--seed", str(s), *extra]
        procs.append(subprocess.Popen([str(c) for c in cmd], env=env(),
                                      stdout=open(out / f"alone{s}.log", "w"),
                                      stderr=subprocess.STDOUT))
    for s, p in zip(seeds, procs):
        if p.wait() != 0:
            sys.exit(f"fairseq-train failed (exit {p.returncode}): see {out}/alone{s}.log")
    alone_s = time.monotonic() - start
    pack = out / "pack"
    write_pack(str(pack), [{"data": str(databin), "seed": s, "run_dir": str(out / f"run{s}")}
                           for s in seeds])
    cmd = [*train_command(pack, pack, [*targs, "--task", "packed_systematicity"], plugin,
                          args.device), *extra]
    packed_s = train(cmd, out / "pack.log")
    print(f"correctness: {args.preset}, {args.k} runs x {args.updates} updates on "
          f"{args.device}: alone (side by side) {alone_s:.0f} s, packed {packed_s:.0f} s")
    bad = 0
    for s in seeds:
        a = params(out / f"alone{s}" / "checkpoints" / "checkpoint_last.pt")
        b = params(out / f"run{s}" / "checkpoints" / "checkpoint_last.pt")
        err, one, name = distance(a, b)
        bad += err > args.tol
        print(f"  seed {s}: ||packed - alone|| / ||alone|| = {err:.2e} "
              f"({'ok' if err <= args.tol else 'ABOVE'} tolerance {args.tol:g}); largest in "
              f"one tensor {one:.2e} of its max ({name})")
    other, _, _ = distance(params(out / "alone1" / "checkpoints" / "checkpoint_last.pt"),
                           params(out / f"run{seeds[-1]}" / "checkpoints" /
                                  "checkpoint_last.pt"))
    print(f"  another seed's run differs by {other:.2e} (a real difference)")
    return 1 if bad else 0


GRID = """experiment = "exp1"
presets = ["{preset}"]
levels = [0, 0.5, 1, 1.5, 2, 2.5, 3]
seeds = [{seed}]
n = [{n}]
schedule = {schedule}
pack = 7
"""


def curve(args) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    schedule = f"{{max_update = {args.max_update}}}" if args.max_update else '"paper"'
    grid = out / "curve.toml"
    grid.write_text(GRID.format(preset=args.preset, seed=args.seed, n=args.n,
                                schedule=schedule))
    device = "gpu" if args.device == "gpu" else "cpu"
    cmd = [sys.executable, "-m", "fairseq_entropy.cli", "sweep", str(grid), "--root",
           str(out / "root"), "--device", device, "--jobs", "1"]
    if args.decode_sample:
        cmd += ["--decode-sample", str(args.decode_sample)]
    start = time.monotonic()
    rc = subprocess.run(cmd, env=env()).returncode
    print(f"curve: sweep --pack 7 exit {rc} in {time.monotonic() - start:.0f} s", flush=True)
    if rc != 0:
        print("curve: the sweep did not finish; run the same command again to resume the pack "
              "from its packed checkpoint (scored cells are skipped)", flush=True)
        return 1
    label = "sample" if args.decode_sample else "last"
    runs = sorted((out / "root" / "runs").rglob(f"{label}/score.json"))
    for f in runs:
        rec = json.loads(f.read_text())
        print(f"  {rec.get('level')}: accuracy {rec['accuracy']:.4f} ({rec['n']} sentences)")
    if not args.decode_sample:
        cli("aggregate", out / "root" / "runs", "--out", out / "results", "--force")
        curves = out / "results" / "curves.tsv"
        print(curves.read_text() if curves.exists() else "no curves.tsv")
    return 0 if len(runs) == 7 else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", required=True, help="working directory")
    common.add_argument("--preset", default="exp1_transformer_sinusoidal", help="preset")
    common.add_argument("--device", choices=["cpu", "gpu"], default="gpu",
                        help="where to train")
    c = sub.add_parser("correctness", parents=[common],
                       help="K runs alone against the same K packed")
    c.add_argument("--updates", type=int, default=200, help="updates of every run")
    c.add_argument("--k", type=int, default=3, help="runs (seeds 1..K)")
    c.add_argument("--n", type=int, default=2000, help="training commands of the level")
    c.add_argument("--tol", type=float, default=1e-4,
                   help="largest ||packed - alone|| / ||alone|| accepted")
    v = sub.add_parser("curve", parents=[common],
                       help="Exp1 curve of one seed, 7 levels in one pack")
    v.add_argument("--seed", type=int, default=830, help="data and training seed")
    v.add_argument("--n", type=int, default=6000, help="training commands per level")
    v.add_argument("--max-update", type=int, help="updates (default: the preset's schedule)")
    v.add_argument("--decode-sample", type=int, help="decode about this many test sentences")
    args = p.parse_args(argv)
    return correctness(args) if args.what == "correctness" else curve(args)


if __name__ == "__main__":
    sys.exit(main())
