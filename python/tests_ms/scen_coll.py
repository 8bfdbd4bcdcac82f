"""Scenario: every collective × group shape × dtype × op on MindSpore tensors, vs a sequential
numpy reference (and vs mccl where mccl has the op and dtype on CPU)."""

from __future__ import annotations

from typing import Any, List

import mindspore as ms
import numpy as np

import symsched.mindspore as symm
from _common import DTYPES, FLOATS, HALF, close, data, groups_of, label, reference, values
from symsched.mindspore import groups as _groups
from symsched.mindspore import mccl


def matrix(rank: int, world: int, args: Any) -> dict:
    sizes = (args or {}).get("sizes", [1, 1003])
    names = _groups.mccl_initialized()
    symm.init()
    failures: List[str] = []
    checked = 0

    def check(ok: bool, what: str) -> None:
        nonlocal checked
        checked += 1
        if not ok:
            failures.append(what)

    for gname, (g, ranks) in groups_of(rank, world, names).items():
        me, p = ranks.index(rank), len(ranks)
        for dtype in DTYPES:
            ops = ["sum", "max", "min"] + (["avg"] if dtype in FLOATS else [])
            for n in sizes:
                parts = [data(1000 * r + n, n, dtype) for r in ranks]
                vals = [v for _, v in parts]
                for op in ops:
                    t = data(1000 * rank + n, n, dtype)[0]
                    symm.shmem_allreduce(t, op, group=g)
                    check(close(values(t), reference(vals, op, dtype), dtype, op),
                          f"allreduce {gname} {label(dtype)} {op} n={n}")
                    if names and op == "sum" and dtype in (ms.float32, ms.int32) and p <= 2:
                        m = data(1000 * rank + n, n, dtype)[0]
                        mccl.all_reduce(m, "sum", g if gname != "world_none" else None)
                        check(np.array_equal(values(m), values(t)), f"allreduce vs mccl {gname} {label(dtype)} n={n}")
                out = ms.ops.zeros((p * n,), dtype)
                symm.shmem_allgather(out, data(1000 * rank + n, n, dtype)[0], group=g)
                check(np.array_equal(values(out), np.concatenate(vals)), f"allgather {gname} {label(dtype)} n={n}")
                big = [data(7 + 1000 * r + n, p * n, dtype)[1] for r in ranks]
                for op in ops:
                    o = ms.ops.zeros((n,), dtype)
                    symm.shmem_reduce_scatter(o, data(7 + 1000 * rank + n, p * n, dtype)[0], op, group=g)
                    ref = reference([b[me * n:(me + 1) * n] for b in big], op, dtype)
                    check(close(values(o), ref, dtype, op), f"reduce_scatter {gname} {label(dtype)} {op} n={n}")
                root = p - 1
                b = data(1000 * rank + n, n, dtype)[0]
                symm.shmem_broadcast(b, root, group=g)
                check(np.array_equal(values(b), vals[root]), f"broadcast {gname} {label(dtype)} n={n}")
                # alltoall: rank i sends (i + j) % 3 + n elements to rank j
                sends = [data(31 * rank + j, (me + j) % 3 + n, dtype)[0] for j in range(p)]
                recv_counts = [(j + me) % 3 + n for j in range(p)]
                r = ms.ops.zeros((sum(recv_counts),), dtype)
                symm.shmem_alltoall(sends, r, recv_counts, group=g)
                expect = np.concatenate([data(31 * ranks[j] + me, (j + me) % 3 + n, dtype)[1] for j in range(p)])
                check(np.array_equal(values(r), expect), f"alltoall {gname} {label(dtype)} n={n}")
                if p >= 2:
                    # a ring of send/recv, even ranks first (group-local ranks)
                    nxt, prv = (me + 1) % p, (me - 1) % p
                    mine = data(77 + rank, n, dtype)[0]
                    got = ms.ops.zeros((n,), dtype)
                    if me % 2 == 0:
                        symm.shmem_send(mine, nxt, group=g)
                        symm.shmem_recv(got, prv, group=g)
                    else:
                        symm.shmem_recv(got, prv, group=g)
                        symm.shmem_send(mine, nxt, group=g)
                    check(np.array_equal(values(got), data(77 + ranks[prv], n, dtype)[1]),
                          f"send/recv {gname} {label(dtype)} n={n}")
    return {"failures": failures, "checked": checked}


