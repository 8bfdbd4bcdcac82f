"""Scenario: the front-of-call cache of every collective (``symsched.core.coll._fast``).

A repeated call with the same key must hit the cache (counted through ``_coll._fire`` and the
native cached calls) and give
the same results as the full path; per-tensor properties the key cannot vouch for must still be
rejected on a hit; an alltoallv whose count matrix changes behind an unchanged local row and
column must still be right (the counts are exchanged on every call)."""

from __future__ import annotations

import torch
import torch.distributed as dist

import symsched as symm
import symsched.functional as F
from symsched.core import coll as _coll
from _common import data, spy_native_hits


def _check(cond: bool, what: str, fails: list) -> None:
    if not cond:
        fails.append(what)


def _raises(fails: list, exc: type, fn, what: str) -> None:
    # every rank finished its previous call first: a failure aborts the group, which fails
    # every call still in flight on it, a slower rank's previous one too (docs/reliability.md)
    symm.barrier()
    try:
        fn()
    except exc:
        return
    except Exception as e:  # noqa: BLE001 - the wrong type is the failure reported
        fails.append(f"{what}: raised {type(e).__name__}: {e}")
        return
    fails.append(f"{what}: did not raise {exc.__name__}")


def fastpath(rank: int, world: int, args) -> dict:
    symm.init()
    fails: list = []
    P = world
    hits: dict = {}
    fire = _coll._fire

    def counting(op_name, *a, **k):
        hits[op_name] = hits.get(op_name, 0) + 1
        return fire(op_name, *a, **k)

    _coll._fire = counting

    def counting_native(prepared) -> None:  # the native cached calls: all-reduce/-gather, reduce-scatter
        op = next(o for o in ("allreduce", "allgather", "reduce_scatter") if prepared.schedule.startswith(o))
        hits[op] = hits.get(op, 0) + 1

    restore_native = spy_native_hits(counting_native)
    n = 5
    sym_in = symm.empty(n, torch.float32)
    sym_big = symm.empty(P * n, torch.float32)
    for it in range(3):  # the first call of each key fills the cache, later ones hit it
        parts = [data(100 * r + it, n, torch.float32) for r in range(P)]
        big = [data(200 * r + it, P * n, torch.float32) for r in range(P)]
        # allgather, ordinary and symmetric buffers
        out = torch.empty(P * n)
        symm.shmem_allgather(out, parts[rank])
        _check(torch.equal(out, torch.cat(parts)), f"allgather it={it}", fails)
        sym_in.copy_(parts[rank])
        symm.shmem_allgather(sym_big, sym_in)
        _check(torch.equal(sym_big, torch.cat(parts)), f"allgather symmetric it={it}", fails)
        # reduce_scatter sum / max
        for op in ("sum", "max"):
            o = torch.empty(n)
            symm.shmem_reduce_scatter(o, big[rank], op)
            ref = torch.stack(big).sum(0) if op == "sum" else torch.stack(big).max(0).values
            _check(torch.allclose(o, ref[rank * n:(rank + 1) * n], rtol=1e-6, atol=1e-6),
                   f"reduce_scatter {op} it={it}", fails)
        # allreduce
        t = parts[rank].clone()
        symm.shmem_allreduce(t)
        _check(torch.allclose(t, torch.stack(parts).sum(0), rtol=1e-6, atol=1e-6), f"allreduce it={it}", fails)
        # alltoall, uneven fixed counts: rank r sends r + j + 1 elements to j
        sends = [torch.full((rank + j + 1,), float(10 * rank + j)) for j in range(P)]
        recv_counts = [r + rank + 1 for r in range(P)]
        rt = torch.empty(sum(recv_counts))
        symm.shmem_alltoall(sends, rt, recv_counts)
        ref = torch.cat([torch.full((r + rank + 1,), float(10 * r + rank)) for r in range(P)])
        _check(torch.equal(rt, ref), f"alltoall it={it}", fails)
        # alltoall of views of one buffer (bound without a copy)
        flat = torch.arange(P * 2, dtype=torch.float32) + 100 * rank
        rt2 = torch.empty(P * 2)
        symm.shmem_alltoall(list(flat.split(2)), rt2, [2] * P)
        ref2 = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * r for r in range(P)])
        _check(torch.equal(rt2, ref2), f"alltoall packed it={it}", fails)
        # broadcast from every root
        for src in range(P):
            b = parts[rank].clone()
            symm.shmem_broadcast(b, src)
            _check(torch.equal(b, parts[src]), f"broadcast src={src} it={it}", fails)
        # send / recv between 0 and 1
        if rank == 0:
            symm.shmem_send(parts[0], 1)
        elif rank == 1:
            r1 = torch.empty(n)
            symm.shmem_recv(r1, 0)
            _check(torch.equal(r1, parts[0]), f"recv it={it}", fails)
        # autograd: forward through the cache, backward through the prepared dual
        x = parts[rank].clone().requires_grad_(True)
        y = F.all_gather(x)
        y.backward(torch.arange(P * n, dtype=torch.float32))
        _check(torch.equal(x.grad, P * torch.arange(rank * n, (rank + 1) * n, dtype=torch.float32)),
               f"all_gather backward it={it}", fails)
    for op in ("allgather", "reduce_scatter", "allreduce", "alltoall", "broadcast"):
        _check(hits.get(op, 0) >= 2, f"{op} never hit the cache: {hits}", fails)
    if rank in (0, 1):
        _check(hits.get("send" if rank == 0 else "recv", 0) >= 2, f"send/recv never hit the cache: {hits}", fails)

    # a count matrix that changes while the last rank's row and column stay the same: rank P-1
    # writes into rank j at offset sum_{k<P-1} C[k][j], which it can only learn by the exchange
    if P >= 3:
        last = P - 1
        mats = []
        for variant in range(2):
            c = [[1] * P for _ in range(P)]
            c[0][0], c[0][1], c[1][0], c[1][1] = ((1, 2, 3, 1), (2, 1, 1, 3))[variant]
            mats.append(c)
        for rnd in range(4):
            c = mats[rnd % 2]
            sends = [torch.full((c[rank][j],), float(1000 * rnd + 10 * rank + j)) for j in range(P)]
            counts = [c[r][rank] for r in range(P)]
            rt = torch.empty(sum(counts))
            symm.shmem_alltoall(sends, rt, counts)
            ref = torch.cat([torch.full((c[r][rank],), float(1000 * rnd + 10 * r + rank)) for r in range(P)])
            _check(torch.equal(rt, ref), f"alltoall changing matrix round {rnd} (rank {last} unchanged)", fails)

    # per-tensor checks still run on a hit (every rank raises alike, before anything is sent)
    t = torch.ones(8)
    symm.shmem_allreduce(t)
    symm.shmem_allreduce(t)
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_allreduce(torch.ones(16)[::2]),
            "non-contiguous allreduce after a hit")
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_allreduce(torch.ones(8, device="meta")),
            "meta tensor allreduce after a hit")
    # in the heap the native cached call reads less (a heap address is CPU memory): contiguity
    # is still checked
    sym16 = symm.empty(16, torch.float32)
    symm.shmem_allreduce(t)
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_allreduce(sym16[::2]),
            "non-contiguous symmetric view allreduce after a hit")
    symm.free(sym16)
    out = torch.empty(P * n)
    _raises(fails, symm.SymschedArgumentError,
            lambda: symm.shmem_allgather(torch.empty(2 * P * n)[::2], torch.ones(n)), "non-contiguous allgather output")
    b = torch.ones(n)
    symm.shmem_broadcast(b, 1)
    _raises(fails, symm.SymschedTypeError, lambda: symm.shmem_broadcast(b, True), "bool src after src=1 was cached")
    ones_p, recv_p = [torch.ones(1)] * P, torch.empty(P)
    symm.shmem_alltoall(ones_p, recv_p, [1] * P)
    symm.shmem_alltoall(ones_p, recv_p, [1] * P)
    _raises(fails, symm.SymschedTypeError, lambda: symm.shmem_alltoall(ones_p, recv_p, [True] * P),
            "bool receive_list after ints were cached")
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_allgather(out, torch.ones(n, dtype=torch.float64)),
            "dtype mismatch after a hit")
    # a view of a released symmetric block is refused even though its key was cached; another
    # block released first keeps records to check, so the hits before the free found their
    # buffer live (the native cached call trusts it until the next free)
    other = symm.empty(64 * n, torch.float32)
    s = symm.empty(n, torch.float32)
    symm.free(other)
    view = s.view(-1)
    s.fill_(1.0)
    symm.shmem_allreduce(s)
    symm.shmem_allreduce(s)
    symm.free(s)
    _raises(fails, symm.StaleTensorError, lambda: symm.shmem_allreduce(view), "stale view after a hit")
    # ...also as an alltoall send tensor or a reduce_scatter output, whose keys are cached
    rs_in, rs_out, a2a_out = symm.empty(P * n, torch.float32), symm.empty(n, torch.float32), torch.empty(P * n)
    rs_in.fill_(1.0)
    gone = symm.empty(P * n, torch.float32)
    gone.fill_(2.0)
    gone_parts, gone_out = list(gone.view(-1).split(n)), gone.view(-1)[:n]
    for _ in range(2):
        symm.shmem_reduce_scatter(rs_out, rs_in)
        symm.shmem_reduce_scatter(gone_out, rs_in)
        symm.shmem_alltoall(gone_parts, a2a_out, [n] * P)
    symm.free(gone)
    _raises(fails, symm.StaleTensorError, lambda: symm.shmem_alltoall(gone_parts, a2a_out, [n] * P),
            "stale alltoall send view after a hit")
    _raises(fails, symm.StaleTensorError, lambda: symm.shmem_reduce_scatter(gone_out, rs_in),
            "stale reduce_scatter output view after a hit")
    # a freed block nobody uses any more must not push live tensors off the cached path (the
    # refusals above aborted the group, which drops every cached launch: warm it again first)
    symm.shmem_reduce_scatter(rs_out, rs_in)
    before = hits.get("reduce_scatter", 0)
    symm.shmem_reduce_scatter(rs_out, rs_in)
    _check(hits.get("reduce_scatter", 0) == before + 1, "a free elsewhere disabled the cached path", fails)
    _check(torch.equal(rs_out, torch.full((n,), float(P))), f"reduce_scatter after a free: {rs_out}", fails)
    symm.free(rs_out)
    symm.free(rs_in)
    # the forbidden-mix rule is checked on the cached path too
    t = torch.ones(8)
    symm.shmem_allreduce(t)
    with symm.interop.step():
        dist.all_reduce(t)
        _raises(fails, symm.ForbiddenMixError, lambda: symm.shmem_allreduce(t), "forbidden mix after a hit")
    # the profiler still sees cached ops (observed calls take the instrumented path)
    xg = torch.ones(n)
    og = torch.empty(P * n)
    symm.shmem_allgather(og, xg)
    with torch.profiler.profile() as prof:
        symm.shmem_allgather(og, xg)
    names = {e.key for e in prof.key_averages()}
    _check("symsched::allgather" in names, f"profiler misses a cached allgather: {sorted(names)[:20]}", fails)
    _coll._fire = fire
    restore_native()
    symm.free(sym_big)
    symm.free(sym_in)
    return {"failures": fails, "hits": hits}
