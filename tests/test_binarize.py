import json

import pytest

from fairseq_entropy.scan.databin import BinarizeError
from fairseq_entropy.scan.dictionary import check_vocabulary, dictionary_words
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


@pytest.mark.slow
def test_sentencepiece_binarization_round_trips_and_shares_one_model(tmp_path, capsys):
    """binarize --spm-vocab: one model for every level, verbs cut into pieces, and a copy
    "decode" (the references as hypotheses, printed as fairseq-generate --post-process
    sentencepiece prints them) scores 1.0 against the word-level data."""
    import hashlib

    from fairseq.data import Dictionary, data_utils

    from fairseq_entropy.scan.subword import SPM_MODEL, detokenize_sentencepiece

    build = tmp_path / "build"
    assert cli(["build", "exp1", "--out", str(build), "--levels", "1,3", "--n", "400",
                "--seed", "2"]) == 0
    out = tmp_path / "bin"
    assert cli(["binarize", str(build), "--out", str(out), "--spm-vocab", "48"]) == 0
    levels = [out / "entropy_1.0", out / "entropy_3.0"]
    models = {(lv / SPM_MODEL).read_bytes() for lv in levels}
    dicts = {(lv / "dict.in.txt").read_bytes() for lv in levels}
    assert len(models) == 1 and len(dicts) == 1          # one model, one dictionary
    man = json.loads((levels[1] / "manifest.json").read_text())
    assert man["subword"]["vocab_size"] == 48 and man["level"] == "entropy_3.0"
    assert man["subword"]["model_sha256"] == hashlib.sha256(models.pop()).hexdigest()
    vocab = Dictionary.load(str(levels[1] / "dict.in.txt"))
    assert len(vocab) == 4 + 47                          # fairseq's specials + pieces - <unk>
    for lv in levels:
        raw = build / lv.name
        src = data_utils.load_indexed_dataset(str(lv / "test.in-out.in"), vocab)
        tgt = data_utils.load_indexed_dataset(str(lv / "test.in-out.out"), vocab)
        commands = (raw / "test.in").read_text().splitlines()
        actions = (raw / "test.out").read_text().splitlines()
        assert len(src) == len(commands) == 7056
        # every test sentence of the last level, every 97th of the first: each sentence's
        # pieces are joined once (Dictionary.string, on the ids as a list: the string of the
        # tensor, ten times faster), and its post-processed string derived from them as
        # Dictionary.string(tensor, "sentencepiece") derives it
        checked = range(len(src)) if lv == levels[1] else range(0, len(src), 97)
        src_pieces = {i: vocab.string(src[i].tolist()) for i in checked}
        assert any(len(src_pieces[i].split()) > len(commands[i].split()) for i in checked)
        words = set(w for c in commands for w in c.split())
        cut = [w for w in ("walk", "jump", "lunge", "sprint") if w in words and
               not any(p == "\u2581" + w for p in vocab.symbols)]
        assert cut, "with 48 pieces some verbs must be split"
        # the copy check, through the scorer
        lines = []
        for i in checked:
            tgt_pieces = vocab.string(tgt[i].tolist())
            s = data_utils.post_process(src_pieces[i], "sentencepiece")
            t = data_utils.post_process(tgt_pieces, "sentencepiece")
            assert s == commands[i] and t == actions[i]
            assert detokenize_sentencepiece(tgt_pieces) == actions[i]
            lines += [f"S-{i}\t{s}", f"T-{i}\t{t}", f"H-{i}\t-0.1\t{t}"]
        if lv != levels[1]:
            continue
        gen = tmp_path / f"{lv.name}.txt"
        gen.write_text("\n".join(lines) + "\n")
        assert cli(["score", str(gen), "--out", str(tmp_path / f"score_{lv.name}"),
                    "--data", str(lv), "--preset", "exp1_cnn_authors", "--seed", "1",
                "--unverified", "--checkpoint", "last"]) == 0
        rec = json.loads((tmp_path / f"score_{lv.name}" / "score.json").read_text())
        assert rec["accuracy"] == 1.0 and rec["n"] == 7056
    # same input, same model bytes (encoding and fairseq-preprocess are deterministic)
    from fairseq_entropy.scan.subword import train_sentencepiece
    assert train_sentencepiece(build / "entropy_1.0", 48) == (levels[1] / SPM_MODEL).read_bytes()