def symmetric_inplace(rank: int, world: int, args: Any) -> dict:
    """symm.empty tensors: zero-copy in place, put/get/signal, stats, free invalidates."""
    failures: List[str] = []
    symm.init()
    before = symm.symm_memory_stats()
    buf = symm.empty((4, 8), ms.float32)
    if not isinstance(buf, ms.Tensor) or tuple(buf.shape) != (4, 8) or buf.dtype != ms.float32:
        failures.append(f"empty returned {type(buf).__name__} {getattr(buf, 'shape', None)}")
    buf[:] = ms.Tensor(np.full((4, 8), float(rank + 1), np.float32))
    symm.shmem_allreduce(buf, "sum")
    if values(buf).tolist() != [float(world * (world + 1) // 2)] * 32:
        failures.append(f"symmetric allreduce {values(buf)[:4]}")
    # put into the next rank's copy, signal it, wait for ours
    sig = symm.empty((1,), ms.int32)
    sig[:] = ms.Tensor(np.zeros(1, np.int32))
    symm.barrier()
    src = ms.Tensor(np.arange(8, dtype=np.float32) + 100 * rank)
    symm.shmem_put_with_signal(buf, 8, src, 0, 8, sig, 0, 1, "set", (rank + 1) % world)
    symm.shmem_wait_for_signal(sig, 0, 1, "eq")
    prev = (rank - 1) % world
    if values(buf)[8:16].tolist() != (np.arange(8) + 100 * prev).tolist():
        failures.append(f"put_with_signal got {values(buf)[8:16]}")
    got = ms.ops.zeros((8,), ms.float32)
    symm.barrier()
    symm.shmem_get(got, 0, buf, 8, 8, (rank + 1) % world)
    if values(got).tolist() != (np.arange(8) + 100 * rank).tolist():
        failures.append(f"get got {values(got)}")
    bf = symm.empty((3,), ms.bfloat16)
    if bf.dtype != ms.bfloat16:
        failures.append(f"bf16 empty dtype {bf.dtype}")
    f8 = symm.empty((5,), ms.float8_e4m3fn)
    if f8.dtype != ms.uint8 or tuple(f8.shape) != (5,):
        failures.append(f"fp8 empty: {f8.dtype} {f8.shape}")
    stats = symm.symm_memory_stats()
    if stats["allocated"] <= before["allocated"]:
        failures.append(f"stats did not grow: {before} -> {stats}")
    symm.barrier()
    for t in (f8, bf, sig, buf):
        symm.free(t)
    if tuple(buf.shape) != (0,):
        failures.append(f"freed tensor still has shape {buf.shape}")
    try:
        symm.free(buf)
        failures.append("double free accepted")
    except symm.SymschedError:
        pass
    return {"failures": failures, "stats": sorted(stats)}


def primitives_and_mc2_groups(rank: int, world: int, args: Any) -> dict:
    """Primitives with group-local target ranks and the MC2 fused ops, on every group shape."""
    symm.init()
    failures: List[str] = []
    names = _groups.mccl_initialized()
    groups = groups_of(rank, world, names)
    buf = symm.empty((len(groups), 8), ms.float32)
    sig = symm.empty((len(groups),), ms.int64)
    buf[:] = ms.ops.zeros((len(groups), 8), ms.float32)
    sig[:] = ms.Tensor(np.zeros(len(groups), np.int64))
    symm.barrier()
    for slot, (gname, (g, ranks)) in enumerate(groups.items()):
        me, p = ranks.index(rank), len(ranks)
        nxt, prv = (me + 1) % p, (me - 1) % p
        src = ms.Tensor(np.arange(8, dtype=np.float32) + 100 * rank)
        flat = buf.reshape(-1)
        # a group is set up by its first collective call (every member takes part), never by a
        # one-sided op, which would raise GroupNotSetUpError here
        symm.barrier(group=g)
        symm.shmem_put_with_signal(flat, 8 * slot, src, 0, 8, sig, slot, 1, "add", nxt, group=g)
        symm.shmem_wait_for_signal(sig, slot, 1, "ge", group=g)
        want = np.arange(8) + 100 * ranks[prv]
        if values(buf[slot:slot + 1]).tolist() != want.tolist():
            failures.append(f"put_with_signal {gname}: {values(buf[slot:slot + 1])}")
        symm.barrier(group=g)
        got = ms.ops.zeros((8,), ms.float32)
        symm.shmem_get(got, 0, flat, 8 * slot, 8, nxt, group=g)
        if values(got).tolist() != (np.arange(8) + 100 * rank).tolist():
            failures.append(f"get {gname}: {values(got)}")
        symm.barrier(group=g)
        # MC2: c = allgather(a) @ b, and block `me` of Σ_j x1_j @ x2
        m, k, n = 2, 3, 4
        a = ms.Tensor((np.arange(m * k, dtype=np.float32).reshape(m, k) + rank) / 3)
        b = ms.Tensor(np.arange(k * n, dtype=np.float32).reshape(k, n) / 5)
        gath, c = ms.ops.zeros((p * m, k), ms.float32), ms.ops.zeros((p * m, n), ms.float32)
        symm.fused_all_gather_matmul(a, b, c, gath, group=g)
        full_a = np.concatenate([(np.arange(m * k, dtype=np.float32).reshape(m, k) + r) / 3 for r in ranks])
        if not (np.allclose(gath.asnumpy(), full_a) and np.allclose(c.asnumpy(), full_a @ b.asnumpy(), rtol=1e-5)):
            failures.append(f"fused_all_gather_matmul {gname}")
        x1 = ms.Tensor(np.arange(p * m * k, dtype=np.float32).reshape(p * m, k) + rank)
        out = symm.fused_matmul_reduce_scatter(x1, b, group=g)
        prods = sum((np.arange(p * m * k, dtype=np.float32).reshape(p * m, k) + r) @ b.asnumpy() for r in ranks)
        if not np.allclose(out.asnumpy(), prods[me * m:(me + 1) * m], rtol=1e-5):
            failures.append(f"fused_matmul_reduce_scatter {gname}")
    symm.barrier()
    symm.free(sig)
    symm.free(buf)
    return {"failures": failures}
