"""Scenarios: the MC2 matmul engines (torch-backed and built-in), forward and autograd."""

from __future__ import annotations

from typing import Any, List

import torch

import symsched as symm
import symsched.functional as F
import symsched.mc2 as mc2
from symsched import _state
from _common import data

#: Tolerances of the issue's precision table (bf16 has 8 bits of mantissa, so 8× the fp16 one,
#: as in ``scen_misc.mc2_precision``).
TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 1e-3, torch.bfloat16: 8e-3}


class _Recorder:
    """Wraps the torch engine and records every call's (c, a, b, m, k, n)."""

    def __init__(self) -> None:
        self.inner = mc2.TorchMatmul()
        self.calls: List[tuple] = []

    def __call__(self, *args: Any) -> None:
        self.calls.append(args[:6])
        self.inner(*args)


def _close(x: torch.Tensor, y: torch.Tensor, tol: float, what: str, fails: List[str]) -> None:
    if x.shape != y.shape or not torch.allclose(x.double(), y.double(), rtol=tol, atol=tol):
        err = float((x.double() - y.double()).abs().max()) if x.shape == y.shape else "shape"
        fails.append(f"{what}: off by {err}")


def engine_forward(rank: int, world: int, args) -> dict:
    """Both engines vs separate collective + torch matmul, every float dtype, ordinary and
    symmetric buffers; torch vs builtin; the torch engine's call order follows the schedule."""
    symm.init()
    fails: List[str] = []
    if mc2.matmul_engine() != "torch" or _state.native().matmul_engine() != "python":
        fails.append(f"default engine {mc2.matmul_engine()} / {_state.native().matmul_engine()}")
    m, k, n = 5, 33, 7
    results = {}
    for engine in ("torch", "builtin"):
        mc2.set_matmul_engine(engine)
        if mc2.matmul_engine() != engine:
            fails.append(f"set_matmul_engine({engine}) reports {mc2.matmul_engine()}")
        for dtype, tol in TOL.items():
            for kind in ("ordinary", "symmetric"):
                def buf(seed: int, *shape: int) -> torch.Tensor:
                    x = data(seed, int(torch.tensor(shape).prod()), dtype).view(*shape) / 4
                    if kind == "symmetric":
                        s = symm.empty(shape, dtype)
                        s.copy_(x)
                        return s
                    return x

                a, b = buf(10 + rank, m, k), buf(20 + rank, k, n)
                g, c = buf(0, world * m, k), buf(1, world * m, n)
                x1 = buf(30 + rank, world * m, k)
                # peers put straight into a symmetric gather_out: it must be filled first
                symm.barrier()
                symm.fused_all_gather_matmul(a, b, c, g)
                g2 = torch.empty(world * m, k, dtype=dtype)
                symm.shmem_allgather(g2, a.clone())
                if not torch.equal(g, g2):
                    fails.append(f"{engine} {dtype} {kind}: gather_out differs")
                _close(c, g2 @ b, tol, f"{engine} {dtype} {kind} all_gather_matmul", fails)
                out = symm.fused_matmul_reduce_scatter(x1, b)
                sep = torch.empty(m, n, dtype=dtype)
                symm.shmem_reduce_scatter(sep, (x1 @ b).contiguous())
                _close(out, sep, tol, f"{engine} {dtype} {kind} matmul_reduce_scatter", fails)
                results[(engine, dtype, kind)] = (c.clone(), out.clone())
                if kind == "symmetric":
                    for t in (x1, c, g, b, a):
                        symm.free(t)
    for dtype, tol in TOL.items():
        for kind in ("ordinary", "symmetric"):
            for i, what in enumerate(("all_gather_matmul", "matmul_reduce_scatter")):
                _close(results[("torch", dtype, kind)][i], results[("builtin", dtype, kind)][i], tol,
                       f"torch vs builtin {dtype} {kind} {what}", fails)

    # The engine sees P steps per launch, in the schedule's order: own block first, then the
    # block of rank-1, rank-2, ... (each as soon as its wait completed).
    rec = _Recorder()
    _state.native().set_matmul_engine(rec)
    a = data(40 + rank, m * k, torch.float32).view(m, k)
    b = data(41, k * n, torch.float32).view(k, n)
    g, c = torch.empty(world * m, k), torch.empty(world * m, n)
    symm.fused_all_gather_matmul(a, b, c, g)
    if len(rec.calls) != world:
        fails.append(f"all_gather_matmul made {len(rec.calls)} engine calls, expected {world}")
    else:
        blocks = [rank] + [(rank + world - i) % world for i in range(1, world)]
        g_base = rec.calls[1][1] - blocks[1] * m * k * 4 if world > 1 else None
        c_base = rec.calls[0][0] - rank * m * n * 4
        for (cc, aa, _bb, mm, kk, nn), s in zip(rec.calls, blocks):
            if (mm, kk, nn) != (m, k, n) or cc != c_base + s * m * n * 4:
                fails.append(f"engine call {(cc, aa, mm, kk, nn)} is not block {s} of c")
            if s != rank and aa != g_base + s * m * k * 4:
                fails.append(f"engine call reads {aa}, not block {s} of gather_out")
    rec.calls.clear()
    symm.fused_matmul_reduce_scatter(torch.cat([a] * world), b)
    if len(rec.calls) != world:
        fails.append(f"matmul_reduce_scatter made {len(rec.calls)} engine calls, expected {world}")
    mc2.set_matmul_engine("torch")
    return {"failures": fails}


