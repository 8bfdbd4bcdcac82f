"""Soak: random collectives over overlapping sub-groups with random dtypes, ops and sizes, each
result compared bit for bit with a sequential reference computed here in torch.

Every rank draws the same sequence of operations from one seeded generator and runs the ones
whose group it belongs to, in order (each rank's order is a subsequence of one global order,
so no two groups can wait on each other). Inputs are small integers, so every sum, max, min
and average over a power-of-two group is exact in every dtype used, whatever the reduction
order: a mismatch is a wrong answer, never rounding.

Arguments (a dict): ``seed``, ``ops`` (operations in the sequence), ``symmetric`` (also use
``symm.empty`` buffers for half the operations: the input of each collective, and for
send/recv the receive buffer too — the binding rule wants a tensor bound the same way on every
rank of the launch).

A rank whose operation raises ends the run with that operation named (the sequence cannot go
on consistently, and its peers would report only the collective it then skips).
"""

from __future__ import annotations

import random
import time
from typing import Any, Dict, List, Tuple

import torch
import torch.distributed as dist

import symsched as symm

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.int64)
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall", "sendrecv")


def _groups(world: int) -> List[Tuple[int, ...]]:
    gs = [tuple(range(world))]
    if world >= 4:
        gs += [(0, 1), (1, 2, 3), (0, 2), (2, 3), (0, 1, 2, 3)[::-1], (1, 3)]
    elif world == 3:
        gs += [(0, 1), (1, 2), (2, 0)]
    elif world == 2:
        gs += [(1, 0)]
    return gs


def _input(seed: int, i: int, r: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1_000_003 + i * 101 + r)
    return torch.randint(-4, 5, (n,), generator=g).to(dtype)


def _reduce(xs: List[torch.Tensor], op: str) -> torch.Tensor:
    stack = torch.stack([x.double() for x in xs])
    if op == "sum":
        out = stack.sum(0)
    elif op == "max":
        out = stack.max(0).values
    elif op == "min":
        out = stack.min(0).values
    else:
        out = stack.sum(0) / len(xs)
    return out.to(xs[0].dtype)


def soak(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    symm.init()
    seed, nops, symmetric = args["seed"], args["ops"], args.get("symmetric", False)
    rng = random.Random(seed)
    groups = _groups(world)
    # every group is set up collectively here, in one order on every rank
    handles = {}
    for ranks in groups:
        pg = dist.new_group(sorted(ranks)) if len(ranks) < world else None
        handles[ranks] = pg
    fails: List[str] = []
    done = 0
    t0 = time.monotonic()
    for i in range(nops):
        ranks = rng.choice(groups)
        kind = rng.choice(COLLECTIVES)
        dtype = rng.choice(DTYPES)
        n = rng.choice((0, 1, 3, 8, 17, 64, 1000, 4096, 70000))
        op = rng.choice(("sum", "max", "min", "avg"))
        P = len(ranks)
        sorted_ranks = tuple(sorted(ranks))
        if op == "avg" and (dtype in (torch.int32, torch.int64) or P & (P - 1)):
            op = "sum"
        root = rng.randrange(P)
        counts = [[rng.choice((0, 1, 5, 300)) for _ in range(P)] for _ in range(P)]
        use_symm = symmetric and rng.random() < 0.5
        numel = n * P if kind == "reduce_scatter" else n
        # symm.empty and symm.free are collective over WORLD: every rank makes them
        s = symm.empty(numel, dtype) if use_symm else None
        if rank not in ranks:
            if s is not None:
                symm.free(s)
            continue
        # the group handle: a ProcessGroup (group-local ranks follow its sorted order) or None
        pg = handles[ranks]
        order = sorted_ranks if pg is not None else tuple(range(world))
        me = order.index(rank)
        ins = {r: _input(seed, i, r, n if kind != "reduce_scatter" else n * P, dtype) for r in order}
        x = ins[rank].clone()
        if s is not None:
            s.copy_(x)
            x = s
        what = f"op {i} {kind} {dtype} n={n} op={op} group={list(order)}"
        try:
            if kind == "allreduce":
                symm.shmem_allreduce(x, op, group=pg)
                want = _reduce([ins[r] for r in order], op)
                got = x
            elif kind == "allgather":
                got = torch.empty(P * n, dtype=dtype)
                symm.shmem_allgather(got, x, group=pg)
                want = torch.cat([ins[r] for r in order])
            elif kind == "reduce_scatter":
                got = torch.empty(n, dtype=dtype)
                symm.shmem_reduce_scatter(got, x, op, group=pg)
                want = _reduce([ins[r] for r in order], op)[me * n:(me + 1) * n]
            elif kind == "broadcast":
                symm.shmem_broadcast(x, root, group=pg)
                want, got = ins[order[root]], x
            elif kind == "alltoall":
                # counts[j][k]: elements rank j sends to rank k (group-local)
                src = _input(seed, i, rank, sum(counts[me]), dtype)
                sends = list(src.split(counts[me]))
                got = torch.empty(sum(counts[j][me] for j in range(P)), dtype=dtype)
                symm.shmem_alltoall(sends, got, [counts[j][me] for j in range(P)], group=pg)
                parts = []
                for j in range(P):
                    sj = _input(seed, i, order[j], sum(counts[j]), dtype)
                    off = sum(counts[j][:me])
                    parts.append(sj[off:off + counts[j][me]])
                want = torch.cat(parts)
            else:  # sendrecv: group-local 0 sends to 1 (groups of two or more)
                if P < 2 or me > 1:
                    continue
                if me == 0:
                    symm.shmem_send(x, 1, group=pg)
                    want = got = x
                else:
                    # the binding rule: the receive buffer is bound as the send buffer is, so a
                    # symmetric send lands in the same symm.empty allocation here
                    got = s if s is not None else torch.empty(n, dtype=dtype)
                    symm.shmem_recv(got, 0, group=pg)
                    want = ins[order[0]]
            if got.shape != want.shape or not torch.equal(got, want):
                bad = (got != want).nonzero().flatten()[:4].tolist() if got.shape == want.shape else "shape"
                fails.append(f"{what}: mismatch at {bad}")
        except Exception as e:
            # the sequence cannot go on consistently after an error, and the peers still in it
            # would report only the collective this rank then skips: end here, naming the op
            raise RuntimeError(f"{what}: {type(e).__name__}: {e}") from e
        finally:
            if s is not None:
                symm.free(s)
        done += 1
    symm.barrier()
    return {"failures": fails[:20], "done": done, "seconds": time.monotonic() - t0}
