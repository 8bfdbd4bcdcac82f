"""Launching standard-library schedules on a group through the native executor.

The Python layer only picks the schedule and binds buffers; the executor (Rust) stages ordinary
tensors through heap scratch, evaluates extents, runs the plan and checks sizes again.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from . import _state
from ._dtypes import WIRE_DTYPES, data_name
from ._enums import ReduceOp
from ._errors import SymschedArgumentError, SymschedRuntimeError
from .profiling import _profiler_on, add_events, op_range, trace_path

#: Below this many bytes allreduce uses the one-shot schedule, at or above it two-shot.
ONE_SHOT_ENV = "SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES"
DEFAULT_ONE_SHOT_MAX_BYTES = 256 * 1024


_one_shot_cache: Tuple[Optional[str], int] = (None, DEFAULT_ONE_SHOT_MAX_BYTES)


def one_shot_max_bytes() -> int:
    """The one-shot / two-shot threshold from ``SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES``."""
    global _one_shot_cache
    raw = os.environ.get(ONE_SHOT_ENV)
    if raw == _one_shot_cache[0]:
        return _one_shot_cache[1]
    try:
        value = int(raw) if raw and raw.strip() else DEFAULT_ONE_SHOT_MAX_BYTES
    except ValueError:
        raise SymschedArgumentError(f"{ONE_SHOT_ENV}={raw!r} is not an integer byte count") from None
    _one_shot_cache = (raw, value)
    return value


def allreduce_schedule(nbytes: int, wire: Optional[torch.dtype]) -> str:
    """Algorithm choice: one-shot for small messages, two-shot above, the wire variant when narrowing."""
    if wire is not None:
        return "allreduce_two_shot_wire"
    return "allreduce_one_shot" if nbytes < one_shot_max_bytes() else "allreduce_two_shot"


def _buf(t: torch.Tensor) -> Tuple[int, int]:
    return (t.data_ptr(), t.numel() * t.element_size())


def run(op_name: str, info: _state.GroupInfo, schedule: str, buffers: Sequence[torch.Tensor], dtype: torch.dtype,
        sizes: Dict[str, int], *, params: Optional[Dict[str, int]] = None, reduce: Optional[ReduceOp] = None,
        wire: Optional[torch.dtype] = None, send_counts: Optional[List[int]] = None,
        recv_counts: Optional[List[int]] = None, nbytes: Optional[int] = None) -> None:
    """Run ``schedule`` on ``info``'s group with the given role buffers (in signature order)."""
    params = dict(params or {})
    if not _profiler_on() and trace_path() is None:
        # hot path: nothing observes the op, so skip building profiler/trace arguments
        try:
            info.handle.launch(schedule, params, [_buf(b) for b in buffers], data_name(dtype, "tensor"),
                               None if reduce is None else reduce.value,
                               None if wire is None else WIRE_DTYPES[wire], sizes, send_counts, recv_counts, False)
        except (ValueError, TypeError):
            raise
        except Exception as exc:
            raise SymschedRuntimeError(f"symsched {op_name} ({schedule}) on group {list(info.ranks)}: {exc}") from exc
        return
    total = nbytes if nbytes is not None else sum(_buf(b)[1] for b in buffers[:1])
    with op_range(op_name, total, info.describe(), schedule=schedule, dtype=str(dtype).replace("torch.", ""),
                  op=None if reduce is None else reduce.value,
                  wire=None if wire is None else WIRE_DTYPES[wire]) as extra:
        try:
            events = info.handle.launch(
                schedule, params, [_buf(b) for b in buffers], data_name(dtype, "tensor"),
                None if reduce is None else reduce.value, None if wire is None else WIRE_DTYPES[wire],
                {k: int(x) for k, x in sizes.items()}, send_counts, recv_counts, trace_path() is not None)
        except (ValueError, TypeError):
            raise
        except Exception as exc:
            raise SymschedRuntimeError(f"symsched {op_name} ({schedule}) on group {list(info.ranks)}: {exc}") from exc
        if events:
            extra["steps"] = len(events)
            add_events(events)


def dual(info: _state.GroupInfo, schedule: str, params: Optional[Dict[str, int]] = None) -> List[Dict[str, Any]]:
    """The backward forms the compiler declared (and the verifier proved) for ``schedule``."""
    try:
        return list(info.handle.duals(schedule, dict(params or {})))
    except Exception as exc:
        raise SymschedRuntimeError(f"cannot read the duals of `{schedule}`: {exc}") from exc


def dual_schedule(info: _state.GroupInfo, schedule: str, params: Optional[Dict[str, int]], expect: str
                  ) -> Tuple[str, Dict[str, int]]:
    """The declared dual schedule of ``schedule`` whose collective is ``expect``."""
    for d in dual(info, schedule, params):
        if d.get("kind") == "schedule" and d.get("collective") == expect:
            return str(d["name"]), {k: int(x) for k, x in d.get("params", {}).items()}
    raise SymschedRuntimeError(
        f"schedule `{schedule}` declares no `{expect}` dual; its duals are {dual(info, schedule, params)}")
