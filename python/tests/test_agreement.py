"""Ranks that disagree on a collective fail alike: every rank raises ``AgreementError`` naming each
rank's values, nothing is written, and the group keeps working; and the launch decisions no
longer drift between ranks over long call sequences.

The scenario functions (``scen_*``) run on every rank through ``_harness`` (this module is
imported by the worker); the ``test_*`` functions start them.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import _harness
import pytest

# ---------------------------------------------------------------------------------------------
# Rank side.


def _expect_agreement_error(call: Callable[[], None], what: str, failures: List[str],
                            parts: List[str] = ()) -> str:
    import symsched as symm

    try:
        call()
    except symm.AgreementError as exc:
        msg = str(exc)
        if not isinstance(exc, symm.SymschedRuntimeError) or not isinstance(exc, ValueError):
            failures.append(f"{what}: AgreementError is not a SymschedRuntimeError and a ValueError")
        for p in parts:
            if p not in msg:
                failures.append(f"{what}: `{p}` not in: {msg}")
        return msg
    except Exception as exc:  # noqa: BLE001 - any other outcome is the failure being reported
        failures.append(f"{what}: expected AgreementError, got {type(exc).__name__}: {exc}")
        return ""
    failures.append(f"{what}: accepted")
    return ""


def scen_disagreements(rank: int, world: int, args: Any) -> Dict[str, Any]:
    import torch

    import symsched as symm

    symm.init()
    failures: List[str] = []
    msgs: Dict[str, str] = {}

    def check(what: str, call: Callable[[], None], parts: List[str] = ()) -> None:
        msgs[what] = _expect_agreement_error(call, what, failures, list(parts))

    def ok_allreduce() -> None:
        # the group still works after each refusal
        t = torch.ones(8)
        symm.shmem_allreduce(t, "sum")
        if not torch.equal(t, torch.full((8,), float(world))):
            failures.append(f"allreduce after a refusal gave {t.tolist()}")

    mine = torch.full((100 if rank == 0 else 120,), float(rank + 1))
    before = mine.clone()
    check("allreduce 100 vs 120", lambda: symm.shmem_allreduce(mine, "sum"),
          ["rank 0: 100 elements f32 sum", "rank 1: 120 elements f32 sum"])
    if not torch.equal(mine, before):
        failures.append("a refused allreduce changed the tensor")
    ok_allreduce()

    n = 10 if rank == 0 else 12
    out = torch.zeros(n * world)
    check("allgather 10 vs 12", lambda: symm.shmem_allgather(out, torch.ones(n)))
    if torch.count_nonzero(out) != 0:
        failures.append("a refused allgather wrote into the output")
    ok_allreduce()

    b = torch.full((16 if rank == 0 else 17,), float(rank + 1))
    check("broadcast 16 vs 17", lambda: symm.shmem_broadcast(b, 0))
    ok_allreduce()

    if rank == 0:
        check("send 10 / recv 12", lambda: symm.shmem_send(torch.ones(10), 1))
    else:
        r = torch.zeros(12)
        check("send 10 / recv 12", lambda: symm.shmem_recv(r, 0))
        if torch.count_nonzero(r) != 0:
            failures.append("a refused recv received data")
    ok_allreduce()

    m = 4 if rank == 0 else 5
    rs_out = torch.zeros(m)
    check("reduce_scatter", lambda: symm.shmem_reduce_scatter(rs_out, torch.ones(m * world), "sum"))
    ok_allreduce()

    t = torch.ones(16, dtype=torch.float64 if rank == 0 else torch.float32)
    check("float64 vs float32", lambda: symm.shmem_allreduce(t, "sum"), ["f64", "f32"])
    ok_allreduce()

    t = torch.ones(16)
    check("max vs sum", lambda: symm.shmem_allreduce(t, "max" if rank == 0 else "sum"),
          ["f32 max", "f32 sum"])
    ok_allreduce()
    return {"failures": failures, "msgs": msgs}


def scen_no_drift(rank: int, world: int, args: Any) -> Dict[str, Any]:
    """An identical, legal call sequence on every rank whose binding patterns differ between
    ranks: an alltoall whose chunks are large enough to run the plan, where rank 0 receives
    everything into one of 300 symmetric tensors (a new pattern each call, more than the old
    per-rank cache of 256 held) and the other ranks receive nothing (their receive role is
    empty: always the same pattern). With per-rank "already checked" caches the ranks decided
    differently whether to exchange and the job hung; every call must now succeed."""
    import torch

    import symsched as symm

    symm.init()
    failures: List[str] = []
    n = 20000  # 80 KB per chunk: above the eager limit, so the plan runs
    pool = [symm.empty((n * world,)) for _ in range(300)]
    calls = 0
    for _ in range(2):
        for i, recv in enumerate(pool):
            sends = [torch.full((n if j == 0 else 0,), float(rank + 1)) for j in range(world)]
            if rank == 0:
                recv_list = [n] * world
                dst = recv
            else:
                recv_list = [0] * world
                dst = torch.zeros(0)
            symm.shmem_alltoall(sends, dst, recv_list)
            if rank == 0:
                want = torch.cat([torch.full((n,), float(j + 1)) for j in range(world)])
                if not torch.equal(recv, want):
                    failures.append(f"call {calls} (tensor {i}): wrong data")
            calls += 1
            if i % 50 == 0:
                x = torch.ones(3)
                symm.shmem_allreduce(x, "sum")
                calls += 1
    for t in pool:
        symm.free(t)
    return {"failures": failures[:5], "calls": calls}


# ---------------------------------------------------------------------------------------------
# Runner side.


@pytest.mark.timeout(240)
def test_disagreeing_ranks_raise_agreement_error_on_every_rank():
    res = _harness.ok(_harness.run("test_agreement", "scen_disagreements", 2, timeout=200,
                                   env={"SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS": "20000"}))
    # every rank built the same message
    assert res[0]["msgs"] == res[1]["msgs"], (res[0]["msgs"], res[1]["msgs"])


@pytest.mark.timeout(300)
def test_launch_decisions_do_not_drift_past_the_cache_capacity():
    res = _harness.ok(_harness.run("test_agreement", "scen_no_drift", 2, timeout=260,
                                   env={"SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS": "20000"}))
    assert res[0]["calls"] == res[1]["calls"] > 600, res
