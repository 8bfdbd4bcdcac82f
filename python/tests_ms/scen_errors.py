"""Scenario: bad input on every rank gets a typed error naming the argument, nothing is sent and
nothing hangs (a correct collective right after each one still completes)."""

from __future__ import annotations

from typing import Any, Callable, List

import mindspore as ms
import numpy as np

import symsched.mindspore as symm

TorchLike = type("Tensor", (), {"__module__": "torch"})  # the MindSpore venv has no torch


def bad_input(rank: int, world: int, args: Any) -> dict:
    symm.init()
    failures: List[str] = []
    seen: List[str] = []

    def expect(what: str, err: type, needle: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
            failures.append(f"{what}: no error")
        except err as exc:
            if needle not in str(exc):
                failures.append(f"{what}: message {exc!s} lacks {needle!r}")
            seen.append(type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - the point is which type
            failures.append(f"{what}: {type(exc).__name__}: {exc}")
        # nothing was sent: the next collective pairs up with the peers' and completes
        t = ms.Tensor(np.ones(4, np.float32))
        symm.shmem_allreduce(t, "sum")
        if t.asnumpy().tolist() != [float(world)] * 4:
            failures.append(f"{what}: the allreduce after it returned {t.asnumpy()}")

    x = ms.Tensor(np.arange(8, dtype=np.float32))
    expect("torch tensor", symm.WrongFrameworkError, "`tensor` is a torch.Tensor",
           lambda: symm.shmem_allreduce(TorchLike(), "sum"))
    expect("torch tensor (TypeError)", TypeError, "torch.Tensor",
           lambda: symm.shmem_allgather(ms.ops.zeros((16,), ms.float32), TorchLike()))
    expect("numpy array", symm.SymschedTypeError, "numpy", lambda: symm.shmem_broadcast(np.zeros(3), 0))
    expect("non-contiguous view", symm.SymschedArgumentError, "contiguous",
           lambda: symm.shmem_allreduce(x[::2], "sum"))
    expect("bool dtype", symm.SymschedArgumentError, "dtype",
           lambda: symm.shmem_allreduce(ms.Tensor(np.zeros(2, np.bool_)), "sum"))
    expect("bad op", symm.SymschedArgumentError, "`op`", lambda: symm.shmem_allreduce(x, "mean"))
    expect("rank outside the group", symm.SymschedArgumentError, "`src`=7",
           lambda: symm.shmem_broadcast(x, 7, group=[0, 1]))
    expect("rank list without me", symm.SymschedArgumentError, "not a member",
           lambda: symm.shmem_allreduce(x, "sum", group=[(rank + 1) % world]))
    expect("unknown group name", symm.SymschedArgumentError, "no_such_group",
           lambda: symm.shmem_allreduce(x, "sum", group="no_such_group"))
    expect("group of wrong type", symm.SymschedTypeError, "group name",
           lambda: symm.shmem_allreduce(x, "sum", group=3.5))
    expect("allgather size", symm.SymschedArgumentError, "`output_tensor`",
           lambda: symm.shmem_allgather(ms.ops.zeros((5,), ms.float32), x))
    expect("put into an ordinary tensor", symm.NotSymmetricError, "`target`",
           lambda: symm.shmem_put(ms.ops.zeros((8,), ms.float32), 0, x, 0, 8, (rank + 1) % world))
    expect("wire format on max", symm.SymschedArgumentError, "low_precision_dtype",
           lambda: symm.shmem_allreduce(x, "max", low_precision_dtype=ms.bfloat16))
    expect("functional backward missing", symm.SymschedArgumentError, "`backward`",
           lambda: symm.functional.all_reduce(x, "sum", backward="both"))

    def in_graph_mode() -> None:
        ms.set_context(mode=ms.GRAPH_MODE)
        try:
            # the same call as the follow-ups: it would hit the cached fast path
            symm.shmem_allreduce(ms.Tensor(np.ones(4, np.float32)), "sum")
        finally:
            ms.set_context(mode=ms.PYNATIVE_MODE)

    expect("graph mode", symm.GraphModeError, "silently zeroes the gradients", in_graph_mode)

    def functional_in_graph_mode() -> None:
        ms.set_context(mode=ms.GRAPH_MODE)
        try:
            symm.functional.all_gather(ms.Tensor(np.ones(4, np.float32)))
        finally:
            ms.set_context(mode=ms.PYNATIVE_MODE)

    expect("graph mode (functional)", symm.GraphModeError, "PyNative", functional_in_graph_mode)
    return {"failures": failures, "seen": seen}


def sizes_differ(rank: int, world: int, args: Any) -> dict:
    """Ranks pass different element counts to one allreduce: an error on every rank, no hang."""
    symm.init()
    failures: List[str] = []
    t = ms.Tensor(np.ones(4 + rank, np.float32))
    msg = ""
    try:
        symm.shmem_allreduce(t, "sum")
        failures.append(f"mismatched sizes accepted: {t.asnumpy().tolist()}")
        kind = "none"
    except symm.SymschedError as exc:
        kind = type(exc).__name__
        msg = str(exc)
    if args and args.get("probe"):
        return {"failures": failures, "kind": kind, "msg": msg}
    ok = ms.Tensor(np.ones(4, np.float32))
    symm.shmem_allreduce(ok, "sum")
    if ok.asnumpy().tolist() != [float(world)] * 4:
        failures.append(f"allreduce after the mismatch returned {ok.asnumpy()}")
    return {"failures": failures, "kind": kind, "msg": msg}


def stuck_peer(rank: int, world: int, args: Any) -> dict:
    """Rank 1 never joins: rank 0's wait times out with an error naming the rank it waited for."""
    import time

    symm.init()
    symm.barrier()  # the world group exists on both ranks
    msg = ""
    if rank == 1:
        time.sleep(8)  # alive, but never joins: rank 0 must time out, not see a dead peer
    if rank == 0:
        try:
            t = ms.Tensor(np.ones(4, np.float32))
            symm.shmem_allreduce(t, "sum")
        except symm.SymschedRuntimeError as exc:
            msg = str(exc)
    # the ranks made different calls on purpose: finalize's barrier would not pair up either
    return {"failures": [] if rank != 0 or msg else ["no timeout error"], "msg": msg, "desynced": True}
