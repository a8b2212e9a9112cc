"""The lm format through the command lines: ``binarize --format lm`` writes fairseq's
language-modeling layout (stock ``transformer_lm`` trains on it), the systematicity_lm task
trains, ``fairseq-generate`` decodes every command from its prompt, ``fairseq-interactive``
answers a raw command, and a checkpoint meeting data of another dictionary or format stops
with the pair task's clear error."""

import os

import pytest
import torch

import fairseq_entropy
from fairseq_entropy.analysis.scoring import read_generate_output, split_commands
from fairseq_entropy.data.dictionary import DictionaryMismatchError
from fairseq_entropy.scan.databin import read_mmap_sequences
from fairseq_entropy.scan.dictionary import dictionary_words
from fairseq_entropy.scan.grammar import Grammar
from fairseq_entropy.scan.lm_format import data_format
from fairseq_entropy.scan.preprocess import preprocess_processes

from _toy import run_module, write_grammar_level  # noqa: E402

USER_DIR = os.path.dirname(fairseq_entropy.__file__)


@pytest.fixture(scope="module", autouse=True)
def preprocess_worker():
    """One fairseq-preprocess worker process for every binarization of the module (fairseq
    imported once)."""
    with preprocess_processes(1):
        yield


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory, preprocess_worker):
    """A tiny scan_transformer_lm trained 4 updates by the systematicity_lm task on 24
    paper-grammar commands in the lm format."""
    tmp = tmp_path_factory.mktemp("lm")
    data, examples = write_grammar_level(tmp, Grammar.paper(), 24, "lm")
    res = run_module("fairseq_cli.train", data, "--user-dir", USER_DIR, "--task",
                  "systematicity_lm", "--arch", "scan_transformer_lm", "--embed-dim", "16",
                  "--decoder-layers", "1", "--criterion", "label_smoothed_cross_entropy",
                  "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8",
                  "--max-update", "4", "--eval-seq-acc", "--eval-seq-acc-max-len-b", "8",
                  "--random-batches", "--progress-interval", "1e-9",
                  "--save-dir", tmp / "ck", "--no-epoch-checkpoints",
                  "--cpu", "--num-workers", "0", "--seed", "1", cwd=tmp)
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp, data, examples, res.stdout + res.stderr


def test_lm_format_is_fairseqs_language_modeling_layout(lm_run):
    _, data, examples, _ = lm_run
    assert sorted(p.name for p in data.iterdir() if p.suffix in (".bin", ".idx", ".txt")) == [
        "dict.txt", "test.bin", "test.idx", "train.bin", "train.idx", "valid.bin", "valid.idx"]
    assert data_format(data) == "lm"
    words = ["<s>", "<pad>", "</s>", "<unk>"] + [
        line.split()[0] for line in (data / "dict.txt").read_text().splitlines()]
    assert words[4:] == dictionary_words(Grammar.paper()) + ["<sep>"]
    lines = [" ".join(words[i] for i in seq) for seq in read_mmap_sequences(data / "test")]
    assert lines == [f"{e.command} <sep> {e.actions} </s>" for e in examples]
    assert split_commands(data, "test") == [e.command for e in examples]


def test_stock_transformer_lm_trains_on_the_lm_format(lm_run):
    tmp, data, _, _ = lm_run
    # --user-dir only gives numpy 2 the numpy.compat.long that fairseq's TokenBlockDataset reads
    res = run_module("fairseq_cli.train", data, "--user-dir", USER_DIR, "--task",
                  "language_modeling", "--sample-break-mode", "eos", "--tokens-per-sample", "64",
                  "--arch", "transformer_lm", "--decoder-layers", "1", "--decoder-embed-dim",
                  "16", "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads", "2",
                  "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8", "--max-update",
                  "3", "--save-dir", tmp / "stock", "--no-save", "--cpu", "--num-workers", "0",
                  cwd=tmp)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "num_updates 3" in res.stdout + res.stderr


def test_generate_decodes_each_command_from_its_prompt(lm_run):
    tmp, data, examples, log = lm_run
    assert "seq_acc" in log and "progress: epoch" in log
    res = run_module("fairseq_cli.generate", data, "--user-dir", USER_DIR, "--task",
                  "systematicity_lm", "--path", tmp / "ck" / "checkpoint_last.pt",
                  "--gen-subset", "test", "--beam", "1", "--max-len-a", "0", "--max-len-b", "6",
                  "--batch-size", "5", "--required-batch-size-multiple", "1", "--cpu", cwd=tmp)
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp / "generate.txt"
    out.write_text(res.stdout)
    samples = read_generate_output(out)
    assert sorted(samples) == list(range(len(examples)))
    for sid, s in samples.items():
        assert (s["S"], s["T"]) == (examples[sid].command, examples[sid].actions)
        assert 1 <= len(s["H"].split()) <= 6     # at most 6 tokens before </s>
        assert "<sep>" not in s["H"]


