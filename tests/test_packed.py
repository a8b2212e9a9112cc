"""Packed runs (``--task packed_systematicity``): K runs in one fairseq-train, each the run it
would have been alone.

Tolerance of the equivalence tests: after 20 AdamW updates with dropout 0, every parameter of
a packed run is within ``1e-4 * max|p| + 1e-6`` of the run trained alone (per tensor), and the
log-probabilities of the two models on a batch agree within ``1e-4 + 1e-4 |value|``.  Bit
equality is not expected: the packed forward runs the K runs' batches padded to one shape
through batched kernels (vmap), which sum in another order (measured: gradients within
~1e-7 relative).
Adam divides each update by the gradient's running RMS, so where a gradient is nearly 0 its
rounding moves the parameter by up to ~lr per update: parameters whose gradient is exactly 0
in exact arithmetic (biases whose only effect is a constant added to all attention scores of
a query, :data:`ZERO_GRADIENT`) are pure rounding noise in both runs and are compared through
the log-probabilities only.  A real difference (another batch, seed, normalisation or clip)
moves parameters by ~1e-2 after 20 updates, 100x the tolerance.
"""

import logging
import re
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _packed_harness import (common_args, fairseq_train,  # noqa: E402
                             fairseq_train_process, load_model, write_levels, write_pack_dir)

from fairseq_entropy.cli import main  # noqa: E402
from fairseq_entropy.data import exact_match  # noqa: E402
from fairseq_entropy.tasks.packed import clip_runs  # noqa: E402
from fairseq_entropy.tasks.packed_runs import PackError, read_pack, unpack  # noqa: E402

SEEDS = [3, 5, 7]
UPDATES = 20
OPTIM = ["--optimizer", "adamw", "--adam-betas", "(0.9,0.98)", "--lr", "1e-3", "--clip-norm",
         "5", "--lr-scheduler", "cosine", "--warmup-updates", "3", "--warmup-init-lr", "0"]
SMOOTHED = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0"]
TINY_TRANSFORMER = ["--embed-dim", "32", "--attention-heads", "2", "--encoder-layers", "2",
                    "--decoder-layers", "2"]
ARCHS = {
    "scan_cnn_paper": ["--arch", "scan_cnn_paper", *SMOOTHED, "--random-batches"],
    # fairseq's fconv (exp1_fconv), with length-sorted batches (no --random-batches)
    "fconv": ["--arch", "fconv_scan_exp1", *SMOOTHED],
    "transformer_sinusoidal": ["--arch", "scan_transformer_paper", *TINY_TRANSFORMER,
                               *SMOOTHED, "--random-batches"],
    "transformer_relative": ["--arch", "scan_transformer_relative", *TINY_TRANSFORMER,
                             "--source-position-buckets", "64", "--target-position-buckets",
                             "4", *SMOOTHED, "--random-batches"],
    "transformer_rope": ["--arch", "scan_transformer_rope", *TINY_TRANSFORMER,
                         "--rope-theta", "1000", *SMOOTHED, "--random-batches"],
    "transformer_learned": ["--arch", "scan_transformer_learned", *TINY_TRANSFORMER,
                            *SMOOTHED, "--random-batches"],
    "equivariant": ["--arch", "equivariant_seq2seq_small", "--cell", "gru",
                    "--encoder-bidirectional", "--embed-dim", "8", "--hidden-dim", "8",
                    "--criterion", "cross_entropy"],
    # as its preset (exp1_rnn_h64) trains it: the decoder fed its own greedy predictions up
    # to its predicted </s>, so the runs' sequences differ in length
    "rnn": ["--arch", "rnn_seq2seq_exp1_rnn_h64", "--criterion",
            "teacher_forcing_cross_entropy", "--teacher-forcing-ratio", "0",
            "--stop-at-predicted-eos", "--mean-over-target-length", "--sentence-avg"],
}
#: the preset's own optimizer where it is not OPTIM: the equivariant model's fairseq adam;
#: the RNN's AdamW at a fixed lr 1e-4 without clipping
OPTIMIZER = {"equivariant": [*OPTIM, "--optimizer", "adam"],
             "rnn": ["--optimizer", "adamw", "--adam-betas", "(0.9,0.98)", "--adam-eps",
                     "1e-08", "--weight-decay", "0.01", "--lr", "1e-4", "--lr-scheduler",
                     "fixed", "--clip-norm", "0"]}
