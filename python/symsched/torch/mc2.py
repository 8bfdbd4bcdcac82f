"""MC2 for PyTorch: :mod:`symsched.core.mc2` (the fused ops, the engine choice) and its torch
engine, :class:`TorchMatmul`, which runs ``torch.mm`` on zero-copy views of the operands.

float32/float64 steps whose operands are aligned call the ``sgemm_``/``dgemm_`` of the MKL that
this torch links (the GEMM ``torch.mm`` itself runs for those types on the CPU) straight from
the executor, without the GIL (:func:`_torch_blas`). ``SYMSCHED_MATMUL_BLAS=0`` or a torch
without MKL sends them through :class:`TorchMatmul` like every other step (16-bit floats, fp8,
mixed types): the step re-acquires the GIL for the view lookup and the ``torch.mm`` call, which
drops it again while it computes.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, Optional, Tuple

import torch

from ..core import knobs, state
from ..core.errors import SymschedArgumentError
from ..core.mc2 import (ENGINE_ENV, fused_all_gather_matmul, fused_matmul_reduce_scatter, matmul_engine,
                        set_matmul_engine)

__all__ = ["TorchMatmul", "ENGINES", "ENGINE_ENV", "BLAS_ENV", "set_matmul_engine", "matmul_engine",
           "fused_all_gather_matmul", "fused_matmul_reduce_scatter"]

#: The engines of a PyTorch process.
ENGINES = ("torch", "builtin")

#: ``SYMSCHED_MATMUL_BLAS=0`` sends float32/float64 steps through :class:`TorchMatmul` too
#: instead of calling torch's BLAS directly (read by :func:`set_matmul_engine`).
BLAS_ENV = knobs.MATMUL_BLAS.name

#: The runtime's dtype names (``DType::name``) as torch dtypes.
_DTYPES = {
    "f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
    "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2,
}

#: Operand views kept per (addresses, sizes, dtypes): a repeated launch reuses its staging area,
#: so the same few keys recur; a sweep over sizes drops the cache when it grows past this.
_MAX_VIEWS = 256

_FLOAT_MM = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


class TorchMatmul:
    """The torch-backed matmul engine: ``c = a @ b`` with ``torch.mm`` on views of this rank's heap.

    Called by the executor with the addresses of ``c``, ``a``, ``b`` (row-major m×n, m×k, k×n)
    and their dtype names: ranges of this rank's heap (symmetric tensors, staging, scratch) or, for
    roles no peer touches, the caller's own tensors, which the executor uses in place. Same-dtype
    operands of float32/float64/float16/bfloat16 go straight to ``torch.mm(out=)``; other
    combinations (fp8, mixed) are widened to float32 (float64 if any is float64) and the product
    is rounded once into ``c``.
    """

    def __init__(self) -> None:
        self._rt: Any = None
        self._heap: Optional[torch.Tensor] = None
        self._base = 0
        self._typed: Dict[torch.dtype, torch.Tensor] = {}
        self._views: Dict[Tuple[Any, ...], Tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]] = {}

    def _bind(self) -> None:
        rt = state.runtime()
        if rt is self._rt:
            return
        self._heap = torch.frombuffer(state.native().heap_block(rt), dtype=torch.uint8)
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
