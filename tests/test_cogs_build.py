"""``build cogs``: a COGS training set whose tested slot of a lexical case has a requested
entropy.  A hand-written COGS-format fixture (original LFs) is built at several levels; the
entropy is recomputed from the written train.tsv with the slots module and Eq. 1 written out
here, against the target (0.01 bit), the manifest and ``measure --format cogs``; the size is
the same at every level, the held-out word's sentences are kept byte for byte and the word
stays out of the slot, the same seed gives the same bytes and another seed other bytes, and
unreachable levels, bad directories, cases and lines are refused with the fix."""

import json
import math
import re
from collections import Counter

import pytest

from fairseq_entropy.cli import main
from fairseq_entropy.cogs import build_files
from fairseq_entropy.cogs.binarize import read_cogs_dir
from fairseq_entropy.cogs.build_files import write_cogs_build
from fairseq_entropy.cogs.builder import plan_cogs_build
from fairseq_entropy.cogs.data import read_cogs_tsv
from fairseq_entropy.cogs.measure import measure_cogs
from fairseq_entropy.cogs.mixing import flat_counts, hit_counts, peaked_counts, reachable_range
from fairseq_entropy.cogs.slots import occurrences
from fairseq_entropy.errors import DataFormatError, UserError
from fairseq_entropy.scan.levels import BuildError

#: object -> sentences "A <subject> ate the <object> ." of the fixture's training set
OBJECTS = {"cake": 300, "donut": 120, "cookie": 70, "box": 45, "rose": 30, "pen": 25,
           "boy": 20, "girl": 15}
SUBJECTS = ("dog", "cat", "bird")


def ate(subj, obj, case="in_distribution"):
    if obj[0].isupper():  # a proper name has no variable of its own
        return (f"A {subj} ate {obj} .\teat . agent ( x _ 2 , x _ 1 ) AND eat . theme ( x _ 2 "
                f", {obj} ) AND {subj} ( x _ 1 )\t{case}\n")
    return (f"A {subj} ate the {obj} .\t* {obj} ( x _ 4 ) ; eat . agent ( x _ 2 , x _ 1 ) AND "
            f"eat . theme ( x _ 2 , x _ 4 ) AND {subj} ( x _ 1 )\t{case}\n")


def ran(subj):
    return f"A {subj} ran .\t{subj} ( x _ 1 ) AND run . agent ( x _ 2 , x _ 1 )\tin_distribution\n"


#: the held-out words' own training sentences (kept at every level)
HEDGEHOG = ate("hedgehog", "cake", "exposure_example_subj_common")
PAULA = "Paula\tPaula\tprimitive\n"
SHARK = "shark\tLAMBDA a . shark ( a )\tprimitive\n"
#: agent@subject twice: left out of a build on agent@subject
SAID = ("Emma said that a cat ran .\tsay . agent ( x _ 1 , Emma ) AND say . ccomp ( x _ 1 , "
        "x _ 5 ) AND run . agent ( x _ 5 , x _ 4 ) AND cat ( x _ 4 )\tin_distribution\n")


def train_rows():
    rows, k = [], 0
    for obj, n in OBJECTS.items():
        for _ in range(n):
            rows.append(ate(SUBJECTS[k % 3], obj))
            k += 1
    rows += [ate("dog", "Emma"), ate("cat", "Emma")]
    rows += [ran(s) for s in SUBJECTS * 5] + [SAID, SAID.replace("cat", "dog")]
    rows[7:7] = [HEDGEHOG]
    rows[30:30] = [PAULA, SHARK]
    return rows


GEN = [ate("cat", "hedgehog", "subj_to_obj_common"), ate("dog", "hedgehog", "subj_to_obj_common"),
       ate("cat", "Paula", "prim_to_obj_proper"), ate("shark", "cake", "prim_to_subj_common"),
       ate("dog", "cake", "pp_recursion")]


def write_cogs_dir(tmp_path):
    """A COGS folder of the hand-made sentences above: train, dev, test and gen.tsv."""
    src = tmp_path / "cogs"
    src.mkdir()
    (src / "train.tsv").write_text("".join(train_rows()))
    (src / "dev.tsv").write_text(ate("dog", "cake") + ran("cat"))
    (src / "test.tsv").write_text(ate("cat", "donut"))
    (src / "gen.tsv").write_text("".join(GEN))
    return src


@pytest.fixture
def cogs(tmp_path):
    return write_cogs_dir(tmp_path)


