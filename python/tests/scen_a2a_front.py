"""Scenario: where a small alltoall's per-call time goes (a benchmark, run by
``bench_alltoall_front.py``, not by the test suite).

Per size it times, interleaved in rounds so load drift hits every column alike:
``call`` = ``symm.shmem_alltoall`` end to end (slowest rank); ``native`` = the cached
``Prepared.run_counts`` alone with prebuilt arguments; ``front`` = ``symm.shmem_alltoall`` with
the launch left out (this rank's checks alone, no peer: the native call declines at its last
check, or, before it existed, the cached Python path fired a no-op); ``gloo`` =
``all_to_all_single``. With ``sweeps`` set, the perftest's allreduce / allgather /
reduce_scatter sweeps (8 B to 64 MiB, symmetric tensors allocated and freed per size) run
first, and the same measurement is repeated after them, with the garbage collector's and the
caches' state at each point, to see what the earlier sweeps leave behind.
"""

from __future__ import annotations

import gc
import inspect
import os
import statistics
import time
from typing import Any, Callable, Dict, List

import torch
import torch.distributed as dist

import symsched as symm
from symsched.core import coll as _coll
from symsched.core import state as _state
from symsched import memory as _memory
from symsched.collectives import _grad


class _NoLaunch:
    """Stands in for a cached native launch: takes the arguments, sends nothing."""

    schedule = "none"

    @staticmethod
    def run_counts(buffers: Any, send: Any, recv: Any) -> None:
        return None

    @staticmethod
    def run(buffers: Any) -> None:
        return None


#: Not a ``(starts, allocs)`` pair: the native call's look-up of a heap buffer fails and declines.
_never = object()


_gc_time = [0.0, 0]
_gc_t0 = [0.0]


def _gc_cb(phase: str, info: Dict[str, int]) -> None:
    if phase == "start":
        _gc_t0[0] = time.perf_counter()
    else:
        _gc_time[0] += time.perf_counter() - _gc_t0[0]
        _gc_time[1] += 1


def _per_call_us(fn: Callable[[], None], calls: int, sync: bool = True) -> float:
    """Slowest rank's wall µs per call; with ``sync`` False this thread's CPU µs per call (a
    rank-local measurement, not inflated by the time other jobs hold the CPU)."""
    if not sync:
        t0 = time.thread_time()
        for _ in range(calls):
            fn()
        return (time.thread_time() - t0) / calls * 1e6
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = (time.perf_counter() - t0) / calls * 1e6
    t = torch.tensor([dt], dtype=torch.float64)
    dist.all_reduce(t, dist.ReduceOp.MAX)
    return float(t)


def _state() -> Dict[str, Any]:
    info = _state.resolve_group(None)
    return {"gc_counts": gc.get_count(), "gc_objects": len(gc.get_objects()), "fast": len(_coll._fast),
            "prepared": len(info.prepared), "dead": _memory._dead, "allocs": len(_memory._starts),
            "threads": len(os.listdir("/proc/self/task")),
            "cpu_s": {t: _task_cpu(t) for t in os.listdir("/proc/self/task")}}


