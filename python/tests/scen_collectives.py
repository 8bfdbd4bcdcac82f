"""Scenario: every collective × group shape × dtype × op, vs a sequential reference and gloo."""

from __future__ import annotations

import torch
import torch.distributed as dist

import symsched as symm
from _common import DTYPES, FLOATS, data, make_groups, reference_reduce

GLOO_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def _check(cond: bool, what: str, failures: list) -> None:
    if not cond:
        failures.append(what)


def matrix(rank: int, world: int, args) -> dict:
    symm.init()
    groups = make_groups(world)
    failures: list = []
    gloo_diffs: list = []
    checked = 0
    sizes = args.get("sizes", [1, 1003]) if args else [1, 1003]
    for gname, (pg, ranks) in groups.items():
        me = ranks.index(rank)
        p = len(ranks)
        for dtype in DTYPES:
            ops = ["sum", "max", "min"] + (["avg"] if dtype in FLOATS else [])
            for n in sizes:
                parts = [data(1000 * r + n, n, dtype) for r in ranks]
                # allreduce
                for op in ops:
                    t = parts[me].clone()
                    symm.shmem_allreduce(t, op, group=pg)
                    ref = reference_reduce(parts, op)
                    if dtype in (torch.float16, torch.bfloat16) and op == "avg":
                        # the executor rounds the 16-bit sum, then scales: ≤ 1 ulp from one rounding
                        ok = torch.allclose(t.float(), ref.float(), rtol=torch.finfo(dtype).eps, atol=1e-5)
                    elif dtype in (torch.float16, torch.bfloat16):
                        ok = torch.allclose(t.float(), ref.float(), rtol=1e-3, atol=1e-5)
                    elif op == "avg":
                        ok = torch.allclose(t, ref, rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=1e-7)
                    else:
                        ok = torch.equal(t, ref)  # bit-exact: fixed rank-order fold
                    _check(ok, f"allreduce {gname} {dtype} {op} n={n}", failures)
                    if op in GLOO_OPS and dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
                        g = parts[me].clone()
                        dist.all_reduce(g, GLOO_OPS[op], group=pg)
                        if op != "sum" or not dtype.is_floating_point or p <= 2:
                            # max/min, integers and 2-rank sums do not depend on the order
                            ok = torch.equal(t, g)
                        else:
                            # gloo folds in another order: bound |a - g| by the rounding error of
                            # two different (P-1)-addition orders, 2 (P-1) eps sum|x|
                            eps = torch.finfo(dtype).eps
                            bound = 2 * (p - 1) * eps * torch.stack([q.abs() for q in parts]).sum(0).double()
                            diff = (t.double() - g.double()).abs()
                            ok = bool((diff <= bound).all())
                            gloo_diffs.append(float(diff.max()) if diff.numel() else 0.0)
                        _check(ok, f"allreduce vs gloo {gname} {dtype} {op} n={n}", failures)
                    checked += 1
                # allgather
                out = torch.empty(p * n, dtype=dtype)
                symm.shmem_allgather(out, parts[me], group=pg)
                _check(torch.equal(out, torch.cat(parts)), f"allgather {gname} {dtype} n={n}", failures)
                # reduce_scatter: input P*n
                big = [data(7 + 1000 * r + n, p * n, dtype) for r in ranks]
                for op in ops:
                    o = torch.empty(n, dtype=dtype)
                    symm.shmem_reduce_scatter(o, big[me], op, group=pg)
                    ref = reference_reduce([b[me * n:(me + 1) * n] for b in big], op)
                    if dtype in (torch.float16, torch.bfloat16) and op == "avg":
                        ok = torch.allclose(o.float(), ref.float(), rtol=torch.finfo(dtype).eps, atol=1e-5)
                    elif dtype in (torch.float16, torch.bfloat16):
                        ok = torch.allclose(o.float(), ref.float(), rtol=1e-3, atol=1e-5)
                    elif op == "avg":
                        ok = torch.allclose(o, ref, rtol=1e-6, atol=1e-7)
                    else:
                        ok = torch.equal(o, ref)
                    _check(ok, f"reduce_scatter {gname} {dtype} {op} n={n}", failures)
                    checked += 1
                # roundtrip allgather -> reduce_scatter(sum) / P == input (floats)
                # broadcast from the last group rank
                b = parts[me].clone()
                symm.shmem_broadcast(b, p - 1, group=pg)
                _check(torch.equal(b, parts[p - 1]), f"broadcast {gname} {dtype} n={n}", failures)
                # alltoall with uneven splits: rank i sends (i + j + 1) elements to j
                send = [data(31 * ranks[me] + j, me + j + 1, dtype) for j in range(p)]
                recv_counts = [i + me + 1 for i in range(p)]
                rt = torch.empty(sum(recv_counts), dtype=dtype)
                symm.shmem_alltoall(send, rt, recv_counts, group=pg)
                expect = torch.cat([data(31 * ranks[i] + me, i + me + 1, dtype) for i in range(p)])
                _check(torch.equal(rt, expect), f"alltoall {gname} {dtype} n={n}", failures)
                checked += 3
            # send/recv in pairs (0<->1, 2<->3 of the group)
            if p >= 2:
                x = data(99 + ranks[me], 17, dtype)
                y = torch.empty(17, dtype=dtype)
                if me % 2 == 0 and me + 1 < p:
                    symm.shmem_send(x, me + 1, group=pg)
                    symm.shmem_recv(y, me + 1, group=pg)
                    _check(torch.equal(y, data(99 + ranks[me + 1], 17, dtype)), f"recv {gname} {dtype}", failures)
                elif me % 2 == 1:
                    symm.shmem_recv(y, me - 1, group=pg)
                    symm.shmem_send(x, me - 1, group=pg)
                    _check(torch.equal(y, data(99 + ranks[me - 1], 17, dtype)), f"recv {gname} {dtype}", failures)
                checked += 1
    return {"failures": failures, "checked": checked, "gloo_max_abs_diff": max(gloo_diffs, default=0.0)}


