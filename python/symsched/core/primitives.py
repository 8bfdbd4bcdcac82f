"""One-sided primitives with the RFC §5.1 signatures.

Offsets and sizes count elements of the tensor's dtype; ``target_rank`` is group-local when a
``group`` is given (``None`` = WORLD). Remote targets must be symmetric tensors (from
``symm.empty``) — the peer's copy at the same heap offset is the one written or read.

Signals are symmetric int32 (as CANN's) or int64 tensors; ``signal_op`` takes CANN's numbering
(SET=0, ADD=1) or 'set'/'add'; compare ops EQ=0, NE=1, GT=2, GE=3, LT=4, LE=5 or
'eq'/'ne'/'gt'/'ge'/'lt'/'le'. Put-with-signal guarantees the data is visible at the peer before
the signal is.

One-sided operations never set a group up (that is collective: every member takes part) and
never reset an aborted one: on a group this rank has not used in a collective call yet
(``symm.barrier(group)`` is the cheapest; ``symm.init()`` sets up WORLD) they raise
:class:`~symsched.core.errors.GroupNotSetUpError` at once instead of waiting for a rendezvous.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from . import adapter, dtypes, failure, memory, state
from . import validate as v
from .adapter import Span
from .enums import CmpLike, SignalOpLike, parse_cmp, parse_signal_op
from .errors import SymschedArgumentError, SymschedRuntimeError
from .profiling import op_range


def _signal_value(value: Any, signal: Span, arg: str) -> int:
    val = v.integer(value, arg, minimum=0)
    limit = 2**31 - 1 if signal.name == "i32" else 2**63 - 1
    if val > limit:
        raise SymschedArgumentError(f"`{arg}`={val} does not fit the {signal.dtype} signal (max {limit})")
    return val


def _call(what: str, fn: Callable[..., Any], *args: Any, info: Optional[state.GroupInfo] = None) -> Any:
    try:
        return fn(*args)
    except (ValueError, TypeError):
        raise
    except Exception as exc:
        aborted = None if info is None else failure.peer_aborted(what, info, exc)
        if aborted is not None:
            raise aborted from exc
        raise SymschedRuntimeError(f"{what}: {exc}") from exc


def _transfer(target: Any, target_offset: Any, src: Any, src_offset: Any, size: Any) -> Tuple[Span, Span, int, int, int]:
    """The checked spans and element offsets/size of a put or get."""
    st, ss = v.tensor(target, "target"), v.tensor(src, "src")
    v.same_dtype(st, "target", ss, "src")
    t_off = v.integer(target_offset, "target_offset")
    s_off = v.integer(src_offset, "src_offset")
    n = v.integer(size, "size")
    v.within(st, t_off, n, "target", "target_offset")
    v.within(ss, s_off, n, "src", "src_offset")
    return st, ss, t_off, s_off, n


def _heap(s: Span, arg: str) -> int:
    return memory.heap_offset(s.ptr, s.nbytes, s.contiguous, arg)


def _one_sided(what: str, target: Any, target_offset: Any, src: Any, src_offset: Any, size: Any,
               target_rank: Any, group: Any, remote: str) -> None:
    """A put (``remote='target'``: the peer's ``target`` is written) or a get (``remote='src'``:
    the peer's ``src`` is read); the remote side must be symmetric, the local one may be any
    contiguous host tensor."""
    st, ss, t_off, s_off, n = _transfer(target, target_offset, src, src_offset, size)
    es = st.itemsize
    if remote == "target":
        dst, frm = _heap(st, "target") + t_off * es, ss.ptr + s_off * es
    else:
        dst, frm = st.ptr + t_off * es, _heap(ss, "src") + s_off * es
    info = state.resolve_set_up(group, f"shmem_{what}")
    peer = state.check_peer(target_rank, info, "target_rank")
    handle = info.handle.put if remote == "target" else info.handle.get
    with op_range(what, n * es, info.describe(), lane=info.lane(), peer=peer):
        _call(f"shmem_{what}", handle, dst, frm, n * es, peer)


def shmem_put(target: Any, target_offset: int, src: Any, src_offset: int, size: int, target_rank: int,
              group: Any = None) -> None:
    """Write ``src[src_offset:src_offset+size]`` into ``target[target_offset:…]`` on ``target_rank``.

    ``target`` must be symmetric; ``src`` may be any contiguous host tensor of the same dtype.
    """
    _one_sided("put", target, target_offset, src, src_offset, size, target_rank, group, "target")


def shmem_get(target: Any, target_offset: int, src: Any, src_offset: int, size: int, target_rank: int,
              group: Any = None) -> None:
    """Read ``src[src_offset:…]`` of ``target_rank`` into local ``target[target_offset:…]``.

    ``src`` must be symmetric (it is read on the peer); ``target`` may be any local tensor.
    """
    _one_sided("get", target, target_offset, src, src_offset, size, target_rank, group, "src")


def _signal_slot(signal: Any, signal_offset: Any) -> Tuple[Span, int, int]:
    s = v.tensor(signal, "signal", names=sorted(dtypes.SIGNALS))
    off = v.integer(signal_offset, "signal_offset")
    v.within(s, off, 1, "signal", "signal_offset")
    return s, _heap(s, "signal") + off * s.itemsize, s.itemsize


def shmem_signal_op(signal: Any, signal_offset: int, signal_value: int, signal_op: SignalOpLike,
                    target_rank: int, group: Any = None) -> None:
    """Set (SET=0) or add to (ADD=1) ``signal[signal_offset]`` on ``target_rank``."""
    s, slot, width = _signal_slot(signal, signal_offset)
    val = _signal_value(signal_value, s, "signal_value")
    sop = parse_signal_op(signal_op)
    info = state.resolve_set_up(group, "shmem_signal_op")
    peer = state.check_peer(target_rank, info, "target_rank")
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
    fw = adapter.active()
    names = ["signal", "signal_offset", "compare_value", "compare_op"]
    if len(args) == 5 or (len(args) >= 2 and isinstance(args[1], fw.tensor_type)) or "depend_tensor" in kw:
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
    s, slot, width = _signal_slot(bound["signal"], bound["signal_offset"])
    val = _signal_value(bound["compare_value"], s, "compare_value")
    cmp = parse_cmp(bound["compare_op"])
    tmo = None if timeout_ms is None else v.integer(timeout_ms, "timeout_ms", minimum=1)
    info = state.resolve_set_up(group, "shmem_wait_for_signal")
    with op_range("wait_for_signal", width, info.describe(), lane=info.lane(), cmp=cmp.name, value=val):
        _call("shmem_wait_for_signal", info.handle.wait, slot, int(cmp), val, width, tmo, info=info)


def shmem_put_with_signal(target: Any, target_offset: int, src: Any, src_offset: int, size: int, signal: Any,
                          signal_offset: int, signal_value: int, signal_op: SignalOpLike, target_rank: int,
                          group: Any = None) -> None:
    """``shmem_put`` then a signal update on the same peer; the data is visible before the signal."""
    st, ss, t_off, s_off, n = _transfer(target, target_offset, src, src_offset, size)
    base = _heap(st, "target")
    s, slot, width = _signal_slot(signal, signal_offset)
    val = _signal_value(signal_value, s, "signal_value")
    sop = parse_signal_op(signal_op)
    info = state.resolve_set_up(group, "shmem_put_with_signal")
    peer = state.check_peer(target_rank, info, "target_rank")
    es = st.itemsize
    with op_range("put_with_signal", n * es, info.describe(), lane=info.lane(), peer=peer):
        _call("shmem_put_with_signal", info.handle.put_with_signal, base + t_off * es, ss.ptr + s_off * es,
              n * es, slot, val, int(sop), peer, width)


def barrier(group: Any = None) -> None:
    """Block until every rank of ``group`` (None = WORLD) reached this barrier. A collective
    call: the first one on a group sets it up, and one on an aborted group resets it first
    (``docs/reliability.md``)."""
    info = state.resolve_group(group)
    with op_range("barrier", 0, info.describe(), lane=info.lane()):
        _call("barrier", info.handle.barrier, info=info)
