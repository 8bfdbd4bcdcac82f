"""Launching standard-library schedules on a group through the native executor.

The Python layer only picks the schedule and binds buffers; the executor (Rust) stages ordinary
tensors through heap scratch, evaluates extents, runs the plan and checks sizes again.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from . import _state
from .core import knobs
from ._dtypes import WIRE_DTYPES, data_name
from ._enums import ReduceOp
from .core.errors import SymschedArgumentError, SymschedError, SymschedRuntimeError
from .profiling import _profiler_on, add_events, op_range, trace_path

def one_shot_max_bytes() -> int:
    """The one-shot / two-shot threshold (``SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES``)."""
    return knobs.ALLREDUCE_ONE_SHOT_MAX_BYTES.get()


def pull_min_bytes() -> int:
    """The push / pull two-shot threshold (``SYMSCHED_ALLREDUCE_PULL_MIN_BYTES``)."""
    return knobs.ALLREDUCE_PULL_MIN_BYTES.get()


def allreduce_schedule(nbytes: int, wire: Optional[torch.dtype]) -> str:
    """Algorithm choice: one-shot for small messages, push two-shot above, pull two-shot for large
    messages, the wire variant when narrowing."""
    if wire is not None:
        return "allreduce_two_shot_wire"
    if nbytes < one_shot_max_bytes():
        return "allreduce_one_shot"
    return "allreduce_two_shot_pull" if nbytes >= pull_min_bytes() else "allreduce_two_shot"


def allgather_pull_min_bytes() -> int:
    """The push / pull threshold for private outputs (``SYMSCHED_ALLGATHER_PULL_MIN_BYTES``)."""
    return knobs.ALLGATHER_PULL_MIN_BYTES.get()


def allgather_schedule(nbytes: int, symmetric_output: bool, group_size: int, candidates: Sequence[str] = (
        "allgather_push", "allgather_pull")) -> str:
    """Algorithm choice for an all-gather of ``nbytes`` output bytes among ``candidates``.

    The push schedule puts into every peer's output, so a private output is staged (copied in
    and out of the heap, with a barrier); the pull schedule reads peers' staged inputs into an
    output only its owner writes, which the executor then uses in place. The choice depends on
    a per-rank property of the output: every rank of a group must pass the same kind of output
    (symmetric or not), as already required for roles peers access. A group of one has no peer:
    push is then a single local copy, and pull's staging copy would be pure overhead."""
    if ("allgather_pull" in candidates and not symmetric_output and group_size > 1
            and nbytes >= allgather_pull_min_bytes()):
        return "allgather_pull"
    return "allgather_push" if "allgather_push" in candidates else candidates[0]


def _buf(t: torch.Tensor) -> Tuple[int, int]:
    return (t.data_ptr(), t.numel() * t.element_size())


#: Prepared launches kept per group before the cache is dropped (a sweep over many sizes).
MAX_PREPARED = 1024


def prepared(info: _state.GroupInfo, schedule: str, params: Optional[Dict[str, int]], dtype: torch.dtype,
             reduce: Optional[ReduceOp], wire: Optional[torch.dtype], sizes: Dict[str, int]) -> Any:
    """The native prepared launch of ``schedule`` for these types and sizes on ``info``'s group.

    Compiling, loading and type resolution happen once per key; a call then only binds buffers.
    """
    key = (schedule, tuple(sorted(params.items())) if params else (), dtype, reduce, wire,
           tuple(sorted(sizes.items())))
    p = info.prepared.get(key)
    if p is None:
        if len(info.prepared) >= MAX_PREPARED:
            info.prepared.clear()
        p = info.handle.prepare(schedule, dict(params or {}), data_name(dtype, "tensor"),
                                None if reduce is None else reduce.value,
                                None if wire is None else WIRE_DTYPES[wire], {k: int(x) for k, x in sizes.items()},
                                knobs.CHECK_BINDINGS.get() == "always")
        info.prepared[key] = p
    return p


def _raise_runtime(op_name: str, info: _state.GroupInfo, schedule: str, exc: Exception) -> None:
    raise SymschedRuntimeError(f"symsched {op_name} ({schedule}) on group {list(info.ranks)}: {exc}") from exc


def run(op_name: str, info: _state.GroupInfo, schedule: str, buffers: Sequence[torch.Tensor], dtype: torch.dtype,
        sizes: Dict[str, int], *, params: Optional[Dict[str, int]] = None, reduce: Optional[ReduceOp] = None,
        wire: Optional[torch.dtype] = None, send_counts: Optional[List[int]] = None,
        recv_counts: Optional[List[int]] = None, nbytes: Optional[int] = None) -> None:
    """Run ``schedule`` on ``info``'s group with the given role buffers (in signature order)."""
    if not _profiler_on() and trace_path() is None:
        # hot path: nothing observes the op
        try:
            p = prepared(info, schedule, params, dtype, reduce, wire, sizes)
            if send_counts is None:
                p.run([_buf(b) for b in buffers])
            else:
                p.run_counts([_buf(b) for b in buffers], send_counts, recv_counts)
        except (SymschedError, TypeError):
            raise
        except ValueError as exc:  # the native binding check and size checks: the caller's arguments
            raise SymschedArgumentError(f"symsched {op_name} ({schedule}): {exc}") from exc
        except Exception as exc:
            _raise_runtime(op_name, info, schedule, exc)
        return
    total = nbytes if nbytes is not None else sum(_buf(b)[1] for b in buffers[:1])
    # the executor's step events use the runtime's group name for their lane: share it
    with op_range(op_name, total, info.describe(), lane=info.lane(), schedule=schedule,
                  dtype=str(dtype).replace("torch.", ""),
                  op=None if reduce is None else reduce.value,
                  wire=None if wire is None else WIRE_DTYPES[wire]) as extra:
        try:
            p = prepared(info, schedule, params, dtype, reduce, wire, sizes)
            if send_counts is None:
                events = p.run([_buf(b) for b in buffers])
            else:
                events = p.run_counts([_buf(b) for b in buffers], send_counts, recv_counts)
        except (SymschedError, TypeError):
            raise
        except ValueError as exc:  # the native binding check and size checks: the caller's arguments
            raise SymschedArgumentError(f"symsched {op_name} ({schedule}): {exc}") from exc
        except Exception as exc:
            _raise_runtime(op_name, info, schedule, exc)
        if events:
            extra["steps"] = len(events)
            add_events(events)


def dual(info: _state.GroupInfo, schedule: str, params: Optional[Dict[str, int]] = None) -> List[Dict[str, Any]]:
    """The backward forms the compiler declared (and the verifier proved) for ``schedule``."""
    try:
        return list(info.handle.duals(schedule, dict(params or {})))
    except Exception as exc:
        raise SymschedRuntimeError(f"cannot read the duals of `{schedule}`: {exc}") from exc


def dual_schedules(info: _state.GroupInfo, schedule: str, params: Optional[Dict[str, int]], expect: str
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


def dual_schedule(info: _state.GroupInfo, schedule: str, params: Optional[Dict[str, int]], expect: str
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
