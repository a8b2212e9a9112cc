"""What a user sees after an interrupted build, a refused build and an output folder that cannot
be written: the error names the missing levels, the differing fields, the user's path."""
import errno
import json
import os
import re
import signal
import tempfile

import pytest

from fairseq_entropy.cli import main as cli
from fairseq_entropy.files import (OutputError, atomic_directory, atomic_write_text,
                                   stop_signals_deferred)
from fairseq_entropy.scan import manifests
from fairseq_entropy.scan.build_requests import request_exp1
from fairseq_entropy.scan.grammar import Grammar


def error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(r"fairseq-entropy [a-z-]+: error: ", err[0]), err
    assert "Fix: " in err[0]
    return err[0]


def test_binarize_refuses_an_interrupted_build_naming_the_missing_levels(tmp_path, monkeypatch,
                                                                           capsys):
    grammar = Grammar.paper()
    levels, params = request_exp1(grammar, [0.0, 1.5, 3.0], 40, 1, 0.05)
    write_pair, written = manifests.write_pair, []

    def interrupted(prefix, examples):  # Ctrl-C while the second level is written
        if "entropy_1.5" in str(prefix):
            raise KeyboardInterrupt
        written.append(prefix)
        return write_pair(prefix, examples)

    monkeypatch.setattr(manifests, "write_pair", interrupted)
    build = tmp_path / "build"
    with pytest.raises(KeyboardInterrupt):
        manifests.write_build(build, grammar, levels, params)
    monkeypatch.setattr(manifests, "write_pair", write_pair)
    manifest = json.loads((build / "manifest.json").read_text())
    assert manifest["levels"] == ["entropy_0.0"]
    assert manifest["planned_levels"] == ["entropy_0.0", "entropy_1.5", "entropy_3.0"]

    assert cli(["binarize", str(build), "--out", str(tmp_path / "bin")]) == 2
    line = error_line(capsys)
    assert "level(s) entropy_1.5, entropy_3.0 of this build were never written" in line
    assert "run the same 'fairseq-entropy build' again" in line
    assert not (tmp_path / "bin").exists()  # nothing half-done

    # the same build again completes it (keeping the finished level), and binarize goes on
    manifests.write_build(build, grammar, levels, params)
    manifest = json.loads((build / "manifest.json").read_text())
    assert manifest["levels"] == manifest["planned_levels"]
    level_manifest = json.loads((build / "entropy_0.0" / "manifest.json").read_text())
    assert "planned_levels" not in level_manifest  # a level's own record does not change


def test_a_different_build_says_which_fields_differ(tmp_path, capsys):
    out = str(tmp_path / "build")
    assert cli(["build", "exp1", "--out", out, "--levels", "3", "--n", "40"]) == 0
    capsys.readouterr()
    assert cli(["build", "exp1", "--out", out, "--levels", "3", "--n", "50", "--seed",
                "2"]) == 2
    line = error_line(capsys)
    assert "already holds a different build" in line
    assert "n_train: 40 there, 50 now; seed: 1 there, 2 now" in line
    assert json.loads((tmp_path / "build" / "manifest.json").read_text())["n_train"] == 40


def test_unwritable_output_names_the_users_path_not_the_temporary_name(tmp_path,
                                                                       monkeypatch):
    target = tmp_path / "results" / "report.md"

    def refused(*args, dir=None, prefix="", **kw):
        name = os.path.join(dir, prefix + "abc123")
        raise PermissionError(errno.EACCES, "Permission denied", name)

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    with pytest.raises(OutputError) as e:
        atomic_write_text(target, "x")
    msg = str(e.value)
    assert msg.startswith(f"{target}: cannot write it (Permission denied: {target.parent})")
    assert ".partial." not in msg and "Fix: " in msg
    with pytest.raises(OutputError) as e:
        with atomic_directory(tmp_path / "bin" / "entropy_3.0"):
            pass
    assert ".partial." not in str(e.value) and str(tmp_path / "bin" / "entropy_3.0") in \
        str(e.value)


def test_a_write_inside_an_atomic_directory_that_fails_names_the_destination(tmp_path):
    dest = tmp_path / "level"
    with pytest.raises(OutputError) as e:
        with atomic_directory(dest) as tmp:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "train.in"))
    assert str(e.value).startswith(f"{dest}: cannot write it (No space left on device")
    assert "free space" in str(e.value) and ".partial." not in str(e.value)
    assert not dest.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_output_folder_is_named(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert cli(["build", "exp1", "--out", str(ro), "--levels", "3", "--n", "40"]) == 2
        line = error_line(capsys)
        assert str(ro) in line and ".partial." not in line
    finally:
        ro.chmod(0o755)


@pytest.fixture
def python_sigint():
    """SIGINT handled by Python's own handler (``KeyboardInterrupt``) for the test, whatever
    the process started with: a shell without job control starts a background command with
    SIGINT ignored, and Python then leaves it ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("kind", ["directory", "file"])
def test_a_stop_signal_just_after_the_temporary_name_is_made_leaves_nothing(kind, tmp_path,
                                                                            monkeypatch,
                                                                            python_sigint):
    """SIGINT delivered the instant mkdtemp/mkstemp has created the temporary entry (before it
    returns) is held back until the name is recorded, so the cleanup removes it."""
    make = "mkdtemp" if kind == "directory" else "mkstemp"
    real = getattr(tempfile, make)

    def make_then_interrupt(*args, **kwargs):
        made = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # the default handler raises KeyboardInterrupt
        return made

    monkeypatch.setattr(tempfile, make, make_then_interrupt)
    dest = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        if kind == "directory":
            with atomic_directory(dest) as tmp:
                (tmp / "x").write_text("never reached\n")
        else:
            atomic_write_text(dest, "never reached\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_stop_signals_deferred_delivers_the_signal_at_the_end_of_the_block(python_sigint):
    events, before = [], signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with stop_signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            events.append("after kill")  # reached: the signal is held back
        events.append("after block")  # not reached: delivered as the block ends
    assert events == ["after kill"]
    assert signal.getsignal(signal.SIGINT) is before
