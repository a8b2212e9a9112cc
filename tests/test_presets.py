import json
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_entropy.experiments import presets as presets_module
from fairseq_entropy.experiments.presets import (PresetError, check_word_split_safe, eval_epochs,
                                                 expand_presets, load_presets, train_args)


def test_epochs_formula():
    assert [eval_epochs("64-8*(k-1)", k) for k in (1, 2, 8)] == [64, 56, 8]
    with pytest.raises(PresetError):
        eval_epochs("__import__('os')", 1)


def test_presets_file_is_complete():
    presets = load_presets()
    for name, p in presets.items():
        assert {"arch", "experiment"} <= set(p), name
        assert "epochs" in p or "epochs_formula" in p, name
    paper = presets["exp1_transformer_sinusoidal"]
    assert paper["arch"] == "scan_transformer_paper" and paper["lr"] == 3e-4
    assert paper["batch_size"] == 32 and paper["epochs"] == 24
    assert paper["warmup_fraction"] == 0.06 and paper["min_lr_ratio"] == 0.1


def test_every_packaged_arch_is_registered_and_known_without_importing_fairseq():
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_entropy.models  # noqa: F401 - registers the plugin's architectures
    from fairseq_entropy.experiments.archs import packaged_archs

    archs = {p["arch"] for p in load_presets().values()}
    assert archs == packaged_archs() and {"scan_transformer_paper", "transformer_lm",
                                          "fconv_scan_exp1"} <= archs
    assert sorted(a for a in archs if a not in ARCH_MODEL_REGISTRY) == []
    # the check of a packaged preset's arch leaves fairseq unimported (as the CLI starts)
    code = ("import sys; from fairseq_entropy.experiments.archs import check_arch; "
            "from fairseq_entropy.experiments.presets import load_presets; "
            "check_arch('exp1_fconv', load_presets()['exp1_fconv']); "
            "assert 'fairseq' not in sys.modules, 'fairseq imported'; "
            "check_arch('my', {'arch': 'lstm_wiseman_iwslt_de_en'}); "
            "assert 'fairseq' in sys.modules, 'a fairseq arch is looked up'")
    # (argv[0] set as the console script sets it: the package then registers nothing)
    res = subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'fairseq-entropy'; "
                          + code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]


def test_every_preset_argument_survives_shell_word_splitting():
    # train-args output is used unquoted, as in the README: fairseq-train ... $(train-args ...)
    values = {"max_update": 100, "warmup_updates": 6, "lr": 3e-4, "min_lr": 3e-5}
    for name, p in load_presets().items():
        for key in ("optimizer_args", "task_args", "model_args", "criterion_args", "extra_args"):
            for token in p.get(key, []):
                check_word_split_safe(token.format(**values), p)


@pytest.mark.parametrize("token", ["(0.9, 0.98)", "'(0.9,0.98)'", "a*", "$HOME", ""])
def test_unsafe_preset_argument_is_refused_with_a_fix(token):
    with pytest.raises(PresetError, match="Fix: write it without spaces or quotes"):
        check_word_split_safe(token, {"arch": "scan_transformer_paper"})


# --- inheritance ----------------------------------------------------------------------------

#: the commit whose presets.json had every preset written out in full
FLAT_PRESETS_COMMIT = "75935c0"


def _flat_presets_of_commit():
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run(["git", "show", f"{FLAT_PRESETS_COMMIT}:recipes/presets.json"],
                          cwd=repo, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"git history with {FLAT_PRESETS_COMMIT} not available: {proc.stderr}")
    return json.loads(proc.stdout)


