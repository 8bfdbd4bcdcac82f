"""Gradients of every differentiable collective (PyNative, ms.grad) vs analytic values."""

import _harness
import pytest


@pytest.mark.timeout(300)
def test_gradients_every_collective_4_ranks():
    res = _harness.run("scen_autograd", "grads", 4, _harness.SYMSCHED, timeout=280)
    for x in _harness.ok(res):
        assert x["checked"] >= 50


@pytest.mark.timeout(200)
def test_send_recv_gradients():
    _harness.ok(_harness.run("scen_autograd", "send_recv_grads", 2, _harness.SYMSCHED, timeout=120,
                             env={"SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS": "20000"}))
