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


class _Identity(torch.autograd.Function):
    """A custom Function that only copies: the autograd machinery's own cost, as a baseline."""

    @staticmethod
    def forward(ctx, x):
        return x.detach().clone()

    @staticmethod
    def backward(ctx, g):
        return g.clone()


def ops_overhead(rank: int, world: int, args) -> dict:
    """Per-call µs of every collective (symmetric buffers) vs its gloo counterpart; the
    functional forms' forward+backward next to a copy-only autograd Function (the baseline of
    what autograd itself costs per call)."""
    import symsched.functional as F

    symm.init()
    rounds = int(args.get("rounds", 5))
    P = world
    out = {}
    for nbytes in args.get("sizes", [8 * P, 65536]):
        n = max(P, nbytes // 4 // P * P)
        big = symm.empty(n, torch.float32)
        small = symm.empty(n // P, torch.float32)
        big.fill_(1.0), small.fill_(1.0)
        gbig, gsmall = torch.ones(n), torch.ones(n // P)
        sends = list(big.split(n // P))
        counts = [n // P] * P
        xg = torch.ones(n, requires_grad=True)
        ones = torch.ones(n)
        calls = 1000 if nbytes <= 4096 else 300

        def sendrecv():
            if rank == 0:
                symm.shmem_send(big, 1)
            else:
                symm.shmem_recv(big, 0)

        def gsendrecv():
            if rank == 0:
                dist.send(gbig, 1)
            else:
                dist.recv(gbig, 0)

        cases = {
            "allreduce": (lambda: symm.shmem_allreduce(big), lambda: dist.all_reduce(gbig)),
            "allgather": (lambda: symm.shmem_allgather(big, small), lambda: dist.all_gather_into_tensor(gbig, gsmall)),
            "reduce_scatter": (lambda: symm.shmem_reduce_scatter(small, big),
                               lambda: dist.reduce_scatter_tensor(gsmall, gbig)),
            "alltoall": (lambda: symm.shmem_alltoall(sends, big, counts),
                         lambda: dist.all_to_all_single(gbig, gbig.clone())),
            "broadcast": (lambda: symm.shmem_broadcast(big, 0), lambda: dist.broadcast(gbig, 0)),
            "sendrecv": (sendrecv, gsendrecv) if P == 2 else None,
            "F.all_reduce fwd+bwd": (lambda: F.all_reduce(xg, backward="adjoint").backward(ones), None),
            "F.all_gather fwd+bwd": (lambda: F.all_gather(xg[: n // P]).backward(ones), None),
            "F.reduce_scatter fwd+bwd": (lambda: F.reduce_scatter(xg).backward(ones[: n // P]), None),
            "copy-only Function fwd+bwd": (lambda: _Identity.apply(xg).backward(ones), None),
        }
        only = args.get("only")
        cases = {k: c for k, c in cases.items() if c is not None and (not only or k in only)}
        for s, g in cases.values():  # warm-up: compile, load, first-call checks
            for _ in range(20):
                s()
                if g is not None:
                    g()
        res = {k: ([], []) for k in cases}
        for _ in range(rounds):  # interleaved so load changes hit every case alike
            for k, (s, g) in cases.items():
                res[k][0].append(_per_call_us(s, calls))
                if g is not None:
                    res[k][1].append(_per_call_us(g, calls))
        out[nbytes] = {k: (min(a), min(b) if b else None) for k, (a, b) in res.items()}
        symm.free(small)
        symm.free(big)
    return out


#: Per collective, the schedules ``schedule_choice`` compares, as the knob values that pick each
#: (``symsched.core.schedules``; every one of these knobs is read on every call).
CHOICES = {
    "allreduce": {
        "one_shot": {"SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES": "1G", "SYMSCHED_ALLREDUCE_PULL_MIN_BYTES": "1G"},
        "two_shot": {"SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES": "0", "SYMSCHED_ALLREDUCE_PULL_MIN_BYTES": "1G"},
        "two_shot_pull": {"SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES": "0", "SYMSCHED_ALLREDUCE_PULL_MIN_BYTES": "0"},
    },
    "reduce_scatter": {
        "push": {"SYMSCHED_REDUCE_SCATTER_PULL_MIN_BYTES": "1G"},
        "pull": {"SYMSCHED_REDUCE_SCATTER_PULL_MIN_BYTES": "0"},
    },
}


def schedule_choice(rank: int, world: int, args) -> dict:
    """Per-call µs of ``args["op"]`` (allreduce: ``shmem_allreduce`` in place; reduce_scatter:
    ``shmem_reduce_scatter`` of ``bytes`` input bytes) under each schedule of ``CHOICES``, with
    symmetric and with ordinary tensors, per size: {bytes: {"<schedule>/<kind>": µs}}. The
    cases alternate within every round, so load drift hits each alike; the minimum over rounds
    is kept."""
    import os

    symm.init()
    op = args["op"]
    rounds = int(args.get("rounds", 5))
    out = {}
    for nbytes in args["sizes"]:
        n = max(world, nbytes // 4 // world * world)
        if op == "allreduce":
            tensors = {"symmetric": (symm.empty(n, torch.float32),), "ordinary": (torch.empty(n),)}
            call = symm.shmem_allreduce
        else:
            tensors = {"symmetric": (symm.empty(n // world, torch.float32), symm.empty(n, torch.float32)),
                       "ordinary": (torch.empty(n // world), torch.empty(n))}
            call = symm.shmem_reduce_scatter
        for ts in tensors.values():
            for t in ts:
                t.fill_(1.0 / world)
        calls = 2000 if nbytes <= 4096 else max(20, (64 << 20) // max(nbytes, 1) // 64)
        res: dict = {}
        for r in range(rounds + 1):  # round 0 warms up: loads, first-call checks
            for name, knobs in CHOICES[op].items():
                os.environ.update(knobs)
                for kind, ts in tensors.items():
                    us = _per_call_us(lambda ts=ts: call(*ts), calls if r else 20)
                    if r:
                        key = f"{name}/{kind}"
                        res[key] = min(res.get(key, us), us)
        out[nbytes] = res
        for t in reversed(tensors["symmetric"]):
            symm.free(t)
    return out
