"""Diagnostics on the MindSpore side: SYMSCHED_TRACE, availability with a reason, versions."""

import json
import os
import sys

import _harness
import pytest


@pytest.mark.timeout(200)
def test_trace_holds_every_rank_ops_and_steps(tmp_path):
    path = str(tmp_path / "trace.json")
    _harness.ok(_harness.run("scen_dfx", "trace", 2, _harness.SYMSCHED, timeout=150, env={"SYMSCHED_TRACE": path}))
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    ops = {(e["pid"], e["name"]) for e in events if e.get("cat") == "symsched"}
    for r in (0, 1):
        assert {(r, "symsched::allreduce"), (r, "symsched::allgather"), (r, "symsched::reduce_scatter")} <= ops, ops
    steps = [e for e in events if e.get("cat") == "step"]
    assert {e["pid"] for e in steps} == {0, 1} and any(e["name"] in ("put", "put_signal") for e in steps)
    assert not os.path.exists(path + ".lock") or os.path.getsize(path + ".lock") == 0


def test_availability_outside_a_job_says_how_to_start_one(monkeypatch):
    for k in ("RANK", "RANK_ID", "WORLD_SIZE", "RANK_SIZE"):
        monkeypatch.delenv(k, raising=False)
    import symsched.mindspore as symm

    why = symm.availability()
    assert why is not None and "msrun" in why and "symsched launch" in why
    assert symm.is_shmem_available() is False
    assert "torch" not in sys.modules


def test_numpy_2_is_refused_with_a_reason():
    from symsched.mindspore import api

    assert api.versions_reason("2.10.0", "1.26.4") is None
    why = api.versions_reason("2.10.0", "2.4.6")
    assert "numpy<2" in why and "bfloat16" in why
