"""Packs whose runs have training sets of different sizes and their own numbers of updates
(pack.json's ``max_update``; Experiment 2's support sizes under a fixed learning rate): each
run is the run fairseq-train would train alone, its last and best checkpoints included.

The tolerances are those of ``test_packed.py`` (its module docstring): parameters within
``1e-4 * max|p| + 1e-6`` of the run alone, at the RNN preset's lr 1e-4 (at 1e-3 Adam's
rounding noise reaches 1.5e-5 after 24 updates, just above it); ten updates more move some
tensor more than 5x the tolerance.
"""

import json
import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _packed_harness import (common_args, fairseq_train, load_model,  # noqa: E402
                             write_levels, write_pack_dir)
from test_packed import ZERO_GRADIENT  # noqa: E402

from fairseq_entropy.models.packed import PackedError  # noqa: E402
from fairseq_entropy.tasks.packed_runs import PackError, read_pack, unpack  # noqa: E402

SEEDS = [3, 5, 7]
#: training commands of the three levels (batch 1: the batches of an epoch)
SIZES = [5, 8, 3]
#: fairseq's default multiple of 8 would drop a level's last command at batch 1
WHOLE = ["--required-batch-size-multiple", "1"]
#: each run's own updates: 3 epochs, 3 epochs, and 2 epochs and 1 batch (it stops mid-epoch)
LIMITS = [15, 24, 7]
FIXED = ["--optimizer", "adamw", "--adam-betas", "(0.9,0.98)", "--adam-eps", "1e-08",
         "--weight-decay", "0.01", "--lr", "1e-4", "--lr-scheduler", "fixed",
         "--clip-norm", "0"]
RNN = ["--arch", "rnn_seq2seq_exp1_rnn_h64", "--criterion", "teacher_forcing_cross_entropy",
       "--teacher-forcing-ratio", "0", "--stop-at-predicted-eos", "--mean-over-target-length",
       "--sentence-avg"]
CNN = ["--arch", "scan_cnn_paper", "--criterion", "label_smoothed_cross_entropy",
       "--label-smoothing", "0", "--random-batches"]
VALIDATE = ["--eval-seq-acc", "--best-checkpoint-metric", "loss"]


@pytest.fixture(scope="module")
def levels(tmp_path_factory):
    return write_levels(tmp_path_factory.mktemp("ragged"), 0, 3, sizes=SIZES)


def train(root: Path, levels, model, batch):
    args = [*model, "--dropout", "0", *FIXED, *VALIDATE, *WHOLE]
    for i, (data, seed, limit) in enumerate(zip(levels, SEEDS, LIMITS)):
        fairseq_train([data, "--task", "systematicity", "--seed", seed, *args,
                       *common_args(root / f"alone{i}", limit, batch)])
    pack = write_pack_dir(root, levels, SEEDS, LIMITS)
    fairseq_train([pack, "--task", "packed_systematicity", "--seed", 1, "--no-unpack-at-exit",
                   *args, *common_args(root / "packed", max(LIMITS), batch)])
    unpack(str(root / "packed" / "checkpoint_last.pt"))


def assert_close(alone: dict, packed: dict) -> None:
    assert alone.keys() == packed.keys()
    for name in alone:
        if ZERO_GRADIENT.search(name):  # rounding noise in both (test_packed.py's docstring)
            continue
        tol = 1e-4 * float(alone[name].abs().max()) + 1e-6
        err = float((alone[name] - packed[name]).abs().max())
        assert err <= tol, (name, err, tol)


def assert_same_checkpoints(root: Path, i: int, iterator: bool) -> None:
    """Run i's unpacked last and best checkpoints are those of ``alone{i}``: weights
    (:func:`assert_close`), updates, best value and, with ``iterator``, the iterator's epoch
    and position."""
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        alone = load_model(root / f"alone{i}" / name)
        ours = load_model(root / f"run{i}" / "checkpoints" / name)
        assert_close(alone["model"], ours["model"])
        assert ours["optimizer_history"][-1]["num_updates"] == \
            alone["optimizer_history"][-1]["num_updates"]
        assert ours["extra_state"]["best"] == alone["extra_state"]["best"]
        if iterator:
            for key in ("epoch", "iterations_in_epoch"):
                assert ours["extra_state"]["train_iterator"][key] == \
                    alone["extra_state"]["train_iterator"][key]


