"""Scenarios: the MC2 matmul engines (torch-backed and built-in), forward and autograd."""

from __future__ import annotations

from typing import Any, List

import torch

import symsched as symm
import symsched.functional as F
import symsched.mc2 as mc2
from symsched.core import knobs
from symsched.core import state as _state
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
    if mc2.matmul_engine() != "torch" or _state.native().matmul_engine() not in ("python", "python+blas"):
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
    # peers' blocks, each as soon as it is there. The pull form (private `g`) reads peers
    # rank+1, rank+2, ... straight into the caller's `g` and multiplies there, writing the
    # caller's `c` in place; the push form (symmetric `g`) multiplies blocks rank-1, rank-2, ...
    # in arrival order.
    rec = _Recorder()
    _state.native().set_matmul_engine(rec)
    a = data(40 + rank, m * k, torch.float32).view(m, k)
    b = data(41, k * n, torch.float32).view(k, n)
    for kind in ("ordinary", "symmetric"):
        if kind == "symmetric":
            g, c = symm.empty((world * m, k), torch.float32), torch.empty(world * m, n)
            symm.barrier()
        else:
            g, c = torch.empty(world * m, k), torch.empty(world * m, n)
        rec.calls.clear()
        symm.fused_all_gather_matmul(a, b, c, g)
        if len(rec.calls) != world:
            fails.append(f"{kind} all_gather_matmul made {len(rec.calls)} engine calls, expected {world}")
            continue
        sign = 1 if kind == "ordinary" else -1
        blocks = [rank] + [(rank + world + sign * i) % world for i in range(1, world)]
        g_base = g.data_ptr() if kind == "ordinary" else rec.calls[1][1] - blocks[1] * m * k * 4 if world > 1 else 0
        c_base = c.data_ptr() if kind == "ordinary" else rec.calls[0][0] - rank * m * n * 4
        for (cc, aa, _bb, mm, kk, nn), s in zip(rec.calls, blocks):
            if (mm, kk, nn) != (m, k, n) or cc != c_base + s * m * n * 4:
                fails.append(f"{kind}: engine call {(cc, aa, mm, kk, nn)} is not block {s} of c")
            if s != rank and aa != g_base + s * m * k * 4:
                fails.append(f"{kind}: engine call reads {aa}, not block {s} of gather_out")
        if not torch.equal(g, torch.cat([data(40 + r, m * k, torch.float32).view(m, k) for r in range(world)])):
            fails.append(f"{kind}: gather_out differs")
        if kind == "symmetric":
            symm.free(g)
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
    symm.barrier()  # nobody is still in an earlier call: the failure aborts the group (docs/reliability.md)
    try:
        symm.fused_all_gather_matmul(a, b, torch.empty(world * 2, 4), torch.empty(world * 2, 3))
        fails.append("a failing engine did not raise")
    except symm.SymschedError as e:
        if "kaboom" not in str(e) or "matmul engine" not in str(e):
            fails.append(f"engine error not reported clearly: {e}")
    mc2.set_matmul_engine("builtin")
    return {"failures": fails}


