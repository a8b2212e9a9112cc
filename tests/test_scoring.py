import argparse
import csv
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch

from fairseq_entropy.analysis.checkpoint_labels import label_of_name
from fairseq_entropy.analysis.columns import ScoreError
from fairseq_entropy.analysis.paper import paper_curve
from fairseq_entropy.analysis.scoring import read_generate_output, score_generate_output
from fairseq_entropy.analysis.statistics import spearman, summarize
from fairseq_entropy.cli import main as cli

REPO = Path(__file__).resolve().parents[1]

GEN = """\
2026-01-01 | INFO | fairseq_cli.generate | loading
S-2\tjump after walk
T-2\tWALK JUMP
H-2\t-0.1\tWALK JUMP
D-2\t-0.1\tWALK JUMP
P-2\t-0.1 -0.1 -0.1
S-0\tjump and walk
T-0\tJUMP WALK
H-0\t-0.5\tWALK WALK
D-0\t-0.5\tWALK WALK
P-0\t-0.2 -0.2 -0.1
S-1\tjump twice and jump
T-1\tJUMP JUMP JUMP
H-1\t-0.2\tJUMP JUMP JUMP
D-1\t-0.2\tJUMP JUMP JUMP
P-1\t-0.1 -0.1 -0.1 -0.1
S-3\tlook after jump left
T-3\tLTURN JUMP LOOK
H-3\t-0.3\tLTURN JUMP LOOK
D-3\t-0.3\tLTURN JUMP LOOK
P-3\t-0.1 -0.1 -0.1 -0.1
Generate test with beam=1: BLEU4 = 1.0
"""


def test_lines_are_matched_by_id_not_order(tmp_path):
    p = tmp_path / "gen.txt"
    p.write_text(GEN)
    samples = read_generate_output(p)
    assert samples[0] == {"S": "jump and walk", "T": "JUMP WALK", "H": "WALK WALK"}
    rows, summary = score_generate_output(p)
    assert [r.correct for r in rows] == [False, True, True, True]
    assert summary["accuracy"] == 0.75 and summary["n"] == 4
    assert summary["by_conjunction"]["and"] == {"accuracy": 0.5, "n": 2}
    assert summary["by_conjunction"]["after"] == {"accuracy": 1.0, "n": 2}
    # same verb in both slots: only "jump twice and jump"
    assert summary["by_shared_verb"]["same_verb"] == {"accuracy": 1.0, "n": 1}
    assert summary["by_shared_verb"]["different_verbs"]["n"] == 3


def test_missing_reference_is_an_error(tmp_path):
    p = tmp_path / "gen.txt"
    p.write_text("S-0\twalk\nH-0\t-0.1\tWALK\n")
    with pytest.raises(ScoreError, match="sample 0 has no T- line"):
        read_generate_output(p)
    p.write_text("nothing here\n")
    with pytest.raises(ScoreError, match="no S-/T-/H- lines"):
        read_generate_output(p)


def test_two_decodes_in_one_file_are_refused_and_nbest_is_not(tmp_path):
    p = tmp_path / "gen.txt"
    head, _, _ = GEN.partition("Generate test")
    n = head.count("\n")
    p.write_text(head + head)  # a decode concatenated with another: every sample again
    with pytest.raises(ScoreError, match=rf"gen.txt:{n + 2}: S-2 again: sample 2 was decoded "
                                         r"before in this file .* Fix: score the output of one"):
        read_generate_output(p)
    p.write_text(head + "H-0\t-0.1\tJUMP WALK\n")  # a stray, conflicting hypothesis of 0
    with pytest.raises(ScoreError, match=rf"gen.txt:{n + 1}: H-0 again: sample 0"):
        read_generate_output(p)
    # --nbest 2: each sample's hypotheses follow it, the first is the best and is scored
    p.write_text("S-0\tjump\nT-0\tJUMP\nH-0\t-0.1\tJUMP\nD-0\t-0.1\tJUMP\nP-0\t-0.1\n"
                 "H-0\t-0.9\tWALK\nD-0\t-0.9\tWALK\nP-0\t-0.9\n"
                 "S-1\twalk\nT-1\tWALK\nH-1\t-0.2\tWALK\nD-1\t-0.2\tWALK\nP-1\t-0.2\n")
    assert read_generate_output(p) == {0: {"S": "jump", "T": "JUMP", "H": "JUMP"},
                                       1: {"S": "walk", "T": "WALK", "H": "WALK"}}


