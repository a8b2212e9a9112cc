import argparse
import pickle

import pytest
import torch

import fairseq_entropy  # noqa: F401  (installs the allow-list)
from fairseq import checkpoint_utils
from fairseq_entropy.checkpoint import FAIRSEQ_CHECKPOINT_GLOBALS, UnsafeCheckpointError


def fairseq_like_state():
    return {"args": None, "cfg": {"model": argparse.Namespace(arch="scan_transformer")},
            "model": {"w": torch.ones(2)}, "extra_state": {"best": 0.5}}


def test_namespace_checkpoint_loads_with_weights_only(tmp_path):
    p = tmp_path / "ckpt.pt"
    torch.save(fairseq_like_state(), p)
    state = torch.load(p, weights_only=True)  # what torch >= 2.6 does by default
    assert state["cfg"]["model"].arch == "scan_transformer"
    assert FAIRSEQ_CHECKPOINT_GLOBALS == (argparse.Namespace,)


class Opaque:
    """A harmless class that is still not on the allow-list."""


class Payload:
    def __reduce__(self):
        return (print, ("this would run at load time",))


def test_checkpoint_with_other_globals_is_refused(tmp_path):
    p = tmp_path / "evil.pt"
    state = fairseq_like_state()
    state["extra_state"]["payload"] = Payload()
    torch.save(state, p)
    with pytest.raises(UnsafeCheckpointError, match=r"evil\.pt.*builtins\.print"):
        checkpoint_utils.load_checkpoint_to_cpu(str(p))
    q = tmp_path / "opaque.pt"
    torch.save({"cfg": {"x": Opaque()}}, q)
    with pytest.raises(UnsafeCheckpointError, match="Opaque"):
        checkpoint_utils.load_checkpoint_to_cpu(str(q))
    assert issubclass(UnsafeCheckpointError, pickle.UnpicklingError)


def test_checkpoint_copies_are_atomic(tmp_path, monkeypatch):
    """A copy that dies halfway (as under SIGTERM) leaves the old checkpoint_last.pt intact."""
    import os

    best, last = tmp_path / "checkpoint_best.pt", tmp_path / "checkpoint_last.pt"
    best.write_bytes(b"N" * 3_000_000)
    last.write_bytes(b"old checkpoint")
    real_fdopen = os.fdopen

    class DiesHalfway:
        """The temporary file, killed after its first 1000 bytes."""

        def __init__(self, fd, mode):
            self.f = real_fdopen(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[:1000])
            raise KeyboardInterrupt  # what the signal handler raises in the training process

    monkeypatch.setattr(os, "fdopen", DiesHalfway)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_utils.PathManager.copy(str(best), str(last), overwrite=True)
    assert last.read_bytes() == b"old checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_best.pt",
                                                         "checkpoint_last.pt"]
    monkeypatch.undo()
    assert checkpoint_utils.PathManager.copy(str(best), str(last), overwrite=True) is True
    assert last.read_bytes() == best.read_bytes()
    with pytest.raises(FileExistsError, match="overwrite"):
        checkpoint_utils.PathManager.copy(str(best), str(last))
    # everything else is fairseq's own PathManager
    assert checkpoint_utils.PathManager.exists(str(best))
