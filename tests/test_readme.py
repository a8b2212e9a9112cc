"""The documentation's commands run as written, from a directory outside the clone.

The bash blocks of the README's "Using it step by step" and docs/data.md's "The original SCAN
splits" are read from those files and run with only their sizes made small (each
substitution must apply), so an edit that breaks them fails here.
"""
import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def bash_block(heading: str, page: str = "README.md") -> str:
    """The first ```bash block after ``heading`` in ``page`` (a path under the clone)."""
    text = (REPO / page).read_text()
    start = text.index(heading)
    m = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    assert m, f"no bash block after {heading!r}"
    return m.group(1)


def shrink(block: str, substitutions) -> str:
    for old, new in substitutions:
        assert block.count(old) == 1, f"README block no longer contains {old!r} once"
        block = block.replace(old, new)
    return block


def run_block(script: str, cwd: Path):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                         capture_output=True, text=True)
    assert res.returncode == 0, f"{script}\nfailed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


def results(path: Path):
    return list(csv.DictReader(open(path), delimiter="\t"))


@pytest.mark.slow
def test_readme_step_by_step_runs_outside_the_clone(tmp_path):
    assert not str(tmp_path).startswith(str(REPO))
    script = shrink(bash_block("## Using it step by step"), [
        ("--levels 0,0.5,1,1.5,2,2.5,3 --n 6000", "--levels 1.5,3 --n 64"),
        ("--support 1..8", "--support 1..1"),
        ("--max-len-b 60", "--max-len-b 4"),
        # override the preset's 24 epochs (48 updates with 24 validations at N=64) with one
        # epoch (2 updates, one validation and one checkpoint save): the last --max-update on
        # a fairseq command line wins
        ("--maximize-best-checkpoint-metric\n", "--maximize-best-checkpoint-metric "
                                                 "--max-update 2\n"),
    ])
    res = run_block(script, tmp_path)
    assert "(verb, slot) pairs absent from data/exp1/entropy_1.5/train.in: (jump, first)" \
        in res.stdout
    rec = json.loads((tmp_path / "runs/exp1/seed1/last/score.json").read_text())
    # the data and the seed come from the checkpoint
    assert rec["data"] == str((tmp_path / "data-bin/exp1/entropy_3.0").resolve())
    assert rec["seed"] == 1 and rec["n"] == 7056 and rec["n_train"] == 64
    rows = results(tmp_path / "results/results.tsv")
    assert [(r["preset"], r["n_train"], r["level"], r["seed"]) for r in rows] == [
        ("exp1_transformer_sinusoidal", "64", "entropy_3.0", "1")]
    assert (tmp_path / "results/accuracy_vs_entropy.png").stat().st_size > 0


@pytest.mark.slow
def test_readme_scan_section_runs(tmp_path, scan_reference):
    # the add-primitive jump files, thinned to 300 training and 101 test commands
    for name, step in (("tasks_train_addprim_jump.txt", 49), ("tasks_test_addprim_jump.txt", 77)):
        lines = (scan_reference / name).read_text().splitlines()[::step]
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    script = shrink(bash_block("## The original SCAN splits", "docs/data.md"),
                    [("--epochs 10", "--epochs 1")])
    res = run_block(script, tmp_path)
    assert "held out 15 of the 300 commands of tasks_train_addprim_jump.txt" in res.stdout
    man = json.loads((tmp_path / "data-bin/scan_jump/manifest.json").read_text())
    assert man["sizes"] == {"train": 285, "valid": 15, "test": 101}  # 7706 lines / 77
    assert ["jump", "second"] in man["restricted_pairs"]
    rec = json.loads((tmp_path / "runs/scan/seed1/last/score.json").read_text())
    assert rec["preset"] == "scan_equivariant" and rec["seed"] == 1 and rec["n"] == 101
    assert rec["experiment"] == "scan" and rec["grammar"] == "scan"
    rows = results(tmp_path / "results/scan/results.tsv")
    assert [(r["experiment"], r["preset"], r["n_train"], r["level"]) for r in rows] == [
        ("scan", "scan_equivariant", "285", "scan_jump")]


def test_the_docs_list_preset_names_where_they_say_presets():
    from fairseq_entropy.experiments.presets import load_presets

    presets = load_presets()
    text = "\n".join((REPO / "docs" / page).read_text()
                     for page in ("models.md", "presets.md", "decoder-only.md"))
    # "preset(s)" followed by a list of `names` (with optional parentheses after a name)
    lists = re.findall(r"[Pp]resets?:?\s+((?:`\w+`(?:\s*\([^)]*\))?"
                       r"(?:,\s*|\s+and\s+|\s*/\s*)?)+)", text)
    named = [n for group in lists for n in re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", group))]
    assert len(named) >= len(presets)
    assert [n for n in named if n not in presets] == []
    assert sorted(set(named)) == sorted(presets)  # and every preset is listed