def test_summary_and_spearman():
    rows = [{"experiment": "exp1", "preset": "p", "model": "m", "n_train": 6000,
             "checkpoint": "last", "level": f"l{h}", "entropy_bits": h, "accuracy": a, "seed": s}
            for h, accs in ((0.0, (0.0, 0.1)), (1.0, (0.4, 0.6)), (2.0, (0.9, 0.9)),
                            (3.0, (1.0, 0.98)))
            for s, a in enumerate(accs)]
    summ = summarize(rows)
    assert [round(r["mean"], 6) for r in summ] == [0.05, 0.5, 0.9, 0.99]
    assert summ[1]["std"] == pytest.approx(0.1414213562, rel=1e-6)  # sample std of 0.4, 0.6
    assert summ[2]["std"] == 0.0 and summ[0]["n"] == 2
    assert spearman(summ)[("exp1", "p", 6000, "last", "unknown")] == pytest.approx(1.0)


#: commands of GEN by sample id
GEN_SOURCES = ["jump and walk", "jump twice and jump", "jump after walk", "look after jump left"]
GEN_TARGETS = ["JUMP WALK", "JUMP JUMP JUMP", "WALK JUMP", "LTURN JUMP LOOK"]


def make_level(root, test_sources=GEN_SOURCES, test_targets=GEN_TARGETS, **manifest):
    """A raw level directory whose test split is ``test_sources``, with a manifest."""
    root.mkdir(parents=True)
    (root / "test.in").write_text("".join(c + "\n" for c in test_sources))
    (root / "test.out").write_text("".join(a + "\n" for a in test_targets))
    (root / "valid.in").write_text("walk\nrun\n")
    (root / "valid.out").write_text("WALK\nRUN\n")
    info = {"experiment": "exp1", "level": "entropy_3.0", "entropy_bits": 2.9999,
            "target_entropy_bits": 3.0, "grammar": "paper", "seed": 4,
            "sizes": {"train": 10, "valid": 2, "test": len(test_sources)}}
    info.update(manifest)
    (root / "manifest.json").write_text(json.dumps(info))
    return root


def score(gen, out, level, *extra, preset="exp1_transformer_sinusoidal"):
    """``fairseq-entropy score`` of a hand-made decode: no checkpoint and no generate log
    exist, so the data, preset and seed are taken as given (``--unverified``), and a decode
    whose name gives no checkpoint label is labelled ``--checkpoint last``."""
    label = [] if label_of_name(gen) else ["--checkpoint", "last"]
    argv = ["score", str(gen), "--out", str(out), "--data", str(level), "--unverified",
            *label, *extra]
    if preset:
        argv += ["--preset", preset]
    return cli(argv)


