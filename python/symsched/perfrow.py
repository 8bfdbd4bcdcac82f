"""What both perftest workers (PyTorch in :mod:`symsched.perftest`, MindSpore in
:mod:`symsched.mindspore.perftest`) share about one table row: the sizes swept, the element
count of a size, the calls per timed batch, the CPU binding of a rank, the row's format and the
copy bound of the largest size.
The driver and both workers import it; it imports neither.
"""

from __future__ import annotations

import argparse
import os
from typing import Callable, Dict, List, Optional


def sizes(a: argparse.Namespace) -> List[int]:
    out, s = [], a.min_b
    while s < a.max_b:
        out.append(s)
        s *= a.factor
    out.append(a.max_b)
    return out


def element_count(op: str, size: int, world: int) -> int:
    """fp32 elements of the row for ``size`` bytes (nccl-tests' sizes): a multiple of the group
    size for the ops that split their buffer among the ranks."""
    n = max(1, size // 4)
    if op in ("allgather", "reduce_scatter", "alltoall"):
        n = max(world, (n // world) * world)
    return n


def batch_calls(a: argparse.Namespace, nbytes: int) -> int:
    """Calls per timed batch: ``--iters``, else about 20 MB moved per batch (5 to 200 calls);
    per call with ``--per-iter`` (3 to 50)."""
    if a.per_iter:
        return a.iters or max(3, min(50, int(64e6 / max(nbytes, 1))))
    return a.iters or max(5, min(200, int(20e6 / max(nbytes, 1))))


def bind_cpu(rank: int, world: int) -> Optional[int]:
    """Bind the calling thread to its own CPU (rank order over the usable CPUs) when there is one
    per rank; returns the CPU, or None when left unbound (oversubscribed, or no affinity API)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < world or not 0 <= rank < world:
        return None
    os.sched_setaffinity(0, {cpus[rank]})
    return cpus[rank]


def header(lib: str) -> str:
    return (f"{'op':>14} {'size(B)':>10} {'count':>9} | {'symsched us':>11} {'algbw':>7} {'busbw':>7} | "
            f"{lib + ' us':>10} {'ratio':>7} | {'mpi us':>9} {'ratio':>7}")


HEADER = header("gloo")


def print_row(r: Dict[str, object], lib: str = "gloo") -> None:
    """One table row; ``lib`` names the framework library's column (its time is ``r["gloo"]``,
    absent when that library lacks the op)."""
    if not getattr(print_row, "done", False):
        print(header(lib))
        print("-" * len(HEADER))
        print_row.done = True  # type: ignore[attr-defined]
    s = float(r["symsched"])  # type: ignore[arg-type]
    alg = int(r["bytes"]) / s / 1e9  # type: ignore[arg-type]
    line = f"{r['op']:>14} {r['bytes']:>10} {r['count']:>9} | {s * 1e6:11.1f} {alg:7.2f} {alg * float(r['bus']):7.2f} | "
    if "gloo" in r:
        g = float(r["gloo"])  # type: ignore[arg-type]
        line += f"{g * 1e6:10.1f} {g / s:6.2f}x |"
    else:
        line += f"{'-':>10} {'-':>7} |"
    if "mpi" in r:
        m = float(r["mpi"])  # type: ignore[arg-type]
        line += f" {m * 1e6:9.1f} {m / s:6.2f}x"
    else:
        line += f" {'-':>9} {'-':>7}"
    print(line, flush=True)


def copy_bound(rows: List[Dict[str, object]], timed: Callable[[Callable[[], None], int], float]) -> List[str]:
    """Each collective's time at the largest size of the run (≥ 1 MiB) against the copy bound
    measured right after it: every rank copying the message once between two buffers of its
    own (numpy, a plain ``memcpy``), all ranks at once, timed by ``timed(fn, nbytes)`` as the
    worker times the collectives (issue 15's "two-copier memcpy bound" at 2 ranks). A
    collective of that message writes at least that many bytes on every rank through the same
    memory system, so a ratio near 1 leaves nothing to gain but the copy's own speed. Every
    rank must call it (the timing synchronises); the lines are for rank 0 to print."""
    import numpy as np

    top: Dict[str, Dict[str, object]] = {}
    for r in rows:
        op = str(r["op"])
        if op not in top or int(r["bytes"]) > int(top[op]["bytes"]):  # type: ignore[call-overload]
            top[op] = r
    lines: List[str] = []
    bounds: Dict[int, float] = {}
    for op, r in top.items():
        nb = int(r["bytes"])  # type: ignore[call-overload]
        if nb < 1 << 20:
            continue
        if nb not in bounds:
            src = np.random.default_rng(0).standard_normal(nb // 4).astype(np.float32)
            dst = np.empty_like(src)
            bounds[nb] = timed(lambda: np.copyto(dst, src), nb)
        t, b = float(r["symsched"]), bounds[nb]  # type: ignore[arg-type]
        lines.append(f"{op:>14} {nb:>10} B: symsched {t * 1e6:10.1f} us, copy bound {b * 1e6:10.1f} us "
                     f"(every rank copying the message once, at once): {t / b:5.2f}x the bound")
    return lines
