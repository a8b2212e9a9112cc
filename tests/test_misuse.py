"""The misuse table: every option of every subcommand, walked from argparse, tried with each
kind of bad value that applies to it.

The kind of an option follows from its parser where it can (a bounded number, a list, a
choice, an on/off flag); options whose value is a name or a path are classified in
:data:`KINDS`, and an option with neither makes :func:`test_every_option_is_classified` fail.
Each case either

* exits 2 with one ``error:`` line that names the option or the file (``file:line`` for text
  files) and ends with ``Fix: ...``, prints no traceback and writes nothing, or
* is accepted as documented (README, "Inputs"): a UTF-8 byte-order mark, CRLF line ends and a
  missing final newline read as the plain text, with the same result.
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_entropy.cli import build_parser, main
from fairseq_entropy.cli import options

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: a place nobody may write, root included (sysfs refuses new entries)
READ_ONLY = "/sys/fairseq-entropy-misuse/out"

# -------------------------------------------------------------------------- classification
#: (command, dest) -> kind, for options whose parser does not tell their kind
KINDS = {
    ("build exp1", "out"): "out-dir", ("build exp2", "out"): "out-dir",
    ("build scan", "out"): "out-file",
    ("build cogs", "cogs_dir"): "in-dir", ("build cogs", "case"): "name",
    ("build cogs", "out"): "out-dir",
    ("build exp1", "restricted_verb"): "name", ("build exp2", "restricted_verb"): "name",
    ("build exp1", "restricted"): "name",
    ("measure", "files"): "in-text", ("measure", "train"): "in-text",
    ("binarize", "build_dir"): "in-dir", ("binarize", "out"): "out-dir",
    ("binarize", "train"): "in-text", ("binarize", "valid"): "in-text",
    ("binarize", "test"): "in-text", ("binarize", "restricted_verb"): "name",
    ("score", "generate_output"): "in-text", ("score", "out"): "out-dir",
    ("score", "data"): "in-dir", ("score", "preset"): "name", ("score", "model"): "name",
    ("score", "path"): "in-file", ("score", "split"): "name",
    ("aggregate", "roots"): "in-dir", ("aggregate", "out"): "out-dir",
    ("predict", "results"): "in-text", ("predict", "preset"): "name",
    ("predict", "split"): "name", ("predict", "split_measures"): "in-text",
    ("predict", "measured_accuracy"): "in-file", ("predict", "plot"): "out-file",
    ("train-args", "preset"): "name", ("train-args", "data"): "in-dir",
    ("train-args", "presets"): "in-text", ("train-args", "field"): "name",
    ("train-args", "user_dir"): "in-dir",
    ("run", "preset"): "name", ("run", "databin"): "in-dir", ("run", "run_dir"): "out-dir",
    ("run", "presets"): "in-text", ("run", "user_dir"): "in-dir",
    ("score", "presets"): "in-text",
    ("sweep", "presets"): "in-text", ("sweep", "user_dir"): "in-dir",
    # the extra fairseq-train arguments after `--`: fairseq-train parses them itself
    ("run", "rest"): "passed-on",
    ("sweep", "grid"): "in-text", ("sweep", "root"): "out-dir", ("sweep", "preset"): "name",
    ("sweep", "recipe"): "in-file", ("sweep", "cases"): "name",
    ("lock", "run_dir"): "out-dir", ("lock", "lock_command"): "command",
    ("pack", "pack_dir"): "out-dir", ("pack", "run"): "run-triple", ("unpack", "pack"): "in-file",
}

#: (command, dest) -> bad values beyond those the kind gives: unknown names, values out of
#: the domain's range, inputs made for another experiment
EXTRA = {
    ("build exp1", "levels"): ["3.5", "-0.5"],
    ("build exp1", "verbs"): ["walk,fly"],
    ("build exp1", "restricted_verb"): ["fly"],
    ("build exp1", "restricted"): ["nowhere"],
    ("build exp2", "support"): ["0", "9", "1..9"],
    ("build exp2", "verbs"): ["walk,fly"],
    ("build exp2", "restricted_verb"): ["fly"],
    ("build exp2", "support_order"): ["walk,fly"],
    # a level outside the case's reachable range; more sentences than the toy COGS has
    ("build cogs", "levels"): ["9", "-1"],
    ("build cogs", "slot_sentences"): ["100000"], ("build cogs", "size"): ["100000"],
    ("measure", "components"): ["verbs"],
    # SCAN splits that hold out no (verb, slot) pair: no slot entropy to predict at
    ("predict", "split"): ["length", "simple"],
    # a results.tsv with one level per curve (the world's score): nothing to fit
    ("predict", "results"): ["@runs"],
    ("score", "preset"): ["nope", "exp2_cnn_authors"],
    ("score", "model"): ["nope"],
    ("score", "split"): ["tset"],
    ("score", "data"): ["@exp2-level"],
    ("train-args", "preset"): ["nope", "exp2_cnn_authors"],
    ("train-args", "field"): ["nope"],
    ("train-args", "data"): ["@exp1-build"],
    ("run", "preset"): ["nope", "exp2_cnn_authors"],
    ("run", "databin"): ["@exp1-build"],
    ("sweep", "preset"): ["nope", "exp2_cnn_authors"],
    ("sweep", "seed"): ["7"],
    ("sweep", "level"): ["1.5"],
    ("lock", "lock_command"): ["/nonexistent/command", "nosuch-program-xyz"],
}


def parsers(parser=None, name=""):
    parser = parser or build_parser()
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}".strip())


def options_of_every_command():
    for name, parser in parsers():
        for a in parser._actions:
            if name and not isinstance(a, (argparse._HelpAction, argparse._VersionAction,
                                           argparse._SubParsersAction)):
                yield name, a


def kind_of(command, action):
    """The kind of an option, from its parser or :data:`KINDS` (None: unclassified)."""
    if action.nargs == 0:
        return "flag"
    if action.choices:
        return "choice"
    if action.type in (options.floats, options.entropies, options.ints, options.names):
        return "list"
    if hasattr(action.type, "bounds"):
        return "number"
    return KINDS.get((command, action.dest))


def bad_values(command, action):
    """(label, value) of every bad value of one option."""
    kind = kind_of(command, action)
    out = []
    if kind == "flag":
        out.append(("value given to a flag", "=yes"))
    elif kind == "choice":
        out.append(("unknown name", "nosuch"))
    elif kind == "list":
        out += [("empty selection", ""), ("empty selection", ","), ("wrong type", "x")]
        if action.type is options.ints:
            out.append(("empty range", "3..1"))
    elif kind == "number":
        kind_, low, high, low_open, high_open = action.type.bounds
        out.append(("wrong type", "x"))
        if kind_ is int:
            out.append(("wrong type", "1.5"))
        out.append(("not a finite number", "nan"))
        if low is not None:
            out.append(("below range", str(kind_(low) if low_open else kind_(low) - 1)))
            out.append(("negative", "-1"))
        if high is not None:
            out.append(("above range", str(kind_(high) if high_open else kind_(high) + 1)))
    elif kind == "name":
        out.append(("unknown name", "nosuch"))
    elif kind in ("in-text", "in-file", "in-dir"):
        out += [("missing path", "@missing"), ("empty name", "")]
        out.append(("directory for a file", "@dir") if kind != "in-dir"
                   else ("file for a directory", "@file"))
        if kind == "in-text":
            out += [("latin-1 text", "@latin1"), ("NUL bytes", "@nul"), ("UTF-16 text", "@utf16")]
    elif kind in ("out-dir", "out-file"):
        # sweep --dry-run writes nothing, so it cannot find out that --root is read-only
        if (command, action.dest) != ("sweep", "root"):
            out.append(("read-only place", READ_ONLY))
        out.append(("under a file", "@file/sub"))
        out.append(("file for a directory", "@file") if kind == "out-dir"
                   else ("directory for a file", "@dir"))
    elif kind == "command":
        out.append(("no command", "--"))
    elif kind == "run-triple":  # DATA SEED RUN_DIR
        out += [("missing path", "/nonexistent/level 1 r"), ("wrong type", "{bin} one r"),
                ("not a data-bin", "{w} 1 r"), ("the same run directory twice", "{bin} 2 {t}/r")]
    out += [("domain", v) for v in EXTRA.get((command, action.dest), [])]
    return kind, out


def test_every_option_is_classified():
    unclassified = [f"{c} {a.option_strings or a.dest}" for c, a in options_of_every_command()
                    if kind_of(c, a) is None]
    assert not unclassified, ("options without a misuse kind: add them to KINDS in "
                              f"tests/test_misuse.py: {unclassified}")
    assert {c for c, _ in options_of_every_command()} >= {
        "build exp1", "build exp2", "build scan", "measure", "binarize", "score", "aggregate",
        "train-args", "run", "sweep", "lock"}
    # every extra case belongs to an option that exists
    known = {(c, a.dest) for c, a in options_of_every_command()}
    assert set(EXTRA) <= known and set(KINDS) <= known


# ------------------------------------------------------------------------------ the world
def _scan_lines(level: Path, split: str):
    cmds = (level / f"{split}.in").read_text().splitlines()
    acts = (level / f"{split}.out").read_text().splitlines()
    return "".join(f"IN: {c} OUT: {a}\n" for c, a in zip(cmds, acts))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny exp1 build and its data-bin, an exp2 level, SCAN-format files, a decode of the
    exp1 test split, a score, a grid and a presets file: the valid inputs every case starts
    from."""
    w = tmp_path_factory.mktemp("world")
    assert main(["build", "exp1", "--out", str(w / "exp1"), "--levels", "3", "--n", "60"]) == 0
    assert main(["build", "exp2", "--out", str(w / "exp2"), "--support", "2"]) == 0
    level = w / "exp1" / "entropy_3.0"
    assert main(["binarize", str(w / "exp1"), "--out", str(w / "bin")]) == 0
    (w / "scan_train.txt").write_text(_scan_lines(level, "train"))
    (w / "scan_valid.txt").write_text(_scan_lines(level, "valid"))
    (w / "scan_test.txt").write_text("".join(_scan_lines(level, "test").splitlines(True)[:30]))
    cmds = (level / "test.in").read_text().splitlines()
    acts = (level / "test.out").read_text().splitlines()
    (w / "gen.txt").write_text("".join(f"S-{i}\t{c}\nT-{i}\t{a}\nH-{i}\t-0.1\t{a}\n"
                                       for i, (c, a) in enumerate(zip(cmds, acts))))
    assert main(["score", str(w / "gen.txt"), "--out", str(w / "runs" / "last"), "--data",
                 str(level), "--preset", "exp1_cnn_authors", "--seed", "1", "--unverified",
                 "--checkpoint", "last"]) == 0
    (w / "grid.toml").write_text('experiment = "exp1"\npresets = ["exp1_cnn_authors"]\n'
                                 'levels = [0, 3]\nseeds = [1, 2]\nn = [60]\n'
                                 'schedule = {max_update = 2}\n')
    (w / "presets.json").write_text(
        '{\n  "mine": {\n    "arch": "scan_cnn_paper",\n    "experiment": "exp1",\n'
        '    "batch_size": 8,\n    "epochs": 2\n  }\n}\n')
    for name, dest in (("results/exp1_cnn_authors/results.tsv", "curve.tsv"),
                       ("fairseq_entropy/analysis/split_measures.tsv", "split_measures.tsv")):
        (w / dest).write_bytes((REPO / name).read_bytes())
    (w / "a_dir").mkdir()
    (w / "a_file").write_text("x\n")
    cogs = w / "cogs"  # a toy COGS: hedgehog is held out of theme@object
    cogs.mkdir()
    eat = ("A {} ate the {} .\t* {} ( x _ 4 ) ; eat . agent ( x _ 2 , x _ 1 ) AND eat . "
           "theme ( x _ 2 , x _ 4 ) AND {} ( x _ 1 )\t{}\n")
    (cogs / "train.tsv").write_text(eat.format("dog", "cake", "cake", "dog", "in_distribution")
                                    * 3 + eat.format("cat", "cake", "cake", "cat",
                                                     "in_distribution")
                                    + eat.format("hedgehog", "cake", "cake", "hedgehog",
                                                 "exposure_example_subj_common"))
    (cogs / "dev.tsv").write_text(eat.format("dog", "cake", "cake", "dog", "in_distribution"))
    (cogs / "gen.tsv").write_text(eat.format("cat", "hedgehog", "hedgehog", "cat",
                                             "subj_to_obj_common"))
    return w


