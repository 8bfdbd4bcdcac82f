"""Groups across emulated nodes on MindSpore under msrun (mccl the framework engine of the
inter-node step): 2 nodes × 2 ranks and 2 nodes × 1 rank — results of every collective and op
vs the sequential fold (tolerances as python/tests/test_cross_node.py), gradients vs analytic
values, primitives refused naming the nodes."""

import _harness
import pytest

SHAPES = [pytest.param(2, 4, id="2x2"), pytest.param(1, 2, id="2x1")]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("per_node,world", SHAPES)
def test_cross_node_collectives_mindspore(per_node, world):
    res = _harness.run("scen_cross_node", "collectives", world, _harness.MSRUN, timeout=380,
                       args={"per_node": per_node})
    for x in _harness.ok(res):
        assert x["checked"] >= 56


@pytest.mark.timeout(300)
@pytest.mark.parametrize("per_node,world", SHAPES)
def test_cross_node_gradients_mindspore(per_node, world):
    _harness.ok(_harness.run("scen_cross_node", "gradients", world, _harness.MSRUN, timeout=280,
                             args={"per_node": per_node}))
