import pytest

from fairseq_entropy.presets import PresetError, eval_epochs, load_presets


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
