"""Scenario: where MC2 fused time goes against separate comm + compute (see bench_mc2.py)."""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable, Dict, List

import torch
import torch.distributed as dist

import symsched as symm
import symsched.mc2 as mc2
from symsched.core import coll as _coll
from symsched.core import knobs
from symsched.core import state as _state


def _turns(fns: Dict[str, Callable[[], object]], iters: int, rounds: int) -> Dict[str, object]:
    """Per variant, timed in turns (one batch each per round): the median over rounds of the
    slowest rank's wall µs per call, and of this thread's CPU µs per call (less disturbed by
    other jobs on a shared host: time spent descheduled is not counted)."""
    out: Dict[str, List[float]] = {k: [] for k in fns}
    cpu: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(2):
                fn()
            dist.barrier()
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(iters):
                fn()
            t = torch.tensor([(time.perf_counter() - t0) / iters, (time.thread_time() - c0) / iters])
            dist.all_reduce(t, dist.ReduceOp.MAX)
            out[name].append(float(t[0]) * 1e6)
            cpu[name].append(float(t[1]) * 1e6)
    return {k: (statistics.median(out[k]), statistics.median(cpu[k])) for k in fns}


def _variant(fn: Callable[[], object], pull: bool, blas: bool) -> Callable[[], None]:
    """``fn`` with the MC2 pull schedules on/off and the direct BLAS path on/off."""
    native = _state.native()
    eng = mc2.TorchMatmul()
    lib = mc2._torch_blas() if blas else None

    def run() -> None:
        os.environ[knobs.MC2_AG_PULL.name] = os.environ[knobs.MC2_RS_PULL.name] = "1" if pull else "0"
        native.set_matmul_engine(eng, lib)
        fn()
        os.environ.pop(knobs.MC2_AG_PULL.name)
        os.environ.pop(knobs.MC2_RS_PULL.name)
    return run


def breakdown(rank: int, world: int, args) -> dict:
    torch.set_num_threads(1)
    symm.init()
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    P = world
    res = {}
    rounds = (args or {}).get("rounds", 7)
    shapes = (args or {}).get("shapes", [(256, 512, 512), (256, 512, 128), (256, 512, 32)])
    noop = lambda *_: None  # noqa: E731
    for m, k, n in shapes:
        for kind in ("ordinary", "symmetric"):
            def buf(*shape: int) -> torch.Tensor:
                t = symm.empty(shape, torch.float32) if kind == "symmetric" else torch.empty(*shape)
                return t.copy_(torch.randn(*shape))

            A, B = buf(m, k), buf(k, n)
            g, c = buf(P * m, k), buf(P * m, n)
            X1, prod, outb = buf(P * m, k), buf(P * m, n), buf(m, n)

            def ag() -> None:
                symm.fused_all_gather_matmul(A, B, c, g)

            def rs() -> None:
                symm.fused_matmul_reduce_scatter(X1, B)

            def noop_engine(fn: Callable[[], object]) -> Callable[[], None]:
                def run() -> None:
                    _state.native().set_matmul_engine(noop)
                    fn()
                return run

            it = 10
            r = _turns({
                "ag_fused_new": _variant(ag, True, True),
                "ag_fused_push_noblas": _variant(ag, False, False),
                "ag_fused_pull_noblas": _variant(ag, True, False),
                "ag_fused_push_blas": _variant(ag, False, True),
                "ag_sep": lambda: (symm.shmem_allgather(g, A), torch.matmul(g, B, out=c)),
                "ag_fused_noop_engine": noop_engine(ag),
                "ag_allgather_only": lambda: symm.shmem_allgather(g, A),
                "mm_full_ag": lambda: torch.matmul(g, B, out=c),
                "rs_fused_new": _variant(rs, True, True),
                "rs_fused_push_noblas": _variant(rs, False, False),
                "rs_fused_pull_noblas": _variant(rs, True, False),
                "rs_fused_push_blas": _variant(rs, False, True),
                "rs_sep": lambda: symm.shmem_reduce_scatter(outb, torch.matmul(X1, B, out=prod)),
                "rs_fused_noop_engine": noop_engine(rs),
                "rs_reduce_scatter_only": lambda: symm.shmem_reduce_scatter(outb, prod),
                "mm_full_rs": lambda: torch.matmul(X1, B, out=prod),
            }, it, rounds)
            mc2.set_matmul_engine("torch")
            res[f"m={m} k={k} n={n} {kind}"] = r
            if kind == "symmetric":
                for t in (outb, prod, X1, c, g, B, A):
                    symm.free(t)
    res["load"] = os.getloadavg()[0]
    return res


def front(rank: int, world: int, args) -> dict:
    """CPU µs per call of the all-gather part alone: the separate pull all-gather against the
    fused pull launch with a matmul engine that returns at once, through the public API, the
    internal function, and the bare native launch (m=256 k=512 n=32, private tensors)."""
    torch.set_num_threads(1)
    symm.init()
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    P, (m, k, n) = world, (256, 512, 32)
    A, B = torch.randn(m, k), torch.randn(k, n)
    g, c = torch.randn(P * m, k), torch.randn(P * m, n)
    _state.native().set_matmul_engine(lambda *_: None)
    symm.fused_all_gather_matmul(A, B, c, g)
    symm.shmem_allgather(g, A)
    ag_key = next(k_ for k_ in _coll._fast if k_[0] == "allgather")
    mm_key = next(k_ for k_ in _coll._fast if k_[0] == "allgather_matmul")
    pag, nag = _coll._fast[ag_key][1], _coll._fast[ag_key][2]
    pmm, nmm = _coll._fast[mm_key][1], _coll._fast[mm_key][2]
    ag_bufs = [(A.data_ptr(), nag[0]), (g.data_ptr(), nag[1])]
    mm_bufs = _coll._bufs((A, B, g, c), nmm)
    r = _turns({
        "allgather (API)": lambda: symm.shmem_allgather(g, A),
        "allgather (native run)": lambda: pag.run(ag_bufs),
        "fused noop (API)": lambda: symm.fused_all_gather_matmul(A, B, c, g),
        "fused noop (_coll)": lambda: _coll.allgather_matmul(A, B, g, c),
        "fused noop (native run)": lambda: pmm.run(mm_bufs),
    }, 50, (args or {}).get("rounds", 9))
    mc2.set_matmul_engine("torch")
    return {"m=256 k=512 n=32 ordinary": r, "schedules": (pag.schedule, pmm.schedule),
            "load": os.getloadavg()[0]}


def pull_vs_push(rank: int, world: int, args) -> dict:
    """Wall and CPU µs per call of each fused op with its pull and push schedules (both on the
    direct BLAS path), alternating, private tensors, per shape."""
    torch.set_num_threads(1)
    symm.init()
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    P, res = world, {}
    for m, k, n in (args or {}).get("shapes", [(256, 512, 512), (256, 512, 128), (256, 512, 32)]):
        A, B = torch.randn(m, k), torch.randn(k, n)
        g, c = torch.randn(P * m, k), torch.randn(P * m, n)
        X1 = torch.randn(P * m, k)

        def ag() -> None:
            symm.fused_all_gather_matmul(A, B, c, g)

        def rs() -> None:
            symm.fused_matmul_reduce_scatter(X1, B)

        res[f"m={m} k={k} n={n}"] = _turns({
            "ag pull": _variant(ag, True, True), "ag push": _variant(ag, False, True),
            "rs pull": _variant(rs, True, True), "rs push": _variant(rs, False, True),
        }, 10, (args or {}).get("rounds", 15))
    mc2.set_matmul_engine("torch")
    res["load"] = os.getloadavg()[0]
    return res