@pytest.mark.parametrize("model,batch", [(RNN, 1), (CNN, 1)], ids=["rnn", "cnn"])
def test_runs_of_their_own_length_train_as_alone(levels, tmp_path, model, batch):
    train(tmp_path, levels, model, batch)
    for i, limit in enumerate(LIMITS):
        assert_same_checkpoints(tmp_path, i, iterator=True)
        last = load_model(tmp_path / f"run{i}" / "checkpoints" / "checkpoint_last.pt")
        assert last["optimizer_history"][-1]["num_updates"] == limit
        assert last["cfg"]["optimization"]["max_update"] == limit
        assert last["task_state"]["training"]["max_update"] == limit
        assert last["task_state"]["training"]["updates"] == limit
    # a run stopped at its own limit is not the run that went on
    short = load_model(tmp_path / "run2" / "checkpoints" / "checkpoint_last.pt")["model"]
    fairseq_train([levels[2], "--task", "systematicity", "--seed", SEEDS[2], *model,
                   "--dropout", "0", *FIXED, "--disable-validation", *WHOLE,
                   *common_args(tmp_path / "longer", LIMITS[2] + 10, batch)])
    longer = load_model(tmp_path / "longer" / "checkpoint_last.pt")["model"]
    assert max(float((short[n] - longer[n]).abs().max()) /
               (1e-4 * float(longer[n].abs().max()) + 1e-6) for n in short) > 5


@pytest.mark.parametrize("sizes,limits,subsets", [
    ([3, 3, 3], None, "valid,test"), (SIZES, [12, 9, 7], "valid")],
    ids=["one-length-two-subsets", "own-length"])
def test_a_runs_best_is_kept_only_where_fairseq_train_saves(tmp_path, sizes, limits, subsets):
    """Validated after every update, saved at every 2nd epoch's end and the last update:
    alone, a run's checkpoint_best is decided at the saves only, on the first
    ``--valid-subset``. With the largest loss as "best" (loss falls, so every validation
    between saves would win), the pack's best must be the run's at its first save, not at
    its first validation, and never chosen on the second subset (here another level's
    commands)."""
    datas = write_levels(tmp_path / "data", 0, 3, sizes=sizes)
    for i, data in enumerate(datas):  # test: the next level's training commands
        for name in ("in.bin", "in.idx", "out.bin", "out.idx"):
            (data / f"test.in-out.{name}").write_bytes(
                (datas[(i + 1) % 3] / f"train.in-out.{name}").read_bytes())
    args = [*CNN, "--dropout", "0", *FIXED, "--eval-seq-acc", "--best-checkpoint-metric",
            "loss", "--maximize-best-checkpoint-metric", "--validate-interval-updates", "1",
            "--save-interval", "2", "--valid-subset", subsets, *WHOLE]
    limits_or_12 = limits or [12] * 3
    for i, (data, seed, limit) in enumerate(zip(datas, SEEDS, limits_or_12)):
        fairseq_train([data, "--task", "systematicity", "--seed", seed, *args,
                       *common_args(tmp_path / f"alone{i}", limit, 1)])
        best = load_model(tmp_path / f"alone{i}" / "checkpoint_best.pt")
        # its first save: the end of epoch 2, or its last update if that comes first
        assert best["optimizer_history"][-1]["num_updates"] == min(2 * sizes[i], limit)
    pack = write_pack_dir(tmp_path, datas, SEEDS, limits)
    fairseq_train([pack, "--task", "packed_systematicity", "--seed", 1, "--no-unpack-at-exit",
                   *args, *common_args(tmp_path / "packed", 12, 1)])
    unpack(str(tmp_path / "packed" / "checkpoint_last.pt"))
    for i in range(3):
        assert_same_checkpoints(tmp_path, i, iterator=True)


COSINE = ["--optimizer", "adamw", "--adam-betas", "(0.9,0.98)", "--lr", "1e-3",
          "--lr-scheduler", "cosine", "--warmup-updates", "3", "--warmup-init-lr", "0",
          "--clip-norm", "5"]


