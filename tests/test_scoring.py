import csv
import json

import pytest

from fairseq_entropy.cli import main as cli
from fairseq_entropy.analysis.scoring import (ScoreError, read_generate_output, score_generate_output,
                                     spearman, summarize)

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


def test_summary_and_spearman():
    rows = [{"experiment": "exp1", "model": "m", "checkpoint": "last", "level": f"l{h}",
             "entropy_bits": h, "accuracy": a, "seed": s}
            for h, accs in ((0.0, (0.0, 0.1)), (1.0, (0.4, 0.6)), (2.0, (0.9, 0.9)),
                            (3.0, (1.0, 0.98)))
            for s, a in enumerate(accs)]
    summ = summarize(rows)
    assert [round(r["mean"], 6) for r in summ] == [0.05, 0.5, 0.9, 0.99]
    assert summ[1]["std"] == pytest.approx(0.1414213562, rel=1e-6)  # sample std of 0.4, 0.6
    assert summ[2]["std"] == 0.0 and summ[0]["n"] == 2
    assert spearman(summ)[("exp1", "m", "last")] == pytest.approx(1.0)


def test_score_and_aggregate_cli(tmp_path):
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN)
    level = tmp_path / "level"
    level.mkdir()
    (level / "manifest.json").write_text(json.dumps(
        {"experiment": "exp1", "level": "entropy_3.0", "entropy_bits": 2.9999,
         "target_entropy_bits": 3.0, "sizes": {"train": 10, "valid": 2, "test": 4}}))
    run = tmp_path / "runs" / "seed1"
    assert cli(["score", str(gen), "--out", str(run), "--data", str(level),
                "--model", "transformer_sinusoidal", "--seed", "1"]) == 0
    rec = json.loads((run / "score.json").read_text())
    assert rec["accuracy"] == 0.75 and rec["level"] == "entropy_3.0" and rec["seed"] == 1
    assert len((run / "examples.tsv").read_text().splitlines()) == 5
    out = tmp_path / "results"
    assert cli(["aggregate", str(tmp_path / "runs"), "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out / "results.tsv"), delimiter="\t"))
    assert rows == [{"experiment": "exp1", "model": "transformer_sinusoidal", "seed": "1",
                     "level": "entropy_3.0", "entropy_bits": "2.999900",
                     "accuracy": "0.750000", "checkpoint": "last"}]
    assert (out / "accuracy_vs_entropy.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "summary.tsv").exists()


def test_score_refuses_output_missing_samples(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN)
    level = tmp_path / "level"
    level.mkdir()
    (level / "manifest.json").write_text(json.dumps(
        {"experiment": "exp1", "level": "entropy_3.0", "entropy_bits": 3.0,
         "sizes": {"train": 10, "valid": 2, "test": 6}}))
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--data", str(level)]) == 2
    err = capsys.readouterr().err
    assert "holds 4 samples but the test split has 6" in err and "--split valid" in err
    assert not (tmp_path / "s").exists()
    # a decode of another split than the one named
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--data", str(level),
                "--split", "valid"]) == 2
    assert "holds 4 samples but the valid split has 2" in capsys.readouterr().err
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--data", str(level),
                "--split", "dev"]) == 2
    assert "has no split 'dev'; it has test, train, valid" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_score_refuses_ids_outside_the_split(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text(GEN.replace("-3\t", "-7\t"))  # 4 samples, ids 0, 1, 2, 7
    level = tmp_path / "level"
    level.mkdir()
    (level / "manifest.json").write_text(json.dumps({"sizes": {"test": 4}}))
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--data", str(level)]) == 2
    assert "sample ids run up to 7 but the test split has ids 0..3" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


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


def test_missing_source_line_is_an_error(tmp_path):
    p = tmp_path / "gen.txt"
    p.write_text(GEN.replace("S-1\tjump twice and jump\n", ""))
    with pytest.raises(ScoreError, match="sample 1 has no S- line"):
        read_generate_output(p)