def slot_entropy(path, slot):
    """Eq. 1 over the words filling ``slot`` in a written file, computed here."""
    counts = Counter(w for e in read_cogs_tsv(path) for w, s in occurrences(e) if s == slot)
    n = sum(counts.values())
    return -sum(c / n * math.log2(c / n) for c in counts.values()), counts


LEVELS = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]


def build(src, out, case="subj_to_obj_common", levels=LEVELS, seed=1, **kw):
    write_cogs_build(out, plan_cogs_build(src, case, levels, seed, **kw))
    return out


def test_mixing_ends_by_hand():
    available = {"a": 5, "b": 2, "c": 1}
    assert peaked_counts(available, {}, 4) == {"a": 4, "b": 0, "c": 0}
    # water-filling: every word up to 1 takes 3 sentences, the 4th lifts the first word
    assert flat_counts(available, {}, 4) == {"a": 2, "b": 1, "c": 1}
    assert reachable_range(available, {}, 4) == (0.0, 1.5)
    # a fixed occurrence of b counts in the level: b is filled to the common level first
    assert flat_counts(available, {"b": 1}, 4) == {"a": 2, "b": 1, "c": 1}
    c, _ = hit_counts({"a": 50, "b": 50}, {}, 50, 1.0)
    assert c == {"a": 25, "b": 25}
    with pytest.raises(BuildError, match=r"reachable range \[0\.000, 1\.500\].*Fix:"):
        hit_counts(available, {}, 4, 2.0)


def test_levels_hit_the_entropy_with_one_size(cogs, tmp_path):
    out = build(cogs, tmp_path / "out")
    source = (cogs / "train.tsv").read_text().splitlines(keepends=True)
    sizes = set()
    for target in LEVELS:
        level = out / f"entropy_{target}"
        h, counts = slot_entropy(level / "train.tsv", "theme@object")
        assert abs(h - target) <= 0.01
        assert "hedgehog" not in counts
        manifest = json.loads((level / "manifest.json").read_text())
        assert manifest["entropy_bits"] == pytest.approx(h, abs=1e-6)
        assert manifest["held_out"] == {"word": "hedgehog", "slot": "theme@object"}
        # measure --format cogs reads the written level and finds the manifest's entropy
        rec = measure_cogs(read_cogs_tsv(level / "train.tsv"),
                           read_cogs_tsv(level / "gen.tsv"))["cases"][0]
        assert rec["held_out"]["word"] == "hedgehog"
        assert rec["tested_slot_entropy_bits"] == manifest["entropy_bits"]
        lines = (level / "train.tsv").read_text().splitlines(keepends=True)
        assert HEDGEHOG in lines  # the exposure example, byte for byte
        # a subset of COGS's lines in COGS's order, the same number at every level
        rest = iter(source)
        assert all(line in rest for line in lines)  # a subsequence of the source
        sizes.add(len(lines))
        assert sum(counts.values()) == OBJECTS["cake"] + 1  # n = the cake sentences
        for stem in ("dev", "test", "gen"):
            assert (level / f"{stem}.tsv").read_bytes() == (cogs / f"{stem}.tsv").read_bytes()
        assert set(read_cogs_dir(level)) == {"train", "valid", "test", "gen"}
    assert len(sizes) == 1
    top = json.loads((out / "manifest.json").read_text())
    assert top["levels"] == [f"entropy_{t}" for t in LEVELS]
    assert len(top["sources"]["train"]["sha256"]) == 64


def test_same_seed_same_bytes_other_seed_other_sentences(cogs, tmp_path):
    a, b = build(cogs, tmp_path / "a"), build(cogs, tmp_path / "b")
    c = build(cogs, tmp_path / "c", seed=2)
    for target in LEVELS:
        for name in ("train.tsv", "manifest.json"):
            assert (a / f"entropy_{target}" / name).read_bytes() == \
                (b / f"entropy_{target}" / name).read_bytes()
    assert (a / "entropy_1.5" / "train.tsv").read_bytes() != \
        (c / "entropy_1.5" / "train.tsv").read_bytes()
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()


def test_proper_name_case_keeps_the_primitive(cogs, tmp_path):
    out = build(cogs, tmp_path / "out", case="prim_to_obj_proper", levels=[0.0, 2.0])
    for target in (0.0, 2.0):
        text = (out / f"entropy_{target}" / "train.tsv").read_text()
        assert PAULA in text.splitlines(keepends=True)
        h, counts = slot_entropy(out / f"entropy_{target}" / "train.tsv", "theme@object")
        assert abs(h - target) <= 0.01 and "Paula" not in counts