def engine_autograd(rank: int, world: int, args) -> dict:
    """Gradients of the functional MC2 forms with the torch engine equal the separate ops', and
    the backward's dual schedules run their matmul steps on the engine too."""
    symm.init()
    fails: List[str] = []
    rec = _Recorder()
    _state.native().set_matmul_engine(rec)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        a = data(70 + rank, 6 * 8, dtype).view(6, 8).requires_grad_()
        b = data(80 + rank, 8 * 5, dtype).view(8, 5).requires_grad_()
        wc = data(90 + rank, world * 6 * 5, dtype).view(world * 6, 5)
        g, c = F.all_gather_matmul(a, b)
        forward_calls = len(rec.calls)
        (c * wc).sum().backward()
        if forward_calls != world or len(rec.calls) <= forward_calls:
            fails.append(f"{dtype}: engine calls forward {forward_calls}, after backward {len(rec.calls)}")
        a2 = a.detach().clone().requires_grad_()
        b2 = b.detach().clone().requires_grad_()
        ((F.all_gather(a2) @ b2) * wc).sum().backward()
        _close(c.detach(), F.all_gather(a.detach()) @ b.detach(), tol, f"{dtype} all_gather_matmul value", fails)
        _close(a.grad, a2.grad, tol, f"{dtype} all_gather_matmul grad a", fails)
        _close(b.grad, b2.grad, tol, f"{dtype} all_gather_matmul grad b", fails)

        rec.calls.clear()
        am = data(110 + rank, world * 4 * 8, dtype).view(world * 4, 8).requires_grad_()
        bm = data(120 + rank, 8 * 3, dtype).view(8, 3).requires_grad_()
        wm = data(130 + rank, 4 * 3, dtype).view(4, 3)
        y = F.matmul_reduce_scatter(am, bm, "sum")
        (y * wm).sum().backward()
        if len(rec.calls) != 2 * world:
            fails.append(f"{dtype}: matmul_reduce_scatter forward+backward made {len(rec.calls)} engine calls")
        am2 = am.detach().clone().requires_grad_()
        bm2 = bm.detach().clone().requires_grad_()
        y2 = F.reduce_scatter(am2 @ bm2, "sum")
        (y2 * wm).sum().backward()
        _close(y.detach(), y2.detach(), tol, f"{dtype} matmul_reduce_scatter value", fails)
        _close(am.grad, am2.grad, tol, f"{dtype} matmul_reduce_scatter grad a", fails)
        _close(bm.grad, bm2.grad, tol, f"{dtype} matmul_reduce_scatter grad b", fails)
        rec.calls.clear()
    mc2.set_matmul_engine("torch")
    return {"failures": fails}


def engine_env_and_errors(rank: int, world: int, args) -> dict:
    """SYMSCHED_MATMUL_ENGINE=builtin is honoured; bad engine names raise; an exception in the
    engine surfaces as a runtime error naming the engine (on every rank, so nobody hangs)."""
    symm.init()
    fails: List[str] = []
    if mc2.matmul_engine() != "builtin" or _state.native().matmul_engine() != "builtin":
        fails.append(f"env engine: {mc2.matmul_engine()} / {_state.native().matmul_engine()}")
    try:
        mc2.set_matmul_engine("cuda")
        fails.append("set_matmul_engine('cuda') did not raise")
    except symm.SymschedArgumentError as e:
        if "engine" not in str(e):
            fails.append(f"unclear error {e}")

    def boom(*_: Any) -> None:
        raise ValueError("kaboom")

    _state.native().set_matmul_engine(boom)
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    try:
        symm.fused_all_gather_matmul(a, b, torch.empty(world * 2, 4), torch.empty(world * 2, 3))
        fails.append("a failing engine did not raise")
    except symm.SymschedError as e:
        if "kaboom" not in str(e) or "matmul engine" not in str(e):
            fails.append(f"engine error not reported clearly: {e}")
    mc2.set_matmul_engine("builtin")
    return {"failures": fails}
