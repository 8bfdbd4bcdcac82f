"""Scenario: per-call cost of small allreduces from Python vs gloo in the same job (a benchmark,
run by ``bench_call_overhead.py``, not by the test suite)."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

import symsched as symm


def _per_call_us(fn, calls: int) -> float:
    """Slowest rank's mean µs per call over ``calls`` back-to-back calls."""
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = torch.tensor([(time.perf_counter() - t0) / calls * 1e6], dtype=torch.float64)
    dist.all_reduce(dt, dist.ReduceOp.MAX)
    return float(dt)


def call_overhead(rank: int, world: int, args) -> dict:
    symm.init()
    rounds = int(args.get("rounds", 7))
    out = {}
    for nbytes in args.get("sizes", [8, 65536]):
        n = nbytes // 4
        sym = symm.empty(n, torch.float32)
        sym.fill_(1.0)
        plain = torch.ones(n)
        gl = torch.ones(n)
        calls = 2000 if nbytes <= 4096 else 500
        cases = {
            "symsched_symmetric": lambda: symm.shmem_allreduce(sym),
            "symsched_ordinary": lambda: symm.shmem_allreduce(plain),
            "gloo": lambda: dist.all_reduce(gl),
        }
        for f in cases.values():  # warm-up: compile, load, first-call checks
            for _ in range(20):
                f()
        res = {k: [] for k in cases}
        for _ in range(rounds):  # interleaved so load changes hit every case alike
            for k, f in cases.items():
                res[k].append(_per_call_us(f, calls))
        # the minimum over rounds: the host is shared, and other load only ever adds time
        out[nbytes] = {k: min(v) for k, v in res.items()}
        symm.free(sym)
    return out
