"""preprocess/prepare_*.sh: data -> data-bin/ that fairseq's stock translation task trains on."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def env(**extra):
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                OMP_NUM_THREADS="1", **extra)


def prepare(script, *args, **extra):
    res = subprocess.run(["bash", str(REPO / "preprocess" / script), *map(str, args)],
                         capture_output=True, text=True, env=env(**extra))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    m = re.search(r"^data-bin: (\S+)", res.stdout, re.M)
    assert m, res.stdout
    return Path(m.group(1)), res


def train_stock_transformer(data: Path, cwd: Path) -> str:
    """3 updates of fairseq's own ``--task translation --arch transformer`` (tiny sizes, no
    --user-dir); returns the log."""
    res = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.train", str(data), "--task", "translation",
         "--source-lang", "in", "--target-lang", "out", "--arch", "transformer",
         "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
         "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
         "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
         "--decoder-attention-heads", "2", "--optimizer", "adam", "--lr", "1e-3",
         "--batch-size", "16", "--max-update", "3", "--cpu", "--num-workers", "0", "--no-save",
         "--log-format", "simple", "--log-interval", "1"],
        cwd=cwd, capture_output=True, text=True, env=env(), timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout + res.stderr


@pytest.mark.slow
def test_prepare_exp1_passes_the_seed_and_trains_with_stock_fairseq(tmp_path):
    data_bin, _ = prepare("prepare_exp1.sh", tmp_path / "a", 7, LEVELS="3", N="200")
    assert data_bin == tmp_path / "a" / "data-bin" / "seed7"
    level = data_bin / "entropy_3.0"
    assert {"dict.in.txt", "dict.out.txt", "manifest.json", "train.in-out.in.bin",
            "valid.in-out.out.idx", "test.in-out.in.bin"} <= {p.name for p in level.iterdir()}
    manifest = json.loads((level / "manifest.json").read_text())
    assert manifest["seed"] == 7 and manifest["sizes"]["train"] == 200
    log = train_stock_transformer(level, tmp_path)
    assert "num_updates 3" in log and "done training" in log


@pytest.mark.slow
def test_prepare_exp2_writes_one_level_per_support_size(tmp_path):
    data_bin, _ = prepare("prepare_exp2.sh", tmp_path, 1, SUPPORT="1,2")
    levels = sorted(p.name for p in data_bin.iterdir() if p.is_dir())
    assert len(levels) == 2
    for name in levels:
        assert (data_bin / name / "train.in-out.in.bin").exists()


@pytest.mark.slow
def test_prepare_scan_holds_out_validation_and_trains_with_stock_fairseq(tmp_path,
                                                                         scan_reference):
    data_bin, _ = prepare("prepare_scan.sh", tmp_path, 3, scan_reference, SPLITS="addprim_jump")
    split = data_bin / "addprim_jump"
    lines = (scan_reference / "tasks_train_addprim_jump.txt").read_text().splitlines()
    test = (scan_reference / "tasks_test_addprim_jump.txt").read_text().splitlines()
    from fairseq.data import data_utils
    sizes = {s: len(data_utils.load_indexed_dataset(str(split / f"{s}.in-out.in"), None))
             for s in ("train", "valid", "test")}
    assert sizes["train"] + sizes["valid"] == len(lines) and sizes["valid"] > 0
    assert sizes["test"] == len(test)
    log = train_stock_transformer(split, tmp_path)
    assert "num_updates 3" in log


def test_prepare_scan_names_a_missing_folder_and_the_fix(tmp_path):
    res = subprocess.run(["bash", str(REPO / "preprocess" / "prepare_scan.sh"), str(tmp_path),
                          "1", str(tmp_path / "nowhere")], capture_output=True, text=True,
                         env=env())
    assert res.returncode == 2
    assert f"{tmp_path / 'nowhere'}/tasks_train_simple.txt not found. Fix:" in res.stderr
    assert not (tmp_path / "data-bin").exists()


def test_prepare_scan_reads_a_clone_of_the_scan_repository_by_default(tmp_path,
                                                                      scan_reference):
    """Without a third argument the script reads ./SCAN, where `git clone` puts the SCAN
    repository, whose files sit in one folder per split (add_prim_split/ for addprim_jump)."""
    clone = tmp_path / "SCAN" / "add_prim_split"
    clone.mkdir(parents=True)
    for part, n in (("train", 400), ("test", 50)):
        name = f"tasks_{part}_addprim_jump.txt"
        lines = (scan_reference / name).read_text().splitlines(keepends=True)[:n]
        (clone / name).write_text("".join(lines))
    res = subprocess.run(["bash", str(REPO / "preprocess" / "prepare_scan.sh"), "out", "2"],
                         cwd=tmp_path, capture_output=True, text=True,
                         env=env(SPLITS="addprim_jump"))
    assert res.returncode == 0, res.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "data-bin" / "seed2" / "addprim_jump" /
                           "manifest.json").read_text())
    assert manifest["sizes"]["train"] + manifest["sizes"]["valid"] == 400
    assert manifest["sizes"]["test"] == 50 and manifest["seed"] == 2
    assert Path(manifest["sources"]["train"]["path"]).resolve() == \
        (clone / "tasks_train_addprim_jump.txt").resolve()
