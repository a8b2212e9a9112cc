import hashlib
import json
import math
from collections import Counter

import pytest

from fairseq_entropy.scan.builders import build_exp1, build_exp2
from fairseq_entropy.scan.levels import BuildError
from fairseq_entropy.scan.mixing import mixing_counts
from fairseq_entropy.cli import main as cli
from fairseq_entropy.scan.entropy import entropy_bits
from fairseq_entropy.scan.grammar import Grammar

G = Grammar.paper()
LEVELS = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)


@pytest.fixture(scope="module")
def exp1():
    return build_exp1(G, LEVELS, n=6000, restricted="jump", seed=3)


def slot_counts(cmds, slot):
    return Counter(getattr(c, slot).verb for c in cmds)


def test_exp1_hits_every_target_and_count(exp1):
    for level in exp1:
        train = level.splits["train"]
        assert len(train) == 6000
        second = slot_counts(train, "second")
        assert abs(entropy_bits(second) - level.target_bits) <= 0.01
        # mixing family: jump gets c, the other seven share the rest within 1
        others = [second.get(v, 0) for v in G.verbs if v != "jump"]
        assert max(others) - min(others) <= 1 and second["jump"] >= max(others)
        first = slot_counts(train, "first")
        assert "jump" not in first and len(first) == 7
        assert max(first.values()) - min(first.values()) <= 1
        conj = Counter(c.conjunction for c in train)
        assert abs(conj["and"] - conj["after"]) <= 1
        assert len(set(train)) == 6000  # drawn without replacement


def test_exp1_level_counts_hand_derived(exp1):
    by_name = {lv.name: lv for lv in exp1}
    assert slot_counts(by_name["entropy_0.0"].splits["train"], "second") == {"jump": 6000}
    assert set(slot_counts(by_name["entropy_3.0"].splits["train"], "second").values()) == {750}


def test_exp1_restricted_never_first_in_train_or_valid(exp1):
    for level in exp1:
        for split in ("train", "valid"):
            assert all(c.first.verb != "jump" for c in level.splits[split])


def test_exp1_valid_split(exp1):
    by_name = {lv.name: lv for lv in exp1}
    # at 0 bits the pool is 7 first verbs x 21 x 21 clauses x 2 conjunctions = 6174 commands
    assert len(by_name["entropy_0.0"].splits["valid"]) == 6174 - 6000 == 174
    for lv in exp1:
        train, valid = set(lv.splits["train"]), set(lv.splits["valid"])
        assert not train & valid and not valid & set(lv.splits["test"])
        if lv.name != "entropy_0.0":
            assert len(valid) == 300  # 5% of 6000


def test_exp1_test_set(exp1):
    tests = [lv.splits["test"] for lv in exp1]
    assert all(t == tests[0] for t in tests)
    t = tests[0]
    assert len(t) == len(set(t)) == 21 * 168 * 2 == 7056
    assert all(c.first.verb == "jump" for c in t)


def test_exp2_support_levels():
    levels = build_exp2(G, [1, 3, 8], restricted="lunge", seed=2)
    for lv, k in zip(levels, [1, 3, 8]):
        train, valid = lv.splits["train"], lv.splits["valid"]
        assert len(train) + len(valid) == 6174 * k
        assert not set(train) & set(valid)
        first = slot_counts(train, "first")
        assert len(first) == k and len(set(first.values())) == 1
        assert entropy_bits(first) == pytest.approx(math.log2(k), abs=1e-9)
        assert lv.extra["support"] == ["lunge", "squat", "crawl", "sprint", "walk", "run",
                                       "look", "jump"][:k]
        for split in (train, valid):
            assert all(c.second.verb != "lunge" for c in split)
        test = lv.splits["test"]
        assert len(test) == len(set(test)) == 7056
        assert all(c.second.verb == "lunge" for c in test)


def test_mixing_counts_errors_name_nearest():
    with pytest.raises(BuildError, match="outside"):
        mixing_counts(6000, G.verbs, "jump", 3.2)
    with pytest.raises(BuildError, match="outside"):
        mixing_counts(6000, G.verbs, "jump", -0.5)
    # with N = 2 the achievable entropies are 0 and 1 bit only
    with pytest.raises(BuildError, match=r"nearest achievable: 1\.0000"):
        mixing_counts(2, G.verbs, "jump", 0.8)