#: command -> its valid argv (``{t}``: the case's own directory, ``{w}``: the world)
BASES = {
    "build exp1": "build exp1 --out {t}/o --levels 3 --n 60",
    "build exp2": "build exp2 --out {t}/o --support 2",
    "build scan": "build scan --out {t}/scan.txt",
    "build cogs": "build cogs {w}/cogs --case subj_to_obj_common --levels 0 --out {t}/o",
    "measure": "measure {w}/scan_valid.txt",
    "binarize": "binarize {w}/exp1 --out {t}/bin",
    "binarize files": "binarize --grammar paper --train {w}/scan_train.txt "
                      "--valid {w}/scan_valid.txt --test {w}/scan_test.txt --out {t}/bin",
    "score": "score {w}/gen.txt --out {t}/s --data {w}/exp1/entropy_3.0 "
             "--preset exp1_cnn_authors --seed 1 --unverified --checkpoint last",
    "aggregate": "aggregate {w}/runs --out {t}/agg",
    "predict": "predict {w}/curve.tsv --split addprim_jump --split-measures {w}/split_measures.tsv "
               "--measured-accuracy {w}/runs/last/score.json",
    "train-args": "train-args exp1_cnn_authors --data {w}/bin/entropy_3.0",
    "run": "run exp1_cnn_authors {w}/bin/entropy_3.0 {t}/run --device cpu",
    "sweep": "sweep {w}/grid.toml --dry-run --root {t}/root --device cpu",
    "lock": "lock {t}/rd -- true",
    "pack": "pack {t}/p --run {w}/bin/entropy_3.0 1 {t}/r",
    "unpack": "unpack {t}/p",
}
#: options that apply to the SCAN-files form of binarize
FILES_FORM = {"train", "valid", "test", "valid_fraction", "seed", "experiment",
              "restricted_verb", "support"}