#: sentences a batch where the preset's is not 8: the RNN's batch of 1
BATCH = {"rnn": 1}
GREEDY = Namespace(beam=1, max_len_a=0, max_len_b=60, min_len=1, sampling=False)
#: parameters whose gradient is 0 in exact arithmetic (see the module docstring)
ZERO_GRADIENT = re.compile(r"(k_proj\.bias|encoder\.layers\.2\.projection\.bias|"
                           r"encoder\.out_proj\.bias)$")


@pytest.fixture(scope="module")
def levels(tmp_path_factory):
    """Three different levels of 24 commands (3 batches of 8 per epoch)."""
    return write_levels(tmp_path_factory.mktemp("levels"), 24, 3)


def train_alone_and_packed(root: Path, levels, arch):
    """Each level trained alone (its seed) and the three packed, with ``arch``'s model
    (:data:`ARCHS`), optimizer (:data:`OPTIMIZER`, else OPTIM) and batch size (:data:`BATCH`,
    else 8); returns the pack dir."""
    args = [*ARCHS[arch], "--dropout", "0", *OPTIMIZER.get(arch, OPTIM), "--disable-validation"]
    batch = BATCH.get(arch, 8)
    for i, (data, seed) in enumerate(zip(levels, SEEDS)):
        fairseq_train([data, "--task", "systematicity", "--seed", seed, *args,
                       *common_args(root / f"alone{i}", UPDATES, batch)])
    pack = write_pack_dir(root, levels, SEEDS)
    fairseq_train([pack, "--task", "packed_systematicity", "--seed", 1, "--no-unpack-at-exit",
                   *args, *common_args(root / "packed", UPDATES, batch)])
    unpack(str(root / "packed" / "checkpoint_last.pt"))
    return pack


def ordinary_model(path):
    from fairseq import checkpoint_utils

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(path)])
    return models[0].eval(), task


def assert_same_run(alone_path, packed_path, levels_dir):
    alone, packed = load_model(alone_path), load_model(packed_path)
    assert packed["cfg"]["common"]["seed"] == alone["cfg"]["common"]["seed"]
    assert packed["cfg"]["task"]["data"] == alone["cfg"]["task"]["data"]
    assert packed["cfg"]["optimization"]["clip_norm"] == \
        alone["cfg"]["optimization"]["clip_norm"]
    assert packed["task_state"]["training"]["data_manifest_sha256"] == \
        alone["task_state"]["training"]["data_manifest_sha256"]
    assert packed["optimizer_history"][-1]["num_updates"] == UPDATES
    a, b = alone["model"], packed["model"]
    assert a.keys() == b.keys()
    moved = 0.0
    for name in a:
        if ZERO_GRADIENT.search(name):
            continue
        tol = 1e-4 * float(a[name].abs().max()) + 1e-6
        err = float((a[name] - b[name]).abs().max())
        assert err <= tol, (name, err, tol)
        moved = max(moved, float(a[name].abs().max()))
    assert moved > 0
    model_a, task = ordinary_model(alone_path)
    model_b, _ = ordinary_model(packed_path)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    sample = ds.collater([ds[i] for i in range(8)])
    with torch.no_grad():
        la = model_a.get_normalized_probs(model_a(**sample["net_input"]), log_probs=True)
        lb = model_b.get_normalized_probs(model_b(**sample["net_input"]), log_probs=True)
    real = sample["target"].ne(task.target_dictionary.pad())
    assert torch.allclose(la[real], lb[real], atol=1e-4, rtol=1e-4), \
        float((la[real] - lb[real]).abs().max())


@pytest.mark.parametrize("arch", list(ARCHS))
def test_packed_runs_train_as_the_runs_alone(arch, levels, tmp_path):
    """Three runs (different seeds and levels) packed against each trained alone, 20 updates.

    The RNN (batch 1, each run's greedy decoder stopping at its own predicted </s>, so the
    runs' sequences differ in length) is measured at most 7e-7 from its run alone at the
    preset's lr 1e-4 (6.7e-6 at lr 1e-3: Adam's rounding noise grows with lr), inside the
    tolerance of the module docstring (1e-4 x max|p| + 1e-6, about 1e-5 for its weights)."""
    train_alone_and_packed(tmp_path, levels, arch)
    for i in range(3):
        assert_same_run(tmp_path / f"alone{i}" / "checkpoint_last.pt",
                        tmp_path / f"run{i}" / "checkpoints" / "checkpoint_last.pt", levels[i])
    # and not the run of another seed or level
    other = load_model(tmp_path / "alone1" / "checkpoint_last.pt")["model"]
    mine = load_model(tmp_path / "run0" / "checkpoints" / "checkpoint_last.pt")["model"]
    assert max(float((other[n] - mine[n]).abs().max()) for n in mine) > 1e-2


