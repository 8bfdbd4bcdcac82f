"""The symmetric heap as framework tensors: ``empty``, ``free``, ``symm_memory_stats``.

A symmetric tensor is an ordinary host tensor of the framework whose memory is a block of this
rank's symmetric heap segment, made zero-copy by the adapter
(:meth:`~symsched.core.adapter.FrameworkAdapter.from_heap`) over a native block object that
exports the heap memory through the buffer protocol and keeps the runtime (and so the mapping)
alive while any tensor refers to it.

Allocation and :func:`free` are collective over WORLD: every rank must make the same calls with
the same sizes in the same order (the runtime checks this and reports a mismatch loudly). Never
rely on garbage collection to free: :func:`free` invalidates the tensor, and any other view of
the freed block is rejected by every symsched op afterwards (``StaleTensorError``).

The bookkeeping is by address: ``_starts`` (sorted block addresses) and ``_allocs`` (address →
record) describe every block, live or released; released records stay until a new block covers
them, so stale views are caught, and ``_dead`` counts them (0: nothing to check, the fast
paths' test).
"""

from __future__ import annotations

import bisect
import math
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import adapter, dtypes, state
from .errors import AgreementError, NotSymmetricError, StaleTensorError, SymschedArgumentError, SymschedRuntimeError, SymschedTypeError

ShapeLike = Union[int, Sequence[int]]


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
#: blocks released so far: a buffer found live stays live until this changes (the native cached
#: calls keep it per launch, as ``_live_ok`` keeps ranges)
_frees = 0
#: ``ptr → nbytes`` of ranges :func:`live` found live since the last ``free``: once any block
#: was released (a perftest sweep, a training step that frees its workspaces), every cached
#: collective call checks its buffers, and the lookup (lock, bisect, record) was ~0.4 µs per
#: buffer. A range found live stays live until a block is released (a new block only drops
#: released records), so ``free`` clears it; exact ranges only, at most ``_LIVE_MAX``.
_live_ok: Dict[int, int] = {}
_LIVE_MAX = 4096
#: the tensors ``free`` released, by id (with a weak reference to tell a reused id apart): they
#: have no elements afterwards, so only this tells them from an ordinary empty tensor
_released: Dict[int, "weakref.ref[Any]"] = {}
#: what the native cached alltoall reads to tell released memory (never rebound, so one tuple)
_records = (_starts, _allocs, _live_ok, _lock)


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__name__}"


