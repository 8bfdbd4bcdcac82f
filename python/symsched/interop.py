"""Interop with the framework's own collectives (gloo here, Hccl on Ascend) — RFC §5.4.

**The rule.** symsched and the framework's collectives may be used in one job and on the same
ProcessGroup object, ordered by program order. What is forbidden is mixing them *on the same
data in the same communication stage*: one gradient bucket (one tensor storage) reduced partly
by gloo and partly by symsched within one training step gives inconsistent results, because the
two libraries synchronise differently (implicit barriers vs. explicit signals).

**What is checked.** Inside ``with symm.interop.step():`` every storage a symsched collective
writes or reduces, and every storage passed to a framework collective made through this module's
helpers (``interop.all_reduce`` …) or — with ``watch_torch=True`` (the default) — through
``torch.distributed``'s own functions called during the step, is recorded with the library that
touched it. The second library touching an already-recorded storage raises
:class:`~symsched.ForbiddenMixError` before it sends anything. Outside a ``step`` nothing is
tracked (no cost). Storages are the unit because buckets are flat tensors whose parts are views:
two disjoint slices of one bucket reduced by different libraries are exactly the forbidden case.
Every recorded storage is kept alive until the step ends, so its address cannot be reused by a
new tensor within the step (which would be reported as a mix that never happened).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import torch
import torch.distributed as dist

from .core.errors import ForbiddenMixError

_local = threading.local()

_WATCHED = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather", "reduce_scatter",
            "broadcast", "all_to_all_single", "reduce")


def _records() -> Optional[Dict[int, Tuple[str, str, Any]]]:
    # the dict lookup: getattr with a default on a thread-local that lacks the attribute raises
    # and catches internally (~0.5 µs on every collective call outside a step)
    return _local.__dict__.get("records")


def _note(t: Any, library: str, op: str) -> None:
    recs = _records()
    if recs is None or not isinstance(t, torch.Tensor) or t.numel() == 0:
        return
    storage = t.untyped_storage()
    key = storage.data_ptr()
    prev = recs.get(key)
    if prev is not None and prev[0] != library:
        raise ForbiddenMixError(
            f"forbidden mix (RFC §5.4): storage at {key:#x} was used by {prev[0]} {prev[1]} and now by "
            f"{library} {op} in the same step; reduce each gradient bucket with one library per step")
    # the record holds the storage: a storage freed during the step (a temporary gloo output)
    # would otherwise leave its address to a new tensor, which then looked already used
    recs[key] = (library, op, storage)


def note_symsched(t: Any, op: str) -> None:
    """Record that a symsched collective writes/reduces ``t`` in the current step."""
    # every symsched call passes here: outside a step, return before any other call
    if _local.__dict__.get("records") is not None:
        _note(t, "symsched", op)


def note_framework(t: Any, op: str) -> None:
    """Record that a framework (gloo) collective writes/reduces ``t`` in the current step."""
    _note(t, "gloo", op)


def _wrap(name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor):
                note_framework(a, name)
            elif isinstance(a, (list, tuple)):
                for x in a:
                    note_framework(x, name)
        return fn(*args, **kwargs)

    wrapper.__symsched_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


@contextlib.contextmanager
def step(watch_torch: bool = True) -> Iterator[None]:
    """One communication stage (typically a training step) in which the mixing rule is checked."""
    if _records() is not None:
        raise RuntimeError("symm.interop.step() does not nest")
    _local.records = {}
    saved: Dict[str, Callable] = {}
    try:
        if watch_torch:
            for name in _WATCHED:
                fn = getattr(dist, name, None)
                if fn is not None and not hasattr(fn, "__symsched_wrapped__"):
                    saved[name] = fn
                    setattr(dist, name, _wrap(name, fn))
        yield
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)
        _local.records = None


def all_reduce(tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None) -> None:
    """``torch.distributed.all_reduce`` on the framework backend, recorded for the mixing check."""
    note_framework(tensor, "all_reduce")
    fn = getattr(dist.all_reduce, "__symsched_wrapped__", dist.all_reduce)
    fn(tensor, op=op, group=group)


def all_gather_into_tensor(output: torch.Tensor, input: torch.Tensor, group: Any = None) -> None:
    """``torch.distributed.all_gather_into_tensor`` (gloo), recorded for the mixing check."""
    note_framework(output, "all_gather_into_tensor")
    fn = getattr(dist.all_gather_into_tensor, "__symsched_wrapped__", dist.all_gather_into_tensor)
    fn(output, input, group=group)


def reduce_scatter_tensor(output: torch.Tensor, input: torch.Tensor, op: Any = dist.ReduceOp.SUM,
                          group: Any = None) -> None:
    """``torch.distributed.reduce_scatter_tensor`` (gloo), recorded for the mixing check."""
    note_framework(input, "reduce_scatter_tensor")
    fn = getattr(dist.reduce_scatter_tensor, "__symsched_wrapped__", dist.reduce_scatter_tensor)
    fn(output, input, op=op, group=group)
