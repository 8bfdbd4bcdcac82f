"""send/recv on a sub-group involve the two ranks of the pair only: the group passed names the
ranks (group-local ranks are mapped through it) but is not set up by a send/recv, so the
members that take no part are not drawn into a hidden collective; and a send/recv that fails on
one rank aborts the pair, the group its peer is waiting in.

Seen in the symmetric soak: ranks 1 and 2 of group [1, 2, 3] sent and received as the group's
first call while rank 3 went on to a WORLD collective; both waited 60 s for rank 3 to set the
group up, rank 3 for them in the WORLD collective.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List

import _harness
import pytest


def first_call(rank: int, world: int, args: Any) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist

    import symsched as symm
    from symsched.core import state

    symm.init()
    fails: List[str] = []
    sub = dist.new_group([1, 2, 3])
    t0 = time.monotonic()
    if rank == 1:
        symm.shmem_send(torch.arange(8, dtype=torch.float32), 1, group=sub)  # group-local 1 = rank 2
        symm.shmem_recv(got := torch.empty(8), 1, group=sub)  # the same pair, the cached path
    elif rank == 2:
        symm.shmem_recv(got := torch.empty(8), 0, group=sub)
        symm.shmem_send(got.clone(), 0, group=sub)
    if rank in (1, 2) and not torch.equal(got, torch.arange(8, dtype=torch.float32)):
        fails.append(f"received {got}")
    if rank in (1, 2) and state.group_ranks(sub) in state._groups:
        fails.append("send/recv set up the whole group [1, 2, 3]")
    symm.barrier()  # WORLD: rank 3 waits here for ranks 1 and 2
    if time.monotonic() - t0 > 10:
        fails.append(f"the WORLD barrier after the send/recv took {time.monotonic() - t0:.1f} s")
    # the group's first collective, later, on every member: sets it up as documented
    if rank != 0:
        x = torch.ones(4)
        symm.shmem_allreduce(x, group=sub)
        if not torch.equal(x, torch.full((4,), 3.0)):
            fails.append(f"allreduce on the group afterwards: {x}")
    symm.barrier()
    return {"failures": fails}


@pytest.mark.timeout(120)
def test_sendrecv_does_not_set_up_its_group():
    _harness.ok(_harness.run("test_sendrecv_groups", "first_call", 4, timeout=100))


def failing_send(rank: int, world: int, args: Any) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist

    import symsched as symm

    symm.init()
    fails: List[str] = []
    sub = dist.new_group([1, 2, 3])
    if rank == 1:
        # a bad argument only the sender has (a strided tensor): raised here, and the pair aborted
        try:
            symm.shmem_send(torch.ones(16)[::2], 1, group=sub)
            fails.append("a strided send was accepted")
        except symm.PeerAbortedError as e:
            fails.append(f"the failing rank saw a peer's abort: {e}")
        except Exception as e:  # noqa: BLE001 - this rank's own error is expected
            if "abort" not in "".join(getattr(e, "__notes__", [])):
                fails.append(f"no abort noted on {type(e).__name__}: {e}")
    elif rank == 2:
        t0 = time.monotonic()
        try:
            symm.shmem_recv(torch.empty(8), 0, group=sub)
            fails.append("the receive of a failed send returned")
        except symm.PeerAbortedError as e:
            dt = time.monotonic() - t0
            if e.rank != 1 or dt > 5:
                fails.append(f"PeerAbortedError names rank {e.rank} after {dt:.2f} s: {e}")
        except Exception as e:  # noqa: BLE001
            fails.append(f"the receiver raised {type(e).__name__} after {time.monotonic() - t0:.1f} s: {e}")
    symm.barrier()
    # the pair is usable again: its next call on both resets it
    if rank in (1, 2):
        try:
            if rank == 1:
                symm.shmem_send(torch.full((8,), 5.0), 1, group=sub)
            else:
                symm.shmem_recv(y := torch.empty(8), 0, group=sub)
                if not torch.equal(y, torch.full((8,), 5.0)):
                    fails.append(f"the send after the reset delivered {y}")
        except Exception as e:  # noqa: BLE001
            fails.append(f"the pair after the abort: {type(e).__name__}: {e}")
    symm.barrier()
    return {"failures": fails}


@pytest.mark.timeout(120)
def test_a_failing_send_aborts_the_pair():
    _harness.ok(_harness.run("test_sendrecv_groups", "failing_send", 4, timeout=100))
