"""Small-message latency of every collective, layer by layer (2 ranks by default).

    PYTHONPATH=$PWD/python python scripts/latency_layers.py [--nproc 2] [--min 8] [--max 32K]
        [--ops allreduce,allgather,reduce_scatter,alltoall] [--iters 2000] [--batches 7] [--no-trace]

Each layer is timed by calling the next deeper layer directly with the same arguments, so the
difference between two rows is what the upper layer adds:

- ``api``     the public call (``symsched.shmem_*``): autograd check, then the kernel below;
- ``coll``    the validated kernel (``symsched.core.coll``) on its cached path: cache key,
              tensor → address, liveness check, interop record, then the native call;
- ``run``     the prepared launch called from Python (``Prepared.run``, or for the alltoall
              the native cached call ``alltoall_hit``, which checks the tensors and counts
              natively): argument conversion, GIL release, one launch;
- ``native``  one launch inside a native loop (``Prepared.run_repeat``): the executor alone —
              checks, agreement, staging, credits, the steps and their signal round trips;
- ``call``    ``Prepared.run_repeat`` with no launch: the PyO3 crossing and GIL release.

Every figure is µs per call: batches of ``--iters`` back-to-back calls after a barrier, the
slowest rank's batch time, the minimum over ``--batches`` batches (the least-disturbed batch;
the machine is shared). Buffers are symmetric (``symm.empty``), as in the perftest.

Unless ``--no-trace``, a second job runs the ``native`` layer under ``SYMSCHED_TRACE`` and
splits one launch into its steps: the median over launches of each step's duration (waits
are the signal round trips: a peer's data or credit arriving, plus the wake-up), and
``native`` minus their sum, the launch time outside the steps (the executor's checks,
agreement, staging and entry/exit credits). Recording a step costs more than most steps
take, so a traced peer is late by it and a wait mostly finds its signal already set: the
waits there are a floor, not the round trip of the untraced job. Give the load average
(``uptime``) beside any figure and compare rows of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional, Tuple

OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall")
LAYERS = ("api", "coll", "run", "native", "call")


def _size(text: str) -> int:
    t = text.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20}
    return int(float(t[:-1]) * mult[t[-1]]) if t and t[-1] in mult else int(t)


def _args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--min", default="8")
    p.add_argument("--max", default="32K")
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=2000, help="calls per timed batch")
    p.add_argument("--batches", type=int, default=7, help="timed batches per layer (the minimum is shown)")
    p.add_argument("--no-trace", action="store_true", help="skip the traced job (the per-step split)")
    p.add_argument("--worker", choices=("time", "trace"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.ops = [o for o in a.ops.split(",") if o]
    bad = [o for o in a.ops if o not in OPS]
    if bad:
        p.error(f"unknown ops {bad}; choose from {list(OPS)}")
    a.sizes, s = [], _size(a.min)
    while s <= _size(a.max):
        a.sizes.append(s)
        s *= a.factor
    return a


# ------------------------------------------------------------------------------------ worker

class _Case:
    """One collective at one size: the callables of each layer, on symmetric buffers."""

    def __init__(self, op: str, nbytes: int, P: int) -> None:
        import torch

        import symsched as symm
        from symsched.core import coll

        self.op, self.bufs = op, []
        n = max(P, (max(1, nbytes // 4) // P) * P) if op != "allreduce" else max(1, nbytes // 4)
        f32 = torch.float32
        coll._fast.clear()
        coll._a2a_native.clear()
        if op == "allreduce":
            x = symm.empty(n, f32).fill_(1.0)
            self.tensors = [x]
            self.api: Callable[[], Any] = lambda: symm.shmem_allreduce(x)
            self.coll: Callable[[], Any] = lambda: coll.allreduce(x)
        elif op == "allgather":
            i, o = symm.empty(n // P, f32).fill_(1.0), symm.empty(n, f32)
            self.tensors = [i, o]
            self.api = lambda: symm.shmem_allgather(o, i)
            self.coll = lambda: coll.allgather(o, i)
        elif op == "reduce_scatter":
            i, o = symm.empty(n, f32).fill_(1.0), symm.empty(n // P, f32)
            self.tensors = [i, o]
            self.api = lambda: symm.shmem_reduce_scatter(o, i)
            self.coll = lambda: coll.reduce_scatter(o, i)
        else:
            i, o = symm.empty(n, f32).fill_(1.0), symm.empty(n, f32)
            sends, counts = list(i.split(n // P)), [n // P] * P
            self.tensors = [i, o]
            self.api = lambda: symm.shmem_alltoall(sends, o, counts)
            self.coll = lambda: coll.alltoall_hit(sends, o, counts, None, False)
        self.api()  # the first call validates and caches the prepared launch
        self.api()
        if op == "alltoall":
            prep = coll._a2a_native[(id(None), f32)][1]
            native_hit = coll._native_a2a
            assert native_hit is not None, "the torch adapter has the native cached alltoall"
            self.bufs = [(i.data_ptr(), i.numel() * 4), (o.data_ptr(), o.numel() * 4)]
            rows = ([n // P] * P, [n // P] * P)
            self.run: Callable[[], Any] = lambda: native_hit(prep, sends, o, f32, counts, False, None)
            self.repeat: Callable[[int], float] = lambda k: prep.run_repeat(self.bufs, k, *rows)
        else:
            (prep, nb), = [(v[1], v[2]) for k, v in coll._fast.items() if k[0] == op]
            self.bufs = [(t.data_ptr(), b) for t, b in zip(self.tensors, nb)]
            self.run = lambda: prep.run(self.bufs)
            self.repeat = lambda k: prep.run_repeat(self.bufs, k)
        self.schedule = prep.schedule

    def free(self) -> None:
        import symsched as symm

        for t in reversed(self.tensors):
            symm.free(t)


def _worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    import symsched as symm
    from symsched.perfrow import bind_cpu

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    symm.init()
    if a.worker == "trace":
        # the runtime read the trace file at init; hidden from the Python side from now on, its
        # calls keep their cached (unobserved) path, as in the timed job
        os.environ.pop("SYMSCHED_TRACE", None)
    bind_cpu(rank, world)

    def slowest(dt: float) -> float:
        t = torch.tensor([dt], dtype=torch.float64)
        dist.all_reduce(t, dist.ReduceOp.MAX)
        return float(t)

    def timed(fn: Callable[[], Any], k: int) -> float:
        best = float("inf")
        for _ in range(a.batches):
            for _ in range(20):
                fn()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            best = min(best, slowest(time.perf_counter() - t0) / k)
        return best * 1e6

    def repeated(case: _Case, k: int) -> float:
        best = float("inf")
        for _ in range(a.batches):
            case.repeat(20)
            dist.barrier()
            best = min(best, slowest(case.repeat(k)) / max(k, 1))
        return best * 1e6

    out: List[Dict[str, Any]] = []
    for op in a.ops:
        for size in a.sizes:
            case = _Case(op, size, world)
            if a.worker == "trace":
                dist.barrier()
                t0 = time.time() * 1e6
                case.repeat(a.iters)
                out.append({"op": op, "bytes": size, "schedule": case.schedule, "t0": t0, "t1": time.time() * 1e6})
            else:
                # the call layer loops in Python over a no-launch native call
                row = {"op": op, "bytes": size, "schedule": case.schedule,
                       "api": timed(case.api, a.iters), "coll": timed(case.coll, a.iters),
                       "run": timed(case.run, a.iters), "native": repeated(case, a.iters),
                       "call": timed(lambda: case.repeat(0), a.iters)}
                out.append(row)
            case.free()
    dist.barrier()
    symm.finalize()
    dist.destroy_process_group()
    if rank == 0 and a.out:
        with open(a.out, "w") as f:
            json.dump(out, f)


# ------------------------------------------------------------------------------------ driver

def _launch(a: argparse.Namespace, argv: List[str], mode: str, out: str, extra: Dict[str, str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1", **extra)
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--worker", mode, "--out", out]
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), WORLD_SIZE=str(a.nproc))) for r in range(a.nproc)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a {mode} rank failed: exit codes {codes}")


def _step_split(rows: List[Dict[str, Any]], trace: str) -> Dict[Tuple[str, int], Dict[str, float]]:
    """Per (op, bytes): the median over rank 0's launches of each step's µs, keyed by plan
    step id and kind (the traced launch events themselves include the recording cost)."""
    with open(trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("pid") == 0]
    steps = sorted((e for e in events if e.get("cat") == "step"), key=lambda e: e["ts"])
    split: Dict[Tuple[str, int], Dict[str, float]] = {}
    for r in rows:
        per: Dict[str, List[float]] = defaultdict(list)
        for e in steps:
            if r["t0"] <= e["ts"] <= r["t1"] and "step" in e.get("args", {}):
                per[f"{e['args']['step']}:{e['name']}"].append(e["dur"])
        split[(r["op"], r["bytes"])] = {k: statistics.median(v) for k, v in per.items() if v}
    return split


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = _args(argv)
    if a.worker:
        _worker(a)
        return 0
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        timing = os.path.join(d, "time.json")
        _launch(a, argv, "time", timing, {})
        with open(timing) as f:
            rows = json.load(f)
        split: Dict[Tuple[str, int], Dict[str, float]] = {}
        if not a.no_trace:
            windows, trace = os.path.join(d, "windows.json"), os.path.join(d, "trace.json")
            _launch(a, argv, "trace", windows, {"SYMSCHED_TRACE": trace})
            with open(windows) as f:
                split = _step_split(json.load(f), trace)
    load_end = os.getloadavg()
    print(f"{a.nproc} ranks, symmetric fp32 buffers, min over {a.batches} batches of {a.iters} calls (µs per call); "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} -> {load_end[0]:.2f} {load_end[1]:.2f} "
          f"{load_end[2]:.2f}")
    print(f"{'op':>14} {'bytes':>6} {'schedule':>22} | {'api':>5} {'coll':>5} {'run':>5} {'native':>6} {'call':>5} | "
          f"{'python':>6} {'pyo3':>5} | traced steps (id:kind, median µs); outside = native - their sum")
    for r in rows:
        python = r["api"] - r["run"]
        pyo3 = r["run"] - r["native"]
        line = (f"{r['op']:>14} {r['bytes']:>6} {r['schedule']:>22} | {r['api']:5.2f} {r['coll']:5.2f} {r['run']:5.2f} "
                f"{r['native']:6.2f} {r['call']:5.2f} | {python:6.2f} {pyo3:5.2f} |")
        s = split.get((r["op"], r["bytes"]))
        if s:
            parts = " ".join(f"{k}={v:.2f}" for k, v in sorted(s.items()))
            line += f" {parts}; outside ≈ {r['native'] - sum(s.values()):.2f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