def test_every_preset_expands_to_the_arguments_of_the_flat_file(tmp_path, monkeypatch):
    # the fconv presets were renamed (presets_module.RENAMED) since the flat file
    old = {presets_module.RENAMED.get(name, name): preset
           for name, preset in _flat_presets_of_commit().items()}
    new = load_presets()
    # every preset of the flat file is still there (presets added since may follow)
    assert set(old) <= set(new), sorted(set(old) - set(new))
    sizes = iter(())
    monkeypatch.setattr(presets_module, "train_size", lambda data_dir: next(sizes))
    checked = 0
    # a deliberate change since the flat file: the invariant-input contrast trains as long as
    # the model it is contrasted with (it had 20 epochs against exp1_equivariant's 30)
    assert old["exp1_equivariant_invariant_input"]["epochs"] == 20
    assert new["exp1_equivariant_invariant_input"]["epochs"] == \
        new["exp1_equivariant"]["epochs"] == old["exp1_equivariant"]["epochs"] == 30
    old["exp1_equivariant_invariant_input"]["epochs"] = 30
    for name, old_preset in old.items():
        assert new[name].get("model") == old_preset.get("model"), name
        assert new[name].get("experiment") == old_preset.get("experiment"), name
        for n in (6000, 4000, 3000, 174):
            for k in (1, 3, 8):
                level = tmp_path / f"k{k}"
                level.mkdir(exist_ok=True)
                (level / "manifest.json").write_text(json.dumps({"support": ["v"] * k}))
                sizes = iter([n, n])
                args = train_args(new[name], level)
                # the one change since the flat file: the Transformers step with the fused
                # AdamW kernel (the same update up to float rounding)
                assert "--length-chunks" not in args, name
                if old_preset["arch"].startswith("scan_transformer"):
                    args.remove("--adamw-fused")
                else:
                    assert "--adamw-fused" not in args, name
                # and the one optimiser change: torch.optim.AdamW (the authors' optimiser) for
                # the presets that had fairseq's adam with decoupled weight decay, with its
                # epsilon written out
                old_args = train_args(old_preset, level)
                if "--weight-decay" in old_args:
                    assert args[args.index("--optimizer") + 1] == "adamw", name
                    args[args.index("--optimizer") + 1] = "adam"
                    if "--adam-eps" not in old_args:
                        i = args.index("--adam-eps")
                        assert args[i + 1] == "1e-08", name
                        args = args[:i] + args[i + 2:]
                # a deliberate change since: the RNN presets train with the authors' AdamW
                # betas and per-sentence loss (train_rnn.py: betas (0.9, 0.98), each
                # sentence's loss divided by its target length)
                if old_preset.get("model") == "rnn":
                    args.remove("--mean-over-target-length")
                    i = args.index("--adam-betas")
                    assert args[i + 1] == "(0.9,0.98)", name
                    args[i + 1] = old_args[old_args.index("--adam-betas") + 1]
                assert args == old_args, (name, n, k)
                checked += 1
    assert checked == len(old) * 12


def test_extends_chain_list_override_and_append():
    raw = {
        "_a": {"batch_size": 8, "lr": 0.1, "model_args": ["--dropout", "0.1"], "notes": "A."},
        "_b": {"lr": 0.2, "epochs": 3},
        "c": {"extends": ["_a", "_b"], "arch": "x", "model_args+": ["--cell", "gru"],
              "notes+": "C."},
        "d": {"extends": "c", "lr": 0.3, "model_args": ["--dropout", "0"]},
    }
    got = expand_presets(raw)
    assert got["c"] == {"batch_size": 8, "lr": 0.2, "epochs": 3, "arch": "x",
                        "model_args": ["--dropout", "0.1", "--cell", "gru"], "notes": "A. C."}
    assert got["d"] == {**got["c"], "lr": 0.3, "model_args": ["--dropout", "0"]}
    assert raw["c"]["model_args+"] == ["--cell", "gru"]  # the input is not modified


@pytest.mark.parametrize("raw, message", [
    ({"a": {"extends": "b", "arch": "x"}, "b": {"extends": "a"}}, "'extends' cycle a -> b -> a"),
    ({"a": {"extends": "nope", "arch": "x"}}, "extends unknown preset 'nope'"),
    ({"a": {"arch": "x", "cpu_epochs": 8}}, "unknown key 'cpu_epochs'"),
    ({"a": {"arch": "x", "lr+": 1}}, "unknown key 'lr\\+'"),
])
def test_bad_inheritance_is_refused_with_file_line_and_fix(tmp_path, raw, message):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw, indent=2))
    with pytest.raises(PresetError, match=message) as e:
        load_presets(path)
    assert str(e.value).startswith(f"{path}:2: preset 'a'") and "Fix:" in str(e.value)


def test_bases_are_not_runnable_presets():
    assert all(not name.startswith("_") for name in load_presets())
    bases = set(load_presets(bases=True)) - set(load_presets())
    assert {"_adamw_cosine", "_transformer", "_rnn", "_equivariant"} <= bases


def test_packaged_presets_file_has_no_repeated_argument_block():
    raw = json.loads(presets_module.default_presets_path().read_text())
    blocks = [json.dumps(v) for entry in raw.values() for k, v in entry.items()
              if k in ("optimizer_args", "criterion_args")]
    assert len(blocks) == len(set(blocks))
    # the paper's three optimiser settings: Transformer/CNN, RNN, equivariant
    assert sum(1 for b in blocks if b.startswith('["--optimizer"')) == 3


