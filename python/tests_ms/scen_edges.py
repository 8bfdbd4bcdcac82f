"""Scenario: 0-row and 0-element inputs in every collective and its backward on MindSpore
tensors, including all_to_all where one rank routes no tokens (ordinary in MoE)."""

from __future__ import annotations

from typing import Any, Callable, List

import mindspore as ms
import numpy as np

import symsched.mindspore as symm

F = symm.functional


def empty_inputs(rank: int, world: int, args: Any) -> dict:
    symm.init()
    failures: List[str] = []
    P = world

    def run(what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - the failure is the result
            failures.append(f"{what}: {type(exc).__name__}: {exc}")
            symm.barrier()  # re-synchronise (and reset an aborted WORLD)
            return None

    for dt in (np.float32, np.float16):
        z = ms.Tensor(np.zeros(0, dt))
        run(f"allreduce 0 {dt.__name__}", lambda: symm.shmem_allreduce(z, "sum"))
        run(f"allgather 0 {dt.__name__}", lambda: symm.shmem_allgather(ms.Tensor(np.zeros(0, dt)), z))
        run(f"reduce_scatter 0 {dt.__name__}", lambda: symm.shmem_reduce_scatter(ms.Tensor(np.zeros(0, dt)), z))
        run(f"broadcast 0 {dt.__name__}", lambda: symm.shmem_broadcast(z, 0))
        run(f"alltoall 0 {dt.__name__}", lambda: symm.shmem_alltoall([ms.Tensor(np.zeros(0, dt))] * P, z, [0] * P))
        symm.barrier()
        for cols in (3, 0):
            x = ms.Tensor(np.zeros((0, cols), dt))
            for name, fn in (
                ("all_gather", lambda t: F.all_gather(t)),
                ("all_reduce adjoint", lambda t: F.all_reduce(t, "sum", backward="adjoint")),
                ("all_reduce identity", lambda t: F.all_reduce(t, "sum", backward="identity")),
                ("copy_to_group", lambda t: F.copy_to_group(t)),
                ("broadcast", lambda t: F.broadcast(t, 0)),
                ("all_to_all", lambda t: F.all_to_all(t, [0] * P, [0] * P)),
                ("all_to_all even", lambda t: F.all_to_all(t, None, None)),
                ("reduce_scatter", lambda t: F.reduce_scatter(t, "sum")),
            ):
                what = f"{name} 0x{cols} {dt.__name__}"
                y = run(what, lambda: fn(x))
                if y is not None and tuple(y.shape)[0] != 0:
                    failures.append(f"{what}: shape {tuple(y.shape)}")
                if dt == np.float32:
                    g = run(f"{what} backward", lambda: ms.grad(lambda t: (fn(t) * 2).sum())(x))
                    if g is not None and tuple(g.shape) != (0, cols):
                        failures.append(f"{what} backward: grad shape {tuple(g.shape)}")
                symm.barrier()

    # one rank routes no tokens: rank 0 has 0 rows and sends none, the others one row to each
    cols = 4
    rows = 0 if rank == 0 else P
    x = ms.Tensor((np.arange(rows * cols, dtype=np.float32) + 100 * rank).reshape(rows, cols))
    ins = [0] * P if rank == 0 else [1] * P
    outs = [0] + [1] * (P - 1)
    y = run("all_to_all 0-row rank 0", lambda: F.all_to_all(x, outs, ins))
    if y is not None:
        want = np.stack([np.arange(cols, dtype=np.float32) + rank * cols + 100 * j for j in range(1, P)]) \
            if P > 1 else np.zeros((0, cols), np.float32)
        if y.asnumpy().shape != want.shape or not np.array_equal(y.asnumpy(), want):
            failures.append(f"all_to_all 0-row rank 0: {y.asnumpy().tolist()} want {want.tolist()}")
    g = run("all_to_all 0-row rank 0 backward", lambda: ms.grad(lambda t: (F.all_to_all(t, outs, ins) * 3).sum())(x))
    if g is not None and (tuple(g.shape) != (rows, cols) or not np.array_equal(g.asnumpy(), np.full((rows, cols), 3.0))):
        failures.append(f"all_to_all 0-row rank 0 grad: {g.asnumpy().tolist()}")
    symm.barrier()
    return {"failures": failures}
