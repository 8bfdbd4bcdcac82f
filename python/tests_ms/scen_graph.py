"""Scenario: the graph-mode ops (``symsched.mindspore.graph``) inside ``@ms.jit`` and under
``GRAPH_MODE``, compared with the PyNative functional forms: values and ``ms.grad`` gradients
of every collective, send/recv gradients, and the per-call cost of one graph op vs PyNative."""

from __future__ import annotations

import time
from typing import Any, Callable, List

import mindspore as ms
import numpy as np

import symsched.mindspore as symm
from _common import groups_of

F = symm.functional


def _w(r: int, n: int, seed: int = 0) -> np.ndarray:
    return (np.arange(n, dtype=np.float32) % 5 + 1) * (r + 1) + seed


def _graph_runs(op: Any, x: Any, w: Any, kind: str) -> tuple:
    """(value, gradient of sum(op(x) * w)) of a graph-mode op, under ``kind``: 'jit' (an
    ``@ms.jit`` function in PyNative mode) or 'graph' (GRAPH_MODE is in force)."""

    def fwd(t: Any) -> Any:
        return op(t)

    def loss(t: Any) -> Any:
        return (op(t) * w).sum()

    if kind == "jit":
        return ms.jit(fwd)(x), ms.jit(ms.grad(loss))(x)
    return fwd(x), ms.grad(loss)(x)


def _graph_value(op: Any, x: Any, kind: str) -> Any:
    def fwd(t: Any) -> Any:
        return op(t)

    return ms.jit(fwd)(x) if kind == "jit" else fwd(x)


def _cases(rank: int, world: int) -> List[tuple]:
    """(label, graph op, PyNative function, input, weight shape) for every collective and group."""
    G = symm.graph
    out: List[tuple] = []
    n = 4
    for gname, (g, ranks) in groups_of(rank, world, False).items():
        p = len(ranks)
        x = ms.Tensor(np.arange(n, dtype=np.float32) + 10 * rank + 1)
        xb = ms.Tensor(np.arange(p * n, dtype=np.float32) * (rank + 1) - 3)
        xa = ms.Tensor(np.arange(p * 2, dtype=np.float32).reshape(p * 2, 1) + rank)
        out.append((f"all_gather {gname}", G.AllGather(g), lambda t, g=g: F.all_gather(t, g), x))
        for op in ("sum", "avg"):
            out.append((f"reduce_scatter {op} {gname}", G.ReduceScatter(op, g),
                        lambda t, g=g, op=op: F.reduce_scatter(t, op, g), xb))
        for op in ("sum", "avg", "max", "min"):
            for b in ("adjoint", "identity"):
                out.append((f"all_reduce {op} {b} {gname}", G.AllReduce(op, g, backward=b),
                            lambda t, g=g, op=op, b=b: F.all_reduce(t, op, g, backward=b), x))
        out.append((f"copy_to_group {gname}", G.CopyToGroup(g), lambda t, g=g: F.copy_to_group(t, g), x))
        out.append((f"reduce_from_group {gname}", G.ReduceFromGroup(g), lambda t, g=g: F.reduce_from_group(t, g), x))
        out.append((f"all_to_all {gname}", G.AllToAll(None, None, g), lambda t, g=g: F.all_to_all(t, None, None, g),
                    xa))
        out.append((f"broadcast {gname}", G.Broadcast(p - 1, g), lambda t, g=g, p=p: F.broadcast(t, p - 1, g), x))
    # uneven static splits on WORLD: rank r sends j+1 rows to rank j (and receives r+1 from each)
    ins = [j + 1 for j in range(world)]
    outs = [rank + 1] * world
    xu = ms.Tensor(np.arange(sum(ins) * 2, dtype=np.float32).reshape(sum(ins), 2) + 100 * rank)
    out.append(("all_to_all uneven", G.AllToAll(outs, ins), lambda t: F.all_to_all(t, outs, ins), xu))
    # other dtypes (forward values and float64 gradients)
    x64 = ms.Tensor(np.arange(n, dtype=np.float64) / 3 + rank)
    out.append(("all_reduce sum f64", G.AllReduce("sum", backward="adjoint"),
                lambda t: F.all_reduce(t, "sum", backward="adjoint"), x64))
    out.append(("all_gather f16", G.AllGather(), lambda t: F.all_gather(t), x.astype(ms.float16)))
    return out