def test_n_larger_than_available():
    with pytest.raises(BuildError, match="N <= 6174"):
        build_exp1(G, [0.0], n=6175)


def test_restricted_verb_not_in_verbs():
    with pytest.raises(BuildError, match="not in the verb list"):
        build_exp1(G, [1.0], restricted="fly")
    with pytest.raises(BuildError, match="not in the verb list"):
        build_exp2(G, [1], restricted="fly")


def digest(root):
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_cli_build_is_byte_identical_for_a_seed(tmp_path):
    args = ["build", "exp1", "--levels", "0,1.5", "--n", "1000", "--seed", "7"]
    assert cli(args + ["--out", str(tmp_path / "a")]) == 0
    assert cli(args + ["--out", str(tmp_path / "b")]) == 0
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert cli(["build", "exp1", "--levels", "0,1.5", "--n", "1000", "--seed", "8",
                "--out", str(tmp_path / "c")]) == 0
    assert digest(tmp_path / "a") != digest(tmp_path / "c")
    man = json.loads((tmp_path / "a" / "entropy_1.5" / "manifest.json").read_text())
    assert man["seed"] == 7 and man["restricted_verb"] == "jump"
    assert man["sizes"] == {"train": 1000, "valid": 50, "test": 7056}
    assert abs(man["entropy_bits"] - 1.5) <= 0.01
    assert man["slots"]["train"]["verb_counts"]["first"]["jump"] == 0
    lines = (tmp_path / "a" / "entropy_1.5" / "train.in").read_text().splitlines()
    assert len(lines) == 1000


def test_cli_refuses_a_different_build_without_force(tmp_path, capsys):
    out = str(tmp_path / "d")
    assert cli(["build", "exp1", "--levels", "3", "--n", "500", "--out", out]) == 0
    before = digest(tmp_path / "d")
    assert cli(["build", "exp1", "--levels", "3", "--n", "600", "--out", out]) == 2
    assert "already holds a different build" in capsys.readouterr().err
    assert digest(tmp_path / "d") == before
    assert cli(["build", "exp1", "--levels", "3", "--n", "600", "--out", out, "--force"]) == 0
    assert len((tmp_path / "d" / "entropy_3.0" / "train.in").read_text().splitlines()) == 600


@pytest.mark.parametrize("argv,message", [
    (["build", "exp1", "--levels", "3.5"], "outside [0, 3]"),
    (["build", "exp1", "--levels", "0.8", "--n", "2"], "nearest achievable"),
    (["build", "exp1", "--levels", "0", "--n", "7000"], "N <= 6174"),
    (["build", "exp1", "--restricted-verb", "fly"], "not in the verb list"),
    (["build", "exp2", "--support", "9"], "support size 9"),
])
def test_cli_bad_input_writes_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "never"
    assert cli(argv + ["--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_cli_build_scan_language(tmp_path, scan_reference):
    out = tmp_path / "scan.txt"
    assert cli(["build", "scan", "--out", str(out)]) == 0
    ours = set(out.read_text().splitlines())
    ref = set(line.strip() for line in open(scan_reference / "tasks.txt"))
    assert ours == ref


def test_cli_measure_reports_slots_and_unseen_pairs(tmp_path, capsys):
    out = tmp_path / "m"
    assert cli(["build", "exp1", "--levels", "1", "--n", "800", "--out", str(out)]) == 0
    capsys.readouterr()
    level = out / "entropy_1.0"
    assert cli(["measure", str(level / "test.in"), "--train", str(level / "train.in"),
                "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)[str(level / "test.in")]
    assert rep["n_commands"] == 7056
    assert rep["entropy_bits"] == {"first": 0.0, "second": 3.0}
    assert rep["verb_counts"]["second"]["walk"] == 882
    assert rep["unseen_in_train"] == [["jump", "first"]]
    scan = tmp_path / "s.txt"
    scan.write_text("IN: jump after walk OUT: I_WALK I_JUMP\nIN: turn left OUT: I_TURN_LEFT\n")
    assert cli(["measure", str(scan), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)[str(scan)]
    assert rep["verb_counts"]["first"]["walk"] == 1 and rep["verb_counts"]["first"]["turn"] == 1
    assert rep["entropy_bits"]["first"] == 1.0 and rep["entropy_bits"]["second"] == 0.0
