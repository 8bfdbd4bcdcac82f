"""The native cached alltoall: calls after the first of a group and dtype are checked and
launched in one native call, and whatever it cannot vouch for goes to the full path, which
gives the right result or the typed error naming the argument."""

import _harness
import pytest


@pytest.mark.timeout(200)
@pytest.mark.parametrize("world", [2, 3])
def test_native_cached_alltoall(world):
    res = _harness.ok(_harness.run("scen_alltoall_hit", "hit", world, timeout=180))
    assert all(r["native"] > 0 for r in res), res
