"""Scenarios for the one-round (eager) alltoall: correctness around the eager capacity and the
pull threshold, slot reuse over many calls with changing counts, mismatched counts, a dead peer."""

from __future__ import annotations

import os
import pickle
import sys
import time

import torch
import torch.distributed as dist

import symsched as symm

#: float32 elements of one 64 KiB chunk: the eager capacity at 2 and 3 ranks.
CAP = 16 * 1024
#: float32 elements of one 4 KiB chunk: larger symmetric chunks are pulled by the receiver.
PULL = 1024


def _raises(fails, exc, fn, *words, sync=True):
    # every rank finished its previous call first: a failure aborts the group, which fails
    # every call still in flight on it, a slower rank's previous one too (docs/reliability.md)
    if sync:
        symm.barrier()
    try:
        fn()
    except exc as e:
        for w in words:
            if w not in str(e):
                fails.append(f"message lacks {w!r}: {e}")
        return str(e)
    except Exception as e:  # wrong type
        fails.append(f"expected {exc.__name__}, got {type(e).__name__}: {e}")
        return None
    fails.append(f"no error for {words}")
    return None


def _value(it: int, src: int, dst: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    base = (it * 7 + src * 3 + dst) % 50
    return (torch.arange(n, dtype=torch.int64) % 97 + base).to(dtype)


def _one(rank, world, it, m, dtype, symmetric, fails, label):
    """One alltoall with ``m[src][dst]`` elements, checked against the expected values."""
    sends = [_value(it, rank, d, m[rank][d], dtype) for d in range(world)]
    recv_counts = [m[s][rank] for s in range(world)]
    total_in, total_out = sum(m[rank]), sum(recv_counts)
    if symmetric:
        # symmetric allocations are collective and alike on every rank: the largest row/column
        inp = symm.empty(max(max(sum(r) for r in m), 1), dtype)
        out = symm.empty(max(max(sum(r[d] for r in m) for d in range(world)), 1), dtype)
        flat = inp[:total_in]
        if total_in:
            flat.copy_(torch.cat(sends))
        sends = list(flat.split(m[rank]))
        recv = out[:total_out]
    else:
        recv = torch.empty(total_out, dtype=dtype)
    recv.fill_(-1)
    symm.shmem_alltoall(sends, recv, recv_counts)
    want = torch.cat([_value(it, s, rank, recv_counts[s], dtype) for s in range(world)])
    if not torch.equal(recv, want):
        fails.append(f"{label} it={it} {dtype} symmetric={symmetric} m={m}: wrong output")
    if symmetric:
        symm.free(out)
        symm.free(inp)


def correct(rank: int, world: int, args) -> dict:
    symm.init()
    fails = []

    def full(f):
        return [[f(s, d) for d in range(world)] for s in range(world)]

    cases = [
        full(lambda s, d: 0),
        full(lambda s, d: s + d + 1),
        full(lambda s, d: 0 if s == d else 1),
        full(lambda s, d: 0 if s == 0 else 5),
        full(lambda s, d: PULL),
        full(lambda s, d: PULL + 1 + s),
        full(lambda s, d: CAP),
        full(lambda s, d: CAP + 1),
        full(lambda s, d: CAP + 1 if (s, d) == (0, world - 1) else 3),
    ]
    it = 0
    for m in cases:
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            for symmetric in (False, True):
                # bf16/int64 change the byte size: CAP elements are 32 or 128 KiB
                _one(rank, world, it, m, dtype, symmetric, fails, "case")
                it += 1
    # back to back with counts changing every call (all ranks derive the same matrix): the
    # landing slots alternate and credits gate their reuse; the fast path caches per matrix
    g = torch.Generator().manual_seed(5)
    mats = [torch.randint(0, 40, (world, world), generator=g).tolist() for _ in range(6)]
    mats.append(full(lambda s, d: PULL + 7))
    for k in range(240):
        _one(rank, world, it, mats[k % len(mats)], torch.float32, k % 3 == 0, fails, "loop")
        it += 1
    return {"failures": fails}


def mismatch(rank: int, world: int, args) -> dict:
    symm.init()
    fails = []
    sends = [torch.ones(4) for _ in range(world)]
    recv = torch.full((4 * world,), -1.0)
    # rank 1 expects 5 elements from rank 0, which sends 4
    counts = [5 if (rank == 1 and s == 0) else 4 for s in range(world)]
    out = torch.full((sum(counts),), -1.0)
    msg = _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_alltoall(sends, out, counts),
                  "rank 0 sends 4 elements to rank 1", "expects 5")
    if not torch.all(out == -1):
        fails.append("a refused alltoall wrote its output")
    # the same on the cached path (a valid call first, then the mismatch again)
    symm.shmem_alltoall(sends, recv, [4] * world)
    if not torch.all(recv == 1):
        fails.append(f"valid call after a refused one: {recv.tolist()}")
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_alltoall(sends, out, counts), "disagree")
    # over the eager capacity on the sender's side only
    big = [torch.ones(CAP + 1) if (rank == 0 and d == 1) else torch.ones(4) for d in range(world)]
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_alltoall(big, recv, [4] * world),
            f"sends {CAP + 1} elements")
    symm.shmem_alltoall(sends, recv, [4] * world)
    if not torch.all(recv == 1):
        fails.append("valid call after the over-capacity mismatch")
    return {"failures": fails, "message": msg}


def dead_peer(rank: int, world: int, args) -> dict:
    """Rank 1 leaves after a barrier; rank 0's alltoall must fail within the signal timeout."""
    symm.init()
    tmp = sys.argv[3]
    fails = []
    sends = [torch.ones(4) for _ in range(world)]
    recv = torch.empty(4 * world)
    symm.shmem_alltoall(sends, recv, [4] * world)
    symm.barrier()
    result = {"failures": fails}
    if rank == 1:
        # the harness's own teardown (barriers, finalize) cannot run with a dead peer
        with open(os.path.join(tmp, f"result{rank}.pkl"), "wb") as f:
            pickle.dump(result, f)
        os._exit(0)
    time.sleep(0.5)
    t0 = time.monotonic()
    msg = _raises(fails, symm.SymschedRuntimeError, lambda: symm.shmem_alltoall(sends, recv, [4] * world),
                  sync=False)
    took = time.monotonic() - t0
    if msg is not None and "1" not in msg.split("never signalled")[-1] and "peer rank 1" not in msg:
        fails.append(f"error does not name the dead peer: {msg}")
    if took > 10:
        fails.append(f"took {took:.1f} s")
    result.update(message=msg, took=took)
    with open(os.path.join(tmp, f"result{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)
    sys.stdout.flush()
    os._exit(0)
