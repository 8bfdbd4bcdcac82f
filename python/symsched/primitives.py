"""One-sided primitives with the RFC §5.1 signatures.

Offsets and sizes count elements of the tensor's dtype; ``target_rank`` is group-local when a
``group`` is given (``None`` = WORLD). Remote targets must be symmetric tensors (from
``symm.empty``) — the peer's copy at the same heap offset is the one written or read.

Signals are symmetric int32 (as CANN's) or int64 tensors; ``signal_op`` takes CANN's numbering
(SET=0, ADD=1) or 'set'/'add'; compare ops EQ=0, NE=1, GT=2, GE=3, LT=4, LE=5 or
'eq'/'ne'/'gt'/'ge'/'lt'/'le'. Put-with-signal guarantees the data is visible at the peer before
the signal is.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from . import _state
from . import _validate as v
from ._enums import CmpLike, SignalOpLike, parse_cmp, parse_signal_op
from .core.errors import SymschedArgumentError, SymschedRuntimeError
from .memory import heap_offset
from .profiling import op_range

SIGNAL_DTYPES = (torch.int32, torch.int64)


def _signal_value(value: Any, signal: torch.Tensor, arg: str) -> int:
    val = v.integer(value, arg, minimum=0)
    limit = 2**31 - 1 if signal.dtype == torch.int32 else 2**63 - 1
    if val > limit:
        raise SymschedArgumentError(f"`{arg}`={val} does not fit the {signal.dtype} signal (max {limit})")
    return val


def _call(what: str, fn, *args):
    try:
        return fn(*args)
    except (ValueError, TypeError):
        raise
    except Exception as exc:
        raise SymschedRuntimeError(f"{what}: {exc}") from exc


def shmem_put(target: torch.Tensor, target_offset: int, src: torch.Tensor, src_offset: int, size: int,
              target_rank: int, group: Any = None) -> None:
    """Write ``src[src_offset:src_offset+size]`` into ``target[target_offset:…]`` on ``target_rank``.

    ``target`` must be symmetric; ``src`` may be any contiguous CPU tensor of the same dtype.
    """
    v.tensor(target, "target")
    v.tensor(src, "src")
    v.same_dtype(target, "target", src, "src")
    t_off = v.integer(target_offset, "target_offset")
    s_off = v.integer(src_offset, "src_offset")
    n = v.integer(size, "size")
    v.span(target, t_off, n, "target", "target_offset")
    v.span(src, s_off, n, "src", "src_offset")
    base = heap_offset(target, "target")
    info = _state.resolve_group(group)
    peer = _state.check_peer(target_rank, info, "target_rank")
    es = target.element_size()
    with op_range("put", n * es, info.describe(), lane=info.lane(), peer=peer):
        _call("shmem_put", info.handle.put, base + t_off * es, src.data_ptr() + s_off * es, n * es, peer)


def shmem_get(target: torch.Tensor, target_offset: int, src: torch.Tensor, src_offset: int, size: int,
              target_rank: int, group: Any = None) -> None:
    """Read ``src[src_offset:…]`` of ``target_rank`` into local ``target[target_offset:…]``.

    ``src`` must be symmetric (it is read on the peer); ``target`` may be any local tensor.
    """
    v.tensor(target, "target")
    v.tensor(src, "src")
    v.same_dtype(target, "target", src, "src")
    t_off = v.integer(target_offset, "target_offset")
    s_off = v.integer(src_offset, "src_offset")
    n = v.integer(size, "size")
    v.span(target, t_off, n, "target", "target_offset")
    v.span(src, s_off, n, "src", "src_offset")
    base = heap_offset(src, "src")
    info = _state.resolve_group(group)
    peer = _state.check_peer(target_rank, info, "target_rank")
    es = src.element_size()
    with op_range("get", n * es, info.describe(), lane=info.lane(), peer=peer):
        _call("shmem_get", info.handle.get, target.data_ptr() + t_off * es, base + s_off * es, n * es, peer)


def _signal_slot(signal: torch.Tensor, signal_offset: Any) -> tuple:
    v.tensor(signal, "signal", dtypes=SIGNAL_DTYPES)
    off = v.integer(signal_offset, "signal_offset")
    v.span(signal, off, 1, "signal", "signal_offset")
    base = heap_offset(signal, "signal")
    es = signal.element_size()
    return base + off * es, es


def shmem_signal_op(signal: torch.Tensor, signal_offset: int, signal_value: int, signal_op: SignalOpLike,
                    target_rank: int, group: Any = None) -> None:
    """Set (SET=0) or add to (ADD=1) ``signal[signal_offset]`` on ``target_rank``."""
    slot, width = _signal_slot(signal, signal_offset)
    val = _signal_value(signal_value, signal, "signal_value")
    sop = parse_signal_op(signal_op)
    info = _state.resolve_group(group)
    peer = _state.check_peer(target_rank, info, "target_rank")
    with op_range("signal_op", width, info.describe(), lane=info.lane(), peer=peer, op=sop.name):
        _call("shmem_signal_op", info.handle.signal, slot, val, int(sop), peer, width)


def shmem_wait_for_signal(*args: Any, group: Any = None, timeout_ms: Optional[int] = None, **kw: Any) -> None:
    """Block until local ``signal[signal_offset] <compare_op> compare_value``.

    Accepts hyper-parallel's form ``shmem_wait_for_signal(depend_tensor, signal, signal_offset,
    compare_value, compare_op)`` (``depend_tensor`` orders the wait after that tensor's producer on a
    device stream; on the host every op is already ordered, so it is only type-checked) and the
    short form ``shmem_wait_for_signal(signal, signal_offset, compare_value, compare_op)``.
    The wait is bounded by ``timeout_ms`` or ``SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS``.
    """
    names = ["signal", "signal_offset", "compare_value", "compare_op"]
    if len(args) == 5 or (len(args) >= 2 and isinstance(args[1], torch.Tensor)) or "depend_tensor" in kw:
        names = ["depend_tensor"] + names
    if len(args) > len(names):
        raise SymschedArgumentError(f"shmem_wait_for_signal takes {len(names)} positional arguments, got {len(args)}")
    bound = dict(zip(names, args))
    for k, val in kw.items():
        if k not in names or k in bound:
            raise SymschedArgumentError(f"shmem_wait_for_signal got an unexpected or repeated argument `{k}`")
        bound[k] = val
    missing = [n for n in names if n not in bound and n != "depend_tensor"]
    if missing:
        raise SymschedArgumentError(f"shmem_wait_for_signal is missing `{missing[0]}`")
    dep = bound.get("depend_tensor")
    if dep is not None:
        v.tensor(dep, "depend_tensor", contiguous=False)
    signal = bound["signal"]
    slot, width = _signal_slot(signal, bound["signal_offset"])
    val = _signal_value(bound["compare_value"], signal, "compare_value")
    cmp = parse_cmp(bound["compare_op"])
    tmo = None if timeout_ms is None else v.integer(timeout_ms, "timeout_ms", minimum=1)
    info = _state.resolve_group(group)
    with op_range("wait_for_signal", width, info.describe(), lane=info.lane(), cmp=cmp.name, value=val):
        _call("shmem_wait_for_signal", info.handle.wait, slot, int(cmp), val, width, tmo)


def shmem_put_with_signal(target: torch.Tensor, target_offset: int, src: torch.Tensor, src_offset: int, size: int,
                          signal: torch.Tensor, signal_offset: int, signal_value: int, signal_op: SignalOpLike,
                          target_rank: int, group: Any = None) -> None:
    """``shmem_put`` then a signal update on the same peer; the data is visible before the signal."""
    v.tensor(target, "target")
    v.tensor(src, "src")
    v.same_dtype(target, "target", src, "src")
    t_off = v.integer(target_offset, "target_offset")
    s_off = v.integer(src_offset, "src_offset")
    n = v.integer(size, "size")
    v.span(target, t_off, n, "target", "target_offset")
    v.span(src, s_off, n, "src", "src_offset")
    base = heap_offset(target, "target")
    slot, width = _signal_slot(signal, signal_offset)
    val = _signal_value(signal_value, signal, "signal_value")
    sop = parse_signal_op(signal_op)
    info = _state.resolve_group(group)
    peer = _state.check_peer(target_rank, info, "target_rank")
    es = target.element_size()
    with op_range("put_with_signal", n * es, info.describe(), lane=info.lane(), peer=peer):
        _call("shmem_put_with_signal", info.handle.put_with_signal, base + t_off * es,
              src.data_ptr() + s_off * es, n * es, slot, val, int(sop), peer, width)


def barrier(group: Any = None) -> None:
    """Block until every rank of ``group`` (None = WORLD) reached this barrier."""
    info = _state.resolve_group(group)
    with op_range("barrier", 0, info.describe(), lane=info.lane()):
        _call("barrier", info.handle.barrier)
