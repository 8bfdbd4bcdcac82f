"""examples/python/train_dp_tp.py as a test: DP gradients via symsched, TP activations via gloo
on one 2×2 DeviceMesh; losses and parameters equal an all-gloo run; the forbidden mix is caught."""

import os
import sys

import _harness
import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


@pytest.mark.timeout(150)
def test_train_dp_tp_matches_all_gloo():
    res = _harness.run("train_dp_tp", "worker", 4, timeout=130, env={"PYTHONPATH": os.path.abspath(EXAMPLES) + os.pathsep + os.path.dirname(os.path.abspath(__file__))})
    for r, x in enumerate(res):
        # fp32 DP average over 2 ranks: both libraries add the same two values, so bit-exact
        assert x["loss_diff"] <= 1e-7, (r, x)
        assert x["param_diff"] <= 1e-7, (r, x)
        assert "forbidden mix" in x["mix_error"], (r, x)
    assert res[0]["losses"][-1] < res[0]["losses"][0]
