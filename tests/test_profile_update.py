"""The operator-call accounting behind ``benchmarks/profile_update.py --floor``."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from profile_update import PhaseTimer, call_seconds, op_calls  # noqa: E402


def test_op_calls_counts_the_calls_dispatched_in_each_model_phase():
    """Calls made from Python or autograd count once per update in their phase; operators run
    inside another operator add their time but no call; phases outside the model (the
    optimizer) are left out."""
    timer = PhaseTimer()
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(4, 16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with timer.phase("model forward"):
                y = torch.nn.functional.linear(x, w)  # aten::linear -> aten::mm inside it
                loss = y.square().sum()
            with timer.phase("backward"):
                loss.backward()
            with timer.phase("optimizer"):
                with torch.no_grad():
                    w.sub_(0.1 * w.grad)
                w.grad = None
    calls = op_calls(prof, updates=3)
    assert set(calls) == {"model forward", "backward"}
    forward = calls["model forward"]
    assert forward["aten::linear"][0] == 1.0
    assert forward["aten::square"][0] == 1.0
    assert forward["aten::sum"][0] == 1.0
    assert forward["aten::mm"][0] == 0.0  # dispatched by aten::linear, not by Python
    assert forward["aten::mm"][1] > 0.0   # its kernel time still counts
    # backward of linear without bias: dL/dw = (dL/dy)^T x, one product per update
    assert calls["backward"]["aten::mm"][0] == 1.0
    assert "aten::sub_" not in forward and "aten::sub_" not in calls["backward"]
    assert set(timer.seconds) == {"model forward", "backward", "optimizer"}


def test_call_seconds_is_the_cost_of_a_call_that_does_no_work():
    cost = call_seconds(seconds=0.05)
    assert 0.0 < cost < 1e-3
