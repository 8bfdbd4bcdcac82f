"""Gradients of every collective (functional and in-place forms) vs analytic values, gloo and
torch.distributed.nn.functional, over WORLD / halves / strided / singleton groups on 4 ranks."""

import _harness
import pytest


@pytest.mark.timeout(200)
def test_gradients_4_ranks():
    _harness.ok(_harness.run("scen_autograd", "grads", 4, timeout=180))