def test_runs_of_their_own_epoch_length_share_a_cosine_schedule(levels, tmp_path):
    """Training sets of 5, 8 and 3 commands and one --max-update (a grid's fixed
    ``max_update`` over Experiment 2's support sizes): the cosine rate follows from the
    update count, so each run is its run alone, validated at its own epoch ends."""
    args = [*CNN, "--dropout", "0", *COSINE, *VALIDATE, *WHOLE]
    for i, (data, seed) in enumerate(zip(levels, SEEDS)):
        fairseq_train([data, "--task", "systematicity", "--seed", seed, *args,
                       *common_args(tmp_path / f"alone{i}", 12, 1)])
    pack = write_pack_dir(tmp_path, levels, SEEDS)
    fairseq_train([pack, "--task", "packed_systematicity", "--seed", 1, "--no-unpack-at-exit",
                   *args, *common_args(tmp_path / "packed", 12, 1)])
    unpack(str(tmp_path / "packed" / "checkpoint_last.pt"))
    for i in range(3):
        assert_same_checkpoints(tmp_path, i, iterator=False)
    # an epoch-dependent rate is refused
    with pytest.raises(PackedError, match=r"\[5, 8, 3\] training batches per epoch.*"
                                          r"--force-anneal 2.*Fix: pack runs whose training "
                                          r"sets have the same size"):
        fairseq_train([pack, "--task", "packed_systematicity", "--seed", 1, *CNN, *FIXED,
                       "--force-anneal", "2", *WHOLE,
                       *common_args(tmp_path / "annealed", 12, 1)])


def test_own_max_update_needs_a_learning_rate_of_the_update_count(levels, tmp_path):
    pack = write_pack_dir(tmp_path, levels, SEEDS, LIMITS)
    cosine = [a if a != "fixed" else "cosine" for a in FIXED]
    with pytest.raises(PackedError, match=r"own max_update.*--lr-scheduler cosine.*Fix:"):
        fairseq_train([pack, "--task", "packed_systematicity", "--seed", 1, *RNN, *cosine,
                       *common_args(tmp_path / "packed", max(LIMITS), 1)])
    with pytest.raises(PackedError, match=r"max_update are \[15, 24, 7\].*would train no "
                                          r"run. Fix: pass --max-update 24"):
        fairseq_train([pack, "--task", "packed_systematicity", "--seed", 1, *RNN, *FIXED,
                       *common_args(tmp_path / "packed", 30, 1)])


def test_a_pack_cut_off_before_any_run_validated_reports_every_run(levels, tmp_path):
    """fairseq-train validates the pack when it stops: runs with no validation of their own
    yet are validated then, so fairseq finds the best-checkpoint metric (seq_acc) it needs."""
    pack = write_pack_dir(tmp_path, levels, SEEDS, LIMITS)
    fairseq_train([pack, "--task", "packed_systematicity", "--seed", 1, *RNN, "--dropout",
                   "0", *FIXED, *WHOLE, "--eval-seq-acc", "--best-checkpoint-metric",
                   "seq_acc", "--maximize-best-checkpoint-metric", "--no-unpack-at-exit",
                   *common_args(tmp_path / "packed", 1, 1)])
    state = load_model(tmp_path / "packed" / "checkpoint_last.pt")
    assert [r["own"]["updates"] for r in state["task_state"]["packed"]["runs"]] == [1, 1, 1]
    assert 0.0 <= state["extra_state"]["best"] <= 1.0


@pytest.mark.parametrize("extra,refused", [
    (["--update-freq", "2"], r"own max_update.*--update-freq \[2\]"),
    (["--bf16"], r"own max_update.*--bf16 \(a finished run's weights would come back"),
])
def test_runs_of_their_own_length_refuse_options_that_would_mix_them(levels, tmp_path,
                                                                      extra, refused):
    pack = write_pack_dir(tmp_path, levels, SEEDS, LIMITS)
    with pytest.raises(PackedError, match=refused + r".*Fix:"):
        fairseq_train([pack, "--task", "packed_systematicity", "--seed", 1, *RNN, *FIXED,
                       *extra, *common_args(tmp_path / "packed", max(LIMITS), 1)])


