"""Every option of every subcommand is documented: it has help, and the help names its
default; ``--version`` answers; the preprocess scripts and recipes answer ``--help`` without
writing; an interrupted command prints one line, no traceback."""
import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_entropy.cli import build_parser, main
from fairseq_entropy.version import __version__

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def parsers(parser=None, name="fairseq-entropy"):
    """(command name, parser) of the top parser and every subparser, walked from argparse."""
    parser = parser or build_parser()
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def documented_actions():
    for name, parser in parsers():
        for a in parser._actions:
            if not isinstance(a, (argparse._HelpAction, argparse._VersionAction,
                                  argparse._SubParsersAction)) \
                    and a.help != argparse.SUPPRESS:  # hidden on purpose (run's `-- ARGS`)
                yield name, parser, a


def test_the_walk_reaches_every_subcommand():
    names = {n for n, _ in parsers()}
    assert {"fairseq-entropy build exp1", "fairseq-entropy build scan", "fairseq-entropy run",
            "fairseq-entropy sweep", "fairseq-entropy lock", "fairseq-entropy pack",
            "fairseq-entropy unpack", "fairseq-entropy predict"} <= names
    assert len(names) == 1 + 13 + 1 + 4  # top, run + 13 other verbs, build's 4 data sets


@pytest.mark.parametrize("name,parser,action", list(documented_actions()),
                         ids=lambda x: x if isinstance(x, str) else
                         "/".join(getattr(x, "option_strings", None) or [getattr(x, "dest", "")]))
def test_every_option_has_help_that_names_its_default(name, parser, action):
    assert action.help and action.help.strip(), f"{name} {action.option_strings or action.dest}"
    text = parser.format_help()
    shown = parser._get_formatter()._get_help_string(action)
    default = action.default
    if action.option_strings and default is not None and not isinstance(default, bool) \
            and default != argparse.SUPPRESS:
        assert "default" in shown, f"{name} {action.option_strings}: {shown!r}"
    assert " ".join(action.help.split()[:3]) in " ".join(text.split())


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"fairseq-entropy {__version__}"


@pytest.mark.parametrize("script", sorted((REPO / "preprocess").glob("prepare_*.sh")),
                         ids=lambda p: p.name)
def test_preprocess_scripts_answer_help_and_refuse_options(script, tmp_path):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    res = subprocess.run(["bash", str(script), "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    usage = "DIR OUT" if script.name == "prepare_cogs.sh" else "[OUT_ROOT]"  # reads files
    assert res.returncode == 0 and f"preprocess/{script.name} {usage}" in res.stdout
    bad = subprocess.run(["bash", str(script), "--out"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown option --out. Fix:" in bad.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("script", ["train_level.sh", "measure_splits.sh"])
def test_recipes_answer_help_and_refuse_missing_arguments(script, tmp_path):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
               TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    path = REPO / "recipes" / script
    res = subprocess.run(["bash", str(path), "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.startswith(f"usage: {path} ") and not res.stderr
    bad = subprocess.run(["bash", str(path)], cwd=tmp_path, env=env, capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "error: " in bad.stderr and ". Fix: pass " in bad.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["tmp"]  # nothing written


def test_ctrl_c_prints_one_line_and_exits_130(tmp_path, capsys, monkeypatch):
    """A KeyboardInterrupt in the middle of a build (raised where the first level is
    written) ends the command with one line and status 130, and leaves no level behind."""
    import fairseq_entropy.scan.manifests as manifests

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(manifests, "write_build", interrupted)
    out = tmp_path / "exp1"
    assert main(["build", "exp1", "--out", str(out), "--levels", "3", "--n", "50"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "build: interrupted" in err and "Traceback" not in err
    assert not out.exists()


def test_misread_inputs_name_the_right_reader(tmp_path, capsys):
    """A grid read by its suffix, a COGS .tsv given as SCAN data, predict's wrong input."""
    from fairseq_entropy.cli import main

    grid = tmp_path / "g.yaml"
    grid.write_text('experiment = "exp1"\n')
    assert main(["sweep", str(grid), "--dry-run"]) == 2
    assert f"{grid}: a grid file is read by its name's suffix, .toml or .json, not '.yaml'. " \
           "Fix: rename it" in capsys.readouterr().err
    cogs = tmp_path / "dev.tsv"
    cogs.write_text("A cat ran .\trun . agent ( x _ 2 , x _ 1 ) AND cat ( x _ 1 )\t"
                    "in_distribution\n")
    assert main(["measure", str(cogs)]) == 2
    assert f"{cogs}:1: line does not start with 'IN:'. Fix: read a COGS .tsv with --format " \
           "cogs" in capsys.readouterr().err
    other = tmp_path / "pfile"
    other.write_text("")
    assert main(["predict", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fairseq-entropy predict: error: {other}: not a score.json, a run "
                          "directory or a results table") and "aggregate" not in err


@pytest.mark.parametrize("argv", [["build", "exp1", "--out", "o"],
                                  ["build", "cogs", "nowhere", "--case", "subj_to_obj_common",
                                   "--out", "o"]])
def test_a_negative_entropy_is_refused_with_the_options(argv, tmp_path, capsys):
    """Before any data are read (the COGS folder here does not exist)."""
    from fairseq_entropy.cli import main

    argv = [str(tmp_path / "o") if a == "o" else a for a in argv]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--levels", "0,-0.5"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert "argument --levels: '0,-0.5' holds -0.5, but an entropy is >= 0 bits. Fix:" in err
    assert not (tmp_path / "o").exists()


def test_run_and_sweep_take_the_same_run_options():
    """A sweep hands each cell the options of ``fairseq-entropy run``: both parsers declare
    them alike (same destination, type, choices and default), so a value the sweep accepts is
    one that run accepts too."""
    subs = dict(parsers())
    run, sweep = subs["fairseq-entropy run"], subs["fairseq-entropy sweep"]

    def shared(parser):
        return {s: (a.dest, a.type, tuple(a.choices or ()), a.default)
                for a in parser._actions for s in a.option_strings
                if s in ("--select", "--no-score-best", "--gen-batch", "--valid-batch",
                         "--decode-sample", "--presets", "--user-dir")}

    assert len(shared(run)) == 7
    assert shared(run) == shared(sweep)
    assert shared(run)["--no-score-best"][0] == "score_best"
    assert shared(run)["--select"][2] == ("valid", "test-loss")