def test_sentencepiece_vocabulary_out_of_range_is_refused(tmp_path, capsys):
    build = tmp_path / "build"
    assert cli(["build", "exp1", "--out", str(build), "--levels", "3", "--n", "200"]) == 0
    capsys.readouterr()
    assert cli(["binarize", str(build), "--out", str(tmp_path / "bin"), "--spm-vocab", "5"]) == 2
    err = capsys.readouterr().err
    assert "sentencepiece cannot train a 5-piece model on" in err
    assert "Vocabulary size is smaller than required_chars" in err
    assert "Fix: choose another --spm-vocab" in err
    assert not (tmp_path / "bin").exists()
    assert cli(["binarize", "--train", str(build / "entropy_3.0" / "train.in"), "--out",
                str(tmp_path / "x"), "--spm-vocab", "40"]) == 2
    assert "--spm-vocab applies to a build directory" in capsys.readouterr().err


def test_preprocess_workers_write_what_a_fairseq_preprocess_process_writes(tmp_path,
                                                                           monkeypatch):
    """fairseq-preprocess run in a reused worker process (preprocess_processes), and in this
    process (which has imported fairseq), gives the same binary files as a new
    ``python -m fairseq_cli.preprocess`` (the binarize command line of one level, which does
    not import fairseq), and its failures surface as BinarizeError with fairseq's message."""
    import subprocess
    import sys
    from pathlib import Path

    from fairseq_entropy.scan import preprocess
    from fairseq_entropy.scan.binarize import binarize_level
    from fairseq_entropy.scan.preprocess import preprocess_processes, run_preprocess

    build = tmp_path / "build"
    assert cli(["build", "exp1", "--out", str(build), "--levels", "2", "--n", "300",
                "--seed", "3"]) == 0
    level = build / "entropy_2.0"
    g = Grammar.paper()
    subprocess.run([sys.executable, "-m", "fairseq_entropy.cli", "binarize", str(level),
                    "--out", str(tmp_path / "process")], check=True, capture_output=True)
    assert "fairseq" in sys.modules
    spawned = []
    own_group = preprocess._run_in_own_group
    monkeypatch.setattr(preprocess, "_run_in_own_group",
                        lambda cmd: spawned.append(cmd) or own_group(cmd))
    # fairseq's parser reads --user-dir from sys.argv: this process's own is not passed on
    monkeypatch.setattr(sys, "argv", ["caller", "--user-dir", str(tmp_path / "no_such_dir")])
    binarize_level(level, tmp_path / "here", g)
    with pytest.raises(BinarizeError, match="(?s)fairseq-preprocess failed on .*"
                                            "FileNotFoundError.*no_dict.txt"):
        run_preprocess(level, tmp_path / "bad", tmp_path / "no_dict.txt", ["train"])
    assert spawned == []  # both ran in this process
    assert sys.argv == ["caller", "--user-dir", str(tmp_path / "no_such_dir")]
    with preprocess_processes(1):
        binarize_level(level, tmp_path / "worker", g)
        with pytest.raises(BinarizeError, match="(?s)fairseq-preprocess failed on .*"
                                                "FileNotFoundError.*no_dict.txt"):
            run_preprocess(level, tmp_path / "bad", tmp_path / "no_dict.txt", ["train"])
    names = sorted(p.name for p in (tmp_path / "process").iterdir()
                   if p.suffix in (".bin", ".idx", ".txt", ".json"))
    assert len(names) == 3 * 2 * 2 + 2 + 1                # splits x sides x (bin, idx), dicts
    for name in names:
        for other in ("worker", "here"):
            assert (Path(tmp_path / other / name).read_bytes()
                    == (tmp_path / "process" / name).read_bytes()), (other, name)
    # Ctrl-C inside fairseq-preprocess run in this process is raised, not reported as a failure
    from fairseq_cli import preprocess as fairseq_preprocess

    def interrupted(args):
        raise KeyboardInterrupt

    import logging

    root = logging.getLogger()
    before = (sys.stdout, sys.stderr, root.handlers[:], root.level, sys.argv)
    monkeypatch.setattr(fairseq_preprocess, "main", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_preprocess(level, tmp_path / "stopped", tmp_path / "here" / "dict.in.txt", ["train"])
    assert (sys.stdout, sys.stderr, root.handlers, root.level, sys.argv) == before


def test_tokens_outside_the_dictionary_are_refused_unless_allowed(tmp_path):
    """fairseq-preprocess writes a token outside the dictionary as <unk> and logs the share
    replaced; a share above 0 is refused (the COGS targets, whose unknown words score as
    misses, allow it)."""
    from fairseq_entropy.scan.preprocess import run_preprocess

    build = tmp_path / "build"
    assert cli(["build", "exp1", "--out", str(build), "--levels", "3", "--n", "100",
                "--seed", "2"]) == 0
    level = build / "entropy_3.0"
    assert cli(["binarize", str(level), "--out", str(tmp_path / "bin")]) == 0
    full = tmp_path / "bin" / "dict.in.txt"
    lines = full.read_text().splitlines(True)
    no_jump = tmp_path / "no_jump.txt"
    no_jump.write_text("".join(ln for ln in lines if ln.split()[0] != "jump"))
    assert len(no_jump.read_text().splitlines()) == len(lines) - 1
    commands = [c.split() for c in (level / "train.in").read_text().splitlines()]
    jumps = sum(c.count("jump") for c in commands)
    tokens = sum(len(c) + 1 for c in commands)                 # each sentence's words + </s>
    assert jumps > 0
    with pytest.raises(BinarizeError) as e:
        run_preprocess(level, tmp_path / "unk", no_jump, ["train"],
                       tgt_dict_path=tmp_path / "bin" / "dict.out.txt")
    assert "replaced tokens by <unk>" in str(e.value) and "Fix: " in str(e.value)
    assert f"{tokens} tokens, {100 * jumps / tokens:.3}% replaced" in str(e.value)
    run_preprocess(level, tmp_path / "allowed", no_jump, ["train"], allow_unk=True,
                   tgt_dict_path=tmp_path / "bin" / "dict.out.txt")
    assert (tmp_path / "allowed" / "train.in-out.in.bin").exists()


def test_a_thread_of_an_interrupted_preprocess_block_starts_no_fairseq_preprocess(tmp_path,
                                                                                 monkeypatch):
    """After a preprocess_processes block ends by Ctrl-C (or SIGTERM raised as it), a call from
    one of its threads that comes late fails at once instead of starting a fairseq-preprocess
    interpreter of its own (which made binarize --jobs 2 take 20 s and more to stop); the
    thread that opened the block, and the threads of the next block, run as before."""
    import threading

    from fairseq_entropy.scan import preprocess

    started = []
    monkeypatch.setattr(preprocess, "_run_in_own_group",
                        lambda cmd: started.append(cmd) or (0, ""))
    # (a call from the main thread of this process, which has imported fairseq, runs here)
    monkeypatch.setattr(preprocess, "_preprocess_main",
                        lambda argv, worker=True: started.append(argv) or (0, ""))

    def in_thread():
        out = {}

        def call():
            try:
                preprocess.run_preprocess(tmp_path, tmp_path / "o", tmp_path / "d.txt",
                                          ["train"])
                out["ok"] = True
            except BinarizeError as e:
                out["error"] = str(e)
        t = threading.Thread(target=call)
        t.start()
        t.join()
        return out

    with pytest.raises(KeyboardInterrupt):
        with preprocess.preprocess_processes(1):
            raise KeyboardInterrupt
    late = in_thread()
    assert "not started: the binarization it belongs to was stopped" in late["error"]
    assert started == []
    preprocess.run_preprocess(tmp_path, tmp_path / "o", tmp_path / "d.txt", ["train"])
    assert len(started) == 1                      # the block's own thread: it runs
    with preprocess.preprocess_processes(1):
        pass                                      # the next block, ended normally
    assert in_thread() == {"ok": True} and len(started) == 2


def test_sentencepiece_on_the_source_side_keeps_word_level_actions(tmp_path, capsys):
    """--spm-side source: the model is trained on the commands alone; with 23 pieces (the 21
    letters of the commands, the word boundary and <unk>) every verb is spelled out in
    letters, the actions keep the grammar's word dictionary, and a copy decode printed as
    plain fairseq-generate prints it scores 1.0."""
    from fairseq.data import Dictionary, data_utils

    from fairseq_entropy.scan.subword import SPM_MODEL, detokenize_sentencepiece

    build = tmp_path / "build"
    assert cli(["build", "exp1", "--out", str(build), "--levels", "3", "--n", "300",
                "--seed", "2"]) == 0
    raw = build / "entropy_3.0"
    chars = set("".join((raw / "train.in").read_text().split()))
    assert len(chars) + 2 == 23                       # + the word-boundary piece and <unk>
    out = tmp_path / "bin"
    assert cli(["binarize", str(build), "--out", str(out), "--spm-vocab", "23",
                "--spm-side", "source"]) == 0
    assert f"trained on {raw}/train.in\n" in capsys.readouterr().out
    out = out / "entropy_3.0"
    man = json.loads((out / "manifest.json").read_text())["subword"]
    assert (man["side"], man["decode"], man["vocab_size"]) == ("source", "fairseq-generate", 23)
    assert (out / SPM_MODEL).is_file()
    assert (out / "dict.out.txt").read_text().split()[::2] == dictionary_words(Grammar.paper())
    src_dict = Dictionary.load(str(out / "dict.in.txt"))
    tgt_dict = Dictionary.load(str(out / "dict.out.txt"))
    assert sorted(src_dict.symbols[4:]) == sorted(["\u2581", *chars])
    src = data_utils.load_indexed_dataset(str(out / "test.in-out.in"), src_dict)
    tgt = data_utils.load_indexed_dataset(str(out / "test.in-out.out"), tgt_dict)
    commands = (raw / "test.in").read_text().splitlines()
    actions = (raw / "test.out").read_text().splitlines()
    lines = []
    for i in range(len(commands)):
        s, t = src_dict.string(src[i]), tgt_dict.string(tgt[i])
        assert len(s.split()) == len(commands[i]) + 1  # a piece per letter and per word
        assert detokenize_sentencepiece(s) == commands[i] and t == actions[i]
        # fairseq-generate without --post-process prints the command's pieces on S-
        lines += [f"S-{i}\t{s}", f"T-{i}\t{t}", f"H-{i}\t-0.1\t{t}"]
    gen = tmp_path / "generate.txt"
    gen.write_text("\n".join(lines) + "\n")
    assert cli(["score", str(gen), "--out", str(tmp_path / "score"), "--data", str(out),
                "--preset", "exp1_cnn_authors", "--seed", "1",
                "--unverified", "--checkpoint", "last"]) == 0
    rec = json.loads((tmp_path / "score" / "score.json").read_text())
    assert rec["accuracy"] == 1.0 and rec["n"] == len(commands) == 7056
    assert rec["graded"]["clause_accuracy"] == 1.0 and rec["variant"] == "spm23-source"
    examples = (tmp_path / "score" / "examples.tsv").read_text().splitlines()
    assert examples[1].split("\t")[4] == commands[0]  # the source column holds words
    capsys.readouterr()
    assert cli(["binarize", str(build), "--out", str(tmp_path / "x"),
                "--spm-side", "source"]) == 2
    assert not (tmp_path / "x").exists()
    assert "--spm-side applies with --spm-vocab" in capsys.readouterr().err
