"""symsched ops as named ranges in MindSpore's profiler, where it records user ranges.

Measured on MindSpore 2.10 CPU: ``mindspore.Profiler(activities=[ProfilerActivity.CPU])``
writes only the CPU kernels it ran (``trace_view.json`` with ``HostCpuOps`` events); neither
``mstx.range_start``/``range_end`` nor the framework's ``RecordFunction`` ranges appear in
its output. ``mstx`` records ranges on Ascend when msprof's ``libmspti`` is preloaded
(``mstx.enable``), so each op is a ``symsched::<op>`` mstx range exactly then and costs one
attribute read otherwise. On CPU the ``SYMSCHED_TRACE`` Chrome trace is the profile.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

try:
    from mindspore.profiler import mstx as _mstx
except ImportError:  # pragma: no cover - a build without the profiler
    _mstx = None


def ranges_recorded() -> bool:
    """Whether MindSpore's profiler records user ranges in this process (mstx enabled)."""
    return bool(_mstx is not None and getattr(_mstx, "enable", False))


def enabled_fn() -> Any:
    """:func:`ranges_recorded` as the cheapest callable for the core's per-call check. Whether
    mstx records is fixed when MindSpore is imported (``mstx.enable`` reads ``LD_PRELOAD``), so
    without mstx this is the builtin ``bool`` (``bool()`` is False) and costs no Python frame."""
    return ranges_recorded if ranges_recorded() else bool


def range_name(op: str, nbytes: int, group: str) -> str:
    """The range name: ``symsched::<op> bytes=<B> group=<ranks>`` (as on the PyTorch side)."""
    return f"symsched::{op} bytes={nbytes} group={group}"


@contextlib.contextmanager
def op_range(op: str, nbytes: int, group: str) -> Iterator[None]:
    """An mstx range around one symsched op when ranges are recorded, nothing otherwise."""
    if not ranges_recorded():
        yield
        return
    rid: Optional[Any] = _mstx.range_start(range_name(op, nbytes, group), None, "symsched")
    try:
        yield
    finally:
        _mstx.range_end(rid)


@contextlib.contextmanager
def named_range(name: str) -> Iterator[None]:
    """An mstx range named ``name`` (entered by the core only while :func:`ranges_recorded`)."""
    rid: Optional[Any] = _mstx.range_start(name, None, "symsched") if ranges_recorded() else None
    try:
        yield
    finally:
        if rid is not None:
            _mstx.range_end(rid)