def test_clipping_is_per_run():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(3, 4, 5)), torch.nn.Parameter(torch.zeros(3, 7))]
    grads = [torch.randn(3, 4, 5) * 0.1, torch.randn(3, 7) * 0.1]
    grads[0][1] *= 1e6  # run 1's gradient is huge
    for p, g in zip(params, grads):
        p.grad = g.clone()
    norms = clip_runs(params, 5.0)
    for k in range(3):
        norm = torch.cat([g[k].reshape(-1) for g in grads]).norm()
        assert torch.allclose(norms[k], norm)
        after = torch.cat([p.grad[k].reshape(-1) for p in params])
        if k == 1:
            assert torch.allclose(after.norm(), torch.tensor(5.0), rtol=1e-5)
        else:  # neighbours untouched, bit for bit
            assert torch.equal(after, torch.cat([g[k].reshape(-1) for g in grads]))


def test_dropout_masks_differ_across_runs():
    from _toy import FakeTask, PAIRS, make_dictionary, make_sample
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion
    from fairseq.models import ARCH_CONFIG_REGISTRY

    from fairseq_entropy.models.packed import PackedModel
    from fairseq_entropy.models.scan_cnn import ScanCNNModel

    d = make_dictionary()
    task = FakeTask(d)
    models = []
    for _ in range(3):  # three identical models: only dropout can tell their losses apart
        torch.manual_seed(0)
        args = Namespace(dropout=0.3)
        ARCH_CONFIG_REGISTRY["scan_cnn_paper"](args)
        models.append(ScanCNNModel.build_model(args, task))
    crit = CrossEntropyCriterion(task, False)
    packed = PackedModel(models)
    sample = make_sample(d, PAIRS)
    packed.train()
    losses = [float(r["loss"]) for r in packed.run_losses([sample] * 3, crit)]
    assert len(set(losses)) == 3
    packed.eval()
    losses = [float(r["loss"]) for r in packed.run_losses([sample] * 3, crit)]
    alone = float(crit(models[0].eval(), sample)[0])
    assert max(abs(x - alone) for x in losses) < 1e-4 * abs(alone)


@pytest.fixture(scope="module")
def validated_pack(levels, tmp_path_factory):
    """The CNN pack trained with validation (seq_acc, best checkpoints) and dropout 0.1."""
    root = tmp_path_factory.mktemp("validated")
    pack = write_pack_dir(root, levels, SEEDS)
    args = [pack, "--task", "packed_systematicity", "--seed", 1, "--no-unpack-at-exit",
            *ARCHS["scan_cnn_paper"], "--dropout", "0.1", *OPTIM, "--eval-seq-acc",
            "--best-checkpoint-metric", "seq_acc", "--maximize-best-checkpoint-metric"]
    return root, pack, args