def test_train_size_reads_the_index_header_as_fairseq_counts(tmp_path):
    from fairseq.data import data_utils

    from fairseq_entropy.experiments.presets import train_size
    from fairseq_entropy.scan.binarize import binarize_level
    from fairseq_entropy.scan.datafiles import Example, write_pair
    from fairseq_entropy.scan.grammar import Grammar

    g = Grammar.paper()
    commands = [c for c, _ in zip(g.commands(one_clause=False), range(37))]
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, k in (("train", 37), ("valid", 5)):
        write_pair(raw / split, [Example(str(c), " ".join(g.interpret(c))) for c in commands[:k]])
    level = binarize_level(raw, tmp_path / "bin", g)
    assert train_size(level) == 37
    assert len(data_utils.load_indexed_dataset(str(level / "train.in-out.in"), None)) == 37
    # the whole reader against fairseq's: every sequence of both sides, and the commands
    from fairseq.data import Dictionary

    from fairseq_entropy.analysis.scoring import split_commands
    from fairseq_entropy.scan.databin import read_mmap_sequences
    for side in ("in", "out"):
        prefix = str(level / f"train.in-out.{side}")
        theirs = data_utils.load_indexed_dataset(prefix, None)
        mine = read_mmap_sequences(prefix)
        assert [m.tolist() for m in mine] == [theirs[i].tolist() for i in range(len(theirs))]
    vocab = Dictionary.load(str(level / "dict.in.txt"))
    assert split_commands(level, "train") == [str(c) for c in commands] == [
        vocab.string(t) for t in data_utils.load_indexed_dataset(
            str(level / "train.in-out.in"), vocab)]
    (level / "train.in-out.in.idx").write_bytes(b"not an index")
    with pytest.raises(PresetError, match=r"train.in-out.in.idx is not a fairseq mmap index"):
        train_size(level)
    (tmp_path / "empty").mkdir()
    with pytest.raises(PresetError, match=r"idx not found. Fix: binarize"):
        train_size(tmp_path / "empty")
    # the folder above the levels (as `binarize` writes them) names its level folders
    with pytest.raises(PresetError, match=rf"{tmp_path}/train.in-out.in.idx not found: "
                                          rf"{tmp_path} holds binarized levels \(bin\), not "
                                          rf"one level. Fix: pass one level folder, e.g. "
                                          rf"{tmp_path}/bin"):
        train_size(tmp_path)


# --- a user's presets file ------------------------------------------------------------------

def test_a_users_file_extends_packaged_presets_and_adds_to_them(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({
        "my_cnn_small": {"extends": "exp1_cnn_authors", "batch_size": 8,
                         "model_args+": ["--dropout", "0.2"]},
        "my_cnn_tiny": {"extends": "my_cnn_small", "lr": 0.01},
        "_my_base": {"extends": "_adamw_cosine", "epochs": 2},
        "my_other": {"extends": "_my_base", "arch": "my_arch", "experiment": "exp1"},
    }, indent=2))
    packaged = load_presets()
    table = load_presets(path)
    assert set(table) == set(packaged) | {"my_cnn_small", "my_cnn_tiny", "my_other"}
    assert all(table[name] == packaged[name] for name in packaged)
    authors = packaged["exp1_cnn_authors"]
    assert table["my_cnn_small"] == {**authors, "batch_size": 8,
                                     "model_args": authors["model_args"] + ["--dropout", "0.2"]}
    assert table["my_cnn_tiny"] == {**table["my_cnn_small"], "lr": 0.01}
    bases = load_presets(bases=True)
    assert table["my_other"] == {**bases["_adamw_cosine"], "epochs": 2, "arch": "my_arch",
                                 "experiment": "exp1"}
    assert "_my_base" in load_presets(path, bases=True)


@pytest.mark.parametrize("key,args,fix", [
    ("extra_args", ["--lr", "5"], "set the preset's key 'lr' instead"),
    ("optimizer_args", ["--max-update", "9"], "set the preset's key 'epochs' instead"),
    ("model_args+", ["--arch", "fconv"], "set the preset's key 'arch' instead"),
    ("task_args", ["--batch-size", "4"], "set the preset's key 'batch_size' instead"),
    ("extra_args", ["--task", "translation"], "drop it (the task's arguments give it)"),
])
def test_a_list_giving_an_option_that_a_key_owns_is_refused(tmp_path, key, args, fix):
    """fairseq keeps the last of two --lr: the preset's lr, which train-args --field
    reports, would be overridden silently."""
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"mine": {"extends": "exp1_cnn_authors", key: args}}))
    with pytest.raises(PresetError) as e:
        load_presets(path)
    assert f"preset 'mine': {key.rstrip('+')} gives {args[0]}, which train-args derives" \
        in str(e.value) and f"Fix: {fix}" in str(e.value)


