"""The front-of-call cache of every collective: hits give the full path's results, per-tensor
checks still run on a hit, and an alltoallv count matrix may change between cached calls."""

import _harness
import pytest


@pytest.mark.timeout(150)
def test_fast_path_of_every_collective_3_ranks():
    _harness.ok(_harness.run("scen_fastpath", "fastpath", 3, timeout=130))
