"""Bad input on every rank: typed errors naming the argument, nothing sent, nothing hung."""

import _harness
import pytest


@pytest.mark.timeout(250)
def test_bad_input_typed_on_every_rank():
    res = _harness.ok(_harness.run("scen_errors", "bad_input", 2, _harness.SYMSCHED, timeout=200, mccl=True))
    for x in res:
        assert "WrongFrameworkError" in x["seen"] and "GraphModeError" in x["seen"]


@pytest.mark.timeout(200)
def test_sizes_differing_across_ranks():
    # every rank raises AgreementError before anything moves; the group keeps working after it
    res = _harness.run("scen_errors", "sizes_differ", 2, _harness.SYMSCHED, timeout=150)
    assert all(x["kind"] == "AgreementError" for x in res), [(x["kind"], x["msg"]) for x in res]
    assert all(not x["failures"] for x in res), [x["failures"] for x in res]
    assert all("rank 0: 4 elements f32 sum" in x["msg"] and "rank 1: 5 elements f32 sum" in x["msg"]
               for x in res), [x["msg"] for x in res]


@pytest.mark.timeout(200)
def test_signal_timeout_names_the_stuck_rank():
    # rank 1 skips the allreduce: rank 0's wait ends after the signal timeout, naming rank 1
    res = _harness.ok(_harness.run("scen_errors", "stuck_peer", 2, _harness.SYMSCHED, timeout=150,
                                   env={"SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS": "3000"}))
    assert "timed out" in res[0]["msg"] and "[1]" in res[0]["msg"], res[0]["msg"]