def test_slot_filled_twice_is_left_out(cogs, tmp_path):
    plan = plan_cogs_build(cogs, "prim_to_subj_common", [0.5], 1)
    assert plan.record["held_out"] == {"word": "shark", "slot": "agent@subject"}
    assert plan.record["sentences"]["filling_slot_twice_or_more_left_out"] == 2
    write_cogs_build(tmp_path / "out", plan)
    lines = (tmp_path / "out" / "entropy_0.5" / "train.tsv").read_text().splitlines(True)
    assert SAID not in lines and SHARK in lines


def test_size_option_and_its_bounds(cogs, tmp_path):
    out = build(cogs, tmp_path / "out", levels=[0.0, 2.0], size=310)
    for target in (0.0, 2.0):
        assert len((out / f"entropy_{target}" / "train.tsv").read_text().splitlines()) == 310
    # 1 hedgehog sentence + 300 cake sentences .. + 19 sentences without an object
    with pytest.raises(BuildError, match=r"--size 10: outside 301\.\.320 .*Fix:"):
        plan_cogs_build(cogs, "subj_to_obj_common", [0.0], 1, size=10)
    with pytest.raises(BuildError, match=r"--slot-sentences 999: outside 1\.\.627.*Fix:"):
        plan_cogs_build(cogs, "subj_to_obj_common", [0.0], 1, slot_sentences=999)


