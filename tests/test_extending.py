"""A user's own presets file and own ``--user-dir`` architecture go through a sweep (whose cells
run ``recipes/train_level.sh``), ``score`` and ``aggregate``, as docs/extending.md
describes."""
import csv
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fairseq_entropy.analysis.provenance import read_checkpoint_info
from fairseq_entropy.cli import main as cli
from fairseq_entropy.errors import UserError
from fairseq_entropy.experiments.grids import GridError, load_grid
from _toy import cut_and_binarize  # noqa: E402

BIN = Path(sys.executable).parent

REPO = Path(__file__).resolve().parents[1]


def readme_extending(kind: str) -> str:
    """The first ```python block, or the first inline JSON object, of docs/extending.md."""
    text = (REPO / "docs" / "extending.md").read_text()
    if kind == "python":
        return re.search(r"```python\n(.*?)```", text, re.S).group(1)
    return re.sub(r"\n\s*", " ", re.search(r"`(\{\"my_.*?\}\})`", text, re.S).group(1))


def shrink(block: str, substitutions) -> str:
    for old, new in substitutions:
        assert block.count(old) == 1, f"docs block no longer contains {old!r} once"
        block = block.replace(old, new)
    return block


#: a user's plugin package, the docs': it imports fairseq_entropy (fairseq takes one
#: --user-dir) and registers a variant of the plugin's Transformer under a name of its own,
#: here made tiny (1+1 layers, d=16) for speed
USER_PLUGIN = shrink(textwrap.dedent(readme_extending("python")), [
    ('"encoder_layers", 4)', '"encoder_layers", 1)'),
    ('"decoder_layers", 4)', '"decoder_layers", 1)\n    args.embed_dim = 16'),
])
ARCH = "my_transformer_4layers"

#: a user's presets file: one preset extending a packaged one, nothing copied
USER_PRESETS = {"my_tiny": {"extends": "exp1_transformer_sinusoidal", "model": "my_tiny",
                            "arch": ARCH, "batch_size": 64}}

GRID = """\
experiment = "exp1"
presets = ["my_tiny"]
levels = [3]
seeds = [5]
n = [320]
schedule = {max_update = 3}
presets_file = "my_presets.json"
user_dir = "my_plugin"
"""


def write_user_files(root: Path) -> Path:
    """The user's plugin, presets file and 1-cell grid under ``root``; returns the grid."""
    (root / "my_plugin").mkdir(parents=True)
    (root / "my_plugin" / "__init__.py").write_text(USER_PLUGIN)
    (root / "my_presets.json").write_text(json.dumps(USER_PRESETS, indent=2))
    (root / "grid.toml").write_text(GRID)
    return root / "grid.toml"


def test_grid_passes_the_users_presets_and_user_dir_to_each_cell(tmp_path, capsys):
    grid = write_user_files(tmp_path)
    (cell,) = load_grid(grid).cells()
    assert cell.presets_file == str(tmp_path / "my_presets.json")
    assert cell.user_dir == str(tmp_path / "my_plugin") and cell.model == "my_tiny"
    assert cli(["sweep", str(grid), "--root", str(tmp_path / "s"), "--dry-run",
                "--device", "cpu", "--jobs", "1"]) == 0
    runs = [ln for ln in capsys.readouterr().out.splitlines()
            if " -m fairseq_entropy.cli run " in ln]
    assert len(runs) == 1 and runs[0].startswith("OMP_NUM_THREADS=1 ")
    assert runs[0].endswith(f" run my_tiny {cell.databin(tmp_path / 's')} "
                            f"{cell.run_dir(tmp_path / 's')} --seed 5 --max-update 3 --device cpu "
                            "--select valid --gen-batch 512 --valid-batch 512 --presets "
                            f"{tmp_path / 'my_presets.json'} --user-dir {tmp_path / 'my_plugin'}")
    # the command line's --presets / --user-dir replace the grid's keys
    other = tmp_path / "other"
    other.mkdir()
    (other / "p.json").write_text(json.dumps({"my_tiny": {"extends": "exp1_fconv",
                                                          "arch": ARCH}}))
    (other / "__init__.py").write_text("")
    (cell,) = load_grid(grid, other / "p.json", other).cells()
    assert cell.presets_file == str(other / "p.json") and cell.user_dir == str(other)
    assert cell.model == "cnn"  # inherited from exp1_fconv


