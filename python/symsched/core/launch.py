"""Launching standard-library schedules on a group through the native executor.

The core only picks the schedule and binds buffers (each an ``(address, bytes)`` pair); the
executor (Rust) stages ordinary tensors through heap scratch, evaluates extents, runs the plan
and checks sizes again. Prepared launches (the compiled and loaded plan, element types, sizes)
are cached per group, so a repeated call only binds buffers.
"""

from __future__ import annotations

from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

from . import dtypes, failure, knobs, state
from .enums import ReduceOp
from .errors import SymschedArgumentError, SymschedError, SymschedRuntimeError
from .profiling import add_events, op_range, profiler_on, trace_path

Buffer = Tuple[int, int]

#: Prepared launches kept per group before the cache is dropped (a sweep over many sizes).
MAX_PREPARED = 1024


def prepared(info: state.GroupInfo, schedule: str, params: Optional[Dict[str, int]], dtype: str,
             reduce: Optional[ReduceOp], wire: Optional[str], sizes: Dict[str, int]) -> Any:
    """The native prepared launch of ``schedule`` for these types (runtime names) and sizes on
    ``info``'s group. Compiling, loading and type resolution happen once per key; a call then
    only binds buffers."""
    key = (schedule, tuple(sorted(params.items())) if params else (), dtype, reduce, wire,
           tuple(sorted(sizes.items())))
    p = info.prepared.get(key)
    if p is None:
        if len(info.prepared) >= MAX_PREPARED:
            info.prepared.clear()
        p = info.handle.prepare(schedule, dict(params or {}), dtype, None if reduce is None else reduce.value,
                                wire, {k: int(x) for k, x in sizes.items()},
                                knobs.CHECK_BINDINGS.get() == "always")
        info.prepared[key] = p
    return p


def native_error(op_name: str, info: state.GroupInfo, schedule: str, exc: Exception) -> NoReturn:
    """Raise a launch's native error: a ``ValueError`` (the binding and size checks) is the
    caller's argument error, a wait that found the group aborted a
    :class:`~symsched.core.errors.PeerAbortedError` naming the failing rank, anything else a
    runtime error naming the group; symsched's own errors (an ``AgreementError``) pass through."""
    if isinstance(exc, SymschedError):
        raise exc
    if isinstance(exc, ValueError):
        raise SymschedArgumentError(f"symsched {op_name} ({schedule}): {exc}") from exc
    aborted = failure.peer_aborted(op_name, info, exc)
    if aborted is not None:
        raise aborted from exc
    raise SymschedRuntimeError(f"symsched {op_name} ({schedule}) on group {list(info.ranks)}: {exc}") from exc


def run(op_name: str, info: state.GroupInfo, schedule: str, buffers: Sequence[Buffer], dtype: str,
        sizes: Dict[str, int], *, params: Optional[Dict[str, int]] = None, reduce: Optional[ReduceOp] = None,
        wire: Optional[str] = None, send_counts: Optional[List[int]] = None,
        recv_counts: Optional[List[int]] = None, nbytes: Optional[int] = None) -> Any:
    """Run ``schedule`` on ``info``'s group with the given role buffers (in signature order),
    inside the op's profiler range and trace event when either watches; returns the prepared
    launch (the caller's cache keeps it)."""
    bufs = list(buffers)
    if not profiler_on() and trace_path() is None:
        # hot path: nothing observes the op
        try:
            p = prepared(info, schedule, params, dtype, reduce, wire, sizes)
            if send_counts is None:
                p.run(bufs)
            else:
                p.run_counts(bufs, send_counts, recv_counts)
        except (SymschedError, TypeError):
            raise
        except Exception as exc:
            native_error(op_name, info, schedule, exc)
        return p
    total = nbytes if nbytes is not None else sum(n for _, n in bufs[:1])
    # the executor's step events use the runtime's group name for their lane: share it
    with op_range(op_name, total, info.describe(), lane=info.lane(), schedule=schedule,
                  dtype=dtypes.HEAP.get(dtype, dtype), op=None if reduce is None else reduce.value,
                  wire=wire) as extra:
        try:
            p = prepared(info, schedule, params, dtype, reduce, wire, sizes)
            if send_counts is None:
                events = p.run(bufs)
            else:
                events = p.run_counts(bufs, send_counts, recv_counts)
        except (SymschedError, TypeError):
            raise
        except Exception as exc:
            native_error(op_name, info, schedule, exc)
        if events:
            extra["steps"] = len(events)
            add_events(events)
    return p


def dual(info: state.GroupInfo, schedule: str, params: Optional[Dict[str, int]] = None) -> List[Dict[str, Any]]:
    """The backward forms the compiler declared (and the verifier proved) for ``schedule``."""
    try:
        return list(info.handle.duals(schedule, dict(params or {})))
    except Exception as exc:
        raise SymschedRuntimeError(f"cannot read the duals of `{schedule}`: {exc}") from exc


def dual_schedules(info: state.GroupInfo, schedule: str, params: Optional[Dict[str, int]], expect: str
                   ) -> List[Tuple[str, Dict[str, int]]]:
    """Every declared dual schedule of ``schedule`` whose collective is ``expect``, in declaration
    order (cached per group); the caller picks one by cost, all being verified adjoints."""
    key = ("duals", schedule, tuple(sorted((params or {}).items())), expect)
    hit = info.prepared.get(key)
    if hit is None:
        hit = tuple((str(d["name"]), tuple(sorted((k, int(x)) for k, x in d.get("params", {}).items())))
                    for d in dual(info, schedule, params)
                    if d.get("kind") == "schedule" and d.get("collective") == expect)
        if not hit:
            raise SymschedRuntimeError(
                f"schedule `{schedule}` declares no `{expect}` dual; its duals are {dual(info, schedule, params)}")
        info.prepared[key] = hit
    return [(name, dict(ps)) for name, ps in hit]


def dual_schedule(info: state.GroupInfo, schedule: str, params: Optional[Dict[str, int]], expect: str
                  ) -> Tuple[str, Dict[str, int]]:
    """The declared dual schedule of ``schedule`` whose collective is ``expect`` (cached per group)."""
    key = ("dual", schedule, tuple(sorted((params or {}).items())), expect)
    hit = info.prepared.get(key)
    if hit is not None:
        return hit[0], dict(hit[1])
    for d in dual(info, schedule, params):
        if d.get("kind") == "schedule" and d.get("collective") == expect:
            found = (str(d["name"]), {k: int(x) for k, x in d.get("params", {}).items()})
            info.prepared[key] = found
            return found[0], dict(found[1])
    raise SymschedRuntimeError(
        f"schedule `{schedule}` declares no `{expect}` dual; its duals are {dual(info, schedule, params)}")
