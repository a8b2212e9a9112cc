"""generate -> binarize -> fairseq-train (a few dozen updates) -> fairseq-generate -> score,
through the console scripts and the recipe, as a user runs them."""
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from _toy import recount  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(cmd, **kw):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               OMP_NUM_THREADS="1", DEVICE="cpu")
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)
    assert res.returncode == 0, f"{cmd} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    run(["fairseq-entropy", "build", "exp1", "--levels", "3", "--n", "320", "--seed", "5",
         "--out", str(tmp / "data")])
    level = tmp / "data" / "entropy_3.0"
    for ext in ("in", "out"):  # keep the decode step short: 48 of the 7056 test commands
        lines = (level / f"test.{ext}").read_text().splitlines()[::147]
        (level / f"test.{ext}").write_text("\n".join(lines) + "\n")
    recount(level, "test")
    run(["fairseq-entropy", "binarize", str(tmp / "data"), "--out", str(tmp / "bin")])
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               OMP_NUM_THREADS="1", DEVICE="cpu", MAX_UPDATE="30", GEN_BATCH="64")
    res = subprocess.run(["bash", str(REPO / "recipes" / "train_level.sh"),
                          "exp1_transformer_sinusoidal", str(tmp / "bin" / "entropy_3.0"),
                          str(tmp / "run")], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return tmp


def test_recipe_trains_decodes_and_scores(trained):
    run_dir = trained / "run"
    last = json.loads((run_dir / "last" / "score.json").read_text())
    best = json.loads((run_dir / "best" / "score.json").read_text())
    assert last["n"] == best["n"] == 48
    assert last["experiment"] == "exp1" and last["level"] == "entropy_3.0"
    assert last["model"] == "transformer_sinusoidal" and last["checkpoint"] == "last"
    assert 0.0 <= last["accuracy"] <= 1.0
    log = (run_dir / "train.log").read_text()
    assert "num_updates 30" in log and "seq_acc" in log
    assert "controlled slot second, target 3.0 bits" in log  # task logs the manifest
    gen = (run_dir / "generate-last.txt").read_text()
    assert gen.count("\nH-") + gen.startswith("H-") == 48
    # fairseq's own deprecation warnings (hydra, torch.cuda.amp) are kept out of the logs
    for name in ("train.log", "generate-last.log"):
        assert "Warning" not in (run_dir / name).read_text(), name


@pytest.mark.slow
def test_checkpoint_restores_in_train_and_interactive(trained):
    ckpt = trained / "run" / "checkpoints" / "checkpoint_last.pt"
    data = trained / "bin" / "entropy_3.0"
    user_dir = str(REPO / "fairseq_entropy")
    args = run(["fairseq-entropy", "train-args", "exp1_transformer_sinusoidal", "--data",
                str(data), "--max-update", "32"]).stdout
    res = run(["fairseq-train", str(data), "--user-dir", user_dir, *shlex.split(args), "--cpu",
               "--restore-file", str(ckpt), "--save-dir", str(trained / "restored"),
               "--num-workers", "0", "--no-epoch-checkpoints", "--log-format", "simple"])
    log = res.stdout + res.stderr
    assert "Loaded checkpoint" in log and "(epoch" in log
    assert (trained / "restored" / "checkpoint_last.pt").exists()
    res = run(["fairseq-interactive", str(data), "--user-dir", user_dir, "--task",
               "systematicity", "--source-lang", "in", "--target-lang", "out", "--path",
               str(ckpt), "--beam", "1", "--cpu"], input="jump twice after walk left\n")
    assert "H-0\t" in res.stdout


@pytest.mark.slow
def test_authors_selection_scores_the_lowest_test_loss_and_trains_the_same(trained):
    """SELECT=test-loss validates on the test split too and scores the checkpoint with the
    lowest test loss (the paper authors' selection) as "test-loss"; the training itself is
    unchanged: the last checkpoint's weights equal those of the plain run."""
    import torch

    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               OMP_NUM_THREADS="1", DEVICE="cpu", MAX_UPDATE="30", GEN_BATCH="64",
               SELECT="test-loss")
    run_dir = trained / "run_test_loss"
    res = subprocess.run(["bash", str(REPO / "recipes" / "train_level.sh"),
                          "exp1_transformer_sinusoidal", str(trained / "bin" / "entropy_3.0"),
                          str(run_dir)], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    log = (run_dir / "train.log").read_text()
    test_losses = [float(line.split("| loss ")[1].split()[0]) for line in log.splitlines()
                   if "valid on 'test' subset" in line]
    assert len(test_losses) == 3  # 320 commands: 10 updates an epoch, 30 updates
    chosen = json.loads((run_dir / "test-loss" / "score.json").read_text())
    assert chosen["checkpoint"] == "test-loss" and chosen["n"] == 48
    assert chosen["checkpoint_path"].endswith("checkpoint_best.pt")
    best = torch.load(run_dir / "checkpoints" / "checkpoint_best.pt", weights_only=True)
    # the checkpoint of the epoch with the lowest test loss (as the log prints it, 3 decimals)
    epoch = 1 + test_losses.index(min(test_losses))
    assert best["optimizer_history"][-1]["num_updates"] == 10 * epoch
    assert round(best["extra_state"]["val_loss"], 3) == min(test_losses)
    assert not (run_dir / "best").exists()
    mine = torch.load(run_dir / "checkpoints" / "checkpoint_last.pt", weights_only=True)
    plain = torch.load(trained / "run" / "checkpoints" / "checkpoint_last.pt",
                       weights_only=True)
    assert mine["model"].keys() == plain["model"].keys()
    for name, w in plain["model"].items():
        assert torch.equal(mine["model"][name], w), name
    res = subprocess.run(["bash", str(REPO / "recipes" / "train_level.sh"),
                          "exp1_transformer_sinusoidal", str(trained / "bin" / "entropy_3.0"),
                          str(trained / "run_typo")], capture_output=True, text=True,
                         env=dict(env, SELECT="test"))
    assert res.returncode == 2 and "SELECT=test: expected valid or test-loss" in res.stderr


def test_aggregate_of_the_run(trained, tmp_path):
    res = run(["fairseq-entropy", "aggregate", str(trained / "run"), "--out", str(tmp_path)])
    assert "transformer_sinusoidal" in res.stdout and "entropy_3.0" in res.stdout
    assert (tmp_path / "accuracy_vs_entropy.png").exists()


def test_train_args_convert_epochs_to_updates(trained):
    data = trained / "bin" / "entropy_3.0"
    out = run(["fairseq-entropy", "train-args", "exp1_transformer_sinusoidal", "--data",
               str(data)]).stdout
    # the README passes the line unquoted: bash word splitting must give the same arguments
    split_by_bash = run(["bash", "-c", 'printf "%s\\n" $(cat)'], input=out).stdout.splitlines()
    assert split_by_bash == shlex.split(out) == out.split()
    assert split_by_bash[split_by_bash.index("--adam-betas") + 1] == "(0.9,0.98)"
    out = out.split()
    # 320 commands / batch 32 = 10 updates per epoch x 24 epochs; warm-up 6% of 240 = 14.4
    assert out[out.index("--max-update") + 1] == "240"
    assert out[out.index("--warmup-updates") + 1] == "14"
    assert out[out.index("--min-lr") + 1] == "3e-05"
    assert "--random-batches" in out and out[out.index("--lr") + 1] == "0.0003"


@pytest.mark.slow
def test_quickstart_passes_build_and_binarize_arguments(tmp_path):
    """The README's beyond-verbs curves: quickstart.sh with BUILD_ARGS (a direction-controlled
    build, on two verbs so that the test set stays small) and BINARIZE_ARGS (letter pieces on
    the command side) trains, decodes, scores and aggregates the level as a variant of its
    own."""
    out = tmp_path / "beyond"
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               OUT=str(out), LEVELS="0", EPOCHS="1", JOBS="1", N="400",
               BUILD_ARGS="--component direction --restricted left --verbs walk,jump",
               BINARIZE_ARGS="--spm-vocab 23 --spm-side source")
    res = subprocess.run(["bash", str(REPO / "recipes" / "quickstart.sh")],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # the sweep's layout: the build arguments name the data and runs of their own class
    tag = Path("exp1+component=direction+restricted=left+verbs=walk-jump")
    manifest = json.loads((out / "data" / tag / "n400" / "seed1" / "manifest.json").read_text())
    assert manifest["component"] == "direction" and manifest["verbs"] == ["walk", "jump"]
    data_bin = out / "data-bin" / tag / "n400" / "seed1" / "entropy_0.0"
    assert (data_bin / "spm.model").exists()
    # source-side pieces: the commands' dictionary holds letters, the actions stay words
    src = [line.split()[0] for line in (data_bin / "dict.in.txt").read_text().splitlines()]
    tgt = [line.split()[0] for line in (data_bin / "dict.out.txt").read_text().splitlines()]
    assert "\u2581" in src and "j" in src and "jump" not in src
    assert "JUMP" in tgt and not any(t.startswith("\u2581") for t in tgt)
    run_dir = out / "runs" / tag / "exp1_cnn_authors" / "n400" / "seed1" / "entropy_0.0"
    score = json.loads((run_dir / "last" / "score.json").read_text())
    # clauses with "left": 2 verbs x 3 phrases (left, opposite left, around left) x 3
    # repetitions = 18; clauses: 2 verbs x 21 = 42; "left" in the first-executed clause of
    # "X and Y" or "Y after X": 18 x 42 x 2
    assert score["n"] == 18 * 42 * 2
    assert score["variant"] == "verbs=walk-jump+direction=left+spm23-source"
    summary = (out / "results" / "summary.tsv").read_text().splitlines()
    header = summary[0].split("\t")
    row = dict(zip(header, summary[1].split("\t")))
    assert row["experiment"] == "exp1+verbs=walk-jump+direction=left+spm23-source"
    assert row["paper_mean"] == "nan"
    # the same OUT with other arguments is refused before anything is written
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    res = subprocess.run(["bash", str(REPO / "recipes" / "quickstart.sh")], capture_output=True,
                         text=True, env=dict(env, BINARIZE_ARGS=""))
    assert res.returncode == 2
    assert "BINARIZE_ARGS=--spm-vocab 23 --spm-side source N=400, not BUILD_ARGS=" in res.stderr
    assert "Fix: choose another OUT" in res.stderr
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


@pytest.mark.slow
def test_quickstart_trains_its_levels_as_one_pack_per_slot(tmp_path):
    """quickstart.sh (PACK=1, the default) on one slot: the two levels train in one packed
    fairseq-train, then each is decoded and scored in its own run directory."""
    out = tmp_path / "demo"
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               OUT=str(out), LEVELS="0,3", N="200", MAX_UPDATE="4", JOBS="1",
               DECODE_SAMPLE="20", CUDA_VISIBLE_DEVICES="")
    res = subprocess.run(["bash", str(REPO / "recipes" / "quickstart.sh")],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    grid = json.loads((out / "quickstart.json").read_text())
    assert grid["levels"] == [0.0, 3.0] and grid["schedule"] == {"max_update": 4}
    packs = list((out / "packs" / "exp1" / "exp1_cnn_authors" / "n200").glob("pack-*"))
    assert len(packs) == 1
    runs = [r["run_dir"] for r in json.loads((packs[0] / "pack.json").read_text())["runs"]]
    levels = out / "runs" / "exp1" / "exp1_cnn_authors" / "n200" / "seed1"
    assert runs == [str((levels / name).resolve()) for name in ("entropy_0.0", "entropy_3.0")]
    for name in ("entropy_0.0", "entropy_3.0"):
        assert (levels / name / "checkpoints" / "trained").exists()
        score = json.loads((levels / name / "sample" / "score.json").read_text())
        assert score["seed"] == 1 and score["level"] == name
    rows = (out / "sweep-status.tsv").read_text().splitlines()[1:]
    assert [r.split("\t")[:2] for r in rows] == [
        [f"exp1_cnn_authors/n200/seed1/{name}", "done"] for name in ("entropy_0.0", "entropy_3.0")]
    bad = subprocess.run(["bash", str(REPO / "recipes" / "quickstart.sh")], capture_output=True,
                         text=True, env=dict(env, PACK="2"))
    assert bad.returncode == 2 and bad.stderr.startswith("PACK=2: expected 1 or 0")


def test_shell_scripts_count_cores_without_openmp_variables():
    """``nproc`` prints OMP_NUM_THREADS when it is set (the tests set it to 1): a script that
    sizes its workers or a Slurm node by ``nproc`` must unset it, or it sees one core."""
    scripts = [p for d in ("recipes", "preprocess", "tests", ".ci") for p in (REPO / d).rglob("*")
               if p.is_file() and (p.suffix == ".sh" or p.name == "run")] + [REPO / "Makefile"]
    calls = [(p.name, line) for p in scripts for line in p.read_text().splitlines()
             if "nproc" in line and not line.lstrip().startswith("#")]
    assert calls, "no script counts cores: the check below would pass vacuously"
    bare = [(name, line) for name, line in calls if "-u OMP_NUM_THREADS" not in line]
    assert not bare, bare
    res = subprocess.run(["bash", "-c", "env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc"],
                         capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert int(res.stdout) == len(os.sched_getaffinity(0))
