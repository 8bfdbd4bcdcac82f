"""nccl-tests-style benchmark: symsched vs gloo (and MPICH through mpi4py when installed) on the
same data in one run.

    python -m symsched.perftest --nproc 2 --ops allreduce,allgather,reduce_scatter,alltoall,mc2 \\
        --min 8 --max 64M [--factor 4] [--plot out.png]

Each rank is a process; with mpi4py importable and ``mpiexec`` beside the interpreter, the ranks
are started by ``mpiexec`` so the MPI column is a real MPICH job, otherwise as plain subprocesses.

Timing is nccl-tests': every library gets the same buffers (refreshed before each batch, outside
the timed window), a few warm-up calls, one barrier, then a batch of back-to-back calls timed
as a whole and divided by the count; a batch's time is the slowest rank's, and the table shows
the median over ``--batches`` batches. The libraries' batches of one size are taken in turns
(one batch of each per round), so drift during a size's measurement falls on all of them alike. Timing each call separately after its own barrier
(``--per-iter``, the median over calls) adds the barrier's release skew to every call — tens of
µs when ranks are oversubscribed — which swamps small messages for every library alike.

Binding (``--no-bind`` turns it off): when there are at least as many usable CPUs as ranks,
the thread of each rank that issues the calls (of every library alike) is bound to its own CPU,
as nccl-tests and MPI launchers bind ranks; helper threads the libraries started at
initialisation (gloo's workers) are left unbound, so gloo keeps its concurrency (binding them
too made gloo 2–3× slower here, which would flatter the ratios). Unbound, Linux often
parks both ranks of a 2-rank job on one core of a 2-core host, even an idle one, and keeps them
there (they switch every few µs, so both look cache-hot to the load balancer): every
synchronisation round then costs two context switches, and small-message times are bimodal
(5 µs or 30–75 µs per allgather depending on the run) for reasons that are the scheduler's,
not any library's.
Sizes (nccl-tests convention): allreduce = tensor bytes, allgather = output bytes,
reduce_scatter = input bytes, alltoall = bytes sent per rank.
busbw = algbw × (2(P-1)/P for allreduce, (P-1)/P otherwise).

Also reported: at the largest size (≥ 1 MiB), each collective's time against the copy bound
measured in the same run (every rank copying the message once between two buffers of its own,
all ranks at once); backward vs forward time of the differentiable forms (batches of forward calls
vs batches of ``torch.autograd.grad`` over graphs built beforehand, so neither side includes
building the other's inputs or accumulating into ``.grad``), the low-precision wire allreduce
in fp32 bytes per second, and MC2 fused vs separate communication + compute.

Groups across nodes (``--nodes N``): the ranks are split into N emulated nodes of
``nproc / N`` consecutive ranks (``SYMSCHED_NODE_ID``, each node bootstrapping its own heaps), so
the world group spans nodes and symsched runs the hierarchical schedules (shmem inside each node,
the inter-node step on gloo); the gloo column is gloo's own collective on the same group. Only
the all-reduce, all-gather and reduce-scatter run across nodes; the MPICH column and the extras
are skipped.
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
from typing import Callable, Dict, List, Optional, Tuple

from .perfrow import batch_calls, bind_cpu, copy_bound, element_count, print_row, sizes

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
    p.add_argument("--iters", type=int, default=0, help="calls per batch (default: by size)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before each batch")
    p.add_argument("--batches", type=int, default=5, help="timed batches per size (the median is shown)")
    p.add_argument("--stat", choices=("median", "min"), default="median",
                   help="statistic over batches: median (default) or min (the least-disturbed batch; on an "
                        "oversubscribed host small messages are bimodal, fast only when all ranks run at once)")
    p.add_argument("--per-iter", action="store_true",
                   help="time every call after its own barrier (the median over calls) instead of batches")
    p.add_argument("--plot", default=None, help="write a bandwidth-vs-size PNG (needs matplotlib)")
    p.add_argument("--no-mpi", action="store_true", help="skip the MPICH column")
    p.add_argument("--no-extras", action="store_true", help="skip backward / low-precision / MC2 extras")
    p.add_argument("--no-bind", action="store_true",
                   help="do not bind each rank to its own CPU (see the module docstring)")
    p.add_argument("--framework", choices=("torch", "mindspore"), default="torch",
                   help="the framework side: torch (symsched vs gloo, MPICH) or mindspore (symsched vs mccl; "
                        "run it with the MindSpore venv's python)")
    p.add_argument("--nodes", type=int, default=1,
                   help="emulated nodes the ranks are split into (consecutive ranks per node): the world group "
                        "then spans nodes and runs hierarchically (torch only)")
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
    if a.nodes < 1 or a.nproc % a.nodes:
        p.error(f"--nodes must divide --nproc ({a.nproc}), got {a.nodes}")
    if a.nodes > 1:
        if a.framework != "torch":
            p.error("--nodes > 1 runs on the torch side only")
        across = ("allreduce", "allgather", "reduce_scatter")
        if "--ops" not in (argv if argv is not None else sys.argv[1:]):
            a.ops = list(across)
        bad = [o for o in a.ops if o not in across]
        if bad:
            p.error(f"across nodes only {list(across)} run, not {bad}")
        a.no_mpi = a.no_extras = True
    return a


# ----------------------------------------------------------------------------------------- worker

def _worker(a: argparse.Namespace) -> None:
    if a.framework == "mindspore":
        from .mindspore.perftest import worker

        worker(a)
        return
    import warnings

    import torch
    import torch.distributed as dist

    import symsched as symm
    import symsched.functional as F

    warnings.filterwarnings("ignore", category=FutureWarning)

    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("PMI_SIZE", os.environ.get("WORLD_SIZE", "1")))
    per_node = world // a.nodes
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank % per_node),
                       "LOCAL_WORLD_SIZE": str(per_node)})
    if a.nodes > 1:
        os.environ["SYMSCHED_NODE_ID"] = f"node-{rank // per_node}"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    symm.init()
    if a.nodes > 1 and rank == 0:
        print(f"world group across {a.nodes} emulated nodes of {per_node} ranks: symsched runs the hierarchical "
              f"schedules (gloo across nodes); the gloo column is gloo's own collective on the same group", flush=True)
    if not a.no_bind:
        # only the thread that issues every library's calls: helper threads started above
        # (gloo's workers) stay free to run on any CPU, as they do unbound
        bind_cpu(rank, world)
    comm = None
    if not a.no_mpi:
        try:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() == world else None
        except Exception:
            comm = None
    P = world

    def slowest(dt: float) -> float:
        t = torch.tensor([dt], dtype=torch.float64)
        dist.all_reduce(t, dist.ReduceOp.MAX)
        return float(t)

    def timed(fn: Callable[[], object], refresh: Callable[[], None], iters: int, batches: int = 0) -> float:
        """Seconds per call: the median over batches of the slowest rank's batch time / calls."""
        if a.per_iter:
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
        per_batch = []
        for _ in range(max(1, batches or a.batches)):
            refresh()
            for _ in range(a.warmup):
                fn()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            per_batch.append(slowest((time.perf_counter() - t0) / iters))
        return min(per_batch) if a.stat == "min" else statistics.median(per_batch)

    Case = Tuple[Callable[[], object], Callable[[], None]]

    def batches_in_turns(cases: Dict[str, Case], iters: int) -> Dict[str, List[float]]:
        """Seconds per call of each ``(call, refresh)``, one batch of each per round for
        ``--batches`` rounds: what drifts meanwhile — load, clock, what the first calls of a size
        warm — falls on every case alike, not on whichever runs first."""
        per: Dict[str, List[float]] = {name: [] for name in cases}
        for _ in range(max(1, a.batches)):
            for name, (fn, refresh) in cases.items():
                per[name].append(timed(fn, refresh, iters, batches=1))
        return per

    def timed_in_turns(cases: Dict[str, Case], iters: int) -> Dict[str, float]:
        """``timed`` of each library's ``(call, refresh)``, their batches taken in turns."""
        if a.per_iter:
            return {name: timed(fn, refresh, iters) for name, (fn, refresh) in cases.items()}
        pick = min if a.stat == "min" else statistics.median
        return {name: pick(v) for name, v in batches_in_turns(cases, iters).items()}

    rows: List[Dict[str, object]] = []
    for op in [o for o in a.ops if o != "mc2"]:
        for size in sizes(a):
            n = element_count(op, size, P)
            nbytes = n * 4
            it = batch_calls(a, nbytes)
            base = torch.randn(n)
            if op == "allreduce":
                x = symm.empty(n, torch.float32)
                xg = torch.empty(n)
                xm = torch.empty(n)
                cases: Dict[str, Case] = {
                    "symsched": (lambda: symm.shmem_allreduce(x), lambda: x.copy_(base)),
                    "gloo": (lambda: dist.all_reduce(xg), lambda: xg.copy_(base)),
                }
                if comm is not None:
                    from mpi4py import MPI
                    cases["mpi"] = (lambda: comm.Allreduce(MPI.IN_PLACE, xm.numpy()), lambda: xm.copy_(base))
                res = timed_in_turns(cases, it)
                symm.free(x)
                bus = 2 * (P - 1) / P
            elif op == "allgather":
                inp = symm.empty(n // P, torch.float32)
                out = symm.empty(n, torch.float32)
                gin, gout = torch.empty(n // P), torch.empty(n)
                src = base[: n // P]
                cases = {
                    "symsched": (lambda: symm.shmem_allgather(out, inp), lambda: inp.copy_(src)),
                    "gloo": (lambda: dist.all_gather_into_tensor(gout, gin), lambda: gin.copy_(src)),
                }
                if comm is not None:
                    cases["mpi"] = (lambda: comm.Allgather(gin.numpy(), gout.numpy()), lambda: gin.copy_(src))
                res = timed_in_turns(cases, it)
                symm.free(out)
                symm.free(inp)
                bus = (P - 1) / P
            elif op == "reduce_scatter":
                inp = symm.empty(n, torch.float32)
                out = symm.empty(n // P, torch.float32)
                gin, gout = torch.empty(n), torch.empty(n // P)
                cases = {
                    "symsched": (lambda: symm.shmem_reduce_scatter(out, inp), lambda: inp.copy_(base)),
                    "gloo": (lambda: dist.reduce_scatter_tensor(gout, gin), lambda: gin.copy_(base)),
                }
                if comm is not None:
                    cases["mpi"] = (lambda: comm.Reduce_scatter_block(gin.numpy(), gout.numpy()),
                                    lambda: gin.copy_(base))
                res = timed_in_turns(cases, it)
                symm.free(out)
                symm.free(inp)
                bus = (P - 1) / P
            else:  # alltoall, equal splits
                inp = symm.empty(n, torch.float32)
                out = symm.empty(n, torch.float32)
                sends = list(inp.split(n // P))
                counts = [n // P] * P
                gin, gout = torch.empty(n), torch.empty(n)
                cases = {
                    "symsched": (lambda: symm.shmem_alltoall(sends, out, counts), lambda: inp.copy_(base)),
                    "gloo": (lambda: dist.all_to_all_single(gout, gin), lambda: gin.copy_(base)),
                }
                if comm is not None:
                    cases["mpi"] = (lambda: comm.Alltoall(gin.numpy(), gout.numpy()), lambda: gin.copy_(base))
                res = timed_in_turns(cases, it)
                symm.free(out)
                symm.free(inp)
                bus = (P - 1) / P
            rows.append({"op": op, "bytes": nbytes, "count": n, "bus": bus, **res})
            if rank == 0:
                print_row(rows[-1])

    bound_lines = copy_bound(rows, lambda fn, nb: timed(fn, lambda: None, batch_calls(a, nb)))
    if rank == 0:
        for line in bound_lines:
            print(line, flush=True)

    extras: List[str] = []
    if "mc2" in a.ops:
        # MC2 fused vs separate (the symsched / gloo collective, then torch.matmul on the same
        # torch threads) per shape: the first shape is compute-bound, the smaller n give
        # communication a larger share. "ordinary" tensors are private: the fused calls then run
        # the pull schedules, which use them in place; "symmetric" ones (symm.empty, as
        # hyper-parallel's workspaces) are used in place by every schedule. The fused matmul
        # steps run on the engine named in the line. "push" is the fused call as session 3 ran
        # it (push schedules, every matmul step through the Python engine; only its Python front
        # is today's cached one), for a before/after ratio in the same run. The variants are
        # timed in turns, one batch each per round, so load drifting on a shared machine hits
        # them alike; times are medians over rounds and each ratio is the median of the rounds'
        # ratios.
        from .core import knobs as _knobs
        from .core import native as _nat
        from .torch import mc2 as _mc2

        def mc2_buf(kind: str, *shape: int) -> torch.Tensor:
            t = symm.empty(shape, torch.float32) if kind == "symmetric" else torch.empty(*shape)
            return t.copy_(torch.randn(*shape))

        def in_turns(fns: Dict[str, Callable[[], object]], iters: int) -> Dict[str, List[float]]:
            return batches_in_turns({name: (fn, lambda: None) for name, fn in fns.items()}, iters)

        def mc2_line(op: str, shape: str, t: Dict[str, List[float]]) -> str:
            med = {name: statistics.median(v) for name, v in t.items()}
            ratio = {name: statistics.median(x / f for x, f in zip(t[name], t["fused"]))
                     for name in ("sep", "gloo", "push")}
            return (f"mc2 {op:25s} {shape}: fused {med['fused'] * 1e6:9.1f} us | separate symsched "
                    f"{med['sep'] * 1e6:9.1f} us ({ratio['sep']:5.2f}x) | separate gloo {med['gloo'] * 1e6:9.1f} us "
                    f"({ratio['gloo']:5.2f}x) | fused push {med['push'] * 1e6:9.1f} us ({ratio['push']:5.2f}x)")

        engine_name = _mc2.matmul_engine()
        # one engine object per variant, made once: a new one would start with no cached views
        torch_engine = _mc2.TorchMatmul() if engine_name == "torch" else None
        blas = _mc2._torch_blas() if engine_name == "torch" else None
        native = _nat.native()

        def as_push(fn: Callable[[], object]) -> Callable[[], None]:
            def run() -> None:
                os.environ[_knobs.MC2_AG_PULL.name] = "0"
                native.set_matmul_engine(torch_engine)
                try:
                    fn()
                finally:
                    os.environ.pop(_knobs.MC2_AG_PULL.name, None)
                    native.set_matmul_engine(torch_engine, blas)
            return run

        native.set_matmul_engine(torch_engine, blas)

        for m, k, nn in ((256, 512, 512), (256, 512, 128), (256, 512, 32)):
            it = a.iters or 10
            for kind in ("ordinary", "symmetric"):
                A, B = mc2_buf(kind, m, k), mc2_buf(kind, k, nn)
                g, c = mc2_buf(kind, P * m, k), mc2_buf(kind, P * m, nn)
                X1, prod, outb = mc2_buf(kind, P * m, k), mc2_buf(kind, P * m, nn), mc2_buf(kind, m, nn)
                shape = f"m={m} k={k} n={nn} {kind:9s} engine={engine_name}"

                def ag() -> None:
                    symm.fused_all_gather_matmul(A, B, c, g)

                def rs() -> None:
                    symm.fused_matmul_reduce_scatter(X1, B)

                extras.append(mc2_line("all_gather_matmul", shape, in_turns({
                    "fused": ag,
                    "sep": lambda: (symm.shmem_allgather(g, A), torch.matmul(g, B, out=c)),
                    "gloo": lambda: (dist.all_gather_into_tensor(g, A), torch.matmul(g, B, out=c)),
                    "push": as_push(ag),
                }, it)))
                extras.append(mc2_line("matmul_reduce_scatter", shape, in_turns({
                    "fused": rs,
                    "sep": lambda: symm.shmem_reduce_scatter(outb, torch.matmul(X1, B, out=prod)),
                    "gloo": lambda: dist.reduce_scatter_tensor(outb, torch.matmul(X1, B, out=prod)),
                    "push": as_push(rs),
                }, it)))
                if kind == "symmetric":
                    for t in (outb, prod, X1, c, g, B, A):
                        symm.free(t)
        _mc2.set_matmul_engine(engine_name)
        extras.append(f"mc2 load average: {os.getloadavg()[0]:.2f}")
    if not a.no_extras:

        class _Identity(torch.autograd.Function):
            """y = x, gradient passed through: the engine's own cost with no work in backward."""

            @staticmethod
            def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
                return x.view_as(x)

            @staticmethod
            def backward(ctx: object, g: torch.Tensor) -> torch.Tensor:
                return g

        nb = 1 << 20
        n = nb // 4
        # backward vs forward (functional forms; backward runs the dual schedule)
        k = a.iters or 20
        for name, fwd in (("all_gather", lambda x: F.all_gather(x)),
                          ("reduce_scatter", lambda x: F.reduce_scatter(x)),
                          ("all_reduce(adjoint)", lambda x: F.all_reduce(x, backward="adjoint"))):
            x = torch.randn(n, requires_grad=True)
            graphs: List[object] = []
            gy = torch.ones_like(fwd(x))

            def f_only() -> None:
                graphs.append(fwd(x))

            def build() -> None:
                graphs.clear()
                for _ in range(k + a.warmup):
                    f_only()

            def b_only() -> None:
                torch.autograd.grad(graphs.pop(), x, gy)

            def fwd_vs(bwd: Callable[[], None]) -> Tuple[float, float, float]:
                """Median forward and backward batch times and the median per-round ratio.

                Forward and backward batches alternate: load on a shared host drifts, and it then
                hits both sides of a ratio alike."""
                tfs, tbs = [], []
                for _ in range(max(1, a.batches)):
                    tfs.append(timed(f_only, graphs.clear, k, batches=1))
                    graphs.clear()
                    tbs.append(timed(bwd, build, k, batches=1))
                    graphs.clear()
                return (statistics.median(tfs), statistics.median(tbs),
                        statistics.median(b / f for f, b in zip(tfs, tbs)))

            tf, tb, ratio = fwd_vs(b_only)
            extras.append(f"backward/forward {name:20s} 1 MiB: fwd {tf * 1e6:8.1f} us, bwd {tb * 1e6:8.1f} us, "
                          f"ratio {ratio:5.2f}")

            # beside it, the same backward without torch's engine: the Function's backward (its
            # Python and the dual launch) called through each prebuilt graph's node, so the line
            # above minus this one is what torch.autograd.grad adds around symsched
            def b_alone() -> None:
                graphs.pop().grad_fn.apply(gy)

            tf, ta, ratio = fwd_vs(b_alone)
            extras.append(f"  {name} backward alone (Function.backward via grad_fn, no torch engine): "
                          f"fwd {tf * 1e6:8.1f} us, bwd {ta * 1e6:8.1f} us, ratio {ratio:5.2f}")
        # what torch.autograd.grad costs by itself: an identity autograd.Function at the same size
        x = torch.randn(n, requires_grad=True)
        graphs = []

        def id_build() -> None:
            graphs.clear()
            for _ in range(k + a.warmup):
                graphs.append(_Identity.apply(x))

        t_id = timed(lambda: torch.autograd.grad(graphs.pop(), x, x), id_build, k)
        graphs.clear()
        extras.append(f"  torch.autograd.grad of an identity autograd.Function, 1 MiB (torch's floor): "
                      f"{t_id * 1e6:8.1f} us")
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
    mpiexec = (shutil.which("mpiexec", path=os.path.dirname(sys.executable))
               if not a.no_mpi and a.framework == "torch" else None)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    bound = not a.no_bind and 0 < a.nproc <= usable
    print(f"ranks {'bound one per CPU' if bound else 'not bound to CPUs'} ({usable} usable CPUs)", flush=True)
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
    print(f"launching {a.nproc} ranks ({'mccl column' if a.framework == 'mindspore' else 'no mpi4py/mpiexec: MPICH column skipped'})",
          flush=True)
    procs = []
    for r in range(a.nproc):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(a.nproc))
        procs.append(subprocess.Popen(args + ["--no-mpi"], env=e))
    codes = [p.wait() for p in procs]
    return max(codes, key=abs)


if __name__ == "__main__":
    sys.exit(main())
