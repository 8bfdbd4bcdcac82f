"""Shared argument checks. Each names the argument and the value it expected."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from .core.errors import SymschedArgumentError, SymschedTypeError
from .memory import check_not_stale


def tensor(t: Any, arg: str, *, dtypes: Optional[Sequence[torch.dtype]] = None, contiguous: bool = True
           ) -> torch.Tensor:
    """A CPU tensor (contiguous by default) with one of ``dtypes``."""
    if not isinstance(t, torch.Tensor):
        raise SymschedTypeError(f"`{arg}` must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise SymschedArgumentError(f"`{arg}` must be on the CPU (the host is the device), got {t.device}")
    if dtypes is not None and t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise SymschedArgumentError(f"`{arg}` has dtype {t.dtype}; expected one of: {allowed}")
    if contiguous and not t.is_contiguous():
        raise SymschedArgumentError(f"`{arg}` must be contiguous (call .contiguous() first)")
    if t.is_sparse or t.is_quantized:
        raise SymschedArgumentError(f"`{arg}` must be a dense tensor")
    check_not_stale(t, arg)
    return t


def integer(v: Any, arg: str, *, minimum: int = 0) -> int:
    """A Python int (or 0-d integer tensor) ≥ ``minimum``."""
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.dtype.is_floating_point:
        v = int(v.item())
    if isinstance(v, bool) or not isinstance(v, int):
        raise SymschedTypeError(f"`{arg}` must be an int, got {type(v).__name__}")
    if v < minimum:
        raise SymschedArgumentError(f"`{arg}` must be ≥ {minimum}, got {v}")
    return v


def same_dtype(a: torch.Tensor, a_arg: str, b: torch.Tensor, b_arg: str) -> None:
    if a.dtype != b.dtype:
        raise SymschedArgumentError(f"`{a_arg}` ({a.dtype}) and `{b_arg}` ({b.dtype}) must have the same dtype")


def span(t: torch.Tensor, offset: int, size: int, t_arg: str, off_arg: str) -> None:
    """``[offset, offset+size)`` elements must lie inside ``t``."""
    if offset + size > t.numel():
        raise SymschedArgumentError(
            f"`{off_arg}`={offset} + `size`={size} runs past the end of `{t_arg}` "
            f"({t.numel()} elements)")
