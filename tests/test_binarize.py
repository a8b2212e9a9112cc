import pytest

from fairseq_entropy.scan.binarize import BinarizeError, check_vocabulary, dictionary_words
from fairseq_entropy.cli import main as cli
from fairseq_entropy.scan.grammar import Grammar


def test_dictionary_has_every_word_once():
    words = dictionary_words(Grammar.paper())
    assert len(words) == len(set(words)) == 8 + 8 + 10  # verbs, function words, actions
    scan = dictionary_words(Grammar.scan())
    assert "turn" in scan and "I_TURN_LEFT" in scan and "LTURN" not in scan


def test_unknown_token_is_refused_with_file_and_line(tmp_path):
    (tmp_path / "train.in").write_text("walk\njump twice\n")
    (tmp_path / "train.out").write_text("WALK\nI_JUMP I_JUMP\n")
    with pytest.raises(BinarizeError, match=r"train\.out:2: token 'I_JUMP'"):
        check_vocabulary(tmp_path / "train", Grammar.paper())


def test_scan_file_errors_name_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("IN: walk OUT: I_WALK\nIN: jump twice I_JUMP I_JUMP\n")
    assert cli(["binarize", "--train", str(bad), "--out", str(tmp_path / "bin")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: line has no 'OUT:'" in err
    assert not (tmp_path / "bin").exists()
    bad.write_text("IN: walk OUT: I_WALK\nIN: fly OUT: I_FLY\n")
    assert cli(["binarize", "--train", str(bad), "--out", str(tmp_path / "bin")]) == 2
    assert f"{bad}:2: unknown word 'fly'" in capsys.readouterr().err
    bad.write_text("IN: walk left OUT: I_WALK\n")
    assert cli(["binarize", "--train", str(bad), "--out", str(tmp_path / "bin")]) == 2
    assert "do not match the command" in capsys.readouterr().err