@pytest.mark.parametrize("line, message", [
    ('user_dir = "nowhere"', "user_dir .*nowhere: not a Python package directory.*Fix:"),
    ("user_dir = 3", "user_dir = 3. Fix: a path"),
    ('presets_file = "none.json"', "presets file .*none.json not found. Fix:"),
])
def test_bad_user_keys_of_a_grid_are_refused(tmp_path, line, message):
    grid = write_user_files(tmp_path)
    text = GRID.replace('user_dir = "my_plugin"', "").replace(
        'presets_file = "my_presets.json"', "")
    key = line.split(" ")[0]
    other = 'user_dir = "my_plugin"' if key == "presets_file" else \
        'presets_file = "my_presets.json"'
    grid.write_text(text + other + "\n" + line + "\n")
    with pytest.raises(UserError, match=message):
        load_grid(grid)


def test_a_grid_naming_a_user_preset_without_its_file_is_refused(tmp_path):
    grid = write_user_files(tmp_path)
    grid.write_text(GRID.replace('presets_file = "my_presets.json"\n', ""))
    with pytest.raises(GridError, match="unknown preset 'my_tiny'; known: .*Fix:"):
        load_grid(grid)


def test_the_readmes_presets_example_extends_a_packaged_preset(tmp_path):
    from fairseq_entropy.experiments.presets import load_presets

    (tmp_path / "p.json").write_text(readme_extending("json"))
    (name, preset), = [(n, p) for n, p in load_presets(tmp_path / "p.json").items()
                       if n.startswith("my_")]
    parent = load_presets()["exp1_transformer_sinusoidal"]
    assert preset == {**parent, "arch": ARCH, "model": "my_transformer", "batch_size": 64}


def env(**extra):
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **extra)


@pytest.mark.slow  # one tiny run: the start-ups of fairseq-train and fairseq-generate
def test_own_architecture_and_presets_through_sweep_score_and_aggregate(tmp_path, capsys):
    grid = write_user_files(tmp_path)
    root = tmp_path / "sweep"
    (cell,) = load_grid(grid).cells()
    # the cell's data, made here with 48 of the 7056 test commands (the sweep builds a level
    # only when its data-bin has no manifest.json)
    build = cell.build_dir(root)
    assert cli(["build", "exp1", "--out", str(build), "--levels", "3", "--n", "320",
                "--seed", "5"]) == 0
    level = build / cell.level_name
    cut_and_binarize(level, cell.databin(root))
    capsys.readouterr()

    # sweep -> train_level.sh (PRESETS, USER_DIR) -> fairseq-entropy run -> train and decode
    res = subprocess.run([sys.executable, "-m", "fairseq_entropy.cli", "sweep", str(grid),
                          "--root", str(root), "--device", "cpu", "--jobs", "1"],
                         capture_output=True, text=True, env=env())
    run = cell.run_dir(root)
    logs = "".join((run / f).read_text()[-3000:] for f in ("sweep.log", "generate-last.log")
                   if (run / f).exists())
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:] + logs
    assert "done 1, failed 0, skipped 0, locked 0" in res.stdout
    info = read_checkpoint_info(run / "checkpoints" / "checkpoint_last.pt")
    assert info["arch"] == ARCH
    # one --user-dir, the user's, for training and for decoding
    user_dir = f"'user_dir': '{tmp_path / 'my_plugin'}'"
    assert user_dir in (run / "train.log").read_text()
    assert user_dir in (run / "generate-last.log").read_text()
    assert "num_updates 3" in (run / "train.log").read_text()
    last = json.loads((run / "last" / "score.json").read_text())
    assert (last["preset"], last["model"], last["seed"], last["n"]) == ("my_tiny", "my_tiny",
                                                                        5, 48)
    hyps = [ln for ln in (run / "generate-last.txt").read_text().splitlines()
            if ln.startswith("H-")]
    assert len(hyps) == 48

    # score: the preset is the user's one of the checkpoint's architecture
    out = tmp_path / "rescored"
    gen = str(run / "generate-last.txt")
    assert cli(["score", gen, "--out", str(out)]) == 2
    assert f"no preset has --arch {ARCH}" in capsys.readouterr().err
    assert not out.exists()
    assert cli(["score", gen, "--out", str(out), "--presets",
                str(tmp_path / "my_presets.json")]) == 0
    again = json.loads((out / "score.json").read_text())
    assert again["preset"] == "my_tiny" and again["accuracy"] == last["accuracy"]
    assert again["correct"] == last["correct"]

    # aggregate: the user's preset is a curve of its own
    assert cli(["aggregate", str(root / "runs"), "--out", str(tmp_path / "results")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "results" / "results.tsv"), delimiter="\t"))
    got = sorted((r["preset"], r["checkpoint"], r["seed"], float(r["accuracy"])) for r in rows)
    best = json.loads((run / "best" / "score.json").read_text())
    assert got == sorted([("my_tiny", "best", "5", best["accuracy"]),
                          ("my_tiny", "last", "5", last["accuracy"])])
