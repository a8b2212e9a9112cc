"""The COGS entropy study as a grid: a grid of ``experiment = "cogs"`` (its cells, the
build / binarize / run commands its dry run prints, its bad values refused with file:line and
a fix), a ``build cogs`` level binarized with its case's gen sentences as a split of their own
and its entropy carried into ``score.json`` and the result rows, ``aggregate`` and
``predict`` over fake level scores (Spearman and H50 against values computed here), and one
cell swept end to end on the hand-written COGS fixture of tests/test_cogs_build.py."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_entropy.analysis.aggregate import collect_scores
from fairseq_entropy.analysis.provenance import load_data_manifest, provenance
from fairseq_entropy.analysis.scoring import write_score
from fairseq_entropy.cli import main as cli
from fairseq_entropy.cogs.binarize import case_splits
from fairseq_entropy.experiments.grids import GridError, load_grid
from test_cogs_build import GEN, slot_entropy, write_cogs_dir

REPO = Path(__file__).resolve().parents[1]
PRESET = "cogs_transformer_sinusoidal"
CASES = ("subj_to_obj_common", "prim_to_obj_proper")


@pytest.fixture
def cogs(tmp_path):
    """The fixture of tests/test_cogs_build.py (theme@object reaches 0 - 2.904 bits)."""
    return write_cogs_dir(tmp_path)


def grid_file(tmp_path, body, name="g.toml"):
    path = tmp_path / name
    path.write_text(body)
    return path


GRID = f"""experiment = "cogs"
cogs_dir = "cogs"
cases = ["subj_to_obj_common", "prim_to_obj_proper"]
levels = [0, 1, 2]
seeds = [1, 2]
presets = ["{PRESET}"]
schedule = {{max_update = 4}}
"""


# ----------------------------------------------------------------------------------- grid
def test_the_recipe_grid_expands_to_two_cases_eight_levels_three_seeds(cogs, tmp_path):
    text = (REPO / "recipes/grids/cogs_entropy.toml").read_text()
    default = "../../data/ReCOGS/variable_free"
    assert f'cogs_dir = "{default}"' in text and "frankaging/ReCOGS" in text
    # the recipe's cogs_dir must be set: refused, naming its line, until the folder is there
    line = text.splitlines().index(f'cogs_dir = "{default}"') + 1
    if not (REPO / "data/ReCOGS/variable_free/train.tsv").is_file():
        with pytest.raises(GridError, match=rf"cogs_entropy.toml:{line}: cogs_dir = "
                                            rf"'{default}': .* Fix: set cogs_dir"):
            load_grid(REPO / "recipes/grids/cogs_entropy.toml")
    grid = load_grid(grid_file(tmp_path, text.replace(default, "cogs")))
    cells = grid.cells()
    assert len(cells) == 2 * 8 * 3 and grid.cases == list(CASES)
    assert {c.preset for c in cells} == {PRESET} and {c.n for c in cells} == {None}
    assert sorted({c.level for c in cells}) == list(range(8))
    assert grid.seeds == [830, 231, 42] and grid.cogs_dir == str(cogs.resolve())
    # ordered case, level, seed: whole curves of a case first
    assert [(c.case, c.level, c.seed) for c in cells[:4]] == [
        (CASES[0], 0, 830), (CASES[0], 0, 231), (CASES[0], 0, 42), (CASES[0], 1, 830)]
    assert len({c.data_key for c in cells}) == 48 and len({c.name for c in cells}) == 48
    assert grid.cells(cases=["prim_to_obj_proper"], levels=[7], seeds=[42])[0].name == \
        f"cogs+case=prim_to_obj_proper/{PRESET}/seed42/entropy_7.0"


def test_dry_run_lists_build_binarize_and_run_per_cell(cogs, tmp_path, capsys):
    root = tmp_path / "root"
    assert cli(["sweep", str(grid_file(tmp_path, GRID)), "--dry-run", "--root", str(root),
                "--device", "cpu", "--jobs", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "12 cells (1 preset(s) x 2 case(s) x 3 levels x 2 seeds)" in out[0]
    assert sum(ln.startswith("# cell ") for ln in out) == 12
    assert sum(ln.startswith("fairseq-entropy build cogs ") for ln in out) == 12
    assert sum(ln.startswith("fairseq-entropy binarize --format cogs ") for ln in out) == 12
    # the commands of one cell, written out here
    tag = "cogs+case=prim_to_obj_proper"
    build = root / "data" / tag / "seed2" / "entropy_1.0"
    databin = root / "data-bin" / tag / "seed2" / "entropy_1.0"
    run = root / "runs" / tag / PRESET / "seed2" / "entropy_1.0"
    at = out.index(f"fairseq-entropy build cogs {cogs.resolve()} --case prim_to_obj_proper "
                   f"--levels 1 --seed 2 --out {build}")
    assert out[at + 1] == (f"fairseq-entropy binarize --format cogs {build / 'entropy_1.0'} "
                           f"--out {databin}")
    assert out[at + 2] == f"# cell 10/12 {tag}/{PRESET}/seed2/entropy_1.0"
    assert out[at + 3].startswith("OMP_NUM_THREADS=1 ")
    assert out[at + 3].endswith(f"-m fairseq_entropy.cli run {PRESET} {databin} {run} --seed 2 "
                                "--max-update 4 --device cpu --select valid --gen-batch 512 "
                                "--valid-batch 512")
    assert not root.exists()  # a dry run writes nothing
    assert cli(["sweep", str(tmp_path / "g.toml"), "--dry-run", "--root", str(root),
                "--device", "cpu", "--case", "subj_to_obj_common", "--seed", "1"]) == 0
    assert "3 cells (1 preset(s) x 1 case(s) x 3 levels x 1 seeds)" in capsys.readouterr().out


@pytest.mark.parametrize("change,line,needle", [
    (('cases = ["subj_to_obj_common", "prim_to_obj_proper"]', 'cases = ["nope"]'), 3,
     "cases: 'nope' is not a COGS generalization case. Fix: choose lexical cases"),
    (('cases = ["subj_to_obj_common", "prim_to_obj_proper"]', 'case = "pp_recursion"'), 3,
     "case: 'pp_recursion' is a structural case"),
    (('cases = ["subj_to_obj_common", "prim_to_obj_proper"]',
      'cases = ["prim_to_obj_proper", "prim_to_obj_proper"]'), 3, "cases repeats a case"),
    (('cases = ["subj_to_obj_common", "prim_to_obj_proper"]\n', ""), 1,
     r"missing key 'case' \(or 'cases'\). Fix:"),
    (('levels', 'case = "subj_to_obj_common"\nlevels'), 3, "both case and cases are given"),
    (('cogs_dir = "cogs"\n', ""), 1, "missing key 'cogs_dir'. Fix: cogs_dir ="),
    (('cogs_dir = "cogs"', 'cogs_dir = "nowhere"'), 2,
     "cogs_dir = 'nowhere': .*nowhere is not a directory. Fix: set cogs_dir"),
    (('cogs_dir = "cogs"', 'cogs_dir = "cogs/gen.tsv"'), 2, "is not a directory"),
    (('levels = [0, 1, 2]', 'levels = [0, 1.0004]'), 4, "more than 3 decimals"),
    (('levels = [0, 1, 2]', 'levels = [-1, 1]'), 4, r"holds -1, .* in >= 0"),
    (('seeds', 'n = [300]\nseeds'), 5, "n is given, but a COGS level's size follows"),
    (('seeds', 'build_args = ["--size", "300"]\nseeds'), 5, "build_args is given"),
    (('seeds', 'pack = 4\nseeds'), 5, "pack = 4, but the levels of a COGS case have"),
    (('"cogs_transformer_sinusoidal"', '"exp1_fconv"'), 6,
     "preset 'exp1_fconv' is a preset of exp1 but the grid is of cogs"),
])
def test_bad_cogs_grids_are_refused_with_file_line_and_fix(cogs, tmp_path, change, line,
                                                             needle):
    path = grid_file(tmp_path, GRID.replace(*change, 1))
    with pytest.raises(GridError, match=rf"g.toml:{line}: .*{needle}") as e:
        load_grid(path)
    assert "Fix:" in str(e.value)


def test_cogs_keys_in_another_experiments_grid_and_gen_without_a_case(cogs, tmp_path):
    with pytest.raises(GridError, match=r"g.toml:5: case is a key of COGS grids, but the "
                                        r"grid is of exp1. Fix: remove it"):
        load_grid(grid_file(tmp_path, 'experiment = "exp1"\nlevels = [1]\nseeds = [1]\n'
                                      'presets = ["exp1_fconv"]\ncase = "x"\n'))
    (cogs / "gen.tsv").unlink()
    with pytest.raises(GridError, match=r"g.toml:2: .*has no gen.tsv. Fix: set cogs_dir"):
        load_grid(grid_file(tmp_path, GRID))


def test_unreachable_levels_and_packs_are_refused_before_anything_is_written(
        cogs, tmp_path, capsys):
    grid = grid_file(tmp_path, GRID.replace("levels = [0, 1, 2]", "levels = [0, 5]"))
    root = tmp_path / "root"
    for dry in (["--dry-run"], []):
        assert cli(["sweep", str(grid), "--root", str(root), "--device", "cpu", *dry]) == 2
        out, err = capsys.readouterr()
        assert out == ""  # no "# grid" header above the error
        assert f"{grid}:4: levels 0, 5 of case subj_to_obj_common cannot all be built" in err
        assert "reachable range [0.000, 2.904] bits" in err and "Fix:" in err
        assert not root.exists()
    # a malformed COGS file is the file's fault, not the grid's levels'
    train = cogs / "train.tsv"
    good = train.read_text()
    train.write_text(good + "A cat ran .\tonly two columns\n")
    assert cli(["sweep", str(grid_file(tmp_path, GRID)), "--dry-run", "--root", str(root)]) == 2
    out, err = capsys.readouterr()
    train.write_text(good)
    assert out == ""
    lines = len(good.splitlines()) + 1
    assert f"{train}:{lines}: " in err and "cannot all be built" not in err, err
    assert cli(["sweep", str(grid_file(tmp_path, GRID)), "--dry-run", "--root", str(root),
                "--pack", "2"]) == 2
    err = capsys.readouterr().err
    assert "--pack 2: the levels of a COGS case have dictionaries of their own" in err
    assert cli(["sweep", str(tmp_path / "g.toml"), "--dry-run", "--root", str(root),
                "--case", "prim_to_subj_common"]) == 2
    assert "case(s) prim_to_subj_common not in the grid. Fix: choose from subj_to_obj_common, " \
           "prim_to_obj_proper" in capsys.readouterr().err


# ----------------------------------------------------------------------- data and scores
def build_level(cogs, tmp_path, level="1", case="subj_to_obj_common", seed="3"):
    out = tmp_path / "build"
    assert cli(["build", "cogs", str(cogs), "--case", case, "--levels", level, "--seed", seed,
                "--out", str(out)]) == 0
    name = f"entropy_{float(level)}"
    databin = tmp_path / "bin" / name
    assert cli(["binarize", "--format", "cogs", str(out / name), "--out", str(databin)]) == 0
    return out / name, databin


def test_a_build_level_is_binarized_with_its_case_and_entropy(cogs, tmp_path, capsys):
    level, databin = build_level(cogs, tmp_path)
    m = json.loads((databin / "manifest.json").read_text())
    built = json.loads((level / "manifest.json").read_text())
    h, _ = slot_entropy(level / "train.tsv", "theme@object")  # Eq. 1 written out in the test
    assert m["entropy_bits"] == built["entropy_bits"] == pytest.approx(h, abs=1e-6)
    assert abs(h - 1.0) <= 0.01 and m["target_entropy_bits"] == 1.0
    assert (m["level"], m["case"], m["seed"]) == ("entropy_1.0", "subj_to_obj_common", 3)
    assert m["held_out"] == {"word": "hedgehog", "slot": "theme@object"}
    # gen_case: the gen.tsv lines of the case, in their order (2 of the fixture's 5)
    mine = [line.split("\t")[0] for line in GEN if line.endswith("\tsubj_to_obj_common\n")]
    assert m["sizes"]["gen_case"] == len(mine) == 2 and m["sizes"]["gen"] == 5
    assert (databin / "gen_case.case").read_text().split() == ["subj_to_obj_common"] * 2
    assert (databin / "gen_case.in-out.in.bin").is_file() and case_splits(databin) == \
        ["gen_case"]
    assert "case subj_to_obj_common" in capsys.readouterr().out
    # COGS's own folder keeps today's layout: no case, no gen_case split
    assert cli(["binarize", "--format", "cogs", str(cogs), "--out", str(tmp_path / "own")]) == 0
    own = json.loads((tmp_path / "own" / "manifest.json").read_text())
    assert "case" not in own and "gen_case" not in own["sizes"] and own["level"] == "own"
    assert case_splits(tmp_path / "own") == []


def test_a_scored_level_carries_its_entropy_and_case_into_its_result_row(cogs, tmp_path):
    _, databin = build_level(cogs, tmp_path)
    manifest, sha = load_data_manifest(databin)
    meta = provenance(manifest, sha, databin, "gen_case", "last", PRESET,
                      "transformer_sinusoidal", 7)
    lines = [line.split("\t") for line in GEN if line.endswith("\tsubj_to_obj_common\n")]
    gen = tmp_path / "generate-gen_case-last.txt"  # the first right, the second wrong
    gen.write_text("".join(f"S-{i}\t{s}\nT-{i}\t{lf}\nH-{i}\t-0.1\t{lf if i == 0 else 'x'}\n"
                           for i, (s, lf, _) in enumerate(lines)))
    rec = write_score(gen, tmp_path / "run" / "gen_case-last", meta, databin, "gen_case")
    assert rec["accuracy"] == 0.5 and rec["by_case"] == {
        "subj_to_obj_common": {"accuracy": 0.5, "n": 2}}
    assert rec["case"] == "subj_to_obj_common" and rec["variant"] == "case=subj_to_obj_common"
    assert rec["entropy_bits"] == manifest["entropy_bits"] and rec["data_seed"] == 3
    (row,) = collect_scores([tmp_path / "run"])
    assert row["experiment"] == "cogs+case=subj_to_obj_common+gen_case"
    assert (row["level"], row["entropy_bits"], row["accuracy"]) == (
        "entropy_1.0", manifest["entropy_bits"], 0.5)


# ------------------------------------------------------------------- aggregate, predict
#: the levels' measured bits (the seed-1 levels of docs/cogs.md)
BITS = (0.0, 1.0019, 2.0005, 3.0009, 4.0003)
#: accuracy on the in-distribution test split per level: ranks 2 1 3 5 4 against 1 2 3 4 5,
#: so Spearman rho = 1 - 6 (1 + 1 + 0 + 1 + 1) / (5 (25 - 1)) = 0.8
TEST_ACC = (0.9, 0.8, 0.95, 0.97, 0.96)


def logistic(h, k=3.0, h50=2.2):
    return 1 / (1 + math.exp(-k * (h - h50)))


def fake_score(root, split, bits, seed, acc, case="subj_to_obj_common"):
    level = f"entropy_{round(bits):.1f}"
    d = root / f"seed{seed}" / level / ("last" if split == "test" else f"{split}-last")
    d.mkdir(parents=True)
    (d / "score.json").write_text(json.dumps({
        "experiment": "cogs", "variant": f"case={case}" if case else "", "preset": PRESET,
        "model": "transformer_sinusoidal", "n_train": 15956, "level": level,
        "entropy_bits": bits, "checkpoint": "last", "seed": seed, "data_seed": seed,
        "accuracy": acc, "split": split, "case": case,
        "by_case": {case if split != "test" else "in_distribution": {"accuracy": acc,
                                                                        "n": 1000}}}))


def test_aggregate_and_predict_fit_a_curve_per_case_and_split(tmp_path, capsys):
    runs = tmp_path / "runs"
    for seed, delta in ((1, 0.001), (2, -0.001)):
        for bits, test_acc in zip(BITS, TEST_ACC):
            fake_score(runs, "gen_case", bits, seed, logistic(bits) + delta)
            fake_score(runs, "test", bits, seed, test_acc)
    # a run on COGS's own training set: no level, so no point of a curve (cases.tsv only)
    own = runs / "own" / "gen-last"
    own.mkdir(parents=True)
    (own / "score.json").write_text(json.dumps({
        "experiment": "cogs", "preset": PRESET, "model": "transformer_sinusoidal",
        "n_train": 24155, "level": "vf", "entropy_bits": None, "checkpoint": "last",
        "seed": 1, "data_seed": None, "accuracy": 0.6, "split": "gen",
        "by_case": {"subj_to_obj_common": {"accuracy": 0.8, "n": 1000}}}))
    out = tmp_path / "agg"
    assert cli(["aggregate", str(runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    gen_exp, test_exp = "cogs+case=subj_to_obj_common+gen_case", "cogs+case=subj_to_obj_common"
    assert f"Spearman(entropy, accuracy) {test_exp} {PRESET} N=15956 last" in printed

    def table(name):
        lines = (out / name).read_text().splitlines()
        return [dict(zip(lines[0].split("\t"), ln.split("\t"))) for ln in lines[1:]]

    results = table("results.tsv")
    assert len(results) == 21 and {r["experiment"] for r in results} == {
        gen_exp, test_exp, "cogs+gen"}
    first = next(r for r in results if r["experiment"] == gen_exp and r["seed"] == "1")
    assert (first["level"], float(first["entropy_bits"])) == ("entropy_0.0", 0.0)
    curves = {c["experiment"]: c for c in table("curves.tsv")}
    assert set(curves) == {gen_exp, test_exp}  # COGS's own training set: no curve
    assert float(curves[test_exp]["rho"]) == pytest.approx(0.8)
    assert float(curves[gen_exp]["rho"]) == pytest.approx(1.0)
    assert float(curves[gen_exp]["h50"]) == pytest.approx(2.2, abs=1e-3)
    assert (curves[gen_exp]["levels"], curves[gen_exp]["seeds"]) == ("5", "2")
    assert curves[test_exp]["h50"] == "nan"  # every test accuracy is above 0.5
    summary = [r for r in table("summary.tsv") if r["experiment"] == gen_exp]
    assert [round(float(r["mean"]), 6) for r in summary] == \
        [round(logistic(b), 6) for b in BITS]
    cases = table("cases.tsv")
    assert {(c["experiment"], c["level"]) for c in cases if c["case"] == "subj_to_obj_common"} \
        == {("cogs+gen", "vf"), *((gen_exp, f"entropy_{i}.0") for i in range(5))}
    assert cli(["predict", str(out / "results.tsv"), "--entropy", "2.2", "--json"]) == 0
    fits = {c["experiment"]: c for c in json.loads(capsys.readouterr().out)["curves"]}
    assert fits[gen_exp]["h50"] == pytest.approx(2.2, abs=1e-3)
    assert fits[gen_exp]["predicted"] == pytest.approx(0.5, abs=1e-3)
    assert fits[gen_exp]["rho"] == pytest.approx(1.0) and fits[test_exp]["h50"] is None
    # the level left out is predicted by the fit of the others: exact logistic data
    assert all(abs(x["error"]) < 1e-3 for x in fits[gen_exp]["loo"])


# ---------------------------------------------------------------------------- end to end
@pytest.mark.slow  # one COGS cell: build, binarize, 4 updates, 4 decodes, 4 scores
def test_one_cogs_cell_swept_end_to_end(cogs, tmp_path):
    grid = grid_file(tmp_path, GRID)
    root = tmp_path / "root"
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
               OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-m", "fairseq_entropy.cli", "sweep", str(grid),
                          "--root", str(root), "--device", "cpu", "--jobs", "1", "--case",
                          "subj_to_obj_common", "--level", "2", "--seed", "1"],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "done 1, failed 0" in res.stdout
    run = root / "runs/cogs+case=subj_to_obj_common" / PRESET / "seed1/entropy_2.0"
    built = json.loads((root / "data/cogs+case=subj_to_obj_common/seed1/entropy_2.0/"
                        "entropy_2.0/manifest.json").read_text())
    scores = {d: json.loads((run / d / "score.json").read_text())
              for d in ("last", "best", "gen_case-last", "gen_case-best")}
    for name, rec in scores.items():
        assert rec["entropy_bits"] == built["entropy_bits"] and rec["data_seed"] == 1
        assert rec["case"] == "subj_to_obj_common" and rec["level"] == "entropy_2.0"
        assert rec["checkpoint"] == ("last" if name.endswith("last") else "best")
    assert scores["last"]["split"] == "test" and scores["last"]["n"] == 1
    assert scores["gen_case-last"]["split"] == "gen_case" and scores["gen_case-last"]["n"] == 2
    assert set(scores["gen_case-last"]["by_case"]) == {"subj_to_obj_common"}
    assert "'gen_subset': 'gen_case'" in (run / "generate-gen_case-last.log").read_text()
    assert cli(["aggregate", str(root / "runs"), "--out", str(tmp_path / "agg")]) == 0
    rows = (tmp_path / "agg" / "results.tsv").read_text().splitlines()[1:]
    assert sorted((r.split("\t")[0], r.split("\t")[6]) for r in rows) == [
        ("cogs+case=subj_to_obj_common", "best"), ("cogs+case=subj_to_obj_common", "last"),
        ("cogs+case=subj_to_obj_common+gen_case", "best"),
        ("cogs+case=subj_to_obj_common+gen_case", "last")]
