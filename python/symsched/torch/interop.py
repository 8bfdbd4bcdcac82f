"""The interop rule (RFC §5.4, :mod:`symsched.core.interop`) for PyTorch: ``torch.distributed``'s
collectives (gloo here, Hccl on Ascend) are the framework side.

Inside ``with symm.interop.step():`` every collective a user can reach in torch is wrapped
(``watch_torch=True``, the default) so every tensor it receives is recorded (:func:`watched`):

* each function of ``torch.distributed.distributed_c10d.__all__`` but the set-up and query ones
  (:data:`NOT_COLLECTIVES`), as ``torch.distributed.<name>`` and as ``distributed_c10d.<name>`` —
  ``reduce_scatter_tensor``, ``all_gather_into_tensor``, ``all_reduce_coalesced``,
  ``reduce_scatter_single``, ``all_gather_single``, ``batch_isend_irecv`` (its ``P2POp``
  tensors), the object collectives …;
* every collective of ``torch.distributed._functional_collectives``;
* the methods of ``ProcessGroup`` and of the backend objects (``Backend``, ``ProcessGroupGloo`` …,
  what ``pg._get_backend(device)`` returns) called directly — ``pg.allreduce``, ``pg.allgather``,
  ``pg.alltoall_base``, ``pg.reduce_scatter``, ``pg.barrier`` … — all of them but the set-up and
  query ones (:data:`PG_NOT_COLLECTIVES`);
* the dispatcher ops ``torch.ops._c10d_functional.*`` (the functional collectives and
  ``torch.compile``'s graphs call them: ``all_reduce``, ``all_gather_into_tensor``,
  ``reduce_scatter_tensor``, ``all_to_all_single``, ``broadcast``, their in-place, ``_out`` and
  ``_coalesced`` forms), ``torch.ops._c10d_functional_autograd.*`` and ``torch.ops.c10d.*``,
  called as the packet or as an overload (``.default``), in eager code and in a compiled
  graph's run: every op there that takes a group (so not ``wait_tensor``). The op objects stay
  torch's own (their kernel entry is wrapped, :class:`WatchedKernel`), so torch's lookups by
  name and ``torch.compile`` see the real ops; a trace records nothing (its tensors are fake),
  the compiled graph's run does.

Each family is enumerated from torch itself, so a collective a new torch adds is watched
without a change here (``test_interop_names`` checks the classification). A torch function that
goes through several of these (``dist.all_reduce`` calls ``pg.allreduce``) records its tensor
once per layer, as the same library, which is no mix. The helpers ``all_reduce``,
``all_gather_into_tensor`` and ``reduce_scatter_tensor`` record their tensors whether or not the
functions are watched (outside a step nothing is recorded and nothing is wrapped).
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
           "functional_collectives", "process_group_classes", "process_group_collectives", "op_collectives",
           "WatchedKernel", "all_reduce", "all_gather_into_tensor",
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

#: methods of ``ProcessGroup`` and of the backend classes that communicate no tensor data
#: (queries, set-up, coalescing brackets, hooks, the pybind plumbing). Every *other* method
#: defined on those classes is watched, so a collective method a new torch adds is watched too.
PG_NOT_COLLECTIVES = frozenset({
    "_pybind11_conduit_v1_", "rank", "size", "name", "get_group_store", "split_group", "merge_remote_group",
    "abort", "shutdown", "_id", "_backend_id", "_set_sequence_number_for_group",
    "_get_sequence_number_for_group", "set_timeout", "_get_backend_name", "_start_coalescing", "_end_coalescing",
    "_register_backend", "_get_backend", "_set_default_backend", "_register_on_completion_hook",
    "_wait_for_pending_works", "_has_hooks", "_enable_collectives_timing", "_set_group_name", "_set_group_desc",
    "boxed", "setUsePgForSymmMemRendezvous", "shrink", "eager_connect_single_device", "supports_tensor_alloc",
    "allocate_tensor", "suspend", "resume", "memory_stats", "_set_default_timeout",
    # the debug wrapper's and NCCL's own: errors, communicator handles, NCCL group brackets,
    # timing, splits and memory-pool registration
    "get_error", "_comm_ptr", "_group_start", "_group_end", "_start_time_estimate", "_end_time_estimate",
    "comm_split_count", "_add_ephemeral_timeout", "_verify_work_timeout", "perform_nocolor_split",
    "register_mem_pool", "deregister_mem_pool", "_is_initialized", "_set_enable_nan_check",
})

#: the dispatcher namespaces whose ops may be collectives: the functional collectives (eager and
#: ``torch.compile``), their autograd forms, and the ops ``ProcessGroup`` methods dispatch to
OP_NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd", "c10d")


def _c10d() -> ModuleType:
    import torch.distributed.distributed_c10d as c10d

    return c10d


def _functional() -> Optional[ModuleType]:
    try:
        import torch.distributed._functional_collectives as funcol
    except ImportError:  # pragma: no cover - a torch without them
        return None
    return funcol


@functools.lru_cache(maxsize=None)
def c10d_collectives() -> Tuple[str, ...]:
    """Every collective of ``torch.distributed`` (its ``distributed_c10d.__all__`` functions that
    communicate): all of them but :data:`NOT_COLLECTIVES`."""
    c10d = _c10d()
    return tuple(n for n in getattr(c10d, "__all__", ()) if n not in NOT_COLLECTIVES
                 and inspect.isfunction(getattr(c10d, n, None)))


@functools.lru_cache(maxsize=None)
def functional_collectives() -> Tuple[str, ...]:
    """Every collective of ``torch.distributed._functional_collectives`` (functions defined
    there, but the autograd plumbing and :data:`FUNCTIONAL_NOT_COLLECTIVES`)."""
    funcol = _functional()
    if funcol is None:
        return ()
    return tuple(n for n, f in vars(funcol).items()
                 if not n.startswith("_") and inspect.isfunction(f) and f.__module__ == funcol.__name__
                 and not n.endswith(("_backward", "_setup_context")) and n not in FUNCTIONAL_NOT_COLLECTIVES)


def process_group_classes() -> Tuple[type, ...]:
    """``ProcessGroup``, ``Backend`` and every subclass of them loaded (``ProcessGroupGloo``,
    ``ProcessGroupNCCL``, the debug wrapper, a Python backend …)."""
    from torch._C import _distributed_c10d as C

    out: List[type] = []
    todo = [C.ProcessGroup, C.Backend]
    while todo:
        cls = todo.pop(0)
        if cls not in out:
            out.append(cls)
            todo.extend(cls.__subclasses__())
    return tuple(out)


def _is_method(v: Any) -> bool:
    # a pybind11 method is an ``instancemethod`` in the class dict; a Python backend's a function
    return type(v).__name__ == "instancemethod" or inspect.isfunction(v)


def process_group_collectives(cls: type) -> Tuple[str, ...]:
    """The collective methods ``cls`` itself defines (not inherited: the class that defines one
    is the one wrapped): all of them but :data:`PG_NOT_COLLECTIVES`."""
    return tuple(n for n, v in vars(cls).items()
                 if not n.startswith("__") and n not in PG_NOT_COLLECTIVES and _is_method(v))


def _takes_group(schema: Any) -> bool:
    # a collective names its group: ``group_name`` (the functional ops) or a ProcessGroup
    # object (``c10d::``); ``wait_tensor`` and ``check_for_nan`` take a tensor and no group
    return any(a.name == "group_name" or "ProcessGroup" in str(a.type) for a in schema.arguments)


@functools.lru_cache(maxsize=None)
def op_collectives() -> Tuple[Tuple[str, str], ...]:
    """Every collective dispatcher op, as (namespace, name): each op registered in
    :data:`OP_NAMESPACES` one of whose overloads takes a group. Read once (scanning every
    registered op costs milliseconds, too much for each step): torch registers these
    namespaces' ops when it is imported."""
    out = set()
    for qual in torch._C._dispatch_get_all_op_names():
        ns, _, name = qual.partition("::")
        name = name.split(".")[0]  # an entry may name an overload
        if ns not in OP_NAMESPACES or (ns, name) in out:
            continue
        packet = getattr(getattr(torch.ops, ns), name)
        if any(_takes_group(getattr(packet, o)._schema) for o in packet.overloads()):
            out.add((ns, name))
    return tuple(sorted(out))


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


