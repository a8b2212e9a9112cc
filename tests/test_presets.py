import pytest

from fairseq_entropy.experiments.presets import (PresetError, check_word_split_safe, eval_epochs,
                                     load_presets)


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
