"""The symmetric heap seen from torch: ``empty``, ``free``, ``symm_memory_stats``.

A symmetric tensor is an ordinary CPU ``torch.Tensor`` whose storage is a block of this rank's
symmetric heap segment, created zero-copy with ``torch.frombuffer`` over a native block object
that exports the heap memory through the buffer protocol and keeps the runtime (and so the
mapping) alive while any tensor refers to it.

Allocation and :func:`free` are collective over WORLD: every rank must make the same calls with
the same sizes in the same order (the runtime checks this and reports a mismatch loudly). Never
rely on garbage collection to free: :func:`free` invalidates the tensor, and any other view of
the freed block is rejected by every symsched op afterwards (``StaleTensorError``).
"""

from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple, Union

import torch

from . import _state
from ._dtypes import DATA_DTYPES, WIRE_DTYPES
from .core.errors import NotSymmetricError, StaleTensorError, SymschedArgumentError, SymschedRuntimeError, SymschedTypeError

ShapeLike = Union[int, Sequence[int], torch.Size]

_ALLOWED = dict(DATA_DTYPES)
_ALLOWED.update({d: n for d, n in WIRE_DTYPES.items() if d not in _ALLOWED})


@dataclass
class _Alloc:
    block: Any
    start: int  # address in this process
    nbytes: int
    live: bool = True


_lock = threading.Lock()
_starts: List[int] = []
_allocs: Dict[int, _Alloc] = {}
_dead = 0  # released records still kept to catch stale views (0 = nothing to check)


def _shape(shape: Any) -> Tuple[int, ...]:
    if isinstance(shape, bool):
        raise SymschedTypeError("`shape` must be an int or a sequence of ints, got bool")
    if isinstance(shape, int):
        dims: Tuple[Any, ...] = (shape,)
    elif isinstance(shape, (tuple, list, torch.Size)):
        dims = tuple(shape)
    else:
        raise SymschedTypeError(f"`shape` must be an int or a sequence of ints, got {type(shape).__name__}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise SymschedTypeError(f"`shape` must hold ints, got {dims!r}")
        if d < 0:
            raise SymschedArgumentError(f"`shape` must hold non-negative sizes, got {dims!r}")
    return dims


def empty(shape: ShapeLike, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A tensor of ``shape`` and ``dtype`` in the symmetric heap (uninitialised; collective).

    Every rank gets its own copy at the same heap offset, so peers can ``shmem_put`` into it.
    Supported dtypes: float32, float64, float16, bfloat16, int32, int64, uint8, float8_e4m3fn,
    float8_e5m2. The size comes from ``SYMMETRIC_MEMORY_HEAP_SIZE`` (bytes, default 1 GiB).
    """
    dims = _shape(shape)
    if not isinstance(dtype, torch.dtype):
        raise SymschedTypeError(f"`dtype` must be a torch.dtype, got {type(dtype).__name__}")
    if dtype not in _ALLOWED:
        allowed = ", ".join(str(d).replace("torch.", "") for d in _ALLOWED)
        raise SymschedArgumentError(f"`dtype` {dtype} is not supported; expected one of: {allowed}")
    elem = torch.empty(0, dtype=dtype).element_size()
    numel = math.prod(dims)
    nbytes = numel * elem
    rt = _state.runtime()
    try:
        # a zero-size request still takes one element so the tensor has a real, unique address
        block = rt.alloc(max(nbytes, elem))
    except Exception as exc:
        raise SymschedRuntimeError(f"symm.empty({list(dims)}, {dtype}): {exc}") from exc
    raw = torch.frombuffer(block, dtype=torch.uint8)
    t = raw[:nbytes].view(dtype).view(dims)
    start = raw.data_ptr()
    size = max(nbytes, elem)
    global _dead
    with _lock:
        # dead records inside the new block are dropped: stale views are caught until reuse
        lo = bisect.bisect_left(_starts, start)
        hi = bisect.bisect_left(_starts, start + size)
        for s in _starts[lo:hi]:
            _dead -= 0 if _allocs[s].live else 1
            del _allocs[s]
        del _starts[lo:hi]
        _starts.insert(lo, start)
        _allocs[start] = _Alloc(block=block, start=start, nbytes=size)
    return t


def _lookup(ptr: int, nbytes: int) -> "_Alloc | None":
    with _lock:
        i = bisect.bisect_right(_starts, ptr) - 1
        if i < 0:
            return None
        a = _allocs[_starts[i]]
    if a.start <= ptr and ptr + nbytes <= a.start + a.nbytes:
        return a
    return None


def is_symmetric(t: torch.Tensor) -> bool:
    """Whether ``t`` lies inside a live ``symm.empty`` allocation."""
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
        return False
    a = _lookup(t.data_ptr(), t.numel() * t.element_size())
    return a is not None and a.live


def heap_offset(t: torch.Tensor, arg: str) -> int:
    """Byte offset of ``t``'s first element in the symmetric heap, or a clear error.

    ``t`` must be contiguous and inside one live allocation.
    """
    if not isinstance(t, torch.Tensor):
        raise SymschedTypeError(f"`{arg}` must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise SymschedArgumentError(f"`{arg}` must be a CPU tensor from symm.empty, got device {t.device}")
    a = _lookup(t.data_ptr(), t.numel() * t.element_size())
    if a is None:
        raise NotSymmetricError(
            f"`{arg}` is not a symmetric tensor: it must be allocated with symm.empty(shape, dtype) "
            f"(or be a view of one); got an ordinary tensor at {t.data_ptr():#x}")
    if not a.live:
        raise StaleTensorError(f"`{arg}` refers to symmetric memory that was released with symm.free")
    if not t.is_contiguous():
        raise SymschedArgumentError(f"`{arg}` must be contiguous")
    return int(_state.runtime().offset_of(a.block)) + (t.data_ptr() - a.start)


def check_not_stale(t: torch.Tensor, arg: str) -> None:
    """Reject views of freed symmetric blocks passed where ordinary tensors are allowed."""
    if not _dead or not isinstance(t, torch.Tensor):
        return
    a = _lookup(t.data_ptr(), t.numel() * t.element_size())
    if a is not None and not a.live:
        raise StaleTensorError(f"`{arg}` refers to symmetric memory that was released with symm.free")


def free(t: torch.Tensor) -> None:
    """Release ``t``'s symmetric allocation (collective over WORLD) and invalidate ``t``.

    ``t`` must be the tensor ``symm.empty`` returned (or a view starting at its first byte).
    Afterwards ``t`` has no elements, and any other view of the block is refused by symsched ops.
    """
    if not isinstance(t, torch.Tensor):
        raise SymschedTypeError(f"`t` must be a torch.Tensor, got {type(t).__name__}")
    ptr = t.untyped_storage().data_ptr()
    with _lock:
        a = _allocs.get(ptr)
    if a is None:
        raise NotSymmetricError("`t` is not a tensor returned by symm.empty")
    if not a.live:
        raise StaleTensorError("`t` was already released with symm.free")
    try:
        _state.runtime().free(a.block)
    except Exception as exc:
        raise SymschedRuntimeError(f"symm.free: {exc}") from exc
    global _dead
    with _lock:
        a.live = False
        a.block = None
        _dead += 1
    # the old storage still maps heap memory; point the tensor at an empty one instead
    t.set_(torch.empty(0, dtype=t.dtype))


def symm_memory_stats() -> Dict[str, int]:
    """``{"allocated", "peak", "free"}`` bytes of this rank's symmetric heap."""
    s = _state.runtime().stats()
    return {"allocated": int(s["allocated"]), "peak": int(s["peak"]), "free": int(s["free"])}
