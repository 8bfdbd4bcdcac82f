"""Scenarios for groups across emulated nodes on MindSpore (msrun, mccl the framework engine):
``args["per_node"]`` ranks per node, node ``b`` holding ranks ``b·L … b·L + L - 1``; each node
bootstraps its own heaps (``SYMSCHED_NODE_ID``, ``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` set before
symsched starts)."""

from __future__ import annotations

import os
from typing import Any, Dict, List

import mindspore as ms
import numpy as np

from _common import data, values


def _node_env(rank: int, per_node: int) -> None:
    os.environ["SYMSCHED_NODE_ID"] = f"node-{rank // per_node}"
    os.environ["LOCAL_RANK"] = str(rank % per_node)
    os.environ["LOCAL_WORLD_SIZE"] = str(per_node)


def _fold(parts: List[np.ndarray], op: str) -> np.ndarray:
    acc = parts[0].copy()
    for p in parts[1:]:
        acc = acc + p if op in ("sum", "avg") else (np.maximum(acc, p) if op == "max" else np.minimum(acc, p))
    return acc / len(parts) if op == "avg" else acc


def _bound(dtype: Any, parts: List[np.ndarray]) -> np.ndarray:
    """As on the torch side: 16-bit data rounds once per level (2u·Σ|x|), f32/f64 sums differ by
    their order (2·P·eps·Σ|x|), integers are exact."""
    absum = np.sum([np.abs(p.astype(np.float64)) for p in parts], axis=0)
    eps = {ms.float32: 2.0 ** -23, ms.float64: 2.0 ** -52, ms.float16: 2.0 ** -10, ms.bfloat16: 2.0 ** -7}.get(dtype)
    if eps is None:
        return np.zeros_like(absum)
    if dtype in (ms.float16, ms.bfloat16):
        return 2 * eps * absum + 1e-30
    return 2 * len(parts) * eps * absum


def collectives(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    """allreduce (every op) / reduce_scatter / allgather on the world group across nodes vs the
    sequential fold; the hierarchical schedules ran; primitives are refused naming the nodes."""
    per_node = args["per_node"]
    _node_env(rank, per_node)
    import symsched.mindspore as symm
    from symsched.core import nodes, state

    fails: List[str] = []
    checked = 0
    for dt in (ms.float32, ms.float64, ms.float16, ms.bfloat16, ms.int32, ms.int64):
        ops = ["sum", "avg", "max", "min"] if dt in (ms.float32, ms.float64, ms.float16, ms.bfloat16) else ["sum", "max", "min"]
        for op in ops:
            for n in (1, 1003):
                ins = [data(1000 * r + n, n, dt) for r in range(world)]
                t = ins[rank][0]
                t = symm.shmem_allreduce(t, op) or t
                want = _fold([v for _, v in ins], op)
                got = values(t)
                if not np.all(np.abs(got - want) <= _bound(dt, [v for _, v in ins])):
                    fails.append(f"allreduce {dt} {op} n={n}: max err {np.max(np.abs(got - want))}")
                checked += 1
        n = 7
        rs = [data(2000 * r, world * n, dt) for r in range(world)]
        out = symm.empty(n, dt)
        symm.shmem_reduce_scatter(out, rs[rank][0])
        want = _fold([v[rank * n:(rank + 1) * n] for _, v in rs], "sum")
        if not np.all(np.abs(values(out) - want) <= _bound(dt, [v[rank * n:(rank + 1) * n] for _, v in rs])):
            fails.append(f"reduce_scatter {dt}")
        ag = symm.empty(world * n, dt)
        symm.shmem_allgather(ag, data(3000 * rank, n, dt)[0])
        if not np.array_equal(values(ag), np.concatenate([data(3000 * r, n, dt)[1] for r in range(world)])):
            fails.append(f"allgather {dt}")
        symm.free(ag)
        symm.free(out)
        checked += 2
    info = state.resolve_group(None)
    ran = {p.schedule for p in info.prepared.values() if hasattr(p, "schedule")}
    if not isinstance(info.handle, nodes.CrossNodeHandle) or ran != {"allreduce_hier", "reduce_scatter_hier",
                                                                     "allgather_hier"}:
        fails.append(f"not hierarchical: {type(info.handle).__name__} ran {sorted(ran)}")
    buf = symm.empty(4, ms.float32)
    try:
        symm.shmem_put(buf, 0, buf, 0, 4, (rank + per_node) % world)
        fails.append("put to another node: no error")
    except ValueError as exc:
        if "node-0" not in str(exc) or "node-1" not in str(exc):
            fails.append(f"put refusal does not name the nodes: {exc}")
    symm.free(buf)
    return {"failures": fails, "checked": checked}


def gradients(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    """Gradients of the differentiable forms across nodes (ms.grad, PyNative) vs analytic values."""
    per_node = args["per_node"]
    _node_env(rank, per_node)
    import symsched.mindspore as symm

    F = symm.functional
    fails: List[str] = []
    n = 5
    w = float(rank + 1)
    total = float(sum(range(1, world + 1)))
    x = ms.Tensor(np.full(n, w, dtype=np.float32))
    wn = ms.Tensor(np.full(n, w, dtype=np.float32))

    def check(got: Any, want: np.ndarray, what: str) -> None:
        g = got.asnumpy().reshape(-1).astype(np.float64)
        if g.shape != want.shape or not np.allclose(g, want, rtol=1e-6, atol=1e-6):
            fails.append(f"{what}: got {g[:6]} want {want[:6]}")

    y = F.all_reduce(x, "sum", None, backward="adjoint")
    check(y, np.full(n, total), "all_reduce forward")
    check(ms.grad(lambda t: (F.all_reduce(t, "sum", None, backward="adjoint") * wn).sum())(x), np.full(n, total),
          "all_reduce adjoint grad")
    check(ms.grad(lambda t: (F.all_reduce(t, "sum", None, backward="identity") * wn).sum())(x), np.full(n, w),
          "all_reduce identity grad")
    check(ms.grad(lambda t: (F.all_gather(t) * ms.Tensor(np.full(world * n, w, dtype=np.float32))).sum())(x),
          np.full(n, total), "all_gather grad")
    xb = ms.Tensor(np.arange(world * n, dtype=np.float32) * w)
    check(ms.grad(lambda t: (F.reduce_scatter(t, "sum", None) * wn).sum())(xb),
          np.concatenate([np.full(n, float(r + 1)) for r in range(world)]), "reduce_scatter grad")
    return {"failures": fails}
