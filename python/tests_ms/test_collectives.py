"""Collectives × groups (WORLD, halves, strided, singleton) × dtypes × ops on MindSpore tensors."""

import _harness
import pytest


@pytest.mark.timeout(300)
def test_collectives_matrix_4_ranks_symsched_launch_rank_lists():
    res = _harness.run("scen_coll", "matrix", 4, _harness.SYMSCHED, timeout=280, args={"sizes": [1, 1003]})
    for x in _harness.ok(res):
        assert x["checked"] > 500


@pytest.mark.timeout(300)
def test_collectives_matrix_4_ranks_msrun_group_names():
    res = _harness.run("scen_coll", "matrix", 4, _harness.MSRUN, timeout=280, args={"sizes": [5]})
    for x in _harness.ok(res):
        assert x["checked"] > 250


@pytest.mark.timeout(200)
def test_symmetric_tensors_in_place_primitives_and_stats():
    res = _harness.run("scen_coll", "symmetric_inplace", 2, _harness.SYMSCHED, timeout=150)
    for x in _harness.ok(res):
        assert x["stats"] == ["allocated", "free", "peak"]


@pytest.mark.timeout(250)
@pytest.mark.parametrize("launcher", [_harness.SYMSCHED, _harness.MSRUN])
def test_primitives_and_mc2_on_every_group(launcher):
    _harness.ok(_harness.run("scen_coll", "primitives_and_mc2_groups", 4, launcher, timeout=200))
