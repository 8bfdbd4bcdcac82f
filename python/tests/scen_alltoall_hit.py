"""Scenario: the native cached alltoall (``_native.alltoall_hit`` through ``_coll.alltoall_hit``).

Once a group and dtype have run an alltoall, later calls whose send list is one buffer in order
are checked and launched in one native call. Here: those calls are taken natively (counted) and
right, with counts changing every call; anything unusual declines to the full path, which gives
the right result or the typed error naming the argument, before anything is sent — a list whose
contents changed, bool / float / negative / too few counts, another dtype, a non-contiguous or
meta receive tensor, a wrong receive size, released symmetric memory, a send tensor that
requires grad, the forbidden mix and the profiler."""

from __future__ import annotations

import torch
import torch.distributed as dist

import symsched as symm
from symsched.core import coll as _coll


def _raises(fails: list, exc: type, fn, what: str, *words: str) -> None:
    # every rank finished its previous call first: a failure aborts the group, which fails
    # every call still in flight on it, a slower rank's previous one too (docs/reliability.md)
    symm.barrier()
    try:
        fn()
    except exc as e:
        for w in words:
            if w not in str(e):
                fails.append(f"{what}: message lacks {w!r}: {e}")
        return
    except Exception as e:  # noqa: BLE001 - the wrong type is the failure reported
        fails.append(f"{what}: raised {type(e).__name__}: {e}")
        return
    fails.append(f"{what}: did not raise {exc.__name__}")


def _expect(rank: int, world: int, counts_of, it: int, dtype: torch.dtype) -> torch.Tensor:
    """What rank ``rank`` receives when rank r sends ``counts_of(r, j)`` elements to j, rank r's
    chunk for j holding ``1000 * it + 100 * r + 10 * j + k``."""
    return torch.cat([(torch.arange(counts_of(r, rank)) + 1000 * it + 100 * r + 10 * rank).to(dtype)
                      for r in range(world)])


def _sends(rank: int, world: int, counts_of, it: int, dtype: torch.dtype, symmetric: bool):
    row = [counts_of(rank, j) for j in range(world)]
    flat = torch.cat([torch.arange(c) + 1000 * it + 100 * rank + 10 * j for j, c in enumerate(row)]).to(dtype)
    if symmetric:  # allocations are collective: the same size on every rank (4 bounds a count)
        s = symm.empty(4 * world, dtype)
        s[: flat.numel()].copy_(flat)
        return s, list(s[: flat.numel()].split(row))
    return flat, list(flat.split(row))


def hit(rank: int, world: int, args) -> dict:
    symm.init()
    fails: list = []
    native = _coll._native_a2a
    taken = {"native": 0}

    def counting(*a, **k):
        done = native(*a, **k)
        taken["native"] += bool(done)
        return done

    _coll._native_a2a = counting
    try:
        _run(rank, world, fails, taken)
    finally:
        _coll._native_a2a = native
    return {"failures": fails, "native": taken["native"]}