def test_unpacked_checkpoints_decode_as_the_packed_model(validated_pack):
    root, pack, args = validated_pack
    fairseq_train([*args, *common_args(root / "packed", 12, 8)])
    assert main(["unpack", str(root / "packed")]) == 0
    for k in range(3):  # last and best of every run
        for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
            assert (root / f"run{k}" / "checkpoints" / name).is_file()
    state = load_model(root / "packed" / "checkpoint_last.pt")
    from fairseq import checkpoint_utils

    _, _, packed_task = checkpoint_utils.load_model_ensemble_and_task(
        [str(root / "packed" / "checkpoint_last.pt")])
    packed_model = packed_task.model
    packed_model.load_state_dict(state["model"])
    for k in range(3):
        model, task = ordinary_model(root / f"run{k}" / "checkpoints" / "checkpoint_last.pt")
        assert task.__class__.__name__ == "SystematicityTask"
        task.load_dataset("test")
        ds = task.dataset("test")
        sample = ds.collater([ds[i] for i in range(len(ds))])
        alone = task.inference_step(task.build_generator([model], GREEDY), [model], sample)
        ours = packed_model.eval().synced(k)
        hyps = task.inference_step(task.build_generator([ours], GREEDY), [ours], sample)
        for h, g in zip(alone, hyps):
            assert torch.equal(h[0]["tokens"], g[0]["tokens"])
        # the best checkpoint is the run's own: its weights score its recorded best seq_acc
        best = load_model(root / f"run{k}" / "checkpoints" / "checkpoint_best.pt")
        assert best["cfg"]["common"]["seed"] == SEEDS[k]
        model, task = ordinary_model(root / f"run{k}" / "checkpoints" / "checkpoint_best.pt")
        task.load_dataset("valid")
        ds = task.dataset("valid")
        sample = ds.collater([ds[i] for i in range(len(ds))])
        hyps = task.inference_step(task.build_generator([model], GREEDY), [model], sample)
        pad, eos = task.target_dictionary.pad(), task.target_dictionary.eos()
        correct = sum(exact_match(h[0]["tokens"], sample["target"][i], pad, eos)
                      for i, h in enumerate(hyps))
        assert best["extra_state"]["best"] == pytest.approx(correct / len(ds), abs=1e-4)


def test_progress_counts_a_runs_epoch_not_the_packs_sentences(validated_pack, tmp_path,
                                                               caplog):
    """A packed step is batch j of every run: 24 commands a run at batch 8 make 3 steps an
    epoch, so 6 updates are 2 epochs (all runs' 72 commands would make 1 epoch of 9)."""
    _, _, args = validated_pack
    with caplog.at_level(logging.INFO):
        fairseq_train([*args, "--progress-interval", "1e-9",
                       *common_args(tmp_path / "packed", 6, 8)])
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("progress: epoch")]
    assert len(lines) >= 4
    assert all(re.match(r"progress: epoch [12]/2 \| update [0-6]/6 \|", line)
               for line in lines), lines


@pytest.mark.slow
def test_killed_pack_resumes_exactly(validated_pack):
    root, pack, args = validated_pack
    args = [a for a in args if a not in ("--eval-seq-acc", "--maximize-best-checkpoint-metric")]
    inv = ["--lr-scheduler", "inverse_sqrt", "--warmup-updates", "3", "--warmup-init-lr", "0",
           "--best-checkpoint-metric", "loss"]
    # each in a process of its own, as a killed and relaunched fairseq-train is
    fairseq_train_process([*args, *inv, *common_args(root / "straight", 8, 8)])
    fairseq_train_process([*args, *inv, *common_args(root / "killed", 4, 8)])  # mid-epoch 2
    fairseq_train_process([*args, *inv, *common_args(root / "killed", 8, 8)])  # resumes
    a = load_model(root / "straight" / "checkpoint_last.pt")
    b = load_model(root / "killed" / "checkpoint_last.pt")
    assert a["optimizer_history"][-1]["num_updates"] == 8
    assert a["model"].keys() == b["model"].keys()
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name


def test_pack_description_errors_name_the_file_and_the_fix(tmp_path):
    with pytest.raises(PackError, match=r"pack.json: no pack description.*Fix:"):
        read_pack(str(tmp_path))
    (tmp_path / "pack.json").write_text('{"runs": [{"data": "x", "seed": "1"}]}')
    with pytest.raises(PackError, match=r"run 0 .*Fix:"):
        read_pack(str(tmp_path))