def schedule_choice_and_cache(rank: int, world: int, args) -> dict:
    """A private ``gather_out`` runs ``allgather_matmul_pull``, a symmetric one the push form,
    and matmul_reduce_scatter its push form; ``SYMSCHED_MC2_AG_PULL=0`` / ``SYMSCHED_MC2_RS_PULL=1``
    flip the all-gather's private case to push and the reduce-scatter to pull, with the same
    values. Repeated calls take the cached launch; a changed shape with the same
    element count does not. The torch engine calls torch's BLAS directly for float32/float64
    unless ``SYMSCHED_MATMUL_BLAS=0``, with torch.mm's values."""
    import os

    from symsched.core import launch as _launch
    from _common import spy_schedules

    symm.init()
    fails: List[str] = []
    m, k, n = 6, 40, 9
    seen: List[str] = []
    restore = spy_schedules(seen)
    runs: List[str] = []
    full = _launch.run

    def counting_run(op_name, info, schedule, *a, **kw):  # type: ignore[no-untyped-def]
        runs.append(schedule)
        return full(op_name, info, schedule, *a, **kw)

    _launch.run = counting_run
    try:
        for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12), (torch.bfloat16, 8e-3)):
            a = data(200 + rank, m * k, dtype).view(m, k)
            b = data(201, k * n, dtype).view(k, n)
            x1 = data(202 + rank, world * m * k, dtype).view(world * m, k)
            results = {}
            for pull in ("1", "0"):  # "0": both knobs flipped
                if pull == "0":
                    os.environ[knobs.MC2_AG_PULL.name], os.environ[knobs.MC2_RS_PULL.name] = "0", "1"
                for kind in ("ordinary", "symmetric"):
                    if kind == "symmetric":
                        g = symm.empty((world * m, k), dtype)
                        symm.barrier()
                    else:
                        g = torch.empty(world * m, k, dtype=dtype)
                    c = torch.empty(world * m, n, dtype=dtype)
                    seen.clear()
                    runs.clear()
                    for _ in range(3):
                        symm.fused_all_gather_matmul(a, b, c, g)
                    want = "allgather_matmul_pull" if pull == "1" and kind == "ordinary" else "allgather_matmul"
                    if seen != [want] * 3 or len(runs) != 1:
                        fails.append(f"{dtype} pull={pull} {kind}: schedules {seen}, full-path runs {runs}")
                    results[(pull, kind)] = (g.clone(), c.clone())
                    if kind == "symmetric":
                        symm.free(g)
                seen.clear()
                runs.clear()
                outs = [symm.fused_matmul_reduce_scatter(x1, b) for _ in range(3)]
                want = "matmul_reduce_scatter" if pull == "1" else "matmul_reduce_scatter_pull"
                if seen != [want] * 3 or len(runs) != 1:
                    fails.append(f"{dtype} pull={pull} matmul_reduce_scatter: schedules {seen}, full-path runs {runs}")
                if outs[0].data_ptr() == outs[1].data_ptr() or not all(torch.equal(o, outs[0]) for o in outs):
                    fails.append(f"{dtype} pull={pull}: cached calls must return new, equal outputs")
                results[(pull, "rs")] = outs[0]
            os.environ.pop(knobs.MC2_AG_PULL.name)
            os.environ.pop(knobs.MC2_RS_PULL.name)
            g0, c0 = results[("1", "ordinary")]
            for key, (g1, c1) in ((k_, v_) for k_, v_ in results.items() if k_[1] != "rs"):
                if not torch.equal(g1, g0) or not torch.equal(c1, c0):
                    fails.append(f"{dtype} {key}: all_gather_matmul differs from the pull form's")
            sep_g = torch.empty(world * m, k, dtype=dtype)
            symm.shmem_allgather(sep_g, a.clone())
            _close(c0, sep_g @ b, tol, f"{dtype} all_gather_matmul vs separate", fails)
            if not torch.equal(results[("1", "rs")], results[("0", "rs")]):
                fails.append(f"{dtype}: matmul_reduce_scatter pull and push differ")
            sep = torch.empty(m, n, dtype=dtype)
            symm.shmem_reduce_scatter(sep, (x1 @ b).contiguous())
            _close(results[("1", "rs")], sep, tol, f"{dtype} matmul_reduce_scatter vs separate", fails)

        # a cached key is per shape: the same element count in another shape is still refused
        a = data(210 + rank, m * k, torch.float32).view(m, k)
        b = data(211, k * n, torch.float32).view(k, n)
        g, c = torch.empty(world * m, k), torch.empty(world * m, n)
        symm.fused_all_gather_matmul(a, b, c, g)
        symm.barrier()  # nobody is still in the call above when this one aborts the group
        try:
            symm.fused_all_gather_matmul(a, b, torch.empty(n, world * m), g)
            fails.append("a `c` of the wrong shape (same element count) was accepted after a cached call")
        except symm.SymschedArgumentError as e:
            if "`c`" not in str(e):
                fails.append(f"unclear error {e}")
    finally:
        restore()
        _launch.run = full
        os.environ.pop(knobs.MC2_AG_PULL.name, None)
        os.environ.pop(knobs.MC2_RS_PULL.name, None)

    # the direct BLAS path and the Python engine agree with torch.mm
    for blas in ("0", "1"):
        os.environ[mc2.BLAS_ENV] = blas
        mc2.set_matmul_engine("torch")
        name = _state.native().matmul_engine()
        if blas == "0" and name != "python":
            fails.append(f"{mc2.BLAS_ENV}=0 left engine {name}")
        if blas == "1" and torch.backends.mkl.is_available() and name != "python+blas":
            fails.append(f"torch's MKL GEMM was not found: engine {name}")
        for dtype in (torch.float32, torch.float64):
            a = data(220 + rank, m * k, dtype).view(m, k)
            b = data(221, k * n, dtype).view(k, n)
            g, c = torch.empty(world * m, k, dtype=dtype), torch.empty(world * m, n, dtype=dtype)
            symm.fused_all_gather_matmul(a, b, c, g)
            _close(c, g @ b, 1e-5 if dtype == torch.float32 else 1e-12, f"blas={blas} {dtype}", fails)
    os.environ.pop(mc2.BLAS_ENV, None)
    try:
        _state.native().set_matmul_engine(mc2.TorchMatmul(), "/nonexistent/libnotloaded.so")
        fails.append("a BLAS library that is not loaded was accepted")
    except ValueError as e:
        if "not a library this process has loaded" not in str(e):
            fails.append(f"unclear error {e}")
    mc2.set_matmul_engine("torch")
    return {"failures": fails}
