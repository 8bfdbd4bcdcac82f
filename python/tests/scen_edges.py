"""Edge scenarios of the call protocol: 0-row and 0-element inputs in every collective and its
backward, released tensors, one-sided ops on a group not set up yet."""

from __future__ import annotations

import time
from typing import Any, Callable, List

import torch
import torch.distributed as dist

import symsched as symm
from symsched import functional as F


def _check(fails: List[str], what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the failure is the result
        fails.append(f"{what}: {type(e).__name__}: {e}")
        symm.barrier()  # re-synchronise (and reset an aborted WORLD) before the next case
        return None


def _eq(fails: List[str], what: str, got: Any, want: torch.Tensor) -> None:
    if got is None:
        return
    if got.shape != want.shape or not torch.equal(got, want):
        fails.append(f"{what}: got {got.shape} {got.flatten()[:8].tolist()}, want {want.shape} "
                     f"{want.flatten()[:8].tolist()}")


def empty_inputs(rank: int, world: int, args) -> dict:
    """Every collective and its backward with 0-row / 0-element inputs (on every rank, and 0 rows
    on one rank only where the collective allows the ranks to differ)."""
    symm.init()
    fails: List[str] = []
    P = world
    for dtype in (torch.float32, torch.bfloat16):
        # in-place forms, 0 elements everywhere
        z = torch.empty(0, dtype=dtype)
        _check(fails, f"allreduce 0 {dtype}", lambda: symm.shmem_allreduce(z))
        _check(fails, f"allgather 0 {dtype}", lambda: symm.shmem_allgather(torch.empty(0, dtype=dtype), z))
        _check(fails, f"reduce_scatter 0 {dtype}",
               lambda: symm.shmem_reduce_scatter(torch.empty(0, dtype=dtype), z))
        _check(fails, f"broadcast 0 {dtype}", lambda: symm.shmem_broadcast(z, 0))
        _check(fails, f"alltoall 0 {dtype}",
               lambda: symm.shmem_alltoall([torch.empty(0, dtype=dtype)] * P, z, [0] * P))
        if P >= 2 and rank < 2:
            peer = 1 - rank
            _check(fails, f"send/recv 0 {dtype}", lambda: (symm.shmem_send(z, peer) if rank == 0
                                                          else symm.shmem_recv(z, peer)))
        symm.barrier()

        # functional forms and their backward: 2-D inputs with 0 rows on every rank
        for cols in (3, 0):
            x = torch.zeros(0, cols, dtype=dtype, requires_grad=True)
            for name, fn in (
                ("all_gather", lambda: F.all_gather(x)),
                ("all_reduce adjoint", lambda: F.all_reduce(x, backward="adjoint")),
                ("all_reduce identity", lambda: F.all_reduce(x, backward="identity")),
                ("copy_to_group", lambda: F.copy_to_group(x)),
                ("reduce_from_group", lambda: F.reduce_from_group(x)),
                ("broadcast", lambda: F.broadcast(x, 0)),
                ("all_to_all", lambda: F.all_to_all(x, [0] * P, [0] * P)),
                ("all_to_all even", lambda: F.all_to_all(x)),
                ("reduce_scatter", lambda: F.reduce_scatter(x)),
            ):
                def run(fn: Callable[[], Any] = fn) -> Any:
                    x.grad = None
                    y = fn()
                    (y.float().sum() * 2).backward()
                    return y
                y = _check(fails, f"{name} 0x{cols} {dtype}", run)
                if y is not None:
                    want_rows = 0
                    if y.shape[0] != want_rows:
                        fails.append(f"{name} 0x{cols}: {tuple(y.shape)} rows")
                    if x.grad is not None and x.grad.shape != x.shape:
                        fails.append(f"{name} 0x{cols}: grad shape {tuple(x.grad.shape)}")
                symm.barrier()

        # all_to_all where one rank routes no tokens (MoE): rank 0 has 0 rows and sends none;
        # the others send one row to each rank
        cols = 4
        rows = 0 if rank == 0 else P
        x = (torch.arange(rows * cols, dtype=torch.float32) + 100 * rank).view(rows, cols).to(dtype)
        x.requires_grad_(True)
        ins = [0] * P if rank == 0 else [1] * P
        outs = [0] + [1] * (P - 1)
        y = _check(fails, f"all_to_all 0-row rank0 {dtype}", lambda: F.all_to_all(x, outs, ins))
        if y is not None:
            want = torch.stack([(torch.arange(cols, dtype=torch.float32) + rank * cols + 100 * j)
                                for j in range(1, P)]).to(dtype) if P > 1 else torch.zeros(0, cols, dtype=dtype)
            _eq(fails, f"all_to_all 0-row rank0 {dtype} values", y.detach(), want)
            y2 = _check(fails, f"all_to_all 0-row rank0 backward {dtype}", lambda: (y.float() * 3).sum().backward())
            if y2 is None and x.grad is not None:
                _eq(fails, f"all_to_all 0-row rank0 grad {dtype}", x.grad, torch.full((rows, cols), 3.0).to(dtype))
        symm.barrier()

        # send/recv of 0 rows, differentiable
        if P >= 2 and rank < 2:
            if rank == 0:
                x = torch.zeros(0, 2, dtype=dtype, requires_grad=True)
                tok = _check(fails, f"functional.send 0 {dtype}", lambda: F.send(x, 1))
                if tok is not None:
                    _check(fails, f"functional.send 0 backward {dtype}", lambda: tok.sum().backward())
            else:
                r = _check(fails, f"functional.recv 0 {dtype}", lambda: F.recv((0, 2), dtype, 0))
                if r is not None:
                    _check(fails, f"functional.recv 0 backward {dtype}", lambda: r.float().sum().backward())
        symm.barrier()

    # MC2 with 0 rows per rank
    a, b = torch.zeros(0, 3, requires_grad=True), torch.ones(3, 2, requires_grad=True)
    out = _check(fails, "all_gather_matmul 0 rows", lambda: F.all_gather_matmul(a, b))
    if out is not None:
        _check(fails, "all_gather_matmul 0 rows backward", lambda: out[1].sum().backward())
    symm.barrier()
    a2 = torch.zeros(0, 3, requires_grad=True)
    out = _check(fails, "matmul_reduce_scatter 0 rows", lambda: F.matmul_reduce_scatter(a2, b))
    if out is not None:
        _check(fails, "matmul_reduce_scatter 0 rows backward", lambda: out.sum().backward())
    symm.barrier()
    return {"failures": fails}


def released(rank: int, world: int, args) -> dict:
    """A tensor after symm.free raises StaleTensorError on every use (and the group stays usable)."""
    symm.init()
    fails: List[str] = []
    t = symm.empty(16, torch.float32)
    t.fill_(1.0)
    symm.shmem_allreduce(t)
    symm.shmem_allreduce(t)  # a cached launch exists
    symm.free(t)
    plain = torch.ones(4)
    for what, fn in (
        ("allreduce", lambda: symm.shmem_allreduce(t)),
        ("allgather input", lambda: symm.shmem_allgather(torch.empty(0), t)),
        ("allgather output", lambda: symm.shmem_allgather(t, torch.empty(0))),
        ("reduce_scatter", lambda: symm.shmem_reduce_scatter(t, torch.empty(0))),
        ("broadcast", lambda: symm.shmem_broadcast(t, 0)),
        ("alltoall receive", lambda: symm.shmem_alltoall([torch.empty(0)] * world, t, [0] * world)),
        ("alltoall send", lambda: symm.shmem_alltoall([t] * world, torch.empty(0), [0] * world)),
        ("functional.all_reduce", lambda: F.all_reduce(t, backward="adjoint")),
        ("functional.all_gather", lambda: F.all_gather(t)),
        ("shmem_put target", lambda: symm.shmem_put(t, 0, plain, 0, 0, 0)),
        ("shmem_get src", lambda: symm.shmem_get(plain, 0, t, 0, 0, 0)),
        ("free again", lambda: symm.free(t)),
    ):
        symm.barrier()  # a failure aborts the group: nobody may still be in the previous call
        try:
            fn()
            fails.append(f"{what}: a released tensor was accepted")
        except symm.StaleTensorError as e:
            if "symm.free" not in str(e):
                fails.append(f"{what}: unclear message {e}")
        except Exception as e:  # noqa: BLE001
            fails.append(f"{what}: {type(e).__name__}: {e}")
    symm.barrier()
    # an ordinary empty tensor is still fine, and the group still works
    try:
        symm.shmem_allreduce(torch.empty(0))
        x = torch.full((8,), float(rank + 1))
        symm.shmem_allreduce(x)
        if not torch.equal(x, torch.full((8,), float(sum(range(1, world + 1))))):
            fails.append(f"allreduce after the refusals: {x.tolist()}")
    except Exception as e:  # noqa: BLE001
        fails.append(f"after the refusals: {type(e).__name__}: {e}")
    return {"failures": fails}


def one_sided_first(rank: int, world: int, args) -> dict:
    """A one-sided op on a group not set up yet raises at once, naming the collective call that
    must come first; WORLD is set up by init."""
    symm.init()
    fails: List[str] = []
    sig = symm.empty(4, torch.int32)
    sig.zero_()
    buf = symm.empty(4, torch.float32)
    sub = dist.new_group([0, 1])
    if rank in (0, 1):
        for what, fn in (
            ("put", lambda: symm.shmem_put(buf, 0, torch.ones(4), 0, 4, 1 - rank, group=sub)),
            ("get", lambda: symm.shmem_get(torch.empty(4), 0, buf, 0, 4, 1 - rank, group=sub)),
            ("signal", lambda: symm.shmem_signal_op(sig, 0, 1, "set", 1 - rank, group=sub)),
            ("wait", lambda: symm.shmem_wait_for_signal(sig, 0, 1, "eq", group=sub)),
            ("put rank list", lambda: symm.shmem_put(buf, 0, torch.ones(4), 0, 4, 1 - rank, group=[0, 1])),
        ):
            t0 = time.monotonic()
            try:
                fn()
                fails.append(f"{what}: a one-sided op on a group not set up did not raise")
            except symm.GroupNotSetUpError as e:
                took = time.monotonic() - t0
                if took > 1.0:
                    fails.append(f"{what}: took {took:.2f} s")
                for w in ("not set up", "symm.barrier(group)", "collective"):
                    if w not in str(e):
                        fails.append(f"{what}: message lacks {w!r}: {e}")
            except Exception as e:  # noqa: BLE001
                fails.append(f"{what}: {type(e).__name__}: {e}")
        # after the documented collective call they work
        symm.barrier(sub)
        symm.shmem_put(buf, 0, torch.full((4,), float(rank)), 0, 4, 1 - rank, group=sub)
        symm.barrier(sub)
        if not torch.equal(buf, torch.full((4,), float(1 - rank))):
            fails.append(f"put after set-up: {buf.tolist()}")
    # WORLD needs nothing beyond init
    t0 = time.monotonic()
    symm.shmem_signal_op(sig, 1, 7, "set", (rank + 1) % world)
    symm.shmem_wait_for_signal(sig, 1, 7, "eq", timeout_ms=20000)
    if time.monotonic() - t0 > 20:
        fails.append("WORLD signal took too long")
    symm.barrier()
    return {"failures": fails}