def symmetric_inplace(rank: int, world: int, args) -> dict:
    """Symmetric tensors are used in place; results equal the staged path."""
    symm.init()
    failures: list = []
    n = 4099
    t = symm.empty(n, torch.float32)
    t.copy_(data(rank, n, torch.float32))
    symm.shmem_allreduce(t)
    ref = reference_reduce([data(r, n, torch.float32) for r in range(world)], "sum")
    _check(torch.equal(t, ref), "symmetric allreduce", failures)
    out = symm.empty((world, n), torch.float32)
    symm.shmem_allgather(out, t)
    _check(torch.equal(out.view(-1), ref.repeat(world)), "symmetric allgather", failures)
    # large message: two-shot
    big = symm.empty(300_000, torch.float32)
    big.copy_(data(5 + rank, 300_000, torch.float32))
    symm.shmem_allreduce(big)
    ref = reference_reduce([data(5 + r, 300_000, torch.float32) for r in range(world)], "sum")
    _check(torch.equal(big, ref), "two-shot allreduce bit-exact", failures)
    # allgather -> reduce_scatter(avg) roundtrip equals the input
    x = data(77 + rank, 513, torch.float32)
    g = torch.empty(world * 513)
    symm.shmem_allgather(g, x)
    back = torch.empty(513)
    # every rank reduce-scatters the same gathered tensor: block r summed P times / P = x_r
    symm.shmem_reduce_scatter(back, g, "avg")
    _check(torch.allclose(back, x, rtol=0, atol=1e-6), "allgather->reduce_scatter roundtrip", failures)
    stats = symm.symm_memory_stats()
    symm.free(big)
    symm.free(out)
    symm.free(t)
    after = symm.symm_memory_stats()
    _check(after["allocated"] < stats["allocated"], "free lowers allocated", failures)
    _check(stats["peak"] >= stats["allocated"], "peak >= allocated", failures)
    return {"failures": failures, "stats": stats, "after": after}
