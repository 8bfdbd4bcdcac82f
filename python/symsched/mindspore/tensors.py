"""``mindspore.Tensor`` ↔ memory spans: the only place that touches tensor internals.

Heap span → tensor: ``Tensor.from_numpy`` over ``numpy.frombuffer`` of the heap block shares
the memory both ways (``Tensor(array)`` and ``mindspore.tensor`` copy). MindSpore's own numpy
``bfloat16`` only exists with numpy 1.x and has no CPU reduce/matmul kernels, so bf16 spans are
made as a uint16 array viewed as ``mindspore.bfloat16`` (zero-copy). fp8 types have no CPU
kernels at all in 2.10 (not even Cast or printing a viewed tensor), so fp8 spans come back as
raw ``uint8`` bytes.

Tensor → span: ``Tensor.data_ptr()`` is the address and, measured on 2.10 CPU, also drains
MindSpore's asynchronous op queue (a pending 1024² matmul that does not involve the tensor is
waited for), so reading it before a launch orders symsched after every op already issued —
both the ops producing the tensor and those still reading it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np

from .errors import SymschedArgumentError, SymschedTypeError
from .errors import WrongFrameworkError

#: Data dtypes of the collectives, with the runtime's names.
DATA_DTYPES: Dict[Any, str] = {
    ms.float32: "f32",
    ms.float64: "f64",
    ms.float16: "f16",
    ms.bfloat16: "bf16",
    ms.int32: "i32",
    ms.int64: "i64",
    ms.uint8: "u8",
}

#: Wire formats for low-precision transport, with the runtime's names.
WIRE_DTYPES: Dict[Any, str] = {
    ms.float16: "f16",
    ms.bfloat16: "bf16",
    ms.float8_e4m3fn: "f8e4m3",
    ms.float8_e5m2: "f8e5m2",
}

FLOAT_DTYPES = (ms.float32, ms.float64, ms.float16, ms.bfloat16)

#: How a span of each dtype is laid out in numpy: (numpy dtype, MindSpore view dtype or None).
_NUMPY: Dict[Any, Tuple[Any, Any]] = {
    ms.float32: (np.float32, None),
    ms.float64: (np.float64, None),
    ms.float16: (np.float16, None),
    ms.bfloat16: (np.uint16, ms.bfloat16),
    ms.int32: (np.int32, None),
    ms.int64: (np.int64, None),
    ms.uint8: (np.uint8, None),
    ms.int8: (np.int8, None),
    ms.bool_: (np.bool_, None),
    # storage only: no CPU kernel reads them, so they are handed out as their bytes
    ms.float8_e4m3fn: (np.uint8, None),
    ms.float8_e5m2: (np.uint8, None),
}

ITEMSIZE: Dict[Any, int] = {d: np.dtype(n).itemsize for d, (n, _) in _NUMPY.items()}

#: numpy dtype -> MindSpore dtype, for the arrays a graph-mode kernel receives (MindSpore hands a
#: pyfunc kernel numpy arrays of the tensors' own dtypes; bfloat16 is not among them, see
#: :mod:`symsched.mindspore.graph`).
FROM_NUMPY: Dict[Any, Any] = {np.dtype(n): d for d, (n, view) in _NUMPY.items()
                              if view is None and d in DATA_DTYPES}


def dtype_label(dtype: Any) -> str:
    """``float32``, ``bfloat16`` … as MindSpore prints them in lower case (for messages)."""
    return str(dtype).lower()


def _allowed(dtypes: Sequence[Any]) -> str:
    return ", ".join(dtype_label(d) for d in dtypes)


def from_buffer(buffer: Any, dtype: Any, shape: Sequence[int], offset: int = 0) -> ms.Tensor:
    """A tensor of ``dtype``/``shape`` over ``buffer`` (anything exporting writable bytes, e.g. a
    heap block) from byte ``offset``, sharing its memory. fp8 dtypes give a uint8 tensor of the
    raw bytes (same shape)."""
    np_dtype, view = _NUMPY[dtype]
    count = math.prod(shape)
    arr = np.frombuffer(buffer, dtype=np_dtype, count=count, offset=offset).reshape(tuple(shape))
    t = ms.Tensor.from_numpy(arr)
    return t.view(view) if view is not None else t


def release(t: ms.Tensor) -> None:
    """Point ``t`` at an empty storage of its dtype so it no longer maps (nor pins) the memory it
    viewed (the numpy array, and through it the heap block's buffer export, is dropped)."""
    t.set_(from_buffer(bytearray(8), t.dtype, (0,)))


@dataclass(frozen=True)
class Span:
    """Where a tensor's elements are: address, bytes, dtype (MindSpore and runtime name), shape."""

    ptr: int
    nbytes: int
    dtype: Any
    name: str
    shape: Tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def _foreign(t: Any) -> Optional[str]:
    """The framework a non-MindSpore tensor comes from, judged by its type's module, without
    importing that framework."""
    mod = type(t).__module__ or ""
    root = mod.split(".", 1)[0]
    if root == "torch":
        return "torch"
    if root in ("numpy", "jax", "jaxlib", "tensorflow", "cupy"):
        return root
    return None


def check_tensor(t: Any, arg: str) -> ms.Tensor:
    """``t`` must be a ``mindspore.Tensor``; a tensor of another framework gets its own error."""
    if isinstance(t, ms.Tensor):
        return t
    other = _foreign(t)
    if other == "torch":
        raise WrongFrameworkError(
            f"`{arg}` is a torch.Tensor, but this is symsched's MindSpore API, which takes mindspore.Tensor "
            f"(use `import symsched` with torch tensors, or convert with mindspore.Tensor(t.numpy()))")
    if other is not None:
        raise WrongFrameworkError(f"`{arg}` is a {other} array; the MindSpore API takes mindspore.Tensor")
    raise SymschedTypeError(f"`{arg}` must be a mindspore.Tensor, got {type(t).__name__}")


def span_of(t: Any, arg: str, dtypes: Sequence[Any] = tuple(DATA_DTYPES)) -> Span:
    """The span of a contiguous tensor whose dtype is one of ``dtypes``; typed errors otherwise.

    Reads ``data_ptr()`` last: it waits for MindSpore's queue (see the module docstring)."""
    t = check_tensor(t, arg)
    dtype = t.dtype
    if dtype not in dtypes:
        raise SymschedArgumentError(f"`{arg}` has dtype {dtype_label(dtype)}; expected one of: {_allowed(dtypes)}")
    if not t.is_contiguous():
        raise SymschedArgumentError(f"`{arg}` must be contiguous (call .contiguous() first)")
    shape = tuple(t.shape)
    nbytes = math.prod(shape) * ITEMSIZE[dtype]
    return Span(ptr=int(t.data_ptr()), nbytes=nbytes, dtype=dtype, name=DATA_DTYPES.get(dtype, ""), shape=shape)