def _note_args(label: str, note: Callable[[Any, str], None], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
    for a in args:
        for t in _tensors(a):
            note(t, label)
    for a in kwargs.values():
        for t in _tensors(a):
            note(t, label)


def _wrap(name: str, fn: Callable, note: Callable[[Any, str], None]) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # traced by torch.compile: the graph gets the original call (``dist.all_reduce``
        # becomes a ``_c10d_functional`` op there), which records its tensors when the graph runs
        if not torch.compiler.is_compiling():
            _note_args(name, note, args, kwargs)
        return fn(*args, **kwargs)

    wrapper.__symsched_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def _real(t: torch.Tensor) -> bool:
    # what a trace passes (fake, functional and other subclass tensors) has no storage to record
    return type(t) is torch.Tensor or type(t) is torch.nn.Parameter


class WatchedKernel:
    """An op's kernel entry during a step — ``OpOverload._op`` and ``OpOverloadPacket._op``,
    what their ``__call__`` runs — wrapped so the real tensors a call passes are recorded
    first. The op objects themselves stay what torch looks up (``torch.ops.<ns>.<name>``,
    ``lookup_op``, graph targets); an op hashes as its kernel entry and ops key torch's tables,
    so this wrapper hashes and compares as the entry it wraps."""

    __slots__ = ("_fn", "_label", "_note")

    def __init__(self, fn: Any, label: str, note: Callable[[Any, str], None]) -> None:
        self._fn = fn
        self._label = label
        self._note = note

    @property
    def __symsched_wrapped__(self) -> Any:
        return self._fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.compiler.is_compiling():
            for a in (*args, *kwargs.values()):
                for t in _tensors(a):
                    if _real(t):
                        self._note(t, self._label)
        return self._fn(*args, **kwargs)

    def __hash__(self) -> int:
        return hash(self._fn)

    def __eq__(self, other: Any) -> bool:
        return other is self or other is self._fn or (isinstance(other, WatchedKernel) and other._fn is self._fn)

    def __getattr__(self, name: str) -> Any:
        # only what the slots lack reaches here; an unset slot must not recurse into itself
        if name in WatchedKernel.__slots__:
            raise AttributeError(name)
        return getattr(self._fn, name)

    def __repr__(self) -> str:
        return f"watched {self._fn!r}"


def _op_entries(packet: Any) -> List[Any]:
    """The objects whose ``_op`` a call of the op runs: the packet and each overload."""
    return [packet] + [getattr(packet, o) for o in packet.overloads()]


@functools.lru_cache(maxsize=None)
def _op_targets() -> Tuple[Tuple[Any, str], ...]:
    """(entry, label) of every collective op's packet and overloads (:func:`op_collectives`;
    torch keeps these objects for the process's life)."""
    return tuple((e, f"torch.ops.{ns}.{n}") for ns, n in op_collectives()
                 for e in _op_entries(getattr(getattr(torch.ops, ns), n)))


def watched() -> Tuple[Tuple[Any, str], ...]:
    """Every (owner, name) :func:`watch` wraps: the collectives as ``torch.distributed.<name>``
    and ``torch.distributed.distributed_c10d.<name>``, the functional collectives, the
    collective methods of the process-group and backend classes, and the collective dispatcher
    ops (owner: their ``torch.ops`` namespace)."""
    c10d = _c10d()
    out: List[Tuple[Any, str]] = [(mod, n) for n in c10d_collectives() for mod in (dist, c10d)]
    funcol = _functional()
    if funcol is not None:
        out += [(funcol, n) for n in functional_collectives()]
    out += [(cls, n) for cls in process_group_classes() for n in process_group_collectives(cls)]
    out += [(getattr(torch.ops, ns), n) for ns, n in op_collectives()]
    return tuple(out)


def _label(owner: Any, name: str, funcol: Optional[ModuleType]) -> str:
    if owner is funcol:
        return f"_functional_collectives.{name}"
    if isinstance(owner, type):
        return f"{owner.__name__}.{name}"
    return name


#: the wrappers made so far, by (wrapped object, note): made once, not on every step (a step
#: wraps some 160 functions and kernel entries); each key's objects are held by its value
_made: Dict[Tuple[int, int], Tuple[Any, Any, Any]] = {}


def _wrapper(fn: Any, note: Callable[[Any, str], None], make: Callable[[], Any]) -> Any:
    hit = _made.get((id(fn), id(note)))
    if hit is not None and hit[0] is fn and hit[1] is note:
        return hit[2]
    w = make()
    _made[(id(fn), id(note))] = (fn, note, w)
    return w


def watch(note: Callable[[Any, str], None]) -> Callable[[], None]:
    """Wrap torch's collectives (:func:`watched`) so each passes its tensors to ``note`` first;
    returns the function that restores them."""
    saved: List[Tuple[Any, str, Any]] = []
    # one wrapper per function, whatever module it is reached through: torch compares some by
    # identity (``P2POp`` accepts ``dist.isend`` only if it *is* ``distributed_c10d.isend``)
    funcol = _functional()
    for entry, label in _op_targets():
        fn = entry._op
        if not isinstance(fn, WatchedKernel):
            saved.append((entry, "_op", fn))
            entry._op = _wrapper(fn, note, lambda: WatchedKernel(fn, label, note))
    for owner, name in watched():
        if isinstance(owner, torch._ops._OpNamespace):
            continue  # their kernel entries: above
        label = _label(owner, name, funcol)
        # a class's own dict: ``getattr`` would bind nothing here but could find an inherited one
        fn = vars(owner).get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if fn is None or hasattr(fn, "__symsched_wrapped__"):
            continue
        saved.append((owner, name, fn))
        setattr(owner, name, _wrapper(fn, note, lambda: _wrap(label, fn, note)))

    def restore() -> None:
        for owner, name, fn in saved:
            setattr(owner, name, fn)

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