#: options whose misuse needs a preset of the user's presets file
WITH_PRESETS = {"presets"}


def _text_variant(src: Path, how: str, dest: Path) -> Path:
    data = src.read_bytes()
    first, rest = data.split(b"\n", 1)
    if how == "latin1":
        data = first + " caf\xe9".encode("latin-1") + b"\n" + rest
    elif how == "nul":
        data = first + b"\n" + rest.replace(b"\n", b"\0\n", 1)
    elif how == "utf16":
        data = data.decode("utf-8").encode("utf-16")
    elif how == "bom":
        data = b"\xef\xbb\xbf" + data
    elif how == "crlf":
        data = data.replace(b"\n", b"\r\n")
    elif how == "no-final-newline":
        data = data.rstrip(b"\n")
    dest.write_bytes(data)
    return dest


def _argv(command, action, value, w, t):
    """The base argv of ``command`` with ``action`` set to ``value``."""
    base = BASES["binarize files" if command == "binarize" and action.dest in FILES_FORM
                 else command].format(w=w, t=t).split()
    if command in ("train-args", "run") and action.dest == "presets":
        base[base.index("exp1_cnn_authors")] = "mine"
    if not action.option_strings:  # a positional: replace it (or the command after `--`)
        if action.dest == "lock_command":
            return base[:base.index("--")] + ([value] if value == "--" else value.split())
        if action.dest == "rest":
            return base + value.split()
        positionals = [a for a in parsers_by_name()[command]._actions
                       if not a.option_strings and a.dest not in ("lock_command", "rest")]
        words = base[len(command.split()):]
        i = [a.dest for a in positionals].index(action.dest)
        words[i] = value
        return command.split() + words
    opt = action.option_strings[-1]
    if action.nargs == 3:  # an option of three words (pack --run DATA SEED RUN_DIR)
        return base + [opt, *value.format(w=w, t=t, bin=w / "bin" / "entropy_3.0").split()]
    if value.startswith("="):
        return base + [opt + value]
    if command == "run":  # options after the positionals go through run's own parser
        return base + [opt, value]
    return base + [opt, value]


