"""OSU-style timing loop for MPICH collectives through mpi4py, the baseline of
scripts/bench_vs_mpich.sh.

For every size: fresh buffer contents each iteration (so no cache-resident replay), a barrier
before every timed op (the same protocol `symsched run` uses), the slowest rank's median time per
op and that rank's minimum; prints one line per size: `op bytes min_us median_us`. Sizes are
nccl-tests style: the byte size of the collective's largest buffer (allreduce: the vector;
allgather: the output; reduce_scatter: the input; alltoall: the send buffer), fp32 elements.

Usage: mpiexec -n 2 python benches/osu_mpi4py.py OP MIN_BYTES MAX_BYTES ITERS WARMUP
"""
import sys
import time

import numpy as np
from mpi4py import MPI


def main() -> None:
    op, lo, hi, iters, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    comm = MPI.COMM_WORLD
    p, me = comm.Get_size(), comm.Get_rank()
    size = lo
    while size <= hi:
        count = max(size // 4, 1)
        n = max(count // p, 1)
        if op == "allreduce":
            src, dst = np.empty(count, np.float32), np.empty(count, np.float32)
            run = lambda: comm.Allreduce(src, dst, op=MPI.SUM)
        elif op == "allgather":
            src, dst = np.empty(n, np.float32), np.empty(n * p, np.float32)
            run = lambda: comm.Allgather(src, dst)
        elif op == "reduce_scatter":
            src, dst = np.empty(n * p, np.float32), np.empty(n, np.float32)
            run = lambda: comm.Reduce_scatter_block(src, dst, op=MPI.SUM)
        elif op == "alltoall":
            src, dst = np.empty(n * p, np.float32), np.empty(n * p, np.float32)
            run = lambda: comm.Alltoall(src, dst)
        else:
            raise SystemExit(f"unknown op {op}")
        times = []
        for it in range(warmup + iters):
            src[:] = np.float32(me * 1000 + it)
            comm.Barrier()
            t0 = time.perf_counter()
            run()
            t1 = time.perf_counter()
            if it >= warmup:
                times.append(t1 - t0)
        times.sort()
        mine = (times[len(times) // 2], times[0])
        # The slowest rank's median and its minimum, as `symsched run` reports them.
        med, low = max(comm.gather(mine, root=0) or [mine])
        if me == 0:
            print(f"{op} {size} {low * 1e6:.2f} {med * 1e6:.2f}", flush=True)
        size *= 2


if __name__ == "__main__":
    main()
