"""Groups across emulated nodes (SYMSCHED_NODE_ID, each node bootstrapping its own heaps) on
gloo: 2 nodes × 2 ranks and 2 nodes × 1 rank. Results and gradients of the collectives, the RFC
precision table, refusals naming the nodes, and a failing host step as a typed error.

Tolerances (hierarchical folds: inside the node, then across): integers, max/min and the
all-gather are exact; f32/f64 sums within 2·P·eps·Σ|x| of the sequential fold (two summation
orders); 16-bit data is accumulated in f32 but rounded once per level, so within 2u·Σ|x|
(u = eps/2 of the data type) — not bit-exact as on one node; a wire format bounds the error by
u_wire·Σ|x| plus the f32 folding error."""

import _harness
import pytest

SHAPES = [pytest.param(2, 4, id="2x2"), pytest.param(1, 2, id="2x1")]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("per_node,world", SHAPES)
def test_cross_node_collectives_vs_reference_and_gloo(per_node, world):
    res = _harness.run("scen_cross_node", "collectives", world, timeout=280,
                       args={"per_node": per_node, "sizes": [1, 1003]})
    for x in _harness.ok(res, show=20):
        assert x["checked"] > 100


@pytest.mark.timeout(150)
@pytest.mark.parametrize("per_node,world", SHAPES)
def test_cross_node_gradients(per_node, world):
    _harness.ok(_harness.run("scen_cross_node", "gradients", world, timeout=130, args={"per_node": per_node}))


@pytest.mark.timeout(150)
@pytest.mark.parametrize("per_node,world", SHAPES)
def test_cross_node_precision_table(per_node, world):
    res = _harness.ok(_harness.run("scen_cross_node", "precision", world, timeout=130,
                                   args={"per_node": per_node}))
    print(res[0]["errors"])


@pytest.mark.timeout(150)
@pytest.mark.parametrize("per_node,world", SHAPES)
def test_cross_node_refusals_name_the_nodes(per_node, world):
    _harness.ok(_harness.run("scen_cross_node", "refusals", world, timeout=130, args={"per_node": per_node}))


@pytest.mark.timeout(150)
def test_cross_node_host_step_failure_is_a_typed_error():
    _harness.ok(_harness.run("scen_cross_node", "host_failure", 4, timeout=130, args={"per_node": 2},
                             env={"SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS": "20000"}))