def test_score_and_aggregate_cli(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN)
    level = make_level(tmp_path / "level")
    run = tmp_path / "runs" / "seed1"
    assert score(gen, run, level, "--seed", "1") == 0
    rec = json.loads((run / "score.json").read_text())
    assert rec["accuracy"] == 0.75 and rec["level"] == "entropy_3.0" and rec["seed"] == 1
    # provenance: preset and its model, data seed, N, grammar, split, checkpoint, manifest hash
    assert rec["preset"] == "exp1_transformer_sinusoidal"
    assert rec["model"] == "transformer_sinusoidal"
    assert rec["data_seed"] == 4 and rec["n_train"] == 10 and rec["grammar"] == "paper"
    assert rec["split"] == "test" and rec["checkpoint"] == "last"
    assert rec["data_manifest_sha256"] == hashlib.sha256(
        (level / "manifest.json").read_bytes()).hexdigest()
    assert len((run / "examples.tsv").read_text().splitlines()) == 5
    out = tmp_path / "results"
    capsys.readouterr()
    assert cli(["aggregate", str(tmp_path / "runs"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "agreement with the paper" not in printed  # no paper value at N=10
    # every file written is named, and every file named was written
    named = [ln.split(None, 1)[1] for ln in printed.splitlines()
             if ln.split(":", 1)[0] in ("results", "summary", "curves", "figure", "plot",
                                        "report")]
    assert sorted(Path(p).name for p in named) == sorted(p.name for p in out.iterdir())
    rows = list(csv.DictReader(open(out / "results.tsv"), delimiter="\t"))
    assert rows == [{"experiment": "exp1", "preset": "exp1_transformer_sinusoidal",
                     "model": "transformer_sinusoidal", "n_train": "10",
                     "level": "entropy_3.0", "entropy_bits": "2.999900", "checkpoint": "last",
                     "seed": "1", "data_seed": "4", "accuracy": "0.750000",
                     # no checkpoint (--unverified): no schedule was recorded; the preset's
                     # own schedule is 24 epochs of ceil(10 / 32) = 1 update
                     "schedule": "unknown", "updates": "", "epochs": "",
                     "preset_max_update": "24", "model_family": "encoder-decoder",
                     "preset_config": "",
                     # by hand: 7 of the 8 clauses match (sample 0's jump clause does not);
                     # sample 0 is wrong in the restricted verb's clause only; no output has
                     # 4 tokens, so corpus BLEU has no 4-gram match
                     "clause_accuracy": "0.875000", "correct_except_restricted_clause":
                     "0.250000", "chrf": rows[0]["chrf"], "bleu": "0.000000",
                     # exact match per conjunction: "jump and walk" is the one miss
                     "accuracy_and": "0.500000", "accuracy_after": "1.000000",
                     # "jump twice and jump" is the one command with a verb twice (right);
                     # the miss is among the other three
                     "accuracy_same_verb": "1.000000", "accuracy_different_verbs": "0.666667"}]
    assert 80 < float(rows[0]["chrf"]) < 100
    assert (out / "accuracy_vs_entropy.png").read_bytes()[:4] == b"\x89PNG"
    summary = list(csv.DictReader(open(out / "summary.tsv"), delimiter="\t"))
    assert [(r["mean"], r["clause_accuracy"], r["correct_except_restricted_clause"],
             r["accuracy_and"], r["accuracy_after"], r["accuracy_same_verb"],
             r["accuracy_different_verbs"]) for r in summary] == [
        ("0.750000", "0.875000", "0.250000", "0.500000", "1.000000", "1.000000", "0.666667")]
    # a second aggregate into the same --out: refused without --force, nothing touched
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "fig_exp2.png").write_bytes(b"a figure of a curve no longer aggregated")
    (out / "fit_addprim_jump.png").write_bytes(b"predict --plot's figure")
    assert cli(["aggregate", str(tmp_path / "runs"), "--out", str(out)]) == 2
    assert f"--out {out} holds an aggregate already" in capsys.readouterr().err
    assert (out / "results.tsv").read_bytes() == before["results.tsv"]
    # --force replaces it: the earlier aggregate's stale figure goes, the other file stays
    assert cli(["aggregate", str(tmp_path / "runs"), "--out", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*before, "fit_addprim_jump.png"])
    assert (out / "results.tsv").read_bytes() == before["results.tsv"]


def test_score_records_graded_metrics(tmp_path):
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN)
    run = tmp_path / "runs" / "seed1"
    assert score(gen, run, make_level(tmp_path / "level"), "--seed", "1") == 0
    graded = json.loads((run / "score.json").read_text())["graded"]
    # by hand: 4 two-clause commands, 8 clauses; only "jump and walk" -> "WALK WALK" misses one
    # clause, the first (jump, the held-out slot of Experiment 1), and gets the second right
    assert graded["n_clauses"] == 8
    assert graded["clause_accuracy"] == pytest.approx(7 / 8)
    assert graded["correct_except_restricted_clause"] == pytest.approx(1 / 4)
    assert 0 < graded["chrf"] < 100
    # no output has four tokens, so there is no 4-gram to match and corpus BLEU-4 is 0
    assert graded["bleu"] == 0.0


def test_score_refuses_a_decode_of_other_data(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN)
    # same number of test commands (4), different commands from id 2 on
    other = GEN_SOURCES[:2] + ["walk after jump", "look after jump left"]
    level = make_level(tmp_path / "level", other, GEN_TARGETS)
    assert score(gen, tmp_path / "s", level, "--seed", "1") == 2
    err = capsys.readouterr().err
    assert ("sample 2 is 'jump after walk' but command 2 of the test split of "
            f"{level} is 'walk after jump'") in err
    assert "Fix: pass the --data level and --split that were decoded" in err
    assert not (tmp_path / "s").exists()


def test_score_refuses_output_missing_samples(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN)
    level = make_level(tmp_path / "level", GEN_SOURCES + ["walk", "run"],
                       GEN_TARGETS + ["WALK", "RUN"])
    assert score(gen, tmp_path / "s", level, "--seed", "1") == 2
    err = capsys.readouterr().err
    assert "holds 4 samples but the test split has 6" in err and "--split valid" in err
    assert not (tmp_path / "s").exists()
    # a decode of another split than the one named
    assert score(gen, tmp_path / "s", level, "--seed", "1", "--split", "valid") == 2
    assert "holds 4 samples but the valid split has 2" in capsys.readouterr().err
    assert score(gen, tmp_path / "s", level, "--seed", "1", "--split", "dev") == 2
    assert f"{level} holds no dev split" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_score_refuses_ids_outside_the_split(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN.replace("-3\t", "-7\t"))  # 4 samples, ids 0, 1, 2, 7
    level = make_level(tmp_path / "level")
    assert score(gen, tmp_path / "s", level, "--seed", "1") == 2
    assert "sample ids run up to 7 but the test split has ids 0..3" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_score_does_not_replace_a_score_without_force(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN)
    level = make_level(tmp_path / "level")
    assert score(gen, tmp_path / "s", level, "--seed", "1") == 0
    before = (tmp_path / "s" / "score.json").read_text()
    assert score(gen, tmp_path / "s", level, "--seed", "2") == 2
    assert "score.json already exists. Fix: pass --force" in capsys.readouterr().err
    assert (tmp_path / "s" / "score.json").read_text() == before
    assert score(gen, tmp_path / "s", level, "--seed", "2", "--force") == 0
    assert json.loads((tmp_path / "s" / "score.json").read_text())["seed"] == 2


def test_score_files_respect_the_umask(tmp_path):
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN)
    level = make_level(tmp_path / "level")
    old = os.umask(0o022)
    try:
        assert score(gen, tmp_path / "s", level, "--seed", "1") == 0
    finally:
        os.umask(old)
    for name in ("score.json", "examples.tsv"):
        assert stat.S_IMODE((tmp_path / "s" / name).stat().st_mode) == 0o644