def test_pack_command_writes_the_description_and_unpack_refuses_a_missing_pack(
        levels, tmp_path, capsys):
    assert main(["pack", str(tmp_path / "p"), "--run", str(levels[0]), "4", "r0",
                 "--run", str(levels[1]), "9", "r1"]) == 0
    runs = read_pack(str(tmp_path / "p"))
    assert [(r["data"], r["seed"]) for r in runs] == [(str(levels[0]), 4), (str(levels[1]), 9)]
    assert main(["pack", str(tmp_path / "q"), "--run", str(tmp_path), "1", "r"]) == 2
    assert main(["unpack", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("Fix:" in line for line in err)
    # any file that is not a torch checkpoint: one line with the fix, no traceback
    for name, data in (("pack.json", b'{"runs": []}\n'), ("empty.pt", b""),
                       ("junk.pt", b"junk\n")):
        (tmp_path / name).write_bytes(data)
        assert main(["unpack", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err == (f"fairseq-entropy unpack: error: {tmp_path / name}: not a torch checkpoint "
                       "(torch.load cannot read it). Fix: give the checkpoint_last.pt of a "
                       "packed_systematicity run\n")
    # a torch checkpoint whose packed state is not what a pack writes: one line, nothing made
    cfg = {key: {} for key in ("task", "common", "optimization", "checkpoint")}
    run = {"data": "d", "seed": 1, "run_dir": str(tmp_path / "u0")}
    whole = {"run": run, "model": {}, "task_cfg": {}, "task_state": {}, "clip_norm": 0.0}
    for i, (state, message) in enumerate((
            ({"task_state": {"packed": {"x": 1}}}, "no fairseq cfg"),
            ({"cfg": cfg, "task_state": {"packed": {"x": 1}}}, "no list of runs"),
            ({"cfg": cfg, "task_state": {"packed": {"runs": ["r"]}}}, "run 0 is not a record"),
            ({"cfg": cfg, "task_state": {"packed": {"runs": [{**whole, "run": {"seed": 1}}]}}},
             "run 0 has no run (data, seed, run_dir)"),
            ({"cfg": cfg, "task_state": {"packed": {"runs": [{"run": run}]}}},
             "run 0 has no model, task_cfg, task_state, clip_norm"),
            ({"cfg": cfg, "task_state": {"packed": {"runs": [{**whole, "best": {"value": 1}}]}}},
             "run 0's best record is incomplete"),
            ({"cfg": cfg, "task_state": {"packed": {"runs": [whole, {**whole, "own": {}}]}}},
             "run 1's own-length record is incomplete"))):
        torch.save(state, tmp_path / f"bad{i}.pt")
        assert main(["unpack", str(tmp_path / f"bad{i}.pt")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and "Fix:" in err[0], err
        assert not (tmp_path / "u0").exists()
    (tmp_path / "afile").write_text("x\n")
    for argv, message in (
            (["--run", str(levels[0]), "-1", "r0"], "the seed '-1' is not an integer >= 0"),
            (["--run", str(levels[0]), "1", ""], "RUN_DIR is empty"),
            (["--run", str(levels[0]), "1", str(tmp_path / "afile")], "RUN_DIR is a file"),
            (["--run", str(levels[0]), "4", "r0", "--run", str(levels[0]), "4", "r1"],
             f"two runs train {levels[0]} with seed 4: the same run twice"),
            # each run's task would load the data as fairseq splits it: c and d
            (["--run", str(tmp_path / "c:d"), "1", "r0"], "DATA " + str(tmp_path / "c:d")
             + ": holds ':'")):
        assert main(["pack", str(tmp_path / "q"), *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and "Fix:" in err, err
    assert main(["pack", str(tmp_path / "a:b"), "--run", str(levels[0]), "1", "r"]) == 2
    assert "PACK_DIR" in capsys.readouterr().err
    assert main(["pack", str(tmp_path / "afile"), "--run", str(levels[0]), "1", "r"]) == 2
    assert "is a file" in capsys.readouterr().err
    assert not (tmp_path / "q").exists() and not (tmp_path / "a:b").exists()
    for argv, message in (
            (["--run", str(levels[0]), "1", str(tmp_path / "q")], "RUN_DIR is PACK_DIR"),
            (["--run", str(tmp_path / "nowhere"), "1", "r0"], "nowhere: no such directory")):
        assert main(["pack", str(tmp_path / "q"), *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and "Fix:" in err, err
    # a pack.json of other runs is replaced only with --force; the same runs again are fine
    before = (tmp_path / "p" / "pack.json").read_bytes()
    again = ["--run", str(levels[0]), "4", "r0", "--run", str(levels[1]), "9", "r1"]
    assert main(["pack", str(tmp_path / "p"), *again]) == 0
    assert (tmp_path / "p" / "pack.json").read_bytes() == before
    capsys.readouterr()
    assert main(["pack", str(tmp_path / "p"), "--run", str(levels[0]), "5", "r0"]) == 2
    assert "already lists other runs" in capsys.readouterr().err
    assert (tmp_path / "p" / "pack.json").read_bytes() == before
    assert main(["pack", str(tmp_path / "p"), "--run", str(levels[0]), "5", "r0",
                 "--force"]) == 0
    assert [r["seed"] for r in read_pack(str(tmp_path / "p"))] == [5]