@pytest.mark.parametrize("limits", [None, LIMITS], ids=["one-length", "own-length"])
@pytest.mark.parametrize("extra,refused", [
    (["--patience", "3"], r"--patience 3 would stop every run"),
    (["--fp16"], r"--fp16 and --amp keep one loss scale"),
    (["--amp"], r"--fp16 and --amp keep one loss scale")])
def test_every_pack_refuses_options_that_act_on_all_runs(levels, tmp_path, limits, extra,
                                                         refused):
    """Early stopping on the runs' pooled validation; one loss scale for all runs."""
    pack = write_pack_dir(tmp_path, levels, SEEDS, limits)
    with pytest.raises(PackedError, match=refused + r".*Fix:"):
        fairseq_train([pack, "--task", "packed_systematicity", "--seed", 1, *RNN, *FIXED,
                       *extra, *common_args(tmp_path / "packed", 24, 1)])


def test_pack_command_takes_a_runs_own_max_update(levels, tmp_path, capsys):
    from fairseq_entropy.cli import main as cli

    pack = tmp_path / "p"
    assert cli(["pack", str(pack), "--run", str(levels[0]), "3", str(tmp_path / "r0"), "15",
                "--run", str(levels[1]), "5", str(tmp_path / "r1")]) == 0
    assert [r["max_update"] for r in read_pack(str(pack))] == [15, None]
    for bad, why in ((["0"], r"MAX_UPDATE '0' is not an integer >= 1"),
                     (["15", "x"], r"5 values. Fix: give DATA SEED RUN_DIR and optionally")):
        assert cli(["pack", str(tmp_path / "q"), "--run", str(levels[0]), "3",
                    str(tmp_path / "r0"), *bad]) != 0
        assert re.search(why, capsys.readouterr().err)
    assert not (tmp_path / "q").exists()


def test_pack_description_reads_and_checks_a_runs_max_update(levels, tmp_path):
    pack = write_pack_dir(tmp_path, levels, SEEDS, LIMITS)
    assert [r["max_update"] for r in read_pack(str(pack))] == LIMITS
    desc = json.loads((pack / "pack.json").read_text())
    desc["runs"][1]["max_update"] = "24"
    (pack / "pack.json").write_text(json.dumps(desc))
    with pytest.raises(PackError, match=r"run 1 has max_update '24'.*Fix: give a positive"):
        read_pack(str(pack))


def test_a_finished_run_keeps_its_weights_and_a_cut_off_pack_resumes(levels, tmp_path):
    """The optimizer's step on a finished run's slice is undone (AdamW's momentum and weight
    decay would move it even with a zero gradient), and a pack cut off mid-epoch (at 10
    updates: run 2 finished, run 1 mid-epoch, the pack in its second epoch) resumes to the
    weights of the pack trained straight through."""
    pack = write_pack_dir(tmp_path, levels, SEEDS, LIMITS)
    args = [pack, "--task", "packed_systematicity", "--seed", 1, "--no-unpack-at-exit", *RNN,
            "--dropout", "0", *FIXED, "--disable-validation", *WHOLE]
    cut = tmp_path / "cut"
    fairseq_train([*args, *common_args(cut, 10, 1)])
    at10 = load_model(cut / "checkpoint_last.pt")["task_state"]["packed"]["runs"]
    fairseq_train([*args, *common_args(cut, max(LIMITS), 1)])
    at24 = load_model(cut / "checkpoint_last.pt")["task_state"]["packed"]["runs"]
    for name, value in at10[2]["model"].items():
        assert torch.equal(value, at24[2]["model"][name]), name
    assert any(not torch.equal(v, at24[0]["model"][n]) for n, v in at10[0]["model"].items())
    assert [r["own"]["updates"] for r in at10] == [10, 10, 7]
    assert [r["own"]["updates"] for r in at24] == LIMITS
    fairseq_train([*args, *common_args(tmp_path / "straight", max(LIMITS), 1)])
    straight = load_model(tmp_path / "straight" / "checkpoint_last.pt")
    for k, run in enumerate(straight["task_state"]["packed"]["runs"]):
        for name, value in run["model"].items():
            assert torch.allclose(value, at24[k]["model"][name], rtol=1e-6, atol=1e-7), \
                (k, name)
