"""Profiler integration and the ``SYMSCHED_TRACE`` Chrome/Perfetto trace.

Every symsched op runs inside the framework's profiler range ``symsched::<op>`` (for PyTorch
``torch.profiler.record_function``) and, nested in it, a second range named
``symsched::<op> bytes=<B> group=<ranks>`` (torch's record_function drops its ``args`` string
from exported traces, so size and group travel in the name of the inner range while the outer
name keeps ``key_averages()`` aggregation per op). The ranges are entered only while the
framework's profiler records: entering one costs tens of µs even when nothing records.

With ``SYMSCHED_TRACE=PATH`` every rank records one complete event per op (name, bytes, group,
schedule), and the native executor records one event per executed plan step (``cat`` "step",
``name`` the kind: put, put_signal, get, signal, wait, reduce, copy, cast, matmul, hostcoll;
``args`` schedule, step id, peer, bytes, and slot/target for waits) plus one "launch" event
around them (``symsched_runtime::exec::trace``). At exit (or :func:`flush_trace`) each rank
merges its events into ``PATH`` under an exclusive ``flock`` on ``PATH.lock`` — Python's op
events here and the executor's step events through ``_native.flush_trace`` (the Rust side
implements the same read/append/rename protocol, and also flushes at process exit) — so one
JSON file holds the whole job (``pid`` = global rank, ``tid`` = group) and opens in
chrome://tracing or ui.perfetto.dev.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import threading
import time
from typing import Any, Dict, Iterator, List, Optional

from . import adapter, knobs
from .native import module as _native

TRACE_ENV = knobs.TRACE.name

_events: List[Dict[str, Any]] = []
_events_lock = threading.Lock()
_t0_ns = time.time_ns() - time.perf_counter_ns()
_registered = False
#: the global rank of this process: events' ``pid`` (set by ``state.init``)
_rank = 0


def set_rank(rank: int) -> None:
    """The global rank this process's events carry (called once the runtime runs)."""
    global _rank
    _rank = rank


def trace_path() -> Optional[str]:
    """The trace file from ``SYMSCHED_TRACE``, or None when tracing is off."""
    return knobs.TRACE.get()


def profiler_on() -> bool:
    """Whether the framework's profiler records now."""
    return bool(adapter.active().profiler_enabled())


def _now_us() -> float:
    # wall-clock based so events of different processes line up
    return (_t0_ns + time.perf_counter_ns()) / 1000.0


def add_events(events: List[Dict[str, Any]]) -> None:
    """Append already-formed trace events."""
    global _registered
    if not events:
        return
    with _events_lock:
        _events.extend(events)
        if not _registered:
            atexit.register(flush_trace)
            _registered = True


@contextlib.contextmanager
def _traced(op: str, nbytes: int, group: str, lane: str, extra: Dict[str, Any]) -> Iterator[None]:
    """Record one complete event around the body when ``SYMSCHED_TRACE`` is set."""
    if trace_path() is None:
        yield
        return
    start = _now_us()
    try:
        yield
    finally:
        end = _now_us()
        extra.update({"bytes": nbytes, "group": group})
        add_events([{
            "name": f"symsched::{op}", "cat": "symsched", "ph": "X",
            "ts": start, "dur": max(end - start, 0.001),
            "pid": _rank, "tid": lane, "args": extra,
        }])


@contextlib.contextmanager
def op_range(op_name: str, nbytes: int, group: str, /, lane: Optional[str] = None,
             **args: Any) -> Iterator[Dict[str, Any]]:
    """Profile one symsched op; yields a dict the caller may add trace args to.

    ``lane`` is the trace ``tid``: pass ``"group " + <runtime group name>`` (e.g. ``group [0, 1]``)
    so the op shares its track with the executor's step events of that group (default
    ``group <group>``)."""
    extra: Dict[str, Any] = dict(args)
    lane = lane or f"group {group}"
    fw = adapter.active()
    if not fw.profiler_enabled():
        with _traced(op_name, nbytes, group, lane, extra):
            yield extra
        return
    with fw.profile_range(f"symsched::{op_name}"):
        with fw.profile_range(f"symsched::{op_name} bytes={nbytes} group={group}"):
            with _traced(op_name, nbytes, group, lane, extra):
                yield extra


def flush_trace() -> None:
    """Merge this rank's recorded events into ``SYMSCHED_TRACE`` (safe to call repeatedly)."""
    path = trace_path()
    if path is None:
        return
    flush = getattr(_native, "flush_trace", None)
    if flush is not None:
        flush()
    with _events_lock:
        mine = list(_events)
        _events.clear()
    if not mine:
        return
    rank = _rank
    meta = [{"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}}]
    lock_path = path + ".lock"
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data: Dict[str, Any] = {"traceEvents": [], "displayTimeUnit": "ms"}
            if os.path.exists(path) and os.path.getsize(path) > 0:
                try:
                    with open(path) as f:
                        data = json.load(f)
                except (OSError, ValueError):
                    data = {"traceEvents": [], "displayTimeUnit": "ms"}
            events = data.setdefault("traceEvents", [])
            if not any(e.get("ph") == "M" and e.get("pid") == rank for e in events):
                events.extend(meta)
            events.extend(mine)
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def reset_trace_file() -> None:
    """Remove a previous run's trace (rank 0, at init, before any rank can write)."""
    path = trace_path()
    if path and os.path.exists(path):
        with contextlib.suppress(OSError):
            os.remove(path)
