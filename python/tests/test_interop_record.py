"""Every collective records the buffers it communicates for the interop rule (RFC §5.4), on the
full path and on the cached one: reduce, send/recv and both MC2 ops as much as allreduce.

Inside ``symm.interop.step()`` a storage that gloo touched and then a symsched collective (or
the other way round) raises ``ForbiddenMixError`` on every rank before anything is sent, so no
peer is left waiting; disjoint storages in one step are fine. The scenario functions run inside
the rank processes (``_harness.run`` imports this module).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import _harness
import pytest


def records(rank: int, world: int, args: Any) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist

    import symsched as symm
    from symsched.core import coll

    symm.init()
    fails: List[str] = []
    fired: Dict[str, int] = {}
    fire = coll._fire

    def counting(op_name, *a, **kw):  # type: ignore[no-untyped-def]
        fired[op_name] = fired.get(op_name, 0) + 1
        return fire(op_name, *a, **kw)

    coll._fire = counting
    peer = 1 - rank  # world == 2

    def refused(what: str, first: Callable[[], None], then: Callable[[], None], cached_as: str = "") -> None:
        """``first`` then ``then`` on one storage in one step must raise ForbiddenMixError at
        ``then``; with ``cached_as``, ``then`` must have been refused on the cached path."""
        # a refusal aborts the group (every rank raises it before sending anything), which drops
        # the cached launches: re-synchronise (the barrier resets the group) and warm the cache
        symm.barrier()
        if cached_as:
            then()
        before = fired.get(cached_as, 0)
        try:
            with symm.interop.step():
                first()
                then()
            fails.append(f"{what}: the mix was not detected")
        except symm.ForbiddenMixError:
            pass
        except Exception as e:  # noqa: BLE001 - the wrong type is the failure reported
            fails.append(f"{what}: raised {type(e).__name__}: {e}")
        if cached_as and fired.get(cached_as, 0) != before + 1:
            fails.append(f"{what}: not refused on the cached path ({cached_as} fired {fired.get(cached_as, 0) - before}x)")

    m, k, n = 2, 3, 4
    for cached in (False, True):
        tag = "cached" if cached else "full"
        t = torch.ones(8)
        a, b = torch.ones(m, k), torch.ones(k, n)
        g, c = torch.empty(world * m, k), torch.empty(world * m, n)
        x1 = torch.ones(world * m, k)
        out = torch.empty(m, n)
        if cached:  # the same calls outside a step first: the ones in the step then hit the cache
            coll.reduce(t, 0)
            (symm.shmem_send if rank == 0 else symm.shmem_recv)(t, peer)
            symm.fused_all_gather_matmul(a, b, c, g)
            coll.matmul_reduce_scatter(x1, b, out)
        refused(f"reduce {tag}", lambda: dist.all_reduce(t), lambda: coll.reduce(t, 0),
                "reduce" if cached else "")
        p2p = symm.shmem_send if rank == 0 else symm.shmem_recv
        refused(f"send/recv {tag}", lambda: dist.all_reduce(t), lambda: p2p(t, peer),
                ("send" if rank == 0 else "recv") if cached else "")
        refused(f"fused_all_gather_matmul gather_out {tag}", lambda: dist.all_gather_into_tensor(g, a),
                lambda: symm.fused_all_gather_matmul(a, b, c, g), "fused_all_gather_matmul" if cached else "")
        refused(f"fused_all_gather_matmul c {tag}", lambda: dist.all_reduce(c),
                lambda: symm.fused_all_gather_matmul(a, b, c, g), "fused_all_gather_matmul" if cached else "")
        refused(f"matmul_reduce_scatter {tag}", lambda: dist.all_reduce(out),
                lambda: coll.matmul_reduce_scatter(x1, b, out), "fused_matmul_reduce_scatter" if cached else "")
        # symsched first, then a watched torch.distributed call on the same storage
        refused(f"reduce then gloo {tag}", lambda: coll.reduce(t, 0), lambda: dist.all_reduce(t))
        refused(f"send/recv then gloo {tag}", lambda: p2p(t, peer), lambda: dist.all_reduce(t))
    # disjoint storages in one step are allowed, and every rank is still in step afterwards
    t1, t2 = torch.ones(8), torch.ones(8)
    with symm.interop.step():
        dist.all_reduce(t1)
        coll.reduce(t2, 0)
        (symm.shmem_send if rank == 0 else symm.shmem_recv)(t2, peer)
    y = torch.full((4,), float(rank + 1))
    symm.shmem_allreduce(y)
    if not torch.equal(y, torch.full((4,), float(sum(range(1, world + 1))))):
        fails.append(f"allreduce after the refusals: {y}")
    coll._fire = fire
    return {"failures": fails}


@pytest.mark.timeout(120)
def test_every_collective_records_for_the_interop_rule() -> None:
    _harness.ok(_harness.run("test_interop_record", "records", 2, timeout=100))
