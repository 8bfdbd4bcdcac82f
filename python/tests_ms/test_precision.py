"""The RFC precision table on MindSpore tensors: every wire format within the bound it implies
(each operand and the result rounded once to the wire, u = eps/2, f32 accumulation:
|err| ≤ u·Σ|x_r| + u·|result|; reduce_scatter rounds only the peers' blocks)."""

import _harness
import pytest


@pytest.mark.timeout(200)
def test_low_precision_wire_within_format_bound():
    res = _harness.ok(_harness.run("scen_precision", "wire_formats", 2, _harness.SYMSCHED, timeout=150, mccl=True))
    print(res[0]["errors"])
