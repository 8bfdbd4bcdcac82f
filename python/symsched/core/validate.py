"""Argument checks shared by every call. Each names the argument and the value it expected."""

from __future__ import annotations

from typing import Any, Collection, List, Optional

from . import adapter, dtypes, knobs, memory
from .adapter import Span
from .errors import SymschedArgumentError, SymschedTypeError


def tensor(t: Any, arg: str, *, names: Optional[Collection[str]] = None, contiguous: bool = True) -> Span:
    """The span of a host tensor (contiguous by default) whose dtype is one of ``names``
    (runtime names, :mod:`symsched.core.dtypes`), not a view of released symmetric memory."""
    s = adapter.active().span(t, arg)
    if not s.numel and memory._released:
        memory.check_not_released(t, arg)
    if names is not None and s.name not in names:
        raise SymschedArgumentError(f"`{arg}` has dtype {s.dtype}; expected one of: {dtypes.labels(names)}")
    if contiguous and not s.contiguous:
        raise SymschedArgumentError(f"`{arg}` must be contiguous (call .contiguous() first)")
    memory.check_not_stale(s.ptr, s.nbytes, arg)
    return s


def matrix(t: Any, arg: str, names: Collection[str]) -> Span:
    """A contiguous 2-d host tensor of one of ``names``."""
    s = tensor(t, arg, names=names)
    if len(s.shape) != 2:
        raise SymschedArgumentError(f"`{arg}` must be a 2-d matrix, got shape {s.shape}")
    return s


def integer(v: Any, arg: str, *, minimum: int = 0) -> int:
    """A Python int (or one-element integer tensor) ≥ ``minimum``."""
    v = adapter.active().as_int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise SymschedTypeError(f"`{arg}` must be an int, got {type(v).__name__}")
    if v < minimum:
        raise SymschedArgumentError(f"`{arg}` must be ≥ {minimum}, got {v}")
    return v


def counts(lst: Any, arg: str, size: int) -> List[int]:
    """One non-negative element count per group rank (a list, tuple or 1-d tensor)."""
    lst = adapter.active().as_list(lst)
    if not isinstance(lst, (list, tuple)):
        raise SymschedTypeError(f"`{arg}` must be a list (or 1-d tensor) of {size} element counts")
    if len(lst) != size:
        raise SymschedArgumentError(f"`{arg}` must have one entry per group rank ({size}), got {len(lst)}")
    return [integer(c, f"{arg}[{i}]") for i, c in enumerate(lst)]


def same_dtype(a: Span, a_arg: str, b: Span, b_arg: str) -> None:
    if a.dtype != b.dtype:
        raise SymschedArgumentError(f"`{a_arg}` ({a.dtype}) and `{b_arg}` ({b.dtype}) must have the same dtype")


def within(s: Span, offset: int, size: int, t_arg: str, off_arg: str) -> None:
    """``[offset, offset+size)`` elements must lie inside the tensor of ``s``."""
    if offset + size > s.numel:
        raise SymschedArgumentError(
            f"`{off_arg}`={offset} + `size`={size} runs past the end of `{t_arg}` ({s.numel} elements)")


def parse_wire(value: Any, arg: str = "low_precision_dtype") -> Optional[str]:
    """A wire format given as a framework dtype or a name (``'bf16'``, ``'float8_e4m3fn'`` …), as
    its runtime name; None for None or a name meaning none."""
    if value is None:
        return None
    fw = adapter.active()
    if isinstance(value, fw.dtype_type):
        name = fw.dtype_names.get(value)
        if name in dtypes.WIRE:
            return name
        raise SymschedArgumentError(f"`{arg}` must be one of {dtypes.WIRE_CHOICES}, got {value}")
    if isinstance(value, str):
        try:
            return dtypes.wire_from_text(value)
        except ValueError:
            raise SymschedArgumentError(f"`{arg}` must be one of {dtypes.WIRE_CHOICES}, got {value!r}") from None
    raise SymschedTypeError(f"`{arg}` must be a {fw.name} dtype or a name, got {type(value).__name__}")


def wire(explicit: Any, data: str, arg: str = "low_precision_dtype") -> Optional[str]:
    """The wire format of a call on ``data`` (a runtime name): the per-call value, else the
    ``SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE`` default; None when no narrowing applies.

    A wire format only applies to floating data wider than it; the env default is silently
    skipped for integer or already-narrow data (it is a job-wide default), while an explicit
    per-call value that cannot apply is an error.
    """
    w = parse_wire(explicit, arg) if explicit is not None else knobs.LOW_PRECISION_DTYPE.get()
    if w is None:
        return None
    if not dtypes.narrows(w, data):
        if explicit is not None:
            raise SymschedArgumentError(
                f"`{arg}`={dtypes.WIRE[w]} cannot carry {dtypes.HEAP.get(data, data)} data: the wire format "
                f"must be a float narrower than the tensor's dtype")
        return None
    return w