def test_a_copy_of_the_packaged_file_loads_as_the_packaged_presets(tmp_path):
    path = tmp_path / "copy.json"
    path.write_text(presets_module.default_presets_path().read_text())
    assert load_presets(path) == load_presets()


def test_a_user_preset_redefining_a_packaged_name_is_refused(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"mine": {"extends": "exp1_fconv"},
                                "exp1_fconv": {"extends": "exp1_cnn_authors", "lr": 1}}, indent=2))
    with pytest.raises(PresetError) as e:
        load_presets(path)
    assert str(e.value) == (
        f"{path}:5: preset 'exp1_fconv' redefines the packaged preset of that name. Fix: give "
        "yours another name, e.g. \"my_exp1_fconv\": {\"extends\": \"exp1_fconv\", ...} with only "
        "the keys that differ")


def test_train_args_lists_a_users_preset_that_extends_a_packaged_one(tmp_path, capsys):
    from fairseq_entropy.cli import main as cli

    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"my_cnn_small": {"extends": "exp1_cnn_authors",
                                                 "model": "my_cnn"}}))
    assert cli(["train-args", "my_cnn_small", "--presets", str(path), "--data", "unused",
                "--field", "arch"]) == 0
    assert cli(["train-args", "my_cnn_small", "--presets", str(path), "--data", "unused",
                "--field", "model"]) == 0
    assert capsys.readouterr().out == "scan_cnn_paper\nmy_cnn\n"
    assert cli(["train-args", "my_cnn_small", "--data", "unused", "--field", "arch"]) == 2
    assert "unknown preset 'my_cnn_small'" in capsys.readouterr().err
    # --list: every preset once, the user's among the packaged ones
    assert cli(["train-args", "--list", "--presets", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    packaged = json.loads((Path(presets_module.__file__).parent / "presets.json").read_text())
    concrete = [name for name in packaged if not name.startswith("_")]  # _bases: no preset
    assert [ln.split("\t")[0] for ln in lines] == sorted([*concrete, "my_cnn_small"])
    mine = next(ln for ln in lines if ln.startswith("my_cnn_small\t")).split("\t")
    assert mine[1:4] == ["exp1", "my_cnn", "scan_cnn_paper"]
    for extra in (["exp1_fconv"], ["--field", "arch"], ["--data", "unused"]):
        assert cli(["train-args", "--list", *extra]) == 2
        assert "Fix: pass --list alone" in capsys.readouterr().err
    assert cli(["train-args"]) == 2
    assert "Fix: pass a preset name (fairseq-entropy train-args --list lists them)" in \
        capsys.readouterr().err
    assert cli(["train-args", "exp1_fconv"]) == 2
    assert "Fix: pass --data LEVEL_DATABIN" in capsys.readouterr().err


@pytest.mark.parametrize("old, new", [("exp1_cnn", "exp1_fconv"), ("exp2_cnn", "exp2_fconv")])
def test_a_renamed_preset_is_refused_with_its_new_name(tmp_path, capsys, old, new):
    """The former names of the fconv presets are no presets: train-args, run's preset check and
    a grid name the preset they were renamed to."""
    from fairseq_entropy.cli import main as cli
    from fairseq_entropy.experiments.grids import GridError, load_grid

    assert old not in presets_module.load_presets() and new in presets_module.load_presets()
    assert cli(["train-args", old, "--data", "unused", "--field", "arch"]) == 2
    err = capsys.readouterr().err
    assert f"preset {old!r} is now named {new!r}" in err and f"Fix: pass {new}" in err
    assert cli(["train-args", new, "--data", "unused", "--field", "arch"]) == 0
    assert capsys.readouterr().out == f"fconv_scan_{old[:4]}\n"
    grid = tmp_path / "g.toml"
    grid.write_text(f'experiment = "{old[:4]}"\npresets = ["{old}"]\nlevels = [1]\nseeds = [1]\n')
    with pytest.raises(GridError, match=rf"g.toml:2: preset '{old}' is now named '{new}'"):
        load_grid(grid)
