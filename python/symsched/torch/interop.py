"""The interop rule (RFC §5.4, :mod:`symsched.core.interop`) for PyTorch: ``torch.distributed``'s
collectives (gloo here, Hccl on Ascend) are the framework side.

Inside ``with symm.interop.step():`` every collective of ``torch.distributed`` is wrapped
(``watch_torch=True``, the default) so every tensor it receives is recorded: each function of
``torch.distributed.distributed_c10d.__all__`` but the set-up and query ones
(:data:`NOT_COLLECTIVES`), as ``torch.distributed.<name>`` and as
``distributed_c10d.<name>`` — ``reduce_scatter_tensor``, ``all_gather_into_tensor``,
``all_reduce_coalesced``, ``reduce_scatter_single``, ``all_gather_single``,
``batch_isend_irecv`` (its ``P2POp`` tensors), the object collectives … — and every collective of
``torch.distributed._functional_collectives``. ``ProcessGroup`` methods called directly are
not watched; the helpers
``all_reduce``, ``all_gather_into_tensor`` and ``reduce_scatter_tensor`` record their tensors
whether or not the functions are watched (outside a step nothing is recorded).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from types import ModuleType
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist

from ..core import interop as _core
from ..core.interop import note_framework, note_symsched

__all__ = ["step", "note_symsched", "note_framework", "watch", "watched", "c10d_collectives",
           "functional_collectives", "all_reduce", "all_gather_into_tensor",
           "reduce_scatter_tensor"]

#: ``torch.distributed.distributed_c10d.__all__`` functions that communicate no tensor data
#: (set-up, queries, group construction). Every *other* function there is watched, so a
#: collective a new torch adds is watched without a change here (``test_interop_names``
#: enumerates them).
NOT_COLLECTIVES = frozenset({
    "destroy_process_group", "get_backend", "get_backend_config", "get_default_backend_for_device",
    "get_global_rank", "get_group_rank", "get_node_local_rank", "get_pg_count", "get_process_group_ranks",
    "get_rank", "get_world_size", "init_process_group", "is_backend_available", "is_gloo_available",
    "is_initialized", "is_mpi_available", "is_nccl_available", "is_torchelastic_launched", "is_ucc_available",
    "is_xccl_available", "new_group", "new_subgroups", "new_subgroups_by_enumeration", "record_comm",
    "shrink_group", "split_group", "supports_complex",
})

#: ``torch.distributed._functional_collectives`` functions that are not collectives: waits,
#: contexts, and the autograd plumbing of the others (``*_backward``, ``*_setup_context``).
FUNCTIONAL_NOT_COLLECTIVES = frozenset({"wait_tensor", "allow_inflight_collective_as_graph_input_ctx"})


def _c10d() -> ModuleType:
    import torch.distributed.distributed_c10d as c10d

    return c10d


def _functional() -> Optional[ModuleType]:
    try:
        import torch.distributed._functional_collectives as funcol
    except ImportError:  # pragma: no cover - a torch without them
        return None
    return funcol


def c10d_collectives() -> Tuple[str, ...]:
    """Every collective of ``torch.distributed`` (its ``distributed_c10d.__all__`` functions that
    communicate): all of them but :data:`NOT_COLLECTIVES`."""
    c10d = _c10d()
    return tuple(n for n in getattr(c10d, "__all__", ()) if n not in NOT_COLLECTIVES
                 and inspect.isfunction(getattr(c10d, n, None)))


def functional_collectives() -> Tuple[str, ...]:
    """Every collective of ``torch.distributed._functional_collectives`` (functions defined
    there, but the autograd plumbing and :data:`FUNCTIONAL_NOT_COLLECTIVES`)."""
    funcol = _functional()
    if funcol is None:
        return ()
    return tuple(n for n, f in vars(funcol).items()
                 if not n.startswith("_") and inspect.isfunction(f) and f.__module__ == funcol.__name__
                 and not n.endswith(("_backward", "_setup_context")) and n not in FUNCTIONAL_NOT_COLLECTIVES)


def _tensors(a: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """The tensors an argument carries: itself, the items of a list (of lists: the coalesced
    forms), a ``P2POp``'s tensor (``batch_isend_irecv``), a dict's values."""
    if isinstance(a, torch.Tensor):
        yield a
    elif depth > 2:
        return
    elif isinstance(a, (list, tuple)):
        for x in a:
            yield from _tensors(x, depth + 1)
    elif isinstance(a, dict):
        for x in a.values():
            yield from _tensors(x, depth + 1)
    elif isinstance(getattr(a, "tensor", None), torch.Tensor):
        yield a.tensor


def _wrap(name: str, fn: Callable, note: Callable[[Any, str], None]) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for a in list(args) + list(kwargs.values()):
            for t in _tensors(a):
                note(t, name)
        return fn(*args, **kwargs)

    wrapper.__symsched_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def watched() -> Tuple[Tuple[ModuleType, str], ...]:
    """Every (module, name) :func:`watch` wraps: the collectives as ``torch.distributed.<name>``
    and ``torch.distributed.distributed_c10d.<name>``, and the functional collectives."""
    c10d = _c10d()
    out = [(mod, n) for n in c10d_collectives() for mod in (dist, c10d)]
    funcol = _functional()
    if funcol is not None:
        out += [(funcol, n) for n in functional_collectives()]
    return tuple(out)


def watch(note: Callable[[Any, str], None]) -> Callable[[], None]:
    """Wrap ``torch.distributed``'s collectives (:func:`watched`) so each passes its tensors to
    ``note`` first; returns the function that restores them."""
    saved: List[Tuple[ModuleType, str, Callable]] = []
    # one wrapper per function, whatever module it is reached through: torch compares some by
    # identity (``P2POp`` accepts ``dist.isend`` only if it *is* ``distributed_c10d.isend``)
    wrappers: Dict[int, Callable] = {}
    funcol = _functional()
    for mod, name in watched():
        fn = getattr(mod, name, None)
        if fn is not None and not hasattr(fn, "__symsched_wrapped__"):
            saved.append((mod, name, fn))
            w = wrappers.get(id(fn))
            if w is None:
                label = name if mod is not funcol else f"_functional_collectives.{name}"
                w = wrappers[id(fn)] = _wrap(label, fn, note)
            setattr(mod, name, w)

    def restore() -> None:
        for mod, name, fn in saved:
            setattr(mod, name, fn)

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