def test_unreachable_level_is_refused_with_the_range(cogs, tmp_path, capsys):
    low, high = plan_cogs_build(cogs, "subj_to_obj_common", [0.0], 1).record["reachable_bits"]
    assert low == 0.0 and 2.5 < high < 3.0
    out = tmp_path / "out"
    assert main(["build", "cogs", str(cogs), "--case", "subj_to_obj_common", "--levels",
                 "1,5", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"reachable range [0.000, {high:.3f}] bits" in err and "Fix:" in err
    assert not out.exists()  # refused before anything is written


@pytest.mark.parametrize("case,text", [
    ("no_such_case", "not a COGS generalization case"),
    ("pp_recursion", "a structural case"),
    ("obj_to_subj_common", "no sentence of the case obj_to_subj_common"),
])
def test_bad_case_is_refused(cogs, case, text):
    with pytest.raises(BuildError, match=f"{text}.*Fix:"):
        plan_cogs_build(cogs, case, [0.0], 1)


def test_bad_directory_and_line_are_refused(cogs, tmp_path):
    with pytest.raises(BuildError, match="not a directory.*Fix:"):
        plan_cogs_build(tmp_path / "nowhere", "subj_to_obj_common", [0.0], 1)
    (cogs / "gen.tsv").unlink()
    with pytest.raises(BuildError, match=r"gen\.tsv: file not found.*Fix:"):
        plan_cogs_build(cogs, "subj_to_obj_common", [0.0], 1)
    (cogs / "gen.tsv").write_text("".join(GEN))
    rows = train_rows()
    rows[2] = "A dog ate the cake .\tin_distribution\n"
    (cogs / "train.tsv").write_text("".join(rows))
    with pytest.raises(DataFormatError, match=r"train\.tsv:3: 2 tab-separated columns.*Fix:"):
        plan_cogs_build(cogs, "subj_to_obj_common", [0.0], 1)
    rows[2] = "A dog ate the cake .\teat ( ( x _ 1\tin_distribution\n"
    (cogs / "train.tsv").write_text("".join(rows))
    with pytest.raises(DataFormatError, match=r"train\.tsv:3: .*Fix:"):
        plan_cogs_build(cogs, "subj_to_obj_common", [0.0], 1)
    # gen.tsv of the other LF format (the variable-free release's): one release at a time
    (cogs / "train.tsv").write_text("".join(train_rows()))
    (cogs / "gen.tsv").write_text("A cat ate the hedgehog .\teat ( agent = cat , theme = * "
                                  "hedgehog )\tsubj_to_obj_common\n")
    with pytest.raises(DataFormatError, match=r"gen\.tsv: variable_free logical forms, but "
                                              r".*train\.tsv has original ones.*Fix:"):
        plan_cogs_build(cogs, "subj_to_obj_common", [0.0], 1)
    with pytest.raises(DataFormatError, match=r"gen\.tsv: variable_free logical forms"):
        read_cogs_dir(cogs)
    (cogs / "gen.tsv").write_text("".join(GEN))
    # a training set without the held-out word's own sentence (a cut COGS)
    (cogs / "train.tsv").write_text("".join(r for r in train_rows() if r != HEDGEHOG))
    with pytest.raises(BuildError, match=r"train\.tsv: no sentence holds 'hedgehog', the "
                                         r"held-out word of subj_to_obj_common.*Fix:"):
        plan_cogs_build(cogs, "subj_to_obj_common", [0.0], 1)


def test_levels_twice_or_with_four_decimals_are_refused(cogs):
    with pytest.raises(BuildError, match="given more than once"):
        plan_cogs_build(cogs, "subj_to_obj_common", [1.0, 1.0], 1)
    with pytest.raises(BuildError, match="more than 3 decimals"):
        plan_cogs_build(cogs, "subj_to_obj_common", [1.0004], 1)


def test_interrupted_write_leaves_no_half_level(cogs, tmp_path, monkeypatch):
    plan = plan_cogs_build(cogs, "subj_to_obj_common", [0.0, 1.0], 1)
    real, calls = build_files.shutil.copyfile, []

    def copy_then_fail(a, b):
        calls.append(b)
        if len(calls) == 5:  # the second level's second copy
            raise OSError(28, "No space left on device")
        return real(a, b)

    monkeypatch.setattr(build_files.shutil, "copyfile", copy_then_fail)
    out = tmp_path / "out"
    with pytest.raises(OSError):
        write_cogs_build(out, plan)
    assert sorted(p.name for p in out.iterdir()) == ["entropy_0.0", "manifest.json"]
    assert json.loads((out / "manifest.json").read_text())["levels"] == ["entropy_0.0"]
    monkeypatch.undo()
    write_cogs_build(out, plan)  # the same request completes the build
    assert json.loads((out / "manifest.json").read_text())["levels"] == ["entropy_0.0",
                                                                        "entropy_1.0"]


def test_cli_builds_and_refuses_another_build_in_out(cogs, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["build", "cogs", str(cogs), "--case", "subj_to_obj_common", "--levels", "0,2",
            "--out", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "hedgehog held out of theme@object" in text
    assert re.search(r"entropy_2\.0: H = (1\.99|2\.00)\d* bits \(target 2\)", text)
    assert main(args) == 0  # the same build again
    assert main(args[:-2] + ["--seed", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already holds a different build" in err and "seed: 1 there, 2 now" in err
    assert main(args[:-2] + ["--seed", "2", "--out", str(out), "--force"]) == 0
    assert json.loads((out / "manifest.json").read_text())["seed"] == 2


def test_cli_refuses_an_unknown_case_with_the_lexical_cases(cogs, tmp_path, capsys):
    assert main(["build", "cogs", str(cogs), "--case", "nope", "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "subj_to_obj_common" in err and "Fix:" in err
    assert isinstance(BuildError("x"), UserError)


@pytest.mark.parametrize("extra,named", [
    (["--case", "nosuch"], "--case"),
    (["--levels", "9"], "--levels"),
    (["--levels", "-1"], "--levels"),
    (["--levels", "x"], "--levels"),
    (["--seed", "-1"], "--seed"),
    (["--slot-sentences", "0"], "--slot-sentences"),
    (["--slot-sentences", "100000"], "--slot-sentences"),
    (["--size", "100000"], "--size"),
    (["--out", "@file"], "@file"),
    (["--out", "@file/sub"], "@file"),
    (["@missing"], "@missing"),
    (["@file"], "@file"),
])
def test_misuse_exits_2_with_one_line_a_fix_and_nothing_written(cogs, tmp_path, capsys,
                                                                  extra, named):
    a_file = tmp_path / "a_file"
    a_file.write_text("x\n")
    at = {"@file": str(a_file), "@missing": str(tmp_path / "nosuch")}
    extra = [at.get(x.split("/")[0], x.split("/")[0]) + x[len(x.split("/")[0]):]
             for x in extra]
    argv = ["build", "cogs", str(cogs), "--case", "subj_to_obj_common", "--levels", "0",
            "--out", str(tmp_path / "o")]
    if extra[0].startswith("/"):  # the positional replaced
        argv[2] = extra[0]
    else:
        argv += extra
    before = sorted(tmp_path.rglob("*"))
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert "Fix:" in lines[0] and at.get(named, named) in lines[0], lines[0]
    assert sorted(tmp_path.rglob("*")) == before
