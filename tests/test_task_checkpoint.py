"""The systematicity task's checkpoint record (grammar, dictionary hash), its clear error when
a checkpoint meets data binarized with another dictionary, and its training progress line."""

import hashlib
import os
import re

import pytest
import torch

import fairseq_entropy
from fairseq_entropy.scan.dictionary import dictionary_words
from fairseq_entropy.scan.grammar import Grammar
from fairseq_entropy.progress import TrainingProgress

from _toy import run_module, write_grammar_level  # noqa: E402

USER_DIR = os.path.dirname(fairseq_entropy.__file__)
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory):
    """A tiny scan_transformer trained 10 updates on paper-grammar data (40 commands, batch 8:
    5 updates per epoch, so the run is exactly 2 epochs), with padding-aware random batches
    (pools of 2 batches)."""
    tmp = tmp_path_factory.mktemp("mismatch")
    data = write_grammar_level(tmp, Grammar.paper(), 40)[0]
    res = run_module("fairseq_cli.train", data, "--user-dir", USER_DIR, "--task", "systematicity",
                  "--source-lang", "in", "--target-lang", "out", "--arch", "scan_transformer_paper",
                  "--embed-dim", "16", "--encoder-layers", "1", "--decoder-layers", "1",
                  "--criterion", "cross_entropy", "--optimizer", "adam", "--lr", "1e-3",
                  "--batch-size", "8", "--max-update", "10", "--eval-seq-acc",
                  "--random-batches", "--batch-pool", "2",
                  "--progress-interval", "1e-9", "--save-dir", tmp / "ck",
                  "--no-epoch-checkpoints", "--cpu", "--num-workers", "0",
                  "--log-format", "simple", "--seed", "1", cwd=tmp)
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp, data, res.stdout + res.stderr


def test_batch_pool_without_random_batches_is_refused_with_the_fix(tmp_path):
    data = write_grammar_level(tmp_path, Grammar.paper(), 16)[0]
    res = run_module("fairseq_cli.train", data, "--user-dir", USER_DIR, "--task", "systematicity",
                  "--source-lang", "in", "--target-lang", "out", "--arch", "scan_transformer_paper",
                  "--embed-dim", "16", "--encoder-layers", "1", "--decoder-layers", "1",
                  "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8", "--max-update", "1",
                  "--batch-pool", "4", "--save-dir", tmp_path / "ck", "--cpu",
                  "--num-workers", "0", cwd=tmp_path)
    assert res.returncode != 0
    assert "--batch-pool 4 needs a positive pool size, --random-batches and --batch-size" \
        in res.stderr and "Fix: add --random-batches" in res.stderr
    assert not (tmp_path / "ck" / "checkpoint_last.pt").exists()


def expected_hash(words):
    h = hashlib.sha256()
    for _ in ("source", "target"):
        h.update("\n".join(SPECIALS + words).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def test_checkpoint_records_grammar_and_dictionary_hash(paper_run):
    tmp, _, _ = paper_run
    state = torch.load(tmp / "ck" / "checkpoint_last.pt", weights_only=True)
    words = dictionary_words(Grammar.paper())
    assert state["cfg"]["task"]["dictionary_grammar"] == "paper"
    assert state["cfg"]["task"]["dictionary_hash"] == expected_hash(words)
    assert state["task_state"]["dictionaries"] == {
        "grammar": "paper", "hash": expected_hash(words),
        "source_size": 4 + len(words), "target_size": 4 + len(words)}


def generate(tmp, data):
    return run_module("fairseq_cli.generate", data, "--user-dir", USER_DIR, "--task",
                   "systematicity", "--source-lang", "in", "--target-lang", "out", "--path",
                   tmp / "ck" / "checkpoint_last.pt", "--gen-subset", "test", "--beam", "1",
                   "--max-len-a", "0", "--max-len-b", "20", "--batch-size", "64",
                   "--required-batch-size-multiple", "1", "--cpu", cwd=tmp)


def test_decoding_data_of_the_same_grammar_works(paper_run):
    tmp, data, _ = paper_run
    res = generate(tmp, data)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("\nH-") == 40


def test_decoding_data_of_another_grammar_names_both_dictionaries_and_the_fix(paper_run):
    tmp, _, _ = paper_run
    scan_data = write_grammar_level(tmp, Grammar.scan(), 20)[0]
    res = generate(tmp, scan_data)
    assert res.returncode != 0
    paper_size = 4 + len(dictionary_words(Grammar.paper()))
    scan_size = 4 + len(dictionary_words(Grammar.scan()))
    assert paper_size != scan_size
    err = res.stderr
    assert "DictionaryMismatchError" in err and "size mismatch" not in err
    assert (f"trained on data with the paper grammar's dictionary ({paper_size} source / "
            f"{paper_size} target symbols") in err
    assert f"but {scan_data} uses the scan grammar's dictionary ({scan_size} / {scan_size}" in err
    assert "Fix: re-binarize the data with --grammar paper" in err


def test_training_logs_progress_with_epochs_updates_and_last_seq_acc(paper_run):
    _, _, log = paper_run
    lines = re.findall(r"progress: epoch (\d+)/(\S+) \| update (\d+)/(\S+) \| (\d+) s elapsed "
                       r"\| (\S+) s left \| last valid seq_acc (\S+)", log)
    assert lines, log[-2000:]
    # 40 commands / batch 8 = 5 updates per epoch; --max-update 10 -> 2 epochs (estimated from
    # the data in epoch 1, measured from epoch 1 in epoch 2)
    assert {(e, n, total) for e, n, _, total, *_ in lines} == {("1", "2", "10"),
                                                               ("2", "2", "10")}
    updates = [int(u) for _, _, u, *_ in lines]
    assert updates == sorted(updates) and updates[-1] == 9
    valid = re.findall(r"valid on 'valid' subset .*?seq_acc ([0-9.]+)", log)
    assert valid  # the epoch-2 lines report the epoch-1 validation
    epoch2 = [acc for e, *_, acc in lines if e == "2"]
    assert epoch2 and all(float(a) == pytest.approx(float(valid[0]), abs=1e-4) for a in epoch2)
    assert all(acc == "n/a" for e, *_, acc in lines if e == "1")


def test_progress_line_from_a_fake_clock():
    now = [0.0]
    p = TrainingProgress(30, max_update=100, max_epoch=0, updates_per_epoch=10,
                         clock=lambda: now[0])
    assert p.step(0) is None                      # starts the clock
    now[0] = 4.0
    assert p.step(2) is None                      # 4 s < FIRST_LINE_S (5 s) since the start
    now[0] = 5.0
    # the first line after 5 s, not the interval's 30: 4 updates in 5 s, 96 left -> 120 s
    assert p.step(4) == ("progress: epoch 1/10 | update 4/100 | 5 s elapsed | ~120 s left "
                         "| last valid seq_acc n/a")
    now[0] = 34.0
    assert p.step(10) is None                     # 29 s < 30 s since the first line
    now[0] = 35.0
    p.seq_acc = 0.5
    # 20 updates in 35 s, 80 left -> 80 * 35 / 20 = 140 s
    assert p.step(20) == ("progress: epoch 1/10 | update 20/100 | 35 s elapsed | ~140 s left "
                          "| last valid seq_acc 0.5000")
    now[0] = 44.0
    assert p.step(25) is None                     # 9 s since the last line
    p.begin_epoch(2, 30)                          # measured: 30 updates in epoch 1
    assert p.updates_per_epoch == 30 and p.total_updates() == 100
    p.max_epoch = 2                               # 2 epochs x 30 < 100 updates
    assert p.total_updates() == 60