def _shape(shape: Any) -> Tuple[int, ...]:
    if isinstance(shape, bool):
        raise SymschedTypeError("`shape` must be an int or a sequence of ints, got bool")
    if isinstance(shape, int):
        dims: Tuple[Any, ...] = (shape,)
    elif isinstance(shape, (tuple, list)):
        dims = tuple(shape)
    else:
        raise SymschedTypeError(f"`shape` must be an int or a sequence of ints, got {type(shape).__name__}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise SymschedTypeError(f"`shape` must hold ints, got {dims!r}")
        if d < 0:
            raise SymschedArgumentError(f"`shape` must hold non-negative sizes, got {dims!r}")
    return dims


def empty(shape: ShapeLike, dtype: Any = None) -> Any:
    """A tensor of ``shape`` and ``dtype`` (default float32) in the symmetric heap
    (uninitialised; collective).

    Every rank gets its own copy at the same heap offset, so peers can ``shmem_put`` into it.
    Supported dtypes: float32, float64, float16, bfloat16, int32, int64, uint8, float8_e4m3fn,
    float8_e5m2. The size comes from ``SYMMETRIC_MEMORY_HEAP_SIZE`` (bytes, default 1 GiB).
    """
    fw = adapter.active()
    dims = _shape(shape)
    if dtype is None:
        dtype = fw.default_dtype
    if not isinstance(dtype, fw.dtype_type):
        raise SymschedTypeError(f"`dtype` must be a {_qualname(fw.dtype_type)}, got {type(dtype).__name__}")
    if fw.dtype_names.get(dtype) not in dtypes.HEAP:
        raise SymschedArgumentError(
            f"`dtype` {dtype} is not supported; expected one of: {dtypes.labels(dtypes.HEAP)}")
    elem = fw.itemsize(dtype)
    nbytes = math.prod(dims) * elem
    size = max(nbytes, elem)
    rt = state.runtime()
    try:
        # a zero-size request still takes one element so the tensor has a real, unique address
        block = rt.alloc(size)
    except AgreementError:
        raise
    except Exception as exc:
        raise SymschedRuntimeError(f"symm.empty({list(dims)}, {dtype}): {exc}") from exc
    t, start = fw.from_heap(block, nbytes, dtype, dims)
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


def _lookup(ptr: int, nbytes: int) -> Optional[_Alloc]:
    """The record whose block holds ``[ptr, ptr + nbytes)``, or None."""
    with _lock:
        i = bisect.bisect_right(_starts, ptr) - 1
        if i < 0:
            return None
        a = _allocs[_starts[i]]
    if a.start <= ptr and ptr + nbytes <= a.start + a.nbytes:
        return a
    return None


def live(ptr: int, nbytes: int) -> bool:
    """False when ``[ptr, ptr + nbytes)`` lies in a block released with ``symm.free``."""
    if _live_ok.get(ptr) == nbytes:
        return True
    a = _lookup(ptr, nbytes)
    with _lock:
        # tested under the lock ``free`` clears the memo under, so no release slips in between
        if a is not None and not a.live:
            return False
        if len(_live_ok) >= _LIVE_MAX:
            _live_ok.clear()
        _live_ok[ptr] = nbytes
    return True


def symmetric(ptr: int, nbytes: int) -> bool:
    """Whether ``[ptr, ptr + nbytes)`` lies inside one live allocation."""
    a = _lookup(ptr, nbytes)
    return a is not None and a.live


def is_symmetric(t: Any) -> bool:
    """Whether ``t`` lies inside a live ``symm.empty`` allocation."""
    fw = adapter.active()
    if not isinstance(t, fw.tensor_type):
        return False
    try:
        s = fw.span(t, "t")
    except (SymschedTypeError, SymschedArgumentError):
        return False
    return symmetric(s.ptr, s.nbytes)


def heap_offset(ptr: int, nbytes: int, contiguous: bool, arg: str) -> int:
    """Byte offset in the symmetric heap of a tensor's first element, or a clear error: the
    tensor must be contiguous and inside one live allocation."""
    a = _lookup(ptr, nbytes)
    if a is None:
        raise NotSymmetricError(
            f"`{arg}` is not a symmetric tensor: it must be allocated with symm.empty(shape, dtype) "
            f"(or be a view of one); got an ordinary tensor at {ptr:#x}")
    if not a.live:
        raise StaleTensorError(f"`{arg}` refers to symmetric memory that was released with symm.free")
    if not contiguous:
        raise SymschedArgumentError(f"`{arg}` must be contiguous")
    return int(state.runtime().offset_of(a.block)) + (ptr - a.start)


def is_released(t: Any) -> bool:
    """Whether ``t`` is a tensor that ``free`` released (cheap when nothing was freed)."""
    if not _released:
        return False
    r = _released.get(id(t))
    return r is not None and r() is t


def check_not_released(t: Any, arg: str) -> None:
    """Refuse a tensor ``free`` released (it has no elements left, so every other check would
    take it for an ordinary empty tensor)."""
    if _released and is_released(t):
        raise StaleTensorError(f"`{arg}` was released with symm.free and cannot be used again")


def _forget(key: int) -> Callable[[Any], None]:
    return lambda _ref: _released.pop(key, None)


def check_not_stale(ptr: int, nbytes: int, arg: str) -> None:
    """Reject views of freed symmetric blocks passed where ordinary tensors are allowed."""
    if not _dead:
        return
    a = _lookup(ptr, nbytes)
    if a is not None and not a.live:
        raise StaleTensorError(f"`{arg}` refers to symmetric memory that was released with symm.free")


def free(t: Any) -> None:
    """Release ``t``'s symmetric allocation (collective over WORLD) and invalidate ``t``.

    ``t`` must be the tensor ``symm.empty`` returned (or a view starting at its first byte).
    Afterwards ``t`` has no elements and every symsched op (and ``free`` again) refuses it with
    ``StaleTensorError``, as it refuses any other view of the block.
    """
    fw = adapter.active()
    if not isinstance(t, fw.tensor_type):
        raise SymschedTypeError(f"`t` must be a {_qualname(fw.tensor_type)}, got {type(t).__name__}")
    if is_released(t):
        raise StaleTensorError("`t` was already released with symm.free")
    ptr = fw.storage_address(t)
    with _lock:
        a = _allocs.get(ptr)
    if a is None:
        raise NotSymmetricError("`t` is not a tensor returned by symm.empty")
    if not a.live:
        raise StaleTensorError("`t` was already released with symm.free")
    try:
        state.runtime().free(a.block)
    except AgreementError:
        raise
    except Exception as exc:
        raise SymschedRuntimeError(f"symm.free: {exc}") from exc
    global _dead, _frees
    with _lock:
        a.live = False
        a.block = None
        _dead += 1
        _frees += 1  # after the record is marked: a count read before it still sees the mark
        _live_ok.clear()
    # the old memory still maps the heap; point the tensor at an empty one instead
    fw.release(t)
    try:
        _released[id(t)] = weakref.ref(t, _forget(id(t)))
    except TypeError:  # pragma: no cover - a tensor type without weak references
        pass


def symm_memory_stats() -> Dict[str, int]:
    """``{"allocated", "peak", "free"}`` bytes of this rank's symmetric heap."""
    s = state.runtime().stats()
    return {"allocated": int(s["allocated"]), "peak": int(s["peak"]), "free": int(s["free"])}
