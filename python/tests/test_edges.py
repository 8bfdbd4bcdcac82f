"""0-row and 0-element inputs in every collective and its backward, released tensors refused on
every use, one-sided ops on a group not set up yet refused at once."""

import _harness
import pytest


@pytest.mark.timeout(200)
@pytest.mark.parametrize("world", [2, 3])
def test_empty_inputs_in_every_collective_and_backward(world):
    _harness.ok(_harness.run("scen_edges", "empty_inputs", world, timeout=180))


@pytest.mark.timeout(120)
def test_released_tensor_raises_stale_on_every_use():
    _harness.ok(_harness.run("scen_edges", "released", 2, timeout=100))


@pytest.mark.timeout(120)
def test_one_sided_op_on_group_not_set_up_raises_at_once():
    _harness.ok(_harness.run("scen_edges", "one_sided_first", 3, timeout=100))
