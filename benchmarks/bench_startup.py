"""Benchmark the CPU time that importing fairseq adds to the command line's own steps.

Importing fairseq (its task, model and criterion registries) costs a new interpreter a few
seconds of CPU, more than the tiny work of several steps around a run.  Two steps avoid it:

- ``arch check``: ``fairseq-entropy run`` and ``train-args`` refuse a preset whose arch fairseq
  does not know.  The arch of a packaged preset is known without fairseq
  (``packaged``); any other arch is looked up in fairseq's registry (``registry``).
- ``fairseq-preprocess``: in a process that has imported fairseq already (a library caller,
  a test), fairseq-preprocess of a level runs in that process (``in-process``) rather than in a
  new ``python -m fairseq_cli.preprocess`` (``new interpreter``, still used by a process
  without fairseq, such as the command line).

Each case runs in a fresh interpreter; its CPU time is the user + system time of that process
and every process it waited for (``RUSAGE_CHILDREN``).  The two variants of a step run
alternately, ``--rounds`` times, and the median is printed, so both see the same machine load.
The figure a variant costs includes the interpreter's own start (the same for both).

Not a test.  Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_startup.py [--rounds 3]
"""

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ARCH = ("import sys; sys.argv[0] = 'fairseq-entropy'\n"  # as the console script starts
        "from fairseq_entropy.experiments.archs import check_arch\n"
        "from fairseq_entropy.experiments.presets import load_presets\n"
        "check_arch('exp1_fconv', {preset})\n"
        "assert ('fairseq' in sys.modules) == {imported}\n")

PREPROCESS = ("import sys, threading\n"
              "import fairseq  # noqa: F401 - a caller that has imported fairseq\n"
              "from fairseq_entropy.scan.binarize import binarize_level\n"
              "from fairseq_entropy.scan.grammar import Grammar\n"
              "call = lambda: binarize_level({level!r}, {out!r}, Grammar.paper())\n"
              "if {thread}:  # outside the main thread: a new interpreter\n"
              "    t = threading.Thread(target=call); t.start(); t.join()\n"
              "else:\n"
              "    call()\n"
              "assert len(list(__import__('pathlib').Path({out!r}).glob('*.bin'))) == 6\n")


def cpu_seconds(code: str) -> float:
    """User + system CPU seconds of ``python -c code`` and the processes it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (median kept)")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tmp = Path(tempfile.mkdtemp(prefix="bench_startup_"))
    try:
        run_cases(tmp, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_cases(tmp: Path, rounds: int) -> None:
    """Build a level in ``tmp``, then measure and print every case ``rounds`` times."""
    subprocess.run([sys.executable, "-m", "fairseq_entropy.cli", "build", "exp1", "--levels",
                    "3", "--n", "300", "--seed", "1", "--out", str(tmp / "build")],
                   check=True, capture_output=True)
    level = str(tmp / "build" / "entropy_3.0")
    cases = {
        ("arch check", "packaged"): lambda r: ARCH.format(
            preset="load_presets()['exp1_fconv']", imported=False),
        ("arch check", "registry"): lambda r: ARCH.format(
            preset="{'arch': 'fconv_iwslt_de_en'}", imported=True),
        ("fairseq-preprocess", "in-process"): lambda r: PREPROCESS.format(
            level=level, out=str(tmp / f"here{r}"), thread=False),
        ("fairseq-preprocess", "new interpreter"): lambda r: PREPROCESS.format(
            level=level, out=str(tmp / f"spawned{r}"), thread=True),
    }
    times = {case: [] for case in cases}
    for r in range(rounds):
        for case, code in cases.items():
            times[case].append(cpu_seconds(code(r)))
    print(f"CPU seconds (user + system, median of {rounds} alternating rounds), "
          f"torch threads {os.environ['OMP_NUM_THREADS']}")
    print(f"{'step':<20} {'variant':<16} {'CPU s':>7}")
    for (step, variant), ts in times.items():
        print(f"{step:<20} {variant:<16} {statistics.median(ts):7.2f}")
    for step, fast, slow in (("arch check", "packaged", "registry"),
                             ("fairseq-preprocess", "in-process", "new interpreter")):
        saved = statistics.median(times[(step, slow)]) - statistics.median(times[(step, fast)])
        print(f"{step}: {fast} saves {saved:.2f} CPU s against {slow}")


if __name__ == "__main__":
    main()