def fake_checkpoint(path, arch, seed, data):
    """The parts of a fairseq checkpoint that score reads: cfg.model (an argparse.Namespace,
    as fairseq stores it), cfg.common.seed and cfg.task.data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"args": None, "cfg": {"model": argparse.Namespace(arch=arch, _name=arch),
                                      "common": {"seed": seed}, "task": {"data": str(data)}},
                "model": {}}, path)


def test_score_needs_a_known_preset_and_seed(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN)
    level = make_level(tmp_path / "level")
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--preset", "exp1_fconv",
                "--seed", "1", "--checkpoint", "last"]) == 2
    err = capsys.readouterr().err
    assert "the decoded data is unknown (no --data; no checkpoint at " in err
    assert "Fix: pass --data LEVEL_DIR" in err
    # --data given but not a directory: said as such, not "no --data"
    assert score(gen, tmp_path / "s", tmp_path / "nope") == 2
    assert f"--data {tmp_path / 'nope'}: no directory. Fix: pass the binarized level " \
        "directory that was decoded" in capsys.readouterr().err
    assert score(gen, tmp_path / "s", level, preset=None) == 2
    err = capsys.readouterr().err
    assert "the preset is unknown (no --preset; no checkpoint at " in err
    assert "Fix: pass --preset NAME" in err
    assert score(gen, tmp_path / "s", level) == 2
    assert "the training seed is unknown (no --seed; no checkpoint" in capsys.readouterr().err
    assert score(gen, tmp_path / "s", level, "--seed", "1", preset="transformer") == 2
    assert "unknown preset 'transformer'" in capsys.readouterr().err
    assert score(gen, tmp_path / "s", level, "--seed", "1", "--model", "cnn") == 2
    assert "--model cnn contradicts preset" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_score_reads_seed_data_and_preset_from_the_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    gen = run / "generate-best.txt"
    run.mkdir()
    gen.write_text(GEN)
    level = make_level(tmp_path / "level", experiment="scan")
    fake_checkpoint(run / "checkpoints" / "checkpoint_best.pt", "equivariant_seq2seq_small", 7,
                    level)
    # no --data, --preset, --model or --seed: all come from checkpoints/checkpoint_best.pt
    assert cli(["score", str(gen), "--out", str(run / "best"), "--checkpoint", "best"]) == 0
    rec = json.loads((run / "best" / "score.json").read_text())
    assert rec["seed"] == 7 and rec["preset"] == "scan_equivariant"
    assert rec["model"] == "equivariant" and rec["checkpoint"] == "best"
    assert rec["data"] == str(level.resolve()) and rec["experiment"] == "scan"
    assert rec["checkpoint_path"] == str((run / "checkpoints" / "checkpoint_best.pt").resolve())
    # an architecture with several presets for the experiment cannot be guessed
    ckpt = tmp_path / "c.pt"
    fake_checkpoint(ckpt, "scan_transformer_paper", 3, level)
    level2 = make_level(tmp_path / "level2")  # exp1
    assert cli(["score", str(gen), "--out", str(tmp_path / "o"), "--path", str(ckpt),
                "--data", str(level2)]) == 2
    err = capsys.readouterr().err
    assert "candidates exp1_transformer_sinusoidal, exp1_transformer_sinusoidal_cpu" in err
    # options that contradict the checkpoint are refused
    assert score(gen, tmp_path / "o", level2, "--path", str(ckpt), "--seed", "4") == 2
    assert "--seed 4 contradicts" in capsys.readouterr().err
    assert score(gen, tmp_path / "o", level2, "--path", str(ckpt), preset="exp1_fconv") == 2
    assert "trained with --arch scan_transformer_paper, but preset exp1_fconv uses " \
        "fconv_scan_exp1" in capsys.readouterr().err
    assert score(gen, tmp_path / "o", level2, "--path", str(ckpt)) == 0
    rec = json.loads((tmp_path / "o" / "score.json").read_text())
    assert rec["seed"] == 3 and rec["preset"] == "exp1_transformer_sinusoidal"


def write_score_json(path, **fields):
    rec = {"experiment": "exp1", "preset": "exp1_transformer_sinusoidal",
           "model": "transformer_sinusoidal", "n_train": 6000, "level": "entropy_3.0",
           "entropy_bits": 3.0, "checkpoint": "last", "seed": 1, "data_seed": 1,
           "accuracy": 1.0}
    rec.update(fields)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))


def summary_rows(out):
    return list(csv.DictReader(open(out / "summary.tsv"), delimiter="\t"))


def test_aggregate_keeps_presets_and_sizes_apart(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_score_json(runs / "a/score.json", accuracy=0.5)
    write_score_json(runs / "b/score.json", preset="exp1_transformer_sinusoidal_cpu",
                     accuracy=0.25)
    write_score_json(runs / "c/score.json", n_train=3000, accuracy=0.75)
    write_score_json(runs / "d/score.json", experiment="exp2", preset="exp2_rnn_l1_h64",
                     model="rnn", n_train=6174, level="support_1", entropy_bits=0.0,
                     accuracy=0.1)
    write_score_json(runs / "e/score.json", experiment="exp2", preset="exp2_rnn_gru_l2_h64",
                     model="rnn", n_train=6174, level="support_1", entropy_bits=0.0,
                     accuracy=0.3)
    write_score_json(runs / "f/score.json", seed=2, accuracy=0.7)  # a second seed of a
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "r")]) == 0
    got = {(r["preset"], r["n_train"]): (r["mean"], r["n"])
           for r in summary_rows(tmp_path / "r")}
    assert got == {("exp1_transformer_sinusoidal", "6000"): ("0.600000", "2"),
                   ("exp1_transformer_sinusoidal_cpu", "6000"): ("0.250000", "1"),
                   ("exp1_transformer_sinusoidal", "3000"): ("0.750000", "1"),
                   ("exp2_rnn_l1_h64", "6174"): ("0.100000", "1"),
                   ("exp2_rnn_gru_l2_h64", "6174"): ("0.300000", "1")}


def test_aggregate_refuses_duplicates_unknown_labels_and_missing_provenance(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_score_json(runs / "a/score.json")
    write_score_json(runs / "copy/score.json", accuracy=0.9)
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert f"{runs / 'copy/score.json'} and {runs / 'a/score.json'} are both seed 1" in err
    (runs / "copy/score.json").unlink()
    write_score_json(runs / "typo/score.json", checkpoint="bets", seed=2)
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "r")]) == 2
    assert "unknown checkpoint label 'bets'" in capsys.readouterr().err
    write_score_json(runs / "typo/score.json", preset=None, seed=2)  # an old score.json
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "r")]) == 2
    assert f"{runs / 'typo/score.json'}: missing preset" in capsys.readouterr().err
    (runs / "typo/score.json").write_bytes(b'{"accuracy": 1.0,\n "seed": \xff}')
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "r")]) == 2
    assert f"{runs / 'typo/score.json'}:2: not valid UTF-8" in capsys.readouterr().err
    (runs / "typo/score.json").write_text('{"accuracy": 1.0,\n "seed": }')
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "r")]) == 2
    assert f"{runs / 'typo/score.json'}:2: invalid JSON" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_aggregate_reads_an_earlier_results_tsv(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_score_json(runs / "a/score.json", accuracy=0.5)
    write_score_json(runs / "b/score.json", level="entropy_1.0", entropy_bits=1.0,
                     accuracy=0.25)
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "old")]) == 0
    old = tmp_path / "old" / "results.tsv"
    # the round trip: the committed table alone aggregates to the same table
    assert cli(["aggregate", str(old), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "results.tsv").read_text() == old.read_text()
    # a new seed beside the committed table: 3-bit mean (0.5 + 0.7) / 2, 1-bit level kept
    write_score_json(tmp_path / "new/score.json", seed=2, accuracy=0.7)
    assert cli(["aggregate", str(old), str(tmp_path / "new"), "--out",
                str(tmp_path / "both")]) == 0
    got = {r["level"]: (r["mean"], r["n"]) for r in summary_rows(tmp_path / "both")}
    assert got == {"entropy_3.0": ("0.600000", "2"), "entropy_1.0": ("0.250000", "1")}
    # a seed that is in both the table and a run directory is refused, naming the line
    assert cli(["aggregate", str(old), str(runs / "a"), "--out", str(tmp_path / "dup")]) == 2
    err = capsys.readouterr().err
    assert f"{runs / 'a/score.json'} and {old}:" in err and "are both seed 1" in err
    # a table from elsewhere, or a damaged line, names the file and line
    lines = old.read_text().splitlines()
    bad = tmp_path / "bad.tsv"
    cells = lines[1].split("\t")
    cells[lines[0].split("\t").index("accuracy")] = "n/a"
    bad.write_text("\n".join([lines[0], "\t".join(cells)]) + "\n")
    assert cli(["aggregate", str(bad), "--out", str(tmp_path / "x")]) == 2
    assert f"{bad}:2: accuracy 'n/a' is not a number" in capsys.readouterr().err
    bad.write_text("experiment\tlevel\taccuracy\nexp1\tentropy_3.0\t0.5\n")
    assert cli(["aggregate", str(bad), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1: missing column(s) preset, model, n_train" in err
    assert "(a results.tsv of an older aggregate" in err and \
        "Fix: aggregate the run directories it was made from" in err
    bad.write_text("cell\tstatus\naccuracy\tdone\n")  # not a results table at all
    assert cli(["aggregate", str(bad), "--out", str(tmp_path / "x")]) == 2
    assert "Fix: pass a results.tsv written by fairseq-entropy aggregate" in \
        capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "dup").exists()


def paper_rows(experiment, model, size):
    rows = [line.split("\t") for line in
            (REPO / "fairseq_entropy/analysis/paper_results.tsv").read_text().splitlines()
            if line and not line.startswith("#")][1:]
    return {float(r[3]): float(r[4]) for r in rows
            if r[0] == experiment and r[1] == model and r[2] == size}


def test_paper_curve_matches_architecture_and_size():
    # the Experiment 2 Transformer presets are the paper's transformer_sinusoidal
    for model in ("transformer_exp2_l2", "transformer_exp2_l3"):
        ref = paper_curve("exp2", model, 6174)
        assert {float(r["entropy_bits"]): float(r["accuracy_mean"]) for r in ref} == \
            paper_rows("exp2", "transformer_sinusoidal", "support") != {}
    # Experiment 1 at N=3000 is the N=3000 curve, not the N=6000 one
    ref = paper_curve("exp1", "transformer_sinusoidal", 3000)
    assert {float(r["entropy_bits"]): float(r["accuracy_mean"]) for r in ref} == \
        paper_rows("exp1", "transformer_sinusoidal", "3000")
    assert paper_rows("exp1", "transformer_sinusoidal", "3000") != \
        paper_rows("exp1", "transformer_sinusoidal", "6000")
    assert paper_curve("exp1", "transformer_sinusoidal", 5000) == []
    assert paper_curve("exp1", "cnn", 6000) and paper_curve("exp1", "transformer_learned",
                                                            6000) == []


def test_score_names_the_line_of_a_latin1_output(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_bytes(GEN.replace("S-1\tjump twice", "S-1\tjump tw\xeece").encode("latin-1"))
    level = make_level(tmp_path / "level")
    assert score(gen, tmp_path / "s", level, "--seed", "1") == 2
    assert f"{gen}:12: not valid UTF-8 (byte 0xee at column 12)" in capsys.readouterr().err


def test_cut_off_output_is_an_error(tmp_path):
    p = tmp_path / "gen.txt"
    # killed in the middle of writing the last hypothesis (line 19: 1 log line, 3 x 5 sample
    # lines, S-3, T-3): no newline at the end
    cut = GEN[:GEN.index("H-3") + len("H-3\t-0.3\tLTURN JU")]
    p.write_text(cut)
    with pytest.raises(ScoreError, match=r"gen.txt:19: the last line is cut off"):
        read_generate_output(p)
    # killed right after a whole H- line, before its D- line
    p.write_text(GEN[:GEN.index("D-3")])
    with pytest.raises(ScoreError, match="sample 3 has an H- line but no D- line"):
        read_generate_output(p)


@pytest.mark.parametrize("line", ["H-2\tWALK JUMP", "H-2\tbest\tWALK JUMP"])
def test_an_h_line_without_its_score_is_an_error_not_an_empty_hypothesis(tmp_path, line):
    """Read as H-<id><TAB><score><TAB><hypothesis>, "H-2<TAB>WALK JUMP" would give sample 2 an
    empty hypothesis, scored wrong, although its hypothesis is right."""
    p = tmp_path / "gen.txt"
    p.write_text(GEN.replace("H-2\t-0.1\tWALK JUMP", line))
    with pytest.raises(ScoreError, match=r"gen.txt:4: H-2 is not H-<id><TAB><score><TAB>"
                                         r"<hypothesis>"):
        read_generate_output(p)
    p.write_text(GEN.replace("H-2\t-0.1\tWALK JUMP", "H-2\t-inf\t"))  # an empty hypothesis
    assert read_generate_output(p)[2]["H"] == ""


def test_missing_source_line_is_an_error(tmp_path):
    p = tmp_path / "gen.txt"
    p.write_text(GEN.replace("S-1\tjump twice and jump\n", ""))
    with pytest.raises(ScoreError, match="sample 1 has no S- line"):
        read_generate_output(p)


def test_agreement_lines_count_levels_inside_the_band():
    from fairseq_entropy.analysis.report import agreement_lines

    keys = ("experiment", "preset", "n_train", "checkpoint", "level", "mean", "paper_mean",
            "agree")
    cells = [dict(zip(keys, row)) for row in (
        ("exp1", "p", 6000, "last", "entropy_0.0", 0.01, 0.0, "yes"),
        ("exp1", "p", 6000, "last", "entropy_1.5", 0.143, 0.3224, "no"),
        ("exp1", "p", 6000, "last", "entropy_3.0", 0.97, 0.985, "yes"),
        ("exp1", "p", 10, "last", "entropy_3.0", 0.75, None, ""))]          # no paper value
    assert agreement_lines(cells) == [
        "agreement with the paper exp1 p N=6000 last: 2/3 levels inside max(2 std, 0.10); "
        "outside: entropy_1.5 (0.143 vs 0.322) (schedule unknown)"]


def test_data_variants_are_curves_of_their_own_without_paper_values(tmp_path, capsys):
    """Scores of another component class or of subword data are aggregated apart from the
    paper's setup (same experiment, preset, level and seed) and get no paper value."""
    from fairseq_entropy.analysis.provenance import data_variant

    assert data_variant({"experiment": "exp1"}) == ""
    assert data_variant({"component": "direction", "restricted_value": "left"}) == \
        "direction=left"
    assert data_variant({"subword": {"vocab_size": 48}}) == "spm48"
    assert data_variant({"component": "repetition", "restricted_value": "twice",
                         "subword": {"vocab_size": 23, "side": "source"}}) == \
        "repetition=twice+spm23-source"
    # the data's verbs, restricted verb, grammar and support order (Experiments 1 and 2)
    eight = ["walk", "run", "look", "jump", "sprint", "crawl", "squat", "lunge"]
    assert data_variant({"experiment": "exp1", "verbs": eight[::-1],
                         "restricted_verb": "jump", "grammar": "paper"}) == ""
    assert data_variant({"experiment": "exp1", "verbs": ["walk", "jump"],
                         "component": "direction", "restricted_value": "left"}) == \
        "verbs=walk-jump+direction=left"
    assert data_variant({"experiment": "exp1", "restricted_verb": "walk"}) == "verb=walk"
    assert data_variant({"experiment": "exp2", "restricted_verb": "lunge"}) == ""
    assert data_variant({"experiment": "exp2", "restricted_verb": "jump"}) == "verb=jump"
    assert data_variant({"experiment": "exp2", "support_order": eight}) == \
        "order=" + "-".join(eight)
    assert data_variant({"experiment": "exp1", "grammar": "scan"}) == "grammar=scan"
    # a SCAN-file level (its own experiment and grammar) and COGS are not variants
    assert data_variant({"experiment": "scan", "grammar": "scan",
                         "verbs": ["walk", "run", "look", "jump"]}) == ""
    assert data_variant({"experiment": "cogs"}) == ""
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN)
    level = make_level(tmp_path / "level", component="direction", restricted_value="left",
                       sizes={"train": 6000, "valid": 2, "test": 4})
    assert score(gen, tmp_path / "runs/dir", level, "--seed", "1") == 0
    assert json.loads((tmp_path / "runs/dir/score.json").read_text())["variant"] == \
        "direction=left"
    write_score_json(tmp_path / "runs/verb/score.json", accuracy=0.5)  # same key, verbs
    write_score_json(tmp_path / "runs/spm/score.json", variant="spm48", accuracy=0.25)
    out = tmp_path / "r"
    assert cli(["aggregate", str(tmp_path / "runs"), "--out", str(out)]) == 0
    got = {r["experiment"]: (r["mean"], r["paper_mean"], r["agree"]) for r in summary_rows(out)}
    assert got == {"exp1": ("0.500000", "1.000000", "no"),
                   "exp1+direction=left": ("0.750000", "nan", "n/a"),
                   "exp1+spm48": ("0.250000", "nan", "n/a")}
    assert {p.name for p in out.glob("fig_*.png")} == {
        "fig_exp1.png", "fig_exp1+direction=left.png", "fig_exp1+spm48.png"}
    assert "(direction=left)" in (out / "report.md").read_text()


