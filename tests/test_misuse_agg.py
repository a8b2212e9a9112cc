"""Misuse of aggregate, grids, presets and sweep, kind by kind: hand-edited score files and
result rows, numbers out of range (resources, schedules), repeated JSON keys, outputs inside
inputs, command-line values blamed on their option, and sample-only sweeps."""
import json
from pathlib import Path

import pytest

from fairseq_entropy.analysis.aggregate import aggregate, collect_scores, read_results_tsv
from fairseq_entropy.analysis.columns import ScoreError
from fairseq_entropy.cli import main as cli
from fairseq_entropy.errors import DataFormatError
from fairseq_entropy.experiments import status as sweep_status
from fairseq_entropy.experiments import sweep
from fairseq_entropy.experiments.grids import GridError, load_grid
from fairseq_entropy.experiments.presets import PresetError, load_presets
from fairseq_entropy.files import loads_json

REPO = Path(__file__).resolve().parents[1]
GRID = """experiment = "exp1"
presets = ["exp1_fconv"]
levels = [0, 3]
seeds = [1]
n = [6000]
"""


def score(path: Path, **changes) -> Path:
    rec = {"experiment": "exp1", "preset": "exp1_fconv", "model": "cnn", "n_train": 6000,
           "level": "entropy_1.5", "entropy_bits": 1.5, "checkpoint": "last", "seed": 1,
           "data_seed": 1, "accuracy": 0.25}
    rec.update(changes)
    path.mkdir(parents=True, exist_ok=True)
    (path / "score.json").write_text(json.dumps(rec))
    return path / "score.json"


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err and lines, err
    assert "error:" in lines[-1] and "Fix:" in lines[-1], err
    return lines[-1]


# -------------------------------------------------------------- hand-edited score.json
@pytest.mark.parametrize("key,value,valid", [
    ("seed", "1", "an integer in 0..2**32-1"),
    ("accuracy", float("nan"), "a finite number in [0, 1]"),
    ("accuracy", 1.7, "a finite number in [0, 1]"),
    ("experiment", "exp3", "one of exp1, exp2, scan"),
    ("n_train", 0, "a positive integer"),
    ("level", "support_3", "entropy_<bits> for exp1"),
    ("entropy_bits", -0.5, "a number of bits in [0, 3]"),
    # measured bits that the level's name contradicts (the builder hits it within 0.01)
    ("entropy_bits", 2.5, "within 0.01 bits of the 1.500 bits that level entropy_1.5 names"),
    ("entropy_bits", 1.489, "within 0.01 bits of the 1.500 bits"),
    ("n", 0, "the number of test commands scored, a positive integer"),
    ("by_conjunction", "x", 'an object of {"accuracy": ..., "n": ...} objects'),
    ("by_shared_verb", {"same_verb": 3}, 'an object of {"accuracy": ..., "n": ...} objects'),
    ("graded", [1], "an object of graded metrics"),
])
def test_a_malformed_score_value_is_refused_naming_file_and_key(tmp_path, key, value, valid):
    good = score(tmp_path / "runs" / "a")
    bad = score(tmp_path / "runs" / "b", **{key: value})
    with pytest.raises(ScoreError) as e:
        collect_scores([tmp_path / "runs"])
    msg = str(e.value)
    assert msg.startswith(f"{bad}: {key} = {value!r}") and valid in msg and "Fix:" in msg
    assert collect_scores([good])[0]["seed"] == 1


def test_a_score_whose_accuracy_is_not_its_count_over_n_is_refused(tmp_path):
    """accuracy must be correct / n: 1764 of 7056 is 0.25 exactly."""
    ok = score(tmp_path / "a", n=7056, correct=1764, accuracy=0.25,
               by_conjunction={"and": {"accuracy": 0.5, "n": 3528}})
    assert collect_scores([ok])[0]["accuracy_and"] == 0.5
    for n, correct, acc, key, valid in (
            (7056, 7056, 0.5, "accuracy", "correct / n = 7056/7056 = 1.000000"),
            (7056, 9000, 0.25, "correct", "an integer in 0..n (7056)"),
            (7056, -1, 0.25, "correct", "an integer in 0..n (7056)")):
        bad = score(tmp_path / "b", n=n, correct=correct, accuracy=acc)
        with pytest.raises(ScoreError) as e:
            collect_scores([bad])
        assert str(e.value).startswith(f"{bad}: {key} = ") and valid in str(e.value)
    bad = score(tmp_path / "c", by_conjunction={"and": {"accuracy": 1.5, "n": 3}})
    with pytest.raises(ScoreError, match=r"by_conjunction\.and\.accuracy = 1\.5, but it must "
                                         r"be a number in \[0, 1\]"):
        collect_scores([bad])


