"""The one-round (eager) alltoall: correct around the eager capacity and the pull threshold for
ordinary and symmetric tensors, many calls with changing counts, mismatched counts refused
alike on every rank (with nothing written), and a dead peer reported within the timeout."""

import _harness
import pytest


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world", [2, 3])
def test_eager_alltoall_correct(world):
    _harness.ok(_harness.run("scen_alltoall_eager", "correct", world, timeout=220))


@pytest.mark.timeout(120)
def test_mismatched_counts_raise_on_every_rank():
    res = _harness.ok(_harness.run("scen_alltoall_eager", "mismatch", 3, timeout=100))
    # every rank reports the same pair
    assert len({r["message"] for r in res}) == 1, [r["message"] for r in res]


@pytest.mark.timeout(60)
def test_dead_peer_is_reported():
    res = _harness.ok(_harness.run("scen_alltoall_eager", "dead_peer", 2, timeout=50,
                                   env={"SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS": "2000"}))
    assert res[0]["message"] and res[0]["took"] < 10, res[0]
