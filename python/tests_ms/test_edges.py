"""0-row and 0-element inputs in every collective and its backward on MindSpore tensors."""

import _harness
import pytest


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_empty_inputs_in_every_collective_and_backward(world):
    _harness.ok(_harness.run("scen_edges", "empty_inputs", world, _harness.SYMSCHED, timeout=280))
