"""MC2 fused communication + compute, with hyper-parallel's signatures.

The schedules ``allgather_matmul`` / ``matmul_reduce_scatter`` multiply each block as soon as it
arrives (resp. push each partial product as soon as it is computed). hyper-parallel's
``signal`` and ``symm_tensor`` workspaces are accepted for source compatibility but not needed:
each plan owns its signal slots and scratch. ``block_size`` is validated and otherwise unused
(the schedule's chunking is one block per rank).

**Matmul engine.** The executor hands every ``compute c = matmul(a, b)`` step of a plan to a
pluggable engine, on the launching thread, in the schedule's order (so each block is still
multiplied as soon as its wait completes). By default this module registers :class:`TorchMatmul`,
which runs ``torch.mm(a, b, out=c)`` on zero-copy views of the operands — the
framework's own GEMM, as real MC2 fuses communication with the framework's matmul kernel. The
executor's built-in kernel (``engine='builtin'``) is the deterministic reference that the Ascend C
lowering reproduces bit for bit; its rounding contract (every product and partial sum rounded,
no fused multiply-add) and portable loops make it several times slower than torch's.
``SYMSCHED_MATMUL_ENGINE=builtin|torch`` (read at import) or :func:`set_matmul_engine` chooses;
the choice is per process, like torch's own kernel settings.

GIL: launches run with the GIL released. float32/float64 steps whose operands are aligned call
the ``sgemm_``/``dgemm_`` of the MKL that this torch links (the GEMM ``torch.mm`` itself runs for
those types on the CPU) straight from the executor, without the GIL: a Python round trip costs
several µs per step and a launch makes P of them. ``SYMSCHED_MATMUL_BLAS=0`` (read by
:func:`set_matmul_engine`) or a torch without MKL sends them through :class:`TorchMatmul` like
every other step (16-bit floats, fp8, mixed types): the step re-acquires the GIL for the view
lookup and the ``torch.mm`` call, which drops it again while it computes. A Python exception in
the engine aborts the launch on this rank (the peers then time out as for any failed step), so
the engine validates everything it can before computing.

Schedules: a private ``gather_out`` runs ``allgather_matmul_pull`` (peers' blocks are read
straight into it, no staging barrier or copy-out), a symmetric one ``allgather_matmul`` (peers
put into it in place); ``SYMSCHED_MC2_AG_PULL=0`` runs the push form for both. Every rank of a
group must pass the same kind of ``gather_out`` (symmetric or not).
``fused_matmul_reduce_scatter`` runs ``matmul_reduce_scatter`` (push);
``SYMSCHED_MC2_RS_PULL=1`` runs ``matmul_reduce_scatter_pull``, whose reduce reads peers'
partial products where they were computed (one copy fewer, one more signal round: slower in
wall time on the loaded 2-core host, ``docs/performance.md``). Repeated calls with the same
shapes take a cached launch.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, Optional, Tuple

import torch

from . import _coll
from . import _state
from . import _validate as v
from . import functional as F
from ._enums import ReduceOpLike
from .core import knobs
from .core.errors import SymschedArgumentError, SymschedConfigError, UnavailableError


#: Environment variable choosing the matmul engine at import: ``torch`` (default) or ``builtin``.
ENGINE_ENV = knobs.MATMUL_ENGINE.name
ENGINES = ("torch", "builtin")

#: The runtime's dtype names (``DType::name``) as torch dtypes.
_DTYPES = {
    "f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
    "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2,
}

#: Operand views kept per (addresses, sizes, dtypes): a repeated launch reuses its staging area,
#: so the same few keys recur; a sweep over sizes drops the cache when it grows past this.
_MAX_VIEWS = 256


class TorchMatmul:
    """The torch-backed matmul engine: ``c = a @ b`` with ``torch.mm`` on views of this rank's heap.

    Called by the executor with the addresses of ``c``, ``a``, ``b`` (row-major m×n, m×k, k×n)
    and their dtype names: ranges of this rank's heap (symmetric tensors, staging, scratch) or, for
    roles no peer touches, the caller's own tensors, which the executor uses in place. Same-dtype operands of float32/float64/float16/bfloat16 go
    straight to ``torch.mm(out=)``; other combinations (fp8, mixed) are widened to float32
    (float64 if any is float64) and the product is rounded once into ``c``.
    """

    def __init__(self) -> None:
        self._rt: Any = None
        self._heap: Optional[torch.Tensor] = None
        self._base = 0
        self._typed: Dict[torch.dtype, torch.Tensor] = {}
        self._views: Dict[Tuple[Any, ...], Tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]] = {}

    def _bind(self) -> None:
        rt = _state.runtime()
        if rt is self._rt:
            return
        self._heap = torch.frombuffer(_state.native().heap_block(rt), dtype=torch.uint8)
        self._base, self._rt = rt.heap_base, rt
        self._typed.clear()
        self._views.clear()

    def _view(self, addr: int, name: str, rows: int, cols: int) -> torch.Tensor:
        heap = self._heap
        assert heap is not None
        dtype = _DTYPES.get(name)
        if dtype is None:
            raise SymschedArgumentError(f"matmul engine: unsupported operand dtype `{name}`")
        size = dtype.itemsize
        off, nbytes = addr - self._base, rows * cols * size
        if nbytes == 0:
            return torch.empty((rows, cols), dtype=dtype)
        if off < 0 or off + nbytes > heap.numel():
            # A role no peer touches, bound from the caller's own memory: the executor uses it
            # in place and guarantees the range is live for the launch, so a view over the raw
            # address (not owning it) is valid whenever the executor passes that address again.
            raw = (ctypes.c_byte * nbytes).from_address(addr)
            return torch.frombuffer(raw, dtype=dtype).view(rows, cols)
        if off % size:
            # Staging areas and symmetric tensors are aligned, so this is never expected; a
            # byte-level view keeps it correct all the same (no cached typed view possible).
            return heap[off:off + nbytes].view(dtype).view(rows, cols)
        typed = self._typed.get(dtype)
        if typed is None:
            typed = heap[: heap.numel() // size * size].view(dtype)
            self._typed[dtype] = typed
        return typed.as_strided((rows, cols), (cols, 1), off // size)

    def __call__(self, c: int, a: int, b: int, m: int, k: int, n: int, dc: str, da: str, db: str) -> None:
        key = (c, a, b, m, k, n, dc, da, db)
        hit = self._views.get(key)
        if hit is None:
            self._bind()
            hit = self._views.get(key)
        if hit is None:
            va, vb, vc = self._view(a, da, m, k), self._view(b, db, k, n), self._view(c, dc, m, n)
            direct = da == db == dc and vc.dtype in _FLOAT_MM and vc.is_contiguous()
            hit = (va, vb, vc, direct)
            if len(self._views) >= _MAX_VIEWS:
                self._views.clear()
            self._views[key] = hit
        va, vb, vc, direct = hit
        if direct:
            torch.mm(va, vb, out=vc)
        else:
            acc = torch.float64 if torch.float64 in (va.dtype, vb.dtype, vc.dtype) else torch.float32
            vc.copy_(torch.mm(va.to(acc), vb.to(acc)))


_FLOAT_MM = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_engine_name = "builtin"

#: ``SYMSCHED_MATMUL_BLAS=0`` sends float32/float64 steps through :class:`TorchMatmul` too
#: instead of calling torch's BLAS directly (read by :func:`set_matmul_engine`).
BLAS_ENV = knobs.MATMUL_BLAS.name


def _torch_blas() -> Optional[str]:
    """The loaded torch library holding the MKL ``sgemm_`` / ``dgemm_`` that ``torch.mm`` calls
    for float32 / float64 CPU matrices (None when torch has no MKL or ``SYMSCHED_MATMUL_BLAS=0``):
    the executor then runs those steps on the same GEMM without taking the GIL (see
    ``python/src/mc2.rs``)."""
    if not knobs.MATMUL_BLAS.get() or not torch.backends.mkl.is_available():
        return None
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libtorch_cpu.so", "libtorch.so"):
        path = os.path.join(lib_dir, name)
        if os.path.exists(path):
            return path
    return None


def set_matmul_engine(engine: str) -> None:
    """Choose the kernel of MC2 matmul steps for this process: ``'torch'`` (:class:`TorchMatmul`,
    the default) or ``'builtin'`` (the executor's deterministic reference kernel, which the Ascend C
    lowering reproduces bit for bit). Every rank should choose the same (results differ by
    rounding)."""
    global _engine_name
    if engine not in ENGINES:
        raise SymschedArgumentError(f"`engine` must be one of {list(ENGINES)}, got {engine!r}")
    if engine == "torch":
        native, lib = _state.native(), _torch_blas()
        try:
            native.set_matmul_engine(TorchMatmul(), lib)
        except ValueError:  # the library is not loaded under that name: every step via Python
            native.set_matmul_engine(TorchMatmul())
    else:
        _state.native().set_matmul_engine(None)
    _engine_name = engine


def matmul_engine() -> str:
    """The current MC2 matmul engine: ``'torch'`` or ``'builtin'``."""
    return _engine_name


def _engine_from_env() -> None:
    """Apply ``SYMSCHED_MATMUL_ENGINE`` at import when it is valid; a bad value is left to
    :func:`symsched.init`, which validates every knob and reports it."""
    try:
        engine = knobs.MATMUL_ENGINE.get() or "torch"
    except SymschedConfigError:
        engine = "torch"
    if engine not in ENGINES:
        engine = "torch"
    try:
        set_matmul_engine(engine)
    except UnavailableError:
        pass  # no native module: nothing runs plans, and every op reports the reason itself


_engine_from_env()


def _grad(*ts: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def fused_all_gather_matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, gather_out: torch.Tensor,
                            signal: Optional[torch.Tensor] = None, block_size: Optional[int] = None,
                            group: Any = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``gather_out`` ← allgather(a) (P·m×k); ``c`` ← gather_out @ b (P·m×n). Returns both."""
    if signal is not None:
        v.tensor(signal, "signal", contiguous=False)
    if block_size is not None and v.integer(block_size, "block_size", minimum=1) > max(a.shape[0], 1):
        raise SymschedArgumentError(f"`block_size` must be ≤ the rows of `a` ({a.shape[0]}), got {block_size}")
    if _grad(a, b):
        g, cc = F.all_gather_matmul(a, b, group)
        gather_out.copy_(g)
        c.copy_(cc)
        return gather_out, c
    _coll.allgather_matmul(a, b, gather_out, c, group)
    return gather_out, c


def fused_matmul_reduce_scatter(x1: torch.Tensor, x2: torch.Tensor, symm_tensor: Optional[torch.Tensor] = None,
                                signal: Optional[torch.Tensor] = None, reduce_op: ReduceOpLike = "sum",
                                group: Any = None) -> torch.Tensor:
    """Returns block ``rank`` (m/P × n) of reduce_scatter(x1 @ x2); x1 is m×k with P | m."""
    if symm_tensor is not None:
        v.tensor(symm_tensor, "symm_tensor", contiguous=False)
    if signal is not None:
        v.tensor(signal, "signal", contiguous=False)
    if _grad(x1, x2):
        return F.matmul_reduce_scatter(x1, x2, reduce_op, group)
    return _coll.matmul_reduce_scatter(x1, x2, None, reduce_op, group)