def _run(rank: int, world: int, fails: list, taken: dict) -> None:
    P = world
    # counts change every call (as in MoE dispatch): the cached launch does not depend on them
    for dtype in (torch.float32, torch.int64):
        for symmetric in (False, True):
            before = taken["native"]
            for it in range(6):
                def counts_of(r, j, it=it):
                    return (r + 2 * j + it) % 4 + (1 if it % 3 else 0)
                flat, sends = _sends(rank, P, counts_of, it, dtype, symmetric)
                recv_counts = [counts_of(r, rank) for r in range(P)]
                whole = symm.empty(4 * P, dtype) if symmetric else torch.empty(4 * P, dtype=dtype)
                out = whole[: sum(recv_counts)]
                symm.shmem_alltoall(sends, out, recv_counts)
                ref = _expect(rank, P, counts_of, it, dtype)
                if not torch.equal(out, ref):
                    fails.append(f"{dtype} symmetric={symmetric} it={it}: {out.tolist()} != {ref.tolist()}")
                if symmetric:
                    symm.free(whole)
                    symm.free(flat)
            # the first call of each (group, dtype) runs the full path; the heap-bound ones after
            # a free take the native path too (their span lies in a live allocation)
            if taken["native"] - before < (2 if symmetric else 5):
                fails.append(f"{dtype} symmetric={symmetric}: only {taken['native'] - before} of 6 calls native")

    n = 4
    flat = torch.arange(P * n, dtype=torch.float32) + 100 * rank
    sends = list(flat.split(n))
    out = torch.empty(P * n)
    symm.shmem_alltoall(sends, out, [n] * P)
    # the same list object with a member replaced: by one of another size, then by one that is
    # not adjacent to the others (the Python path concatenates it)
    sends[P - 1] = flat[(P - 1) * n: (P - 1) * n + 2]
    recv = [2 if rank == P - 1 else n] * P
    out2 = torch.empty(sum(recv))
    symm.shmem_alltoall(sends, out2, recv)
    ref2 = torch.cat([torch.arange(rank * n, rank * n + recv[r], dtype=torch.float32) + 100 * r for r in range(P)])
    if not torch.equal(out2, ref2):
        fails.append(f"changed list member: {out2.tolist()} != {ref2.tolist()}")
    sends[0] = torch.full((n,), -1.0)
    before = taken["native"]
    symm.shmem_alltoall(sends, out2, recv)
    if taken["native"] != before:
        fails.append("a list that is not one buffer in order was taken natively")
    ref3 = torch.full((sum(recv),), -1.0) if rank == 0 else ref2
    if not torch.equal(out2, ref3):
        fails.append(f"non-adjacent member: {out2.tolist()} != {ref3.tolist()}")

    # bad arguments after the native cache is warm: the full path's typed errors, nothing sent
    sends = list(flat.split(n))
    symm.shmem_alltoall(sends, out, [n] * P)
    _raises(fails, symm.SymschedTypeError, lambda: symm.shmem_alltoall(sends, out, [True] * P),
            "bool counts", "receive_list[0]")
    _raises(fails, symm.SymschedTypeError, lambda: symm.shmem_alltoall(sends, out, [float(n)] * P),
            "float counts", "receive_list[0]")
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_alltoall(sends, out, [-1] + [n] * (P - 1)),
            "negative count", "receive_list[0]")
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_alltoall(sends, out, [n] * (P - 1)),
            "too few counts", "receive_list")
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_alltoall(sends[:-1], out, [n] * P),
            "too few send tensors", "send_tensor_list")
    mixed = list(flat.split(n))
    mixed[1] = mixed[1].to(torch.float64)
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_alltoall(mixed, out, [n] * P),
            "another dtype", "send_tensor_list[1]")
    # ...also as a view of the same buffer, back to back with the others (same element size)
    viewed = list(flat.split(n))
    viewed[1] = flat[n: 2 * n].view(torch.int32)
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_alltoall(viewed, out, [n] * P),
            "another dtype in one buffer", "send_tensor_list[1]")
    _raises(fails, symm.SymschedArgumentError,
            lambda: symm.shmem_alltoall(sends, torch.empty(2 * P * n)[::2], [n] * P),
            "non-contiguous receive tensor", "receive_tensor")
    _raises(fails, symm.SymschedArgumentError,
            lambda: symm.shmem_alltoall(sends, torch.empty(P * n, device="meta"), [n] * P),
            "meta receive tensor", "receive_tensor")
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_alltoall(sends, torch.empty(P * n + 1), [n] * P),
            "wrong receive size", "receive_tensor")

    # released symmetric memory: a send view and a receive view
    for which in ("send", "receive"):
        sflat = symm.empty(P * n, torch.float32)
        sout = symm.empty(P * n, torch.float32)
        sflat.fill_(1.0)
        ssends, sview = list(sflat.view(-1).split(n)), sout.view(-1)
        for _ in range(2):
            symm.shmem_alltoall(ssends, sview, [n] * P)
        symm.free(sflat if which == "send" else sout)
        _raises(fails, symm.StaleTensorError, lambda: symm.shmem_alltoall(ssends, sview, [n] * P),
                f"released {which} view after hits")
        # the released tensor itself has no elements left: with zero counts every other check
        # passes, so only the record of what ``free`` released tells it apart (the failure above
        # dropped the cached launches: one good call caches the native one again)
        symm.shmem_alltoall(sends, out, [n] * P)
        gone = sflat if which == "send" else sout
        nothing = [torch.empty(0)] * P
        _raises(fails, symm.StaleTensorError,
                lambda: symm.shmem_alltoall([gone] * P if which == "send" else nothing,
                                            torch.empty(0) if which == "send" else gone, [0] * P),
                f"released {which} tensor itself, zero counts")
        symm.free(sout if which == "send" else sflat)

    # a send tensor that requires grad takes the differentiable form
    x = torch.arange(P * n, dtype=torch.float32, requires_grad=True)
    gout = torch.empty(P * n)
    symm.shmem_alltoall(list(x.split(n)), gout, [n] * P)
    if gout.grad_fn is None:
        fails.append("requires_grad send: the result has no grad_fn")
    else:  # every rank alike: the backward is collective
        gout.sum().backward()
        if x.grad is None or not torch.equal(x.grad, torch.ones(P * n)):
            fails.append(f"requires_grad send: grad {x.grad}")

    # the forbidden mix is checked before a native launch
    symm.shmem_alltoall(sends, out, [n] * P)
    with symm.interop.step():
        dist.all_reduce(out)
        _raises(fails, symm.ForbiddenMixError, lambda: symm.shmem_alltoall(sends, out, [n] * P),
                "forbidden mix after hits")
    # the profiler still sees the op (observed calls take the instrumented path)
    with torch.profiler.profile() as prof:
        symm.shmem_alltoall(sends, out, [n] * P)
    names = {e.key for e in prof.key_averages()}
    if "symsched::alltoall" not in names:
        fails.append(f"profiler misses a cached alltoall: {sorted(names)[:20]}")