def test_an_experiment_2_curve_holds_every_support_size(tmp_path, capsys):
    """Experiment 2's N grows with the support (k verbs, about 5866 commands each), so its
    levels are one curve per preset: one Spearman rho over the levels, one agreement line."""
    runs = tmp_path / "runs"
    for k, acc in ((1, 0.0), (2, 0.2), (4, 0.9)):
        write_score_json(runs / f"k{k}/score.json", experiment="exp2", preset="exp2_cnn_authors",
                         model="cnn_authors", n_train=5866 * k, level=f"support_{k}",
                         entropy_bits=float(k.bit_length() - 1), accuracy=acc)
    capsys.readouterr()
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "Spearman(entropy, accuracy) exp2 exp2_cnn_authors N=support last " \
        "[schedule unknown]: 1.000" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("agreement with the paper")]
    # paper: 0.00, 0.15 +- 0.05, 0.79 +- 0.14
    assert lines == ["agreement with the paper exp2 exp2_cnn_authors N=support last: 3/3 "
                     "levels inside max(2 std, 0.10) (schedule unknown)"]
    curves = list(csv.DictReader(open(tmp_path / "r" / "curves.tsv"), delimiter="\t"))
    assert [(c["experiment"], c["levels"]) for c in curves] == [("exp2", "3")]


