"""examples/python/train_dp_tp_mindspore.py as a test: DP gradients via symsched, TP activations via
mccl, one 2×2 mesh of MindSpore group names; losses and parameters equal an all-mccl run; MAX and
float64 (which mccl on CPU lacks) match an analytic numpy reference; the forbidden mix is caught."""

import os

import _harness
import pytest

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))


@pytest.mark.timeout(250)
@pytest.mark.parametrize("launcher", [_harness.MSRUN, _harness.SYMSCHED])
def test_train_dp_tp_mindspore_matches_all_mccl(launcher):
    env = {"PYTHONPATH": EXAMPLES + os.pathsep + _harness.HERE}
    res = _harness.run("train_dp_tp_mindspore", "worker", 4, launcher, timeout=200, env=env, mccl=True)
    for r, x in enumerate(res):
        # fp32 DP average over 2 ranks: both libraries add the same two values, so bit-exact
        assert x["loss_diff"] == 0.0 and x["param_diff"] == 0.0, (r, x)
        assert x["max_diff"] == 0.0 and x["f64_diff"] == 0.0, (r, x)
        assert "forbidden mix" in x["mix_error"], (r, x)
    assert res[0]["losses"][-1] < res[0]["losses"][0]