def _task_cpu(tid: str) -> float:
    """CPU seconds (user + system) a thread of this process has used."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return -1.0


def _measure(world: int, sizes: List[int], rounds: int) -> Dict[int, Dict[str, float]]:
    has_old = "tried" in inspect.signature(_coll.alltoall).parameters
    out: Dict[int, Dict[str, float]] = {}
    for nbytes in sizes:
        n = max(world, (nbytes // 4 // world) * world)
        inp = symm.empty(n, torch.float32)
        out_t = symm.empty(n, torch.float32)
        inp.copy_(torch.randn(n))
        sends = list(inp.split(n // world))
        counts = [n // world] * world
        gin, gout = torch.empty(n), torch.empty(n)
        call = lambda: symm.shmem_alltoall(sends, out_t, counts)  # noqa: E731
        for _ in range(50):
            call()
        nb = (n * 4, n * 4)
        entry = getattr(_coll, "_a2a_native", {}).get((id(None), torch.float32))
        key = next((k for k in _coll._fast if k[0] == "alltoall" and k[3] == n), None)
        group, prepared = entry if entry is not None else _coll._fast[key][:2]
        bufs = [(inp.data_ptr(), nb[0]), (out_t.data_ptr(), nb[1])]
        send = list(counts)
        native = lambda: prepared.run_counts(bufs, send, counts)  # noqa: E731

        real = getattr(_coll, "_native_a2a", None)

        def dry(*a: Any) -> bool:
            # every check of the native call, which then declines at its last step (the
            # liveness look-up of its heap buffers, given no records) instead of launching
            real(*a[:-1], _never)
            return True

        def front() -> float:
            if real is not None and any(k[0] == id(None) for k in getattr(_coll, "_a2a_native", {})):
                _coll._native_a2a = dry
                try:
                    return _per_call_us(call, 5000, sync=False)
                finally:
                    _coll._native_a2a = real
            _coll._fast[key] = (group, _NoLaunch(), nb)
            try:
                return _per_call_us(call, 5000, sync=False)
            finally:
                _coll._fast[key] = (group, prepared, nb)

        def old() -> None:
            # the cached Python path this session started from: shmem_alltoall's grad check,
            # then _coll.alltoall's key, scan and _fire
            if _grad(*sends):
                raise AssertionError("no grad here")
            _coll.alltoall(sends, out_t, counts, tried=True)

        res: Dict[str, List[float]] = {"call": [], "old": [], "native": [], "front": [], "gloo": []}
        gc_in_call = []
        calls = 2000
        for _ in range(rounds):
            _gc_time[0], _gc_time[1] = 0.0, 0
            res["call"].append(_per_call_us(call, calls))
            gc_in_call.append(_gc_time[0] / calls * 1e6)
            if has_old:
                res["old"].append(_per_call_us(old, calls))
            res["native"].append(_per_call_us(native, calls))
            res["front"].append(front())
            dist.barrier()
            res["gloo"].append(_per_call_us(lambda: dist.all_to_all_single(gout, gin), 200))
        out[nbytes] = {k: statistics.median(v) if v else float("nan") for k, v in res.items()}
        out[nbytes]["gc_us_per_call"] = statistics.median(gc_in_call)
        out[nbytes]["dead"] = _memory._dead
        symm.free(out_t)
        symm.free(inp)
    return out


def _sweeps(world: int, iters: int) -> None:
    """The perftest's earlier sweeps, in its order and sizes (op by op, ×4 from 8 B to 64 MiB),
    with the gloo calls left out and fewer calls per size."""
    for op in ("allreduce", "allgather", "reduce_scatter"):
        size = 8
        while size <= 64 << 20:
            n = max(1, size // 4)
            m = max(world, (n // world) * world) if op != "allreduce" else n
            calls = max(2, min(iters, int(20e6 / (m * 4))))
            if op == "allreduce":
                x = symm.empty(m, torch.float32)
                for _ in range(calls):
                    symm.shmem_allreduce(x)
                symm.free(x)
            elif op == "allgather":
                i, o = symm.empty(m // world, torch.float32), symm.empty(m, torch.float32)
                for _ in range(calls):
                    symm.shmem_allgather(o, i)
                symm.free(o)
                symm.free(i)
            else:
                i, o = symm.empty(m, torch.float32), symm.empty(m // world, torch.float32)
                for _ in range(calls):
                    symm.shmem_reduce_scatter(o, i)
                symm.free(o)
                symm.free(i)
            size *= 4


def front(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    symm.init()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= world:  # as the perftest: each rank's calling thread on its own CPU
        os.sched_setaffinity(0, {cpus[rank]})
    gc.callbacks.append(_gc_cb)
    sizes = args.get("sizes", [8, 1024, 32768, 65536])
    rounds = int(args.get("rounds", 5))
    report: Dict[str, Any] = {"before": _state(), "alone": _measure(world, sizes, rounds)}
    if args.get("sweeps"):
        _sweeps(world, int(args.get("sweep_iters", 50)))
        report["after_sweeps_state"] = _state()
        report["after"] = _measure(world, sizes, rounds)
        if args.get("collect"):
            gc.collect()
            report["after_collect"] = _measure(world, sizes, rounds)
    report["end"] = _state()
    return report
