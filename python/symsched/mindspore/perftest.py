"""The MindSpore side of ``python -m symsched.perftest --framework mindspore``: symsched vs mccl
on the same data in one run, timed as the PyTorch perftest times symsched vs gloo (nccl-tests'
batches: buffers refreshed untimed, warm-up calls, one barrier, a batch of back-to-back calls
timed as a whole, the slowest rank's batch, the median over batches).

MindSpore runs ops asynchronously: each symsched call reads its tensors' ``data_ptr()``, which
waits for the queue, and every mccl batch ends with the same wait on its output, so both columns
time completed work. The slowest rank's time is found with a symsched max-allreduce (mccl on CPU
has no MAX), outside the timed region. mccl on CPU has no reduce_scatter or all_to_all kernel:
those rows show symsched only. The mccl all-gather is its list form (``all_gather_into_tensor``
has no CPU kernel), timed without the copy into one output tensor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Callable, Dict, List


def worker(a: argparse.Namespace) -> None:
    import mindspore as ms
    import mindspore.mint.distributed as dist
    import numpy as np

    import symsched.mindspore as symm
    from symsched.perfrow import batch_calls, bind_cpu, copy_bound, element_count, print_row, sizes

    symm.init_mccl()
    symm.init()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if not a.no_bind:
        bind_cpu(rank, world)
    P = world
    peak = symm.empty((1,), ms.float64)

    def slowest(dt: float) -> float:
        peak[:] = ms.Tensor(np.array([dt]))
        symm.shmem_allreduce(peak, "max")
        return float(peak.asnumpy()[0])

    def timed(fn: Callable[[], None], refresh: Callable[[], None], iters: int, done: Callable[[], None]) -> float:
        per_batch = []
        for _ in range(max(1, a.batches)):
            refresh()
            for _ in range(a.warmup):
                fn()
            done()
            symm.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            done()
            per_batch.append(slowest((time.perf_counter() - t0) / iters))
        return min(per_batch) if a.stat == "min" else statistics.median(per_batch)

    def nothing() -> None:
        return None

    rows: List[Dict[str, Any]] = []
    for op in [o for o in a.ops if o != "mc2"]:
        for size in sizes(a):
            n = element_count(op, size, P)
            nbytes = n * 4
            it = batch_calls(a, nbytes)
            base = ms.Tensor(np.random.default_rng(rank).standard_normal(n).astype(np.float32))
            res: Dict[str, float] = {}
            if op == "allreduce":
                x = symm.empty((n,), ms.float32)
                xm = ms.ops.zeros((n,), ms.float32)
                res["symsched"] = timed(lambda: symm.shmem_allreduce(x), lambda: x.copy_(base), it, nothing)
                res["gloo"] = timed(lambda: dist.all_reduce(xm), lambda: xm.copy_(base), it, lambda: xm.data_ptr())
                symm.free(x)
                bus = 2 * (P - 1) / P
            elif op == "allgather":
                inp = symm.empty((n // P,), ms.float32)
                out = symm.empty((n,), ms.float32)
                src = base[: n // P].copy()  # copy_ refuses a partial view as its source
                gin = ms.ops.zeros((n // P,), ms.float32)
                parts = [ms.ops.zeros((n // P,), ms.float32) for _ in range(P)]
                res["symsched"] = timed(lambda: symm.shmem_allgather(out, inp), lambda: inp.copy_(src), it, nothing)
                res["gloo"] = timed(lambda: dist.all_gather(parts, gin), lambda: gin.copy_(src), it,
                                    lambda: parts[-1].data_ptr())
                symm.free(out)
                symm.free(inp)
                bus = (P - 1) / P
            elif op == "reduce_scatter":
                inp = symm.empty((n,), ms.float32)
                out = symm.empty((n // P,), ms.float32)
                res["symsched"] = timed(lambda: symm.shmem_reduce_scatter(out, inp), lambda: inp.copy_(base), it,
                                        nothing)
                symm.free(out)
                symm.free(inp)
                bus = (P - 1) / P
            else:  # alltoall, equal splits
                inp = symm.empty((n,), ms.float32)
                out = symm.empty((n,), ms.float32)
                sends = [inp[j * (n // P):(j + 1) * (n // P)] for j in range(P)]
                counts = [n // P] * P
                res["symsched"] = timed(lambda: symm.shmem_alltoall(sends, out, counts), lambda: inp.copy_(base), it,
                                        nothing)
                symm.free(out)
                symm.free(inp)
                bus = (P - 1) / P
            rows.append({"op": op, "bytes": nbytes, "count": n, "bus": bus, **res})
            if rank == 0:
                print_row(rows[-1], "mccl")
    bound_lines = copy_bound(rows, lambda fn, nb: timed(fn, nothing, batch_calls(a, nb), nothing))
    if rank == 0:
        for line in bound_lines:
            print(line, flush=True)
        print(f"load average: {os.getloadavg()[0]:.2f}", flush=True)
    symm.barrier()
    symm.free(peak)
    symm.finalize()
