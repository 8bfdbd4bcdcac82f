"""Per-call µs of a small allreduce on 2 ranks by the routes PyTorch code can take: the eager
Python API (the cached fast path), the dispatcher ops called eagerly, and a torch.compile'd
function holding one collective (Dynamo's guards, AOTAutograd's runtime wrapper, the ordered
effect, the op).

    python tests/bench_dispatch_overhead.py          # BENCH_BYTES (default 8), BENCH_RANKS (2)

Prints the load average with the numbers: compare the rows of one run, not runs.
"""

import os
import time

import _harness


def _per_call_us(fn, calls: int) -> float:
    import torch
    import torch.distributed as dist

    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = torch.tensor([(time.perf_counter() - t0) / calls * 1e6], dtype=torch.float64)
    dist.all_reduce(dt, dist.ReduceOp.MAX)
    return float(dt)


def routes(rank: int, world: int, args: dict) -> dict:
    import torch

    import symsched as symm
    import symsched.functional as F

    symm.init()
    t = torch.ones(max(1, args["bytes"] // 4))

    def inplace(x):
        symm.shmem_allreduce(x)

    def functional(x):
        return F.all_reduce(x, "sum", None, backward="identity")

    compiled_inplace = torch.compile(inplace, fullgraph=True)
    compiled_functional = torch.compile(functional, fullgraph=True)
    cases = {
        "eager symm.shmem_allreduce": lambda: symm.shmem_allreduce(t),
        "eager F.all_reduce": lambda: F.all_reduce(t, "sum", None, backward="identity"),
        "eager torch.ops.symsched.shmem_allreduce": lambda: torch.ops.symsched.shmem_allreduce(t, "sum", [], None),
        "eager torch.ops.symsched.all_reduce": lambda: torch.ops.symsched.all_reduce(t, "sum", [], None, "identity"),
        "compiled fn: symm.shmem_allreduce": lambda: compiled_inplace(t),
        "compiled fn: F.all_reduce": lambda: compiled_functional(t),
    }
    for f in cases.values():  # warm-up: compile, load, first-call checks
        for _ in range(30):
            f()
    res = {k: [] for k in cases}
    for _ in range(5):  # interleaved so load changes hit every case alike
        for k, f in cases.items():
            res[k].append(_per_call_us(f, 1000))
    return {k: min(v) for k, v in res.items()}


def main() -> None:
    world = int(os.environ.get("BENCH_RANKS", "2"))
    nbytes = int(os.environ.get("BENCH_BYTES", "8"))
    load = os.getloadavg()
    res = _harness.run("bench_dispatch_overhead", "routes", world, timeout=600, args={"bytes": nbytes})[0]
    print(f"{world} ranks, {nbytes} B float32 allreduce; load average before: {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}; after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for k, us in res.items():
        print(f"{k:<44} {us:8.2f} us/call")


if __name__ == "__main__":
    main()