def test_interactive_answers_a_raw_command(lm_run):
    tmp, data, _, _ = lm_run
    res = run_module("fairseq_cli.interactive", data, "--user-dir", USER_DIR, "--task",
                  "systematicity_lm", "--path", tmp / "ck" / "checkpoint_last.pt", "--beam", "1",
                  "--max-len-b", "4", "--cpu", cwd=tmp, stdin="jump twice and walk\n")
    assert res.returncode == 0, res.stderr[-3000:]
    lines = dict(line.split("\t", 1) for line in res.stdout.splitlines() if "\t" in line)
    assert lines["S-0"] == "jump twice and walk"
    assert 1 <= len(lines["H-0"].split("\t")[1].split()) <= 4


def lm_task(data):
    from fairseq_entropy.tasks.systematicity_lm import SystematicityLmConfig, SystematicityLmTask
    return SystematicityLmTask.setup_task(SystematicityLmConfig(data=str(data)))


def test_a_checkpoint_on_data_of_another_grammar_or_format_stops_with_the_fix(lm_run):
    tmp, data, _, _ = lm_run
    state = torch.load(tmp / "ck" / "checkpoint_last.pt", weights_only=False)["task_state"]
    assert state["dictionaries"]["format"] == "lm"
    assert state["dictionaries"]["grammar"] == "paper"
    lm_task(data).load_state_dict(state)                      # its own data: no error
    scan_data, _ = write_grammar_level(tmp, Grammar.scan(), 6, "lm")
    with pytest.raises(DictionaryMismatchError) as e:
        lm_task(scan_data).load_state_dict(state)
    msg = str(e.value)
    size = 4 + len(dictionary_words(Grammar.paper())) + 1
    assert f"trained on data with the paper grammar's dictionary ({size} source" in msg
    assert "Fix: re-binarize the data with --grammar paper" in msg
    # the pair task on pair data, with the lm checkpoint
    from fairseq_entropy.tasks.systematicity import SystematicityConfig, SystematicityTask
    pairs, _ = write_grammar_level(tmp, Grammar.paper(), 6, "pairs")
    task = SystematicityTask.setup_task(SystematicityConfig(data=str(pairs), source_lang="in",
                                                            target_lang="out"))
    with pytest.raises(DictionaryMismatchError) as e:
        task.load_state_dict(state)
    assert "trained on lm-format data (task systematicity_lm)" in str(e.value)
    assert "--format lm" in str(e.value)


def test_the_lm_task_refuses_pair_data_with_the_fix(tmp_path):
    from fairseq_entropy.errors import UserError
    pairs, _ = write_grammar_level(tmp_path, Grammar.paper(), 6, "pairs")
    with pytest.raises(UserError, match="binarize --format lm"):
        lm_task(pairs)


def test_a_generated_sep_stays_in_the_hypothesis_and_is_scored_wrong(lm_run, tmp_path):
    """fairseq-generate prints S- lines with the task's source dictionary and H- lines with
    its target dictionary: the source of a line is its command (cut at <sep>), while a
    hypothesis that holds a generated <sep> is printed whole, so it never equals its
    reference."""
    from fairseq_entropy.analysis.scoring import score_generate_output
    _, data, examples, _ = lm_run
    task = lm_task(data)
    src, tgt = task.source_dictionary, task.target_dictionary
    e = examples[0]
    line = src.encode_line(f"{e.command} <sep> {e.actions}", add_if_not_exist=False)
    assert src.string(line) == e.command
    assert tgt.string(line) == f"{e.command} <sep> {e.actions}"
    first = e.actions.split()[0]
    hyp = tgt.encode_line(f"{first} <sep> {first}", add_if_not_exist=False)
    assert tgt.string(hyp) == f"{first} <sep> {first}"
    assert len(tgt) == len(src) and tgt.indices == src.indices
    out = tmp_path / "generate.txt"
    out.write_text(f"S-0\t{e.command}\nT-0\t{first}\nH-0\t-0.1\t{tgt.string(hyp)}\n"
                   f"S-1\t{e.command}\nT-1\t{first}\nH-1\t-0.1\t{first}\n")
    rows, summary = score_generate_output(out)
    assert [r.correct for r in rows] == [False, True]
    assert summary["correct"] == 1