def parsers_by_name():
    return dict(parsers())


def _resolve(value: str, w: Path, t: Path, src) -> str:
    """Turn a ``@name`` placeholder into a path of the world or the case."""
    if not value.startswith("@"):
        return value
    name, _, sub = value[1:].partition("/")
    path = {"missing": t / "nosuch", "dir": w / "a_dir", "file": w / "a_file",
            "exp2-level": w / "exp2" / "support_2", "exp1-build": w / "exp1",
            "runs": w / "runs"}.get(name)
    if path is None:  # a text variant of the option's valid file
        path = _text_variant(src, name, t / f"variant{Path(src).suffix}")
    return str(path / sub) if sub else str(path)


def _snapshot(*dirs):
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else None
            for d in dirs for p in Path(d).rglob("*")}


def _valid_source(command, action, w):
    """The option's valid input file (the one its text variants are made from)."""
    return {("measure", "files"): w / "scan_valid.txt",
            ("measure", "train"): w / "scan_valid.txt",
            ("binarize", "train"): w / "scan_train.txt",
            ("binarize", "valid"): w / "scan_valid.txt",
            ("binarize", "test"): w / "scan_test.txt",
            ("score", "generate_output"): w / "gen.txt",
            ("train-args", "presets"): w / "presets.json",
            ("run", "presets"): w / "presets.json",
            ("score", "presets"): w / "presets.json",
            ("sweep", "presets"): w / "presets.json",
            ("sweep", "grid"): w / "grid.toml",
            ("predict", "results"): w / "curve.tsv",
            ("predict", "split_measures"): w / "split_measures.tsv"}.get((command, action.dest))