def values_and_grads(rank: int, world: int, args: Any) -> dict:
    """Every case in PyNative, then in @ms.jit, then under GRAPH_MODE (the mode is process-wide:
    set last); the graph results must equal PyNative's exactly (the same schedules run)."""
    symm.init()
    failures: List[str] = []
    checked = 0
    cases = _cases(rank, world)
    ref = []
    for label, _op, fn, x in cases:
        y = fn(x)
        w = ms.Tensor(_w(rank, int(np.prod(y.shape)), 2).reshape(y.shape)).astype(y.dtype)
        gx = ms.grad(lambda t, fn=fn, w=w: (fn(t) * w).sum())(x) if x.dtype != ms.float16 else None
        ref.append((y.asnumpy(), None if gx is None else gx.asnumpy(), w))

    def compare(kind: str) -> None:
        nonlocal checked
        for (label, op, _fn, x), (y_ref, g_ref, w) in zip(cases, ref):
            if g_ref is None:
                y, g = _graph_value(op, x, kind), None
            else:
                y, g = _graph_runs(op, x, w, kind)
            checked += 1
            if not np.array_equal(y.asnumpy(), y_ref):
                failures.append(f"{kind} {label}: value {y.asnumpy().reshape(-1)[:6]} want {y_ref.reshape(-1)[:6]}")
            if g_ref is not None and not np.array_equal(g.asnumpy(), g_ref):
                failures.append(f"{kind} {label}: grad {g.asnumpy().reshape(-1)[:6]} want {g_ref.reshape(-1)[:6]}")

    compare("jit")
    compare("jit")  # a second call of each compiled graph runs its collectives again
    ms.set_context(mode=ms.GRAPH_MODE)
    compare("graph")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    symm.barrier()
    return {"failures": failures, "checked": checked}


def send_recv(rank: int, world: int, args: Any) -> dict:
    """Send/Recv in both graph kinds: the value arrives, the receiver's gradient travels back."""
    symm.init()
    G = symm.graph
    failures: List[str] = []
    n = 3
    w = _w(1, n, 7)
    kind = args
    for it in range(2):
        if kind == "graph":
            ms.set_context(mode=ms.GRAPH_MODE)
        if rank == 0:
            send = G.Send(1)
            x = ms.Tensor(np.arange(n, dtype=np.float32) + it)

            def loss(t: Any) -> Any:
                return send(t).sum()

            gx = (ms.jit(ms.grad(loss)) if kind == "jit" else ms.grad(loss))(x)
            if not np.allclose(gx.asnumpy(), w):
                failures.append(f"{kind} send grad {gx.asnumpy()} want {w}")
        elif rank == 1:
            recv = G.Recv((n,), ms.float32, 0)
            wt = ms.Tensor(w)

            def rloss(s: Any) -> Any:
                return (recv(s) * s * wt).sum()

            def value(s: Any) -> Any:
                return recv(s)

            gs = (ms.jit(ms.grad(rloss)) if kind == "jit" else ms.grad(rloss))(ms.Tensor(np.ones(n, np.float32)))
            if not np.allclose(gs.asnumpy(), (np.arange(n) + it) * w):
                failures.append(f"{kind} recv: d/ds {gs.asnumpy()} want {(np.arange(n) + it) * w}")
        ms.set_context(mode=ms.PYNATIVE_MODE)  # the Python API refuses GRAPH_MODE
        symm.barrier()
    return {"failures": failures}


def cost(rank: int, world: int, args: Any) -> dict:
    """Per-call time of an 8-byte all_reduce: the in-place PyNative call (cached fast path), the
    PyNative functional form, and the graph op in @ms.jit and under GRAPH_MODE, in alternating
    rounds of one run (no asserts: the caller reports them)."""
    symm.init()
    G = symm.graph
    iters = int(args or 200)
    x = ms.Tensor(np.ones(2, np.float32))
    op = G.AllReduce("sum", backward="identity")

    @ms.jit
    def jf(t: Any) -> Any:
        return op(t)

    def timed(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        for _ in range(iters):
            y = fn()
        y.asnumpy()
        return (time.perf_counter() - t0) / iters * 1e6

    res = {"inplace": [], "pynative": [], "jit": [], "graph": []}
    buf = ms.Tensor(np.ones(2, np.float32))
    for _ in range(3):
        symm.barrier()
        res["inplace"].append(timed(lambda: symm.shmem_allreduce(buf, "sum") or buf))
        symm.barrier()
        res["pynative"].append(timed(lambda: F.all_reduce(x, "sum", backward="identity")))
        symm.barrier()
        res["jit"].append(timed(lambda: jf(x)))
        symm.barrier()
        ms.set_context(mode=ms.GRAPH_MODE)
        res["graph"].append(timed(lambda: op(x)))
        ms.set_context(mode=ms.PYNATIVE_MODE)
    symm.barrier()
    return {"failures": [], "us": {k: sorted(v) for k, v in res.items()}}
