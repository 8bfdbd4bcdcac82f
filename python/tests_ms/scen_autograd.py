"""Scenario: gradients of every differentiable collective with ``ms.grad`` (PyNative) vs analytic
values. Each rank differentiates its own loss ``sum(w_rank * y)``; the total loss is the sum
over ranks, so the analytic gradient of rank ``me``'s input collects every rank's weights."""

from __future__ import annotations

from typing import Any, List

import mindspore as ms
import numpy as np

import symsched.mindspore as symm
from _common import groups_of

F = symm.functional


def _w(r: int, n: int, seed: int = 0) -> np.ndarray:
    return (np.arange(n, dtype=np.float32) % 5 + 1) * (r + 1) + seed


def grads(rank: int, world: int, args: Any) -> dict:
    symm.init()
    failures: List[str] = []
    checked = 0

    def check(got: Any, want: np.ndarray, what: str) -> None:
        nonlocal checked
        checked += 1
        g = got.asnumpy().reshape(-1).astype(np.float64)
        if g.shape != want.reshape(-1).shape or not np.allclose(g, want.reshape(-1), rtol=1e-6, atol=1e-6):
            failures.append(f"{what}: got {g[:6]} want {want.reshape(-1)[:6]}")

    n = 4
    for gname, (g, ranks) in groups_of(rank, world, False).items():
        me, p = ranks.index(rank), len(ranks)
        x = ms.Tensor(np.arange(n, dtype=np.float32) + 10 * rank)
        # all_gather: dL/dx_me = Σ_r w_r[block me]
        w = ms.Tensor(_w(rank, p * n))
        check(ms.grad(lambda t: (F.all_gather(t, g) * w).sum())(x),
              sum(_w(r, p * n)[me * n:(me + 1) * n] for r in ranks), f"all_gather {gname}")
        # reduce_scatter sum / avg: dL/dx_me = concat_r w_r (/P for avg)
        xb = ms.Tensor(np.arange(p * n, dtype=np.float32) + rank)
        for op, scale in (("sum", 1.0), ("avg", 1.0 / p)):
            wn = ms.Tensor(_w(rank, n, 1))
            check(ms.grad(lambda t: (F.reduce_scatter(t, op, g) * wn).sum())(xb),
                  np.concatenate([_w(r, n, 1) for r in ranks]) * scale, f"reduce_scatter {op} {gname}")
        # all_reduce: adjoint = Σ_r w_r, identity = w_me; avg scales by 1/P
        wn = ms.Tensor(_w(rank, n, 2))
        for op, scale in (("sum", 1.0), ("avg", 1.0 / p)):
            check(ms.grad(lambda t: (F.all_reduce(t, op, g, backward="adjoint") * wn).sum())(x),
                  sum(_w(r, n, 2) for r in ranks) * scale, f"all_reduce adjoint {op} {gname}")
            check(ms.grad(lambda t: (F.all_reduce(t, op, g, backward="identity") * wn).sum())(x),
                  _w(rank, n, 2) * scale, f"all_reduce identity {op} {gname}")
        # max: the gradient goes to the winning element (the largest rank's x here)
        check(ms.grad(lambda t: (F.all_reduce(t, "max", g, backward="adjoint") * wn).sum())(x),
              sum(_w(r, n, 2) for r in ranks) * (1.0 if me == p - 1 else 0.0), f"all_reduce max {gname}")
        # copy_to_group (f) / reduce_from_group (g)
        check(ms.grad(lambda t: (F.copy_to_group(t, g) * wn).sum())(x), sum(_w(r, n, 2) for r in ranks),
              f"copy_to_group {gname}")
        check(ms.grad(lambda t: (F.reduce_from_group(t, g) * wn).sum())(x), _w(rank, n, 2),
              f"reduce_from_group {gname}")
        # broadcast from the last group rank: its input collects every weight, others get 0
        check(ms.grad(lambda t: (F.broadcast(t, p - 1, g) * wn).sum())(x),
              sum(_w(r, n, 2) for r in ranks) * (1.0 if me == p - 1 else 0.0), f"broadcast {gname}")
        # all_to_all with even splits: rows sent to rank j come back with j's weights for them
        xa = ms.Tensor(np.arange(p * 2, dtype=np.float32).reshape(p * 2, 1) + rank)
        wa = ms.Tensor(_w(rank, p * 2, 3).reshape(p * 2, 1))
        want = np.concatenate([_w(ranks[j], p * 2, 3)[2 * me:2 * me + 2] for j in range(p)])
        check(ms.grad(lambda t: (F.all_to_all(t, None, None, g) * wa).sum())(xa), want, f"all_to_all {gname}")
    # MC2 on WORLD: c = allgather(a) @ b; dL/da_me = Σ_r (w_r @ bᵀ)[block me] (b the same on every rank)
    m, k, nn = 2, 3, 2
    a = ms.Tensor(np.arange(m * k, dtype=np.float32).reshape(m, k) + rank)
    b = ms.Tensor(np.arange(k * nn, dtype=np.float32).reshape(k, nn) / 7)
    wc = ms.Tensor(_w(rank, world * m * nn, 4).reshape(world * m, nn))
    ga = ms.grad(lambda t: (F.all_gather_matmul(t, b)[1] * wc).sum())(a)
    bt = b.asnumpy().T
    want = sum(_w(r, world * m * nn, 4).reshape(world * m, nn)[rank * m:(rank + 1) * m] @ bt for r in range(world))
    check(ga, want, "all_gather_matmul")
    # matmul_reduce_scatter: c_me = Σ_j (a_j @ b)[block me]; dL/da_me = concat_r w_r @ bᵀ
    a2 = ms.Tensor(np.arange(world * m * k, dtype=np.float32).reshape(world * m, k) + rank)
    wr = ms.Tensor(_w(rank, m * nn, 5).reshape(m, nn))
    check(ms.grad(lambda t: (F.matmul_reduce_scatter(t, b) * wr).sum())(a2),
          np.concatenate([_w(r, m * nn, 5).reshape(m, nn) @ bt for r in range(world)]), "matmul_reduce_scatter")
    # in-place form under ms.grad: routed through the functional, gradient flows (identity)
    def inplace(t: Any) -> Any:
        y = t * 1
        symm.shmem_allreduce(y, "sum")
        return (y * ms.Tensor(_w(rank, n, 6))).sum()

    check(ms.grad(inplace)(ms.Tensor(np.ones(n, np.float32))), _w(rank, n, 6), "shmem_allreduce under ms.grad")
    return {"failures": failures, "checked": checked}


def send_recv_grads(rank: int, world: int, args: Any) -> dict:
    """send/recv pairs: the receiver's gradient travels back to the sender."""
    symm.init()
    failures: List[str] = []
    n = 3
    w = _w(1, n, 7)
    if rank == 0:
        x = ms.Tensor(np.arange(n, dtype=np.float32))
        gx = ms.grad(lambda t: F.send(t, 1).sum())(x)
        if not np.allclose(gx.asnumpy(), w):
            failures.append(f"send grad {gx.asnumpy()} want {w}")
    elif rank == 1:
        scale = ms.Tensor(np.ones(n, np.float32))

        def loss(s: Any) -> Any:
            # MindSpore runs a backward only on the path to what ms.grad differentiates: the
            # anchor ties recv to `s` (see docs/mindspore.md)
            y = F.recv((n,), ms.float32, 0, anchor=s)
            return (y * s * ms.Tensor(w)).sum()

        gs = ms.grad(loss)(scale)
        if not np.allclose(gs.asnumpy(), np.arange(n) * w):
            failures.append(f"recv: d/ds {gs.asnumpy()}")
    symm.barrier()
    return {"failures": failures}