def cases():
    for command, action in options_of_every_command():
        kind, values = bad_values(command, action)
        for label, value in values:
            name = "/".join(action.option_strings) or action.dest
            yield pytest.param(command, action, label, value,
                               id=f"{command}:{name}:{label}:{value}")


def _call(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def no_training(monkeypatch):
    """A run that got past its checks would start fairseq-train: fail instead."""
    import fairseq_entropy.experiments.run as run_module

    def refuse(*args, **kwargs):
        raise AssertionError("the run passed its checks and started training")
    monkeypatch.setattr(run_module, "_train", refuse)


@pytest.mark.parametrize("command,action,label,value", list(cases()))
def test_misuse_is_refused_with_one_line_and_a_fix(command, action, label, value, world,
                                                   tmp_path, capsys, no_training):
    t = tmp_path / "case"
    t.mkdir()
    src = _valid_source(command, action, world)
    value = _resolve(value, world, t, src)
    argv = _argv(command, action, value, world, t)
    before = _snapshot(world, t)
    code, out, err = _call(argv, capsys)
    after = _snapshot(world, t)
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert code == 2, f"{argv} exited {code}: {err[-2000:]}"
    assert "Traceback" not in err
    assert len(lines) == 1, err
    line = lines[0]
    assert "Fix:" in line, line
    named = [s for s in (action.option_strings + [action.dest, action.dest.replace("_", "-"),
                                                  (action.metavar or "")])
             if s] + ([value, str(Path(value).parent)] if value and "/" in value else [])
    if action.dest == "lock_command":
        named.append("command")
    assert any(s in line for s in named), f"{line!r} names none of {named}"
    created = {p for p in after if p not in before and not str(p).startswith(str(src or "-"))
               and "variant" not in p.name}
    changed = {p for p in before if p in after and before[p] != after[p]}
    assert not created and not changed, f"written: {created | changed}"


# ------------------------------------------------------- text files accepted as documented
ACCEPTED = ("bom", "crlf", "no-final-newline")


def text_options():
    for command, action in options_of_every_command():
        # binarize: see the test below; run reads --presets as train-args does (the same
        # read_presets_file), and a run that gets past it trains
        if kind_of(command, action) == "in-text" and command not in ("binarize", "run"):
            yield pytest.param(command, action,
                               id=f"{command}:{'/'.join(action.option_strings) or action.dest}")


def _normalized(text: str, *paths) -> str:
    for p in paths:
        text = text.replace(str(p), "PATH")
    return text


@pytest.mark.parametrize("command,action", list(text_options()))
def test_text_as_editors_write_it_reads_as_the_same_text(command, action, world, tmp_path,
                                                         capsys, no_training):
    src = _valid_source(command, action, world)
    results = []
    for how in ("plain",) + ACCEPTED:
        t = tmp_path / how
        t.mkdir()
        path = src if how == "plain" else _text_variant(src, how, t / src.name)
        if (command, action.dest) == ("score", "generate_output") and how == "no-final-newline":
            # a decode whose last line has no newline was cut off while it was written: it is
            # refused (names file:line), not scored
            code, _, err = _call(_argv(command, action, str(path), world, t), capsys)
            assert code == 2 and f"{path}:" in err and "cut off" in err and "Fix:" in err
            continue
        argv = _argv(command, action, str(path), world, t)
        code, out, err = _call(argv, capsys)
        assert code == 0, f"{how}: {err}"
        results.append(_normalized(out, path, src, t, Path(path).parent, Path(src).parent))
    assert all(r == results[0] for r in results), results


def test_binarize_reads_scan_files_as_editors_write_them(world, tmp_path, capsys):
    """One binarize of SCAN files with a byte-order mark, CRLF line ends and no final newline
    (in all three files) gives the same data as the plain files."""
    def run(train, valid, test, out):
        code, stdout, err = _call(["binarize", "--grammar", "paper", "--train", str(train),
                                   "--valid", str(valid), "--test", str(test), "--out", str(out)],
                                  capsys)
        assert code == 0, err
        return sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*.bin"))

    files = [world / "scan_train.txt", world / "scan_valid.txt", world / "scan_test.txt"]
    odd = []
    for f in files:
        data = f.read_bytes().replace(b"\n", b"\r\n").rstrip(b"\r\n")
        odd.append(tmp_path / f.name)
        odd[-1].write_bytes(b"\xef\xbb\xbf" + data)
    assert run(*odd, tmp_path / "odd") == run(*files, tmp_path / "plain")


# ------------------------------------------------------------------ grids and presets values
GRID = ('experiment = "{exp}"\npresets = ["{preset}"]\nlevels = {levels}\nseeds = {seeds}\n'
        '{n}schedule = {schedule}\n')
GOOD_GRID = dict(exp="exp1", preset="exp1_cnn_authors", levels="[0, 3]", seeds="[1]",
                 n="n = [60]\n", schedule='"paper"')


@pytest.mark.parametrize("change,line,key", [
    (dict(levels="[0, 3.5]"), 3, "levels"),          # above 3 bits
    (dict(levels="[-1]"), 3, "levels"),
    (dict(levels='["x"]'), 3, "levels"),             # wrong type
    (dict(levels="[]"), 3, "levels"),                # empty selection
    (dict(levels="[1.5, 1.50001]"), 3, "levels"),    # both named entropy_1.5
    (dict(seeds="[-1]"), 4, "seeds"),
    (dict(seeds="[1.5]"), 4, "seeds"),
    (dict(n="n = [-1]\n"), 5, "n"),
    (dict(n='n = ["6000"]\n'), 5, "n"),
    (dict(schedule="{epochs = -20}"), 6, "schedule"),
    (dict(schedule='{epochs = "x"}'), 6, "schedule"),
    (dict(schedule="{max_update = 0}"), 6, "schedule"),
    (dict(schedule="{max_update = 2.5}"), 6, "schedule"),
    (dict(schedule='"paper"\npack = -1'), 7, "pack"),
    (dict(schedule='"paper"\npack = 2.5'), 7, "pack"),
    (dict(schedule='"paper"\npack = "16"'), 7, "pack"),
    (dict(preset="nope"), 2, "preset"),
    (dict(preset="exp2_cnn_authors"), 2, "preset"),  # a preset of the other experiment
    (dict(exp="exp2", n="", preset="exp2_cnn_authors", levels="[0]"), 3, "levels"),
    (dict(exp="exp2", n="", preset="exp2_cnn_authors", levels="[9]"), 3, "levels"),
    (dict(exp="exp2", n="", preset="exp2_cnn_authors", levels="[1.5]"), 3, "levels"),
])
def test_bad_grid_values_are_refused_by_a_dry_run(change, line, key, tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(**{**GOOD_GRID, **change}))
    code, out, err = _call(["sweep", str(grid), "--dry-run", "--root", str(tmp_path / "r"),
                            "--device", "cpu"], capsys)
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and f"{grid}:{line}: " in err and key in err and "Fix:" in err
    assert sorted(tmp_path.iterdir()) == [grid]


PRESET = '{{\n  "mine": {{\n    "extends": "{base}",\n    "{key}": {value}\n  }}\n}}\n'


@pytest.mark.parametrize("key,value", [
    ("batch_size", "0"), ("batch_size", '"32"'), ("epochs", "-20"), ("epochs", '"x"'),
    ("lr", "0"), ("warmup_fraction", "1.5"), ("min_lr_ratio", "-0.1"),
    ("experiment", '"exp3"'), ("model_args", '"--dropout 0.1"'), ("arch", "3"),
    ("epochs_by_train_size", '{"6000": -1}'), ("epochs_formula", '"8-8*k"'),
    ("epochs_formula", '"k**2"'),
])
def test_bad_preset_values_are_refused_at_load(key, value, tmp_path, capsys, world):
    presets = tmp_path / "p.json"
    base = "mine0"
    presets.write_text(PRESET.format(base=base, key=key, value=value).replace(
        '{\n  "mine"', '{\n  "mine0": {"arch": "scan_cnn_paper", "experiment": "exp1"},'
        '\n  "mine"', 1))
    code, out, err = _call(["train-args", "mine0", "--data", str(world / "bin"), "--presets",
                            str(presets)], capsys)
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and f"{presets}:3: preset 'mine': key '{key}'" in err
    assert "must be" in err and "Fix:" in err


# ----------------------------------------------------------- shell recipes and preprocess
def _sh(script, args, env, cwd):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", **env)
    return subprocess.run(["bash", str(REPO / script), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("script,args,env,names", [
    ("preprocess/prepare_exp1.sh", ["out"], {"LEVELS": "0,4"}, "--levels"),
    ("preprocess/prepare_exp1.sh", ["out"], {"N": "-1"}, "--n"),
    ("preprocess/prepare_exp1.sh", ["out"], {"RESTRICTED_VERB": "fly"}, "fly"),
    ("preprocess/prepare_exp1.sh", ["out", "-3"], {}, "--seed"),
    ("preprocess/prepare_exp1.sh", ["odd,dir"], {}, "','"),
    ("preprocess/prepare_exp2.sh", ["out"], {"SUPPORT": "3..1"}, "--support"),
    ("preprocess/prepare_exp2.sh", ["odd:dir"], {}, "':'"),
    ("preprocess/prepare_scan.sh", ["out", "1", "nosuch"], {}, "nosuch"),
    ("recipes/train_level.sh", ["nope", "bin", "run"], {}, "nope"),
    ("recipes/train_level.sh", ["exp1_cnn_authors", "nosuch", "run"], {}, "nosuch"),
    ("recipes/train_level.sh", ["exp1_cnn_authors", "bin", "run"], {"SEED": "-1"}, "SEED"),
    ("recipes/train_level.sh", ["exp1_cnn_authors", "bin", "run"], {"EPOCHS": "0"},
     "EPOCHS"),
    ("recipes/train_level.sh", ["exp1_cnn_authors", "bin", "run"], {"SELECT": "best"},
     "SELECT"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_recipes_refuse_bad_settings_and_write_nothing(script, args, env, names, tmp_path):
    res = _sh(script, args, env, tmp_path)
    lines = [ln for ln in res.stderr.splitlines() if "error" in ln.lower()]
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(lines) == 1, res.stderr
    assert names in lines[0] and "Fix:" in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == []


def test_prepare_exp1_takes_an_output_path_with_spaces_and_quotes(tmp_path):
    """Every other character is quoted through: a space, a quote, a dollar sign and a glob."""
    out = tmp_path / "my data 'x' $HOME *"
    res = _sh("preprocess/prepare_exp1.sh", [str(out)], {"LEVELS": "3", "N": "60"}, tmp_path)
    assert res.returncode == 0, res.stderr
    assert (out / "data-bin" / "seed1" / "entropy_3.0" / "train.in-out.in.bin").exists()


def test_a_reader_that_stops_early_is_not_an_error(tmp_path):
    """`fairseq-entropy ... | head -1`: the closed pipe ends the command quietly with the
    status of a tool killed by SIGPIPE (128 + 13), no error line and no traceback."""
    proc = subprocess.Popen([str(BIN / "fairseq-entropy"), "sweep",
                             str(REPO / "recipes" / "grids" / "exp1.toml"), "--dry-run",
                             "--root", str(tmp_path / "sweep")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()  # the dry run prints about 66 kB: more than a pipe holds
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert first.startswith(b"# grid")
    assert proc.wait(timeout=120) == 141
    assert err == ""
    assert not (tmp_path / "sweep").exists()
