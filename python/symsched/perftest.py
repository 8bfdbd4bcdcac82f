"""nccl-tests-style benchmark: symsched vs gloo (and MPICH through mpi4py when installed) on the
same data in one run.

    python -m symsched.perftest --nproc 2 --ops allreduce,allgather,reduce_scatter,alltoall,mc2 \\
        --min 8 --max 64M [--factor 4] [--plot out.png]

Each rank is a process; with mpi4py importable and ``mpiexec`` beside the interpreter, the ranks
are started by ``mpiexec`` so the MPI column is a real MPICH job, otherwise as plain subprocesses.
Every library gets the same buffers, refreshed before every iteration, and the same barrier
(gloo) before every timed call; the time of an iteration is the slowest rank's, and the table
shows the median over iterations. Sizes (nccl-tests convention): allreduce = tensor bytes,
allgather = output bytes, reduce_scatter = input bytes, alltoall = bytes sent per rank.
busbw = algbw × (2(P-1)/P for allreduce, (P-1)/P otherwise).

Also reported: backward vs forward time of the differentiable forms, the low-precision wire
allreduce in fp32 bytes per second, and MC2 fused vs separate communication + compute.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional

OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "mc2")


def parse_size(text: str) -> int:
    t = text.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(t)


def _args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m symsched.perftest", description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--min", default="8")
    p.add_argument("--max", default="64M")
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=0, help="iterations per size (default: by size)")
    p.add_argument("--plot", default=None, help="write a bandwidth-vs-size PNG (needs matplotlib)")
    p.add_argument("--no-mpi", action="store_true", help="skip the MPICH column")
    p.add_argument("--no-extras", action="store_true", help="skip backward / low-precision / MC2 extras")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.ops = [o.strip() for o in a.ops.split(",") if o.strip()]
    bad = [o for o in a.ops if o not in OPS]
    if bad:
        p.error(f"unknown ops {bad}; choose from {list(OPS)}")
    a.min_b, a.max_b = parse_size(a.min), parse_size(a.max)
    if a.min_b < 1 or a.max_b < a.min_b:
        p.error("--min must be ≥ 1 and ≤ --max")
    if a.factor < 2:
        p.error("--factor must be ≥ 2")
    return a


def sizes(a: argparse.Namespace) -> List[int]:
    out, s = [], a.min_b
    while s < a.max_b:
        out.append(s)
        s *= a.factor
    out.append(a.max_b)
    return out


# ----------------------------------------------------------------------------------------- worker

def _worker(a: argparse.Namespace) -> None:
    import warnings

    import torch
    import torch.distributed as dist

    import symsched as symm
    import symsched.functional as F

    warnings.filterwarnings("ignore", category=FutureWarning)

    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("PMI_SIZE", os.environ.get("WORLD_SIZE", "1")))
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(world)})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    symm.init()
    comm = None
    if not a.no_mpi:
        try:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() == world else None
        except Exception:
            comm = None
    P = world

    def timed(fn: Callable[[], None], refresh: Callable[[], None], iters: int) -> float:
        """Median over iterations of the slowest rank's time, in seconds."""
        for _ in range(2):
            refresh()
            dist.barrier()
            fn()
        ts = []
        for _ in range(iters):
            refresh()
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        t = torch.tensor(ts, dtype=torch.float64)
        dist.all_reduce(t, dist.ReduceOp.MAX)
        return float(t.median())

    def n_iters(nbytes: int) -> int:
        return a.iters or max(3, min(50, int(64e6 / max(nbytes, 1))))

    rows: List[Dict[str, object]] = []
    for op in [o for o in a.ops if o != "mc2"]:
        for size in sizes(a):
            n = max(1, size // 4)
            if op in ("allgather", "reduce_scatter", "alltoall"):
                n = max(P, (n // P) * P)
            nbytes = n * 4
            it = n_iters(nbytes)
            base = torch.randn(n)
            if op == "allreduce":
                x = symm.empty(n, torch.float32)
                xg = torch.empty(n)
                xm = torch.empty(n)
                res = {
                    "symsched": timed(lambda: symm.shmem_allreduce(x), lambda: x.copy_(base), it),
                    "gloo": timed(lambda: dist.all_reduce(xg), lambda: xg.copy_(base), it),
                }
                if comm is not None:
                    from mpi4py import MPI
                    res["mpi"] = timed(lambda: comm.Allreduce(MPI.IN_PLACE, xm.numpy()), lambda: xm.copy_(base), it)
                symm.free(x)
                bus = 2 * (P - 1) / P
            elif op == "allgather":
                inp = symm.empty(n // P, torch.float32)
                out = symm.empty(n, torch.float32)
                gin, gout = torch.empty(n // P), torch.empty(n)
                src = base[: n // P]
                res = {
                    "symsched": timed(lambda: symm.shmem_allgather(out, inp), lambda: inp.copy_(src), it),
                    "gloo": timed(lambda: dist.all_gather_into_tensor(gout, gin), lambda: gin.copy_(src), it),
                }
                if comm is not None:
                    res["mpi"] = timed(lambda: comm.Allgather(gin.numpy(), gout.numpy()), lambda: gin.copy_(src), it)
                symm.free(out)
                symm.free(inp)
                bus = (P - 1) / P
            elif op == "reduce_scatter":
                inp = symm.empty(n, torch.float32)
                out = symm.empty(n // P, torch.float32)
                gin, gout = torch.empty(n), torch.empty(n // P)
                res = {
                    "symsched": timed(lambda: symm.shmem_reduce_scatter(out, inp), lambda: inp.copy_(base), it),
                    "gloo": timed(lambda: dist.reduce_scatter_tensor(gout, gin), lambda: gin.copy_(base), it),
                }
                if comm is not None:
                    res["mpi"] = timed(lambda: comm.Reduce_scatter_block(gin.numpy(), gout.numpy()),
                                       lambda: gin.copy_(base), it)
                symm.free(out)
                symm.free(inp)
                bus = (P - 1) / P
            else:  # alltoall, equal splits
                inp = symm.empty(n, torch.float32)
                out = symm.empty(n, torch.float32)
                sends = list(inp.split(n // P))
                counts = [n // P] * P
                gin, gout = torch.empty(n), torch.empty(n)
                res = {
                    "symsched": timed(lambda: symm.shmem_alltoall(sends, out, counts), lambda: inp.copy_(base), it),
                    "gloo": timed(lambda: dist.all_to_all_single(gout, gin), lambda: gin.copy_(base), it),
                }
                if comm is not None:
                    res["mpi"] = timed(lambda: comm.Alltoall(gin.numpy(), gout.numpy()), lambda: gin.copy_(base), it)
                symm.free(out)
                symm.free(inp)
                bus = (P - 1) / P
            rows.append({"op": op, "bytes": nbytes, "count": n, "bus": bus, **res})
            if rank == 0:
                _print_row(rows[-1])

    extras: List[str] = []
    if "mc2" in a.ops:
        m, k, nn = 256, 512, 512
        A = torch.randn(m, k)
        B = torch.randn(k, nn)
        g, c = torch.empty(P * m, k), torch.empty(P * m, nn)
        it = a.iters or 10
        fused = timed(lambda: symm.fused_all_gather_matmul(A, B, c, g), lambda: None, it)
        sep = timed(lambda: (symm.shmem_allgather(g, A), torch.matmul(g, B, out=c)), lambda: None, it)
        gl = timed(lambda: (dist.all_gather_into_tensor(g, A), torch.matmul(g, B, out=c)), lambda: None, it)
        extras.append(f"mc2 all_gather_matmul  m={m} k={k} n={nn}: fused {fused * 1e6:9.1f} us | separate symsched "
                      f"{sep * 1e6:9.1f} us ({sep / fused:5.2f}x) | separate gloo {gl * 1e6:9.1f} us ({gl / fused:5.2f}x)")
        X1 = torch.randn(P * m, k)
        outb = torch.empty(m, nn)
        fused = timed(lambda: symm.fused_matmul_reduce_scatter(X1, B), lambda: None, it)
        sep = timed(lambda: symm.shmem_reduce_scatter(outb, X1 @ B), lambda: None, it)
        gl = timed(lambda: dist.reduce_scatter_tensor(outb, X1 @ B), lambda: None, it)
        extras.append(f"mc2 matmul_reduce_scatter m={m} k={k} n={nn}: fused {fused * 1e6:9.1f} us | separate symsched "
                      f"{sep * 1e6:9.1f} us ({sep / fused:5.2f}x) | separate gloo {gl * 1e6:9.1f} us ({gl / fused:5.2f}x)")
    if not a.no_extras:
        nb = 1 << 20
        n = nb // 4
        # backward vs forward (functional forms; backward runs the dual schedule)
        for name, fwd in (("all_gather", lambda x: F.all_gather(x)),
                          ("reduce_scatter", lambda x: F.reduce_scatter(x)),
                          ("all_reduce(adjoint)", lambda x: F.all_reduce(x, backward="adjoint"))):
            x = torch.randn(n, requires_grad=True)
            holder: Dict[str, object] = {}

            def f_only() -> None:
                holder["y"] = fwd(x)

            def b_only() -> None:
                y = holder["y"]
                y.backward(torch.ones_like(y))

            tf = timed(f_only, lambda: None, 10)
            tb = timed(b_only, f_only, 10)
            extras.append(f"backward/forward {name:20s} 1 MiB: fwd {tf * 1e6:8.1f} us, bwd {tb * 1e6:8.1f} us, "
                          f"ratio {tb / tf:5.2f}")
        # low-precision wire: fp32 bytes per second
        for nb in (1 << 20, 16 << 20):
            n = nb // 4
            base = torch.randn(n)
            x = symm.empty(n, torch.float32)
            t32 = timed(lambda: symm.shmem_allreduce(x), lambda: x.copy_(base), 10)
            line = f"low-precision allreduce {nb >> 20:3d} MiB fp32 data: f32 {nb / t32 / 1e9:6.2f} GB/s"
            for w in (torch.float16, torch.bfloat16, torch.float8_e4m3fn):
                tw = timed(lambda: symm.shmem_allreduce(x, low_precision_dtype=w), lambda: x.copy_(base), 10)
                line += f" | {str(w).replace('torch.', '')} {nb / tw / 1e9:6.2f} GB/s ({t32 / tw:4.2f}x)"
            extras.append(line)
            symm.free(x)
    if rank == 0:
        for e in extras:
            print(e, flush=True)
        if a.plot:
            _plot(rows, a.plot)
    dist.barrier()
    symm.finalize()
    dist.destroy_process_group()


HEADER = (f"{'op':>14} {'size(B)':>10} {'count':>9} | {'symsched us':>11} {'algbw':>7} {'busbw':>7} | "
          f"{'gloo us':>10} {'ratio':>7} | {'mpi us':>9} {'ratio':>7}")


def _print_row(r: Dict[str, object]) -> None:
    if not getattr(_print_row, "done", False):
        print(HEADER)
        print("-" * len(HEADER))
        _print_row.done = True  # type: ignore[attr-defined]
    s = float(r["symsched"])  # type: ignore[arg-type]
    alg = int(r["bytes"]) / s / 1e9  # type: ignore[arg-type]
    g = float(r["gloo"])  # type: ignore[arg-type]
    line = (f"{r['op']:>14} {r['bytes']:>10} {r['count']:>9} | {s * 1e6:11.1f} {alg:7.2f} {alg * float(r['bus']):7.2f} | "
            f"{g * 1e6:10.1f} {g / s:6.1f}x |")
    if "mpi" in r:
        m = float(r["mpi"])  # type: ignore[arg-type]
        line += f" {m * 1e6:9.1f} {m / s:6.1f}x"
    else:
        line += f" {'-':>9} {'-':>7}"
    print(line, flush=True)


def _plot(rows: List[Dict[str, object]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib (pip install matplotlib); no plot written", file=sys.stderr)
        return
    ops = sorted({str(r["op"]) for r in rows})
    fig, axes = plt.subplots(1, len(ops), figsize=(5 * len(ops), 4), squeeze=False)
    for ax, op in zip(axes[0], ops):
        rs = [r for r in rows if r["op"] == op]
        xs = [int(r["bytes"]) for r in rs]  # type: ignore[arg-type]
        for lib in ("symsched", "gloo", "mpi"):
            if all(lib in r for r in rs):
                ax.plot(xs, [int(r["bytes"]) / float(r[lib]) / 1e9 for r in rs], marker="o", label=lib)  # type: ignore[arg-type]
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(op)
        ax.set_xlabel("bytes")
        ax.set_ylabel("algbw GB/s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    print(f"plot written to {path}")


# ----------------------------------------------------------------------------------------- launcher

def main(argv: Optional[List[str]] = None) -> int:
    a = _args(argv)
    if a.worker:
        _worker(a)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    args = [sys.executable, "-m", "symsched.perftest", "--worker"] + (argv if argv is not None else sys.argv[1:])
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) if not a.no_mpi else None
    have_mpi = False
    if mpiexec:
        try:
            import mpi4py  # noqa: F401

            have_mpi = True
        except ImportError:
            have_mpi = False
    if have_mpi:
        print(f"launching {a.nproc} ranks with {mpiexec} (MPICH column enabled)", flush=True)
        return subprocess.call([mpiexec, "-n", str(a.nproc)] + args, env=env)
    print(f"launching {a.nproc} ranks (no mpi4py/mpiexec: MPICH column skipped)", flush=True)
    procs = []
    for r in range(a.nproc):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(a.nproc))
        procs.append(subprocess.Popen(args + ["--no-mpi"], env=e))
    codes = [p.wait() for p in procs]
    return max(codes, key=abs)


if __name__ == "__main__":
    sys.exit(main())