def test_a_level_above_the_verbs_entropy_is_refused(tmp_path):
    f = score(tmp_path / "r", level="entropy_9.0", entropy_bits=9)
    with pytest.raises(ScoreError, match=r"entropy_bits = 9, but it must be a number of bits "
                                         r"in \[0, 3\]"):
        collect_scores([f])
    # the level's own name counts too, with a plausible measured entropy beside it
    f = score(tmp_path / "r", level="entropy_9.0", entropy_bits=2.9)
    with pytest.raises(ScoreError, match="level = 'entropy_9.0'"):
        collect_scores([f])


def test_a_string_seed_beside_the_same_seed_is_not_a_second_seed(tmp_path, capsys):
    score(tmp_path / "runs" / "a")
    score(tmp_path / "runs" / "b", seed="1")
    assert cli(["aggregate", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "seed = '1'" in line and "(a JSON number, not text)" in line
    assert not (tmp_path / "out").exists()


def test_results_tsv_rows_are_checked_like_scores(tmp_path):
    header = ("experiment\tpreset\tmodel\tn_train\tlevel\tentropy_bits\tcheckpoint\tseed\t"
              "data_seed\taccuracy\n")
    row = "exp1\texp1_fconv\tcnn\t6000\tentropy_1.5\t1.5\tlast\t1\t1\t{}\n"
    f = tmp_path / "results.tsv"
    f.write_text(header + row.format("0.5") + row.format("nan"))
    with pytest.raises(ScoreError, match=rf"^{f}:3: accuracy = nan, but it must be a finite "
                                         r"number in \[0, 1\]\. Fix: restore the line"):
        read_results_tsv(f)
    f.write_text(header + row.format("0.5"))
    assert [r["accuracy"] for r in read_results_tsv(f)] == [0.5]
    # a line cut short (or with one field too many) says so, not "empty checkpoint"
    for line, fields in (("exp1\texp1_fconv\tcnn\t6000\tentropy_1.5\n", 5),
                         (row.format("0.5").rstrip("\n") + "\tx\n", 11)):
        f.write_text(header + line)
        with pytest.raises(ScoreError, match=rf"^{f}:2: {fields} tab-separated field\(s\), but "
                                             "the header has 10"):
            read_results_tsv(f)
    # the same table under another name is not read as a score.json ("invalid JSON")
    txt = tmp_path / "results.txt"
    txt.write_text(header + row.format("0.5"))
    with pytest.raises(ScoreError, match=r"not a score\.json, a run directory or a results "
                                         r"table named \*\.tsv \(a file is read by its name\)\. "
                                         r"Fix: pass a score\.json"):
        collect_scores([txt])


# ------------------------------------------------------------------ roots and --out
def test_out_inside_an_input_is_refused_and_nothing_written(tmp_path, capsys):
    score(tmp_path / "runs" / "full3" / "last")
    for out in (tmp_path / "runs" / "full3" / "last", tmp_path / "runs"):
        assert cli(["aggregate", str(tmp_path / "runs"), "--out", str(out)]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert f"--out {out}: inside the input {tmp_path / 'runs'}" in line
    assert sorted(p.name for p in (tmp_path / "runs").rglob("*") if p.is_file()) == \
        ["score.json"]


def test_a_root_given_twice_or_nested_reads_each_file_once(tmp_path):
    score(tmp_path / "runs" / "a")
    rows = collect_scores([tmp_path / "runs", tmp_path / "runs", tmp_path / "runs" / "a",
                           tmp_path / "runs" / "a" / "score.json"])
    assert len(rows) == 1


def test_no_scores_says_what_was_searched_with_a_fix(tmp_path, capsys):
    (tmp_path / "emptyd").mkdir()
    assert cli(["aggregate", str(tmp_path / "emptyd"), "--out", str(tmp_path / "x")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"no score.json under {tmp_path / 'emptyd'}" in line
    hdr = tmp_path / "hdr.tsv"
    hdr.write_text("experiment\tpreset\tmodel\tn_train\tlevel\tentropy_bits\tcheckpoint\tseed"
                   "\tdata_seed\taccuracy\n")
    assert cli(["aggregate", str(hdr), "--out", str(tmp_path / "x")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"no result rows in {hdr} (a header only)" in line and "score.json" not in \
        line.split("Fix:")[0]
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------- one run twice, cells that mix
COGS_SCHEDULE = {"max_update": 100, "train_args_sha256": "ab" * 32, "updates": 100}


def cogs_score(path: Path, seed: int, accuracy: float, cases: bool = True) -> Path:
    extra = {"by_case": {"obj_to_subj_common": {"accuracy": accuracy, "n": 1000}},
             "by_case_type": {"lexical": {"accuracy": accuracy, "n": 1000}}} if cases else {}
    return score(path, experiment="cogs", preset="cogs_transformer_sinusoidal",
                 model="transformer_sinusoidal", n_train=24155, level="cogs",
                 entropy_bits=None, seed=seed, accuracy=accuracy, split="gen",
                 schedule=COGS_SCHEDULE, **extra)


def results_seeds(path: Path):
    lines = path.read_text().splitlines()
    seed = lines[0].split("\t").index("seed")
    return sorted(int(line.split("\t")[seed]) for line in lines[1:])


def test_an_earlier_results_tsv_beside_its_cogs_runs_is_refused(tmp_path, capsys):
    """COGS rows get the duplicate check too: following "to add runs, pass its results.tsv"
    but passing the old run directories again would put each seed in twice."""
    runs = tmp_path / "runs"
    cogs_score(runs / "seed1" / "gen-last", 1, 0.8)
    cogs_score(runs / "seed2" / "gen-last", 2, 0.6)
    first = tmp_path / "first"
    assert cli(["aggregate", str(runs), "--out", str(first)]) == 0
    assert results_seeds(first / "results.tsv") == [1, 2]
    capsys.readouterr()
    second = tmp_path / "second"
    assert cli(["aggregate", str(first / "results.tsv"), str(runs), "--out", str(second)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"{runs / 'seed1' / 'gen-last' / 'score.json'} and {first / 'results.tsv'}:2 are " \
        "both seed 1 of {'experiment': 'cogs+gen'" in line
    assert "Fix: pass either the earlier results.tsv or the run directories" in line
    assert not second.exists()
    # adding a run the right way: the earlier results.tsv and only the new run directory
    new = tmp_path / "new"
    cogs_score(new / "seed3" / "gen-last", 3, 0.7)
    assert cli(["aggregate", str(first / "results.tsv"), str(new), "--out", str(second)]) == 0
    assert results_seeds(second / "results.tsv") == [1, 2, 3]
    # a copied COGS run directory (here without its per-case tables) is the same run twice
    cogs_score(runs / "copy" / "gen-last", 1, 0.8, cases=False)
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "third")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "are both seed 1 of {'experiment': 'cogs+gen'" in line
    assert "Fix: aggregate only one of them" in line
    assert not (tmp_path / "third").exists()


EXP2 = dict(experiment="exp2", preset="exp2_cnn_authors", model="cnn_authors",
            level="support_4", entropy_bits=2.0,
            schedule={"max_update": 2000, "train_args_sha256": "cd" * 32, "updates": 2000})


def test_exp2_runs_on_training_sets_of_different_sizes_are_never_one_cell(tmp_path, capsys):
    """Experiment 2's cell has no N (it grows with the support): seeds built with another
    --valid-fraction (23464 and 19760 training commands) are refused, not averaged."""
    runs = tmp_path / "runs"
    a = score(runs / "seed1", seed=1, data_seed=1, n_train=23464, accuracy=0.95, **EXP2)
    b = score(runs / "seed2", seed=2, data_seed=2, n_train=19760, accuracy=0.40, **EXP2)
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "out")]) == 2
    line = one_error_line(capsys.readouterr().err)
    # rows are sorted by n_train: the 19760 run is the cell's first, the other named first
    assert f"{a} (n_train 23464) and {b} (n_train 19760) are runs of one cell, exp2 " \
        "exp2_cnn_authors support_4 last, trained on different training sets" in line
    assert "Fix: aggregate the runs of each build apart" in line
    assert not (tmp_path / "out").exists()
    # the report alone refuses them too, before writing summary.tsv
    from fairseq_entropy.analysis.report import write_report
    with pytest.raises(ScoreError, match="trained on different training sets"):
        write_report(collect_scores([runs]), tmp_path / "rep")
    assert not (tmp_path / "rep" / "summary.tsv").exists()
    # one build: the printed table and summary.tsv give the same N, the mean of both seeds
    score(runs / "seed2", seed=2, data_seed=2, n_train=23464, accuracy=0.40, **EXP2)
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "out")]) == 0
    table = [ln.split() for ln in capsys.readouterr().out.splitlines()
             if ln.startswith("exp2 ")]
    assert [(t[2], t[6], t[8]) for t in table] == [("23464", "0.6750", "2")]
    summary = (tmp_path / "out" / "summary.tsv").read_text().splitlines()
    head = summary[0].split("\t")
    (cell,) = [dict(zip(head, ln.split("\t"))) for ln in summary[1:]]
    assert (cell["n_train"], cell["n"]) == ("23464", "2")
    assert float(cell["mean"]) == pytest.approx((0.95 + 0.40) / 2)


def test_a_run_with_and_without_its_schedule_is_refused(tmp_path, capsys):
    """An older results.tsv (no schedule columns) beside the same run re-scored with its
    schedule would put seed 1 in two cells, "unknown" and "max_update=4500 ..."."""
    old = tmp_path / "old_results.tsv"
    old.write_text("experiment\tpreset\tmodel\tn_train\tlevel\tentropy_bits\tcheckpoint\t"
                   "seed\tdata_seed\taccuracy\n"
                   "exp1\texp1_fconv\tcnn\t6000\tentropy_1.5\t1.500000\tlast\t1\t1\t0.25\n")
    sched = {"max_update": 4500, "train_args_sha256": "ef" * 32, "updates": 4500}
    new = score(tmp_path / "runs" / "seed1", schedule=sched)
    assert cli(["aggregate", str(old), str(tmp_path / "runs"), "--out",
                str(tmp_path / "out")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"{old}:2 (schedule unknown) and {new} (schedule max_update=4500 args=efefefef) " \
        "are both seed 1 of exp1 exp1_fconv N=6000 entropy_1.5 last" in line
    assert not (tmp_path / "out").exists()
    # another seed of the older aggregate is no conflict: two cells, one seed each
    score(tmp_path / "runs" / "seed1", seed=2, schedule=sched)
    assert cli(["aggregate", str(old), str(tmp_path / "runs"), "--out",
                str(tmp_path / "out")]) == 0
    assert results_seeds(tmp_path / "out" / "results.tsv") == [1, 2]


def test_a_curve_row_without_entropy_is_refused_or_left_off_the_curve(tmp_path, capsys):
    """exp1 and exp2 levels always record their entropy: a score without it is refused with
    its file; a SCAN split without a controlled slot (no entropy) gets a row in summary.tsv
    and no point on a curve, instead of a TypeError."""
    bad = score(tmp_path / "exp1" / "a", entropy_bits=None)
    assert cli(["aggregate", str(tmp_path / "exp1"), "--out", str(tmp_path / "o1")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.endswith(f"error: {bad}: entropy_bits = None, but it must be the measured "
                         "entropy of the level in bits (every exp1 and exp2 level records it;"
                         " its curve needs it). Fix: score again with fairseq-entropy score "
                         "--data LEVEL_DIR --preset NAME --seed S --checkpoint last|best "
                         "--force (or restore the file's value)")
    scan = dict(experiment="scan", preset="scan_cnn")
    for lvl, h, seed, acc in (("addprim_jump", None, 1, 0.1), ("simple", 2.5, 1, 0.9),
                              ("length", 1.0, 1, 0.2), ("around_right", 2.0, 1, 0.6)):
        score(tmp_path / "scan" / lvl, level=lvl, entropy_bits=h, seed=seed, accuracy=acc,
              **scan)
    res = aggregate([tmp_path / "scan"], tmp_path / "o2")
    lines = (tmp_path / "o2" / "summary.tsv").read_text().splitlines()
    head = lines[0].split("\t")
    cells = {c["level"]: c for c in (dict(zip(head, ln.split("\t"))) for ln in lines[1:])}
    assert cells["addprim_jump"]["entropy_bits"] == "" and cells["addprim_jump"]["agree"] \
        == "n/a" and float(cells["addprim_jump"]["mean"]) == pytest.approx(0.1)
    assert "no entropy recorded" in cells["addprim_jump"]["note"]
    # the curve holds the three splits with an entropy: rho of (1.0, 2.0, 2.5) vs
    # (0.2, 0.6, 0.9) is 1
    curves = (tmp_path / "o2" / "curves.tsv").read_text().splitlines()
    (curve,) = [dict(zip(curves[0].split("\t"), ln.split("\t"))) for ln in curves[1:]]
    assert (curve["levels"], float(curve["rho"])) == ("3", 1.0)
    assert res["spearman"][("scan", "scan_cnn", 6000, "last", "unknown")] == 1.0


# ------------------------------------------------------------- JSON repeated keys
def test_a_repeated_json_key_is_refused_with_its_line():
    text = '{\n "a": {"x": 1, "n": {"x": 2}},\n "b": [{"x": 1}],\n "a": {}\n}'
    with pytest.raises(DataFormatError, match=r"^f\.json:4: key 'a' is repeated"):
        loads_json(text, "f.json")
    # the same key in different objects is fine
    assert loads_json('{"a": {"x": 1}, "b": {"x": 2}}', "f") == {"a": {"x": 1}, "b": {"x": 2}}


def test_presets_file_misuse_is_refused_with_a_fix(tmp_path):
    f = tmp_path / "p.json"
    f.write_text('{\n "my": {"extends": "exp1_fconv"},\n "my": {"extends": "exp1_fconv", '
                 '"lr": 0.1}\n}\n')
    with pytest.raises(PresetError, match=rf"^{f}:3: key 'my' is repeated in one object.*Fix:"):
        load_presets(f)
    for text, what in (("", "the presets file is empty"), ("[]", "got a JSON list"),
                       ('{"my": 3}', "preset 'my' is a JSON int")):
        f.write_text(text)
        with pytest.raises(PresetError) as e:
            load_presets(f)
        assert what in str(e.value) and "Fix:" in str(e.value)


def test_json_grid_with_a_repeated_key_is_refused(tmp_path):
    g = tmp_path / "g.json"
    g.write_text('{"experiment": "exp1", "presets": ["exp1_fconv"], "levels": [0],\n'
                 '"seeds": [1],\n"seeds": [2]}')
    with pytest.raises(GridError, match=rf"^{g}:3: key 'seeds' is repeated"):
        load_grid(g)


# ------------------------------------------------------------------ numbers in range
@pytest.mark.parametrize("line,problem", [
    ("timeout_min = -5", "timeout_min = -5 must be > 0"),
    ("cpus_per_task = 0", "cpus_per_task = 0 must be > 0"),
    ("mem_gb = nan", "mem_gb = nan is not a finite number"),
    ("slurm_mem_gb = inf", "slurm_mem_gb = inf is not a finite number"),
])
def test_resources_out_of_range_fail_the_dry_run(tmp_path, capsys, line, problem):
    g = tmp_path / "g.toml"
    g.write_text(GRID + f"[resources]\ngpus_per_node = 0\n{line}\n")
    assert cli(["sweep", str(g), "--dry-run", "--root", str(tmp_path / "r")]) == 2
    err = one_error_line(capsys.readouterr().err)
    assert f"{g}:8: [resources] {problem}. Fix: write a finite, positive" in err


def test_schedule_bounds(tmp_path, capsys):
    g = tmp_path / "g.toml"
    for sched in ("{max_update = 99999999999999999999}", "{epochs = 1e9}"):
        g.write_text(GRID + f"schedule = {sched}\n")
        with pytest.raises(GridError, match=r"g.toml:6: schedule .*0 < E <= 100000 .*"
                                            r"0 < U <= 1000000000"):
            load_grid(g)
    g.write_text(GRID + "schedule = {max_update = 1000000000}\n")
    assert load_grid(g).schedule.max_update == 10 ** 9
    for opt, value, bound in (("--max-update", "99999999999999999999", "1..1000000000"),
                              ("--epochs", "1e9", "(0, 100000]")):
        with pytest.raises(SystemExit) as e:  # argparse's error
            cli(["train-args", "exp1_fconv", "--data", ".", opt, value])
        assert e.value.code == 2
        line = one_error_line(capsys.readouterr().err)
        assert f"argument {opt}" in line and bound in line
    f = tmp_path / "p.json"
    f.write_text('{"my": {"extends": "exp1_fconv", "epochs": 1e9}}')
    with pytest.raises(PresetError, match=r"'epochs' = 1000000000.0, but it must be a "
                                          r"positive number <= 100000"):
        load_presets(f)


# ------------------------------------------------------ command-line values and devices
def test_command_line_values_are_blamed_on_their_option(tmp_path, capsys):
    g = tmp_path / "ok.toml"
    g.write_text(GRID)
    assert cli(["sweep", str(g), "--dry-run", "--user-dir", str(g)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"--user-dir {g}: not a Python package directory" in line and "ok.toml:1" not in line
    assert cli(["sweep", str(g), "--dry-run", "--presets", str(g)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"error: --presets {g}:1: invalid JSON" in line


def test_gpu_sweep_without_a_gpu_is_a_user_error(tmp_path, capsys):
    g = tmp_path / "ok.toml"
    g.write_text(GRID)
    assert cli(["sweep", str(g), "--dry-run", "--device", "gpu", "--gpus", "0",
                "--root", str(tmp_path / "r")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "--device gpu: no GPU found (--gpus 0 was given)" in line


def test_train_args_field_prints_shell_words_and_refuses_extends(capsys):
    assert cli(["train-args", "exp1_cnn_authors", "--data", ".", "--field", "extends"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "--field extends: not a field of a loaded preset" in line and "model_args" in line
    preset = load_presets()["exp1_cnn_authors"]
    assert cli(["train-args", "exp1_cnn_authors", "--data", ".", "--field", "model_args"]) == 0
    assert capsys.readouterr().out.split() == preset["model_args"]


# ------------------------------------------------------------------- --decode-sample
FAKE_RECIPE = """#!/bin/bash
# PRESET DATABIN RUN_DIR: writes only a sample score, as train_level.sh with DECODE_SAMPLE
[ -n "$DECODE_SAMPLE" ] || exit 3
mkdir -p "$3/sample"
echo "{\\"n\\": $DECODE_SAMPLE, \\"accuracy\\": 0.5}" > "$3/sample/score.json"
"""


def test_decode_sample_reaches_the_run_and_is_not_a_full_score(tmp_path, monkeypatch,
                                                                  capsys):
    g = tmp_path / "ok.toml"
    g.write_text(GRID)
    assert cli(["sweep", str(g), "--dry-run", "--decode-sample", "7", "--device", "cpu",
                "--jobs", "1", "--root", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert out.count(" --decode-sample 7") == 2  # one per cell
    assert cli(["sweep", str(g), "--decode-sample", "7", "--executor", "slurm"]) == 2
    assert "--decode-sample with --executor slurm" in one_error_line(capsys.readouterr().err)
    recipe = tmp_path / "fake.sh"
    recipe.write_text(FAKE_RECIPE)
    monkeypatch.setattr(sweep, "prepare_data", lambda cell, root, env: None)
    cell = load_grid(g).cells()[0]
    root = tmp_path / "root"
    res = sweep.run_cell(cell, root, {"DECODE_SAMPLE": "7"}, recipe)
    assert res.status == "done" and res.accuracy is None
    assert "a sample of 7 test sentences only, accuracy 0.5" in res.reason
    assert sweep.scored(cell, root) is None  # a rerun trains and scores it in full
    assert "  done: " in sweep_status.format_summary([res])
    # without DECODE_SAMPLE the same unscored run is a failure, never "done"
    assert sweep.run_cell(cell, root, {}, recipe).status == "failed"
