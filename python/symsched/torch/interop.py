"""The interop rule (RFC §5.4, :mod:`symsched.core.interop`) for PyTorch: ``torch.distributed``'s
collectives (gloo here, Hccl on Ascend) are the framework side.

Inside ``with symm.interop.step():`` the ``torch.distributed`` functions below are wrapped
(``watch_torch=True``, the default) so every tensor they receive is recorded; the helpers
``all_reduce``, ``all_gather_into_tensor`` and ``reduce_scatter_tensor`` record their tensors
whether or not the functions are watched (outside a step nothing is recorded).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Dict, Iterator

import torch
import torch.distributed as dist

from ..core import interop as _core
from ..core.interop import note_framework, note_symsched

__all__ = ["step", "note_symsched", "note_framework", "watch", "all_reduce", "all_gather_into_tensor",
           "reduce_scatter_tensor"]

_WATCHED = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather", "reduce_scatter",
            "broadcast", "all_to_all_single", "reduce")


def _wrap(name: str, fn: Callable, note: Callable[[Any, str], None]) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor):
                note(a, name)
            elif isinstance(a, (list, tuple)):
                for x in a:
                    note(x, name)
        return fn(*args, **kwargs)

    wrapper.__symsched_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def watch(note: Callable[[Any, str], None]) -> Callable[[], None]:
    """Wrap ``torch.distributed``'s collectives so each passes its tensors to ``note`` first;
    returns the function that restores them."""
    saved: Dict[str, Callable] = {}
    for name in _WATCHED:
        fn = getattr(dist, name, None)
        if fn is not None and not hasattr(fn, "__symsched_wrapped__"):
            saved[name] = fn
            setattr(dist, name, _wrap(name, fn, note))

    def restore() -> None:
        for name, fn in saved.items():
            setattr(dist, name, fn)

    return restore


@contextlib.contextmanager
def step(watch_torch: bool = True) -> Iterator[None]:
    """One communication stage (typically a training step) in which the mixing rule is checked;
    ``watch_torch`` also records ``torch.distributed``'s own collectives called meanwhile."""
    with _core.step(watch=watch_torch):
        yield


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