def _exp2_schedule(updates, own, args):
    return {"max_update": updates, "updates": updates, "train_args_sha256": args * 8,
            "preset_max_update": own}


def test_an_experiment_2_curve_at_the_papers_per_level_schedule_is_one_curve(tmp_path, capsys):
    """The paper trains 64 - 8(k - 1) epochs at support size k: each level has its own
    updates and arguments hash, yet the levels trained at their preset's own schedule are one
    curve (one Spearman rho, one agreement line); a shortened run is a curve of its own, and
    two argument sets at the preset's updates on one level are refused."""
    runs = tmp_path / "runs"
    # the paper's schedule: 64 - 8(k - 1) epochs of ceil(5866 k / 32) batches (k = 4: 40 x 734)
    for k, acc, updates, args in ((1, 0.0, 11776, "a"), (2, 0.2, 20552, "b"),
                                  (4, 0.9, 29360, "c")):
        write_score_json(runs / f"k{k}/score.json", experiment="exp2", preset="exp2_cnn_authors",
                         model="cnn_authors", n_train=5866 * k, level=f"support_{k}",
                         entropy_bits=float(k.bit_length() - 1), accuracy=acc,
                         schedule=_exp2_schedule(updates, updates, args))
    write_score_json(runs / "short/score.json", experiment="exp2", preset="exp2_cnn_authors",
                     model="cnn_authors", n_train=5866 * 4, level="support_4", entropy_bits=2.0,
                     accuracy=0.1, schedule=_exp2_schedule(40, 29360, "d"))
    capsys.readouterr()
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "Spearman(entropy, accuracy) exp2 exp2_cnn_authors N=support last " \
        "[schedule preset's own per level]: 1.000" in out
    assert "[schedule max_update=40 args=dddddddd]: n/a" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("agreement with the paper")]
    assert "agreement with the paper exp2 exp2_cnn_authors N=support last: 3/3 levels inside " \
        "max(2 std, 0.10) (the preset's own schedule at each level (updates: support_1 " \
        "11776, support_2 20552, support_4 29360))" in lines
    curves = list(csv.DictReader(open(tmp_path / "r" / "curves.tsv"), delimiter="\t"))
    assert sorted((c["schedule"], c["levels"]) for c in curves) == [
        ("max_update=40 args=dddddddd", "1"), ("preset's own per level", "3")]
    # the same level at the preset's updates with other arguments (another learning rate)
    write_score_json(runs / "lr/score.json", experiment="exp2", preset="exp2_cnn_authors",
                     model="cnn_authors", n_train=5866 * 2, level="support_2", entropy_bits=1.0,
                     accuracy=0.3, schedule=_exp2_schedule(20552, 20552, "e"))
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err
    assert "both train support_2 of exp2_cnn_authors at the preset's own number of updates" in err
    assert "Fix: aggregate the runs of each argument set apart" in err


