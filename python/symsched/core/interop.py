"""Interop with the framework's own collectives (gloo or Hccl for PyTorch, mccl or Hccl for
MindSpore) — RFC §5.4.

**The rule.** symsched and the framework's collectives may be used in one job and on the same
group object, ordered by program order. What is forbidden is mixing them *on the same data in
the same communication stage*: one gradient bucket (one tensor allocation) reduced partly by the
framework and partly by symsched within one training step gives inconsistent results, because
the two libraries synchronise differently (implicit barriers vs. explicit signals).

**What is checked.** Inside ``with symm.interop.step():`` every allocation a symsched collective
communicates (each collective names the buffers it writes, reduces or sends, and records them
before anything is sent: the call protocol of :mod:`symsched.core.coll`), and every allocation
passed to a framework collective made through the flavour's helpers (``interop.all_reduce`` …)
or — with ``watch=True`` (the default) — through the framework's own functions called during
the step (:meth:`~symsched.core.adapter.FrameworkAdapter.watch_collectives`), is recorded with
the library that touched it. The second library touching an already-recorded allocation raises
:class:`~symsched.ForbiddenMixError` before it sends anything. Outside a ``step`` nothing is
tracked (no cost). Allocations are the unit because buckets are flat tensors whose parts are
views: two disjoint slices of one bucket reduced by different libraries are exactly the
forbidden case. Every recorded allocation is kept alive until the step ends, so its address
cannot be reused by a new tensor within the step (which would be reported as a mix that never
happened).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Dict, Iterator, Optional, Tuple

from . import adapter
from .errors import ForbiddenMixError

#: per thread: ``records`` (address -> (library, op, keepalive)) while a step is open
local = threading.local()


def _records() -> Optional[Dict[int, Tuple[str, str, Any]]]:
    # the dict lookup: getattr with a default on a thread-local that lacks the attribute raises
    # and catches internally (~0.5 µs on every collective call outside a step)
    return local.__dict__.get("records")


def _note(t: Any, library: str, op: str) -> None:
    recs = _records()
    if recs is None:
        return
    key = adapter.active().interop_key(t)
    if key is None:
        return
    address, keepalive = key
    prev = recs.get(address)
    if prev is not None and prev[0] != library:
        raise ForbiddenMixError(
            f"forbidden mix (RFC §5.4): storage at {address:#x} was used by {prev[0]} {prev[1]} and now by "
            f"{library} {op} in the same step; reduce each gradient bucket with one library per step")
    # the record holds the allocation: one freed during the step (a temporary framework output)
    # would otherwise leave its address to a new tensor, which then looked already used. The
    # first use is kept: a framework call passes its tensor through several watched layers
    # (``dist.all_reduce`` → ``ProcessGroup.allreduce``), and the message names what the user called
    if prev is None:
        recs[address] = (library, op, keepalive)


def note_symsched(t: Any, op: str) -> None:
    """Record that a symsched collective communicates ``t`` (a tensor, or a tuple of them) in the
    current step."""
    # every symsched call passes here: outside a step, return before any other call
    if local.__dict__.get("records") is not None:
        for x in t if isinstance(t, tuple) else (t,):
            _note(x, "symsched", op)


def note_framework(t: Any, op: str) -> None:
    """Record that one of the framework's collectives communicates ``t`` in the current step."""
    if local.__dict__.get("records") is not None:
        _note(t, adapter.active().collectives_label, op)


@contextlib.contextmanager
def step(watch: bool = True) -> Iterator[None]:
    """One communication stage (typically a training step) in which the mixing rule is checked;
    ``watch`` also records the framework's own collective functions called meanwhile."""
    if _records() is not None:
        raise RuntimeError("symm.interop.step() does not nest")
    local.records = {}
    restore = adapter.active().watch_collectives(note_framework) if watch else None
    try:
        yield
    finally:
        if restore is not None:
            restore()
        local.records = None