def test_levels_of_one_per_level_curve_trained_with_an_edited_preset_are_refused(tmp_path,
                                                                                  capsys):
    """Each level's score records the hash of its preset's arguments without the schedule
    (``preset_config``); one curve at the preset's own per-level schedule refuses two of
    them (the preset edited between levels), and a level without the record (an older
    score) is not compared."""
    runs = tmp_path / "runs"
    for k, updates, config in ((1, 11776, "11112222"), (2, 20552, None), (4, 29360, "33334444")):
        sched = {**_exp2_schedule(updates, updates, str(k)),
                 **({"preset_config_sha256": config * 8} if config else {})}
        write_score_json(runs / f"k{k}/score.json", experiment="exp2", preset="exp2_cnn_authors",
                         model="cnn_authors", n_train=5866 * k, level=f"support_{k}",
                         entropy_bits=float(k.bit_length() - 1), accuracy=0.1 * k,
                         schedule=sched)
    capsys.readouterr()
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "(support_4, preset arguments 33334444) and " in err
    assert "(support_1, 11112222) were trained with different arguments of preset " \
        "exp2_cnn_authors" in err and "Fix: re-train the levels of one argument set" in err
    assert not (tmp_path / "r").exists()
    # the same configuration at every level that records one: one curve; results.tsv keeps
    # the record, so a later aggregate of the committed table checks it again
    shutil.rmtree(runs / "k4")
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "ok")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "ok" / "results.tsv"), delimiter="\t"))
    assert sorted((r["level"], r["preset_config"]) for r in rows) == [
        ("support_1", "11112222"), ("support_2", "")]
    write_score_json(runs / "k4/score.json", experiment="exp2", preset="exp2_cnn_authors",
                     model="cnn_authors", n_train=5866 * 4, level="support_4", entropy_bits=2.0,
                     accuracy=0.4, schedule={**_exp2_schedule(29360, 29360, "4"),
                                             "preset_config_sha256": "5" * 64})
    assert cli(["aggregate", str(tmp_path / "ok" / "results.tsv"), str(runs / "k4"),
                "--out", str(tmp_path / "again")]) == 2
    assert "preset arguments 55555555" in capsys.readouterr().err
