"""Process-wide runtime state: bootstrap, availability and the group cache.

The native runtime is started once per process. Bootstrap is collective over the ranks of the
node: every local rank must reach :func:`init` (directly, or through the first ``symm.empty`` or
collective on WORLD). Inside a framework's distributed job the rank variables come from the job
(:meth:`~symsched.core.adapter.FrameworkAdapter.job`) and a job id is agreed through the job's
store, so two jobs that reuse a ``MASTER_PORT`` never meet in the same rendezvous directory;
without one, the launcher variables (``RANK`` …, as ``symsched launch`` sets them) are used.
"""

from __future__ import annotations

import atexit
import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from . import aborts, adapter, knobs, nodes, profiling
from .errors import (GroupNotSetUpError, SymschedArgumentError, SymschedConfigError, SymschedError,
                     SymschedRuntimeError, SymschedTypeError, UnavailableError)
from .native import IMPORT_ERROR
from .native import module as _native
from .native import native

__all__ = ["native", "availability", "is_shmem_available", "init", "finalize", "runtime", "is_initialized",
           "GroupInfo", "group_ranks", "resolve_group", "check_peer", "world_size", "global_rank"]

_lock = threading.RLock()
_runtime: Any = None
_finalized = False
_groups: Dict[Tuple[int, ...], "GroupInfo"] = {}
#: groups this rank saw aborted (:mod:`symsched.core.failure`): their next collective call resets them
_aborted: set = set()

_STORE_KEY = "symsched/job_id"


def availability() -> Optional[str]:
    """None when symmetric memory can be used in this process, else the reason it cannot."""
    if _native is None:
        return IMPORT_ERROR
    reason = _native.availability()
    if reason:
        return reason
    if not adapter.is_bound():
        return "no framework is bound to symsched: import symsched (PyTorch) first"
    fw = adapter.active()
    if _runtime is None and fw.job() is None and not knobs.RANK.is_set():
        return fw.job_hint
    return None


def is_shmem_available() -> bool:
    """True when :func:`availability` reports no problem."""
    return availability() is None


def _job_id(fw: adapter.FrameworkAdapter, rank: int) -> str:
    """The job id: ``SYMSCHED_JOB_ID``, else one rank 0 makes, agreed through the job's store."""
    given = knobs.JOB_ID.get()
    if given is not None:
        return given
    return fw.share_from_rank0(_STORE_KEY, uuid.uuid4().hex[:16] if rank == 0 else None)


def init() -> None:
    """Start the symmetric-memory runtime and set up WORLD (idempotent).

    Collective over the ranks of this node (``symm.empty`` and every collective call it on first
    use). Validates every knob first (a bad value raises
    :class:`~symsched.SymschedConfigError` on every rank, before anything is set up). Inside a
    framework's distributed job the ranks are the job's; otherwise the launcher variables
    (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_PORT) are read by the runtime.
    """
    global _runtime
    with _lock:
        if _runtime is not None:
            return
        nat = native()
        reason = nat.availability()
        if reason:
            raise UnavailableError(reason)
        if not adapter.is_bound():
            raise UnavailableError("no framework is bound to symsched: import symsched (PyTorch) first")
        fw = adapter.active()
        knobs.check_all()
        engine = knobs.MATMUL_ENGINE.get()
        if engine not in (None, "builtin", fw.name):
            raise SymschedConfigError(
                f"{knobs.MATMUL_ENGINE.name}={engine!r} names another framework: this process runs symsched "
                f"for {fw.name} (accepted here: builtin, {fw.name})")
        job = fw.job()
        if job is not None:
            rank, world = job
            # the runtime bootstraps from the environment: hand it the job's ranks and id
            os.environ["RANK"] = str(rank)
            os.environ["WORLD_SIZE"] = str(world)
            os.environ.setdefault("MASTER_PORT", "0")
            os.environ[knobs.JOB_ID.name] = _job_id(fw, rank)
            if rank == 0:
                profiling.reset_trace_file()
        elif not knobs.RANK.is_set():
            raise UnavailableError(fw.job_hint)
        try:
            _runtime = nat.Runtime.from_env()
        except Exception as exc:  # the native error text is the useful part
            raise SymschedRuntimeError(f"symsched runtime failed to start: {exc}") from exc
        profiling.set_rank(int(_runtime.rank))
        atexit.register(_atexit)
        # WORLD is set up here, collectively, so that no later call sets it up by surprise
        # (a one-sided op on WORLD never waits for a rendezvous); a job spanning nodes has no
        # intra-node WORLD (every rank is refused alike, at once, without a rendezvous)
        try:
            resolve_group(None)
        except SymschedRuntimeError as exc:
            if "spans nodes" not in str(exc):
                raise


def finalize() -> None:
    """End this process's use of symsched (collective over WORLD): a barrier, then local rank 0
    removes the node's private rendezvous directory. Symmetric tensors must not be used after.
    Registered with ``atexit`` as well; calling it twice is harmless."""
    global _finalized
    if _runtime is None or _finalized:
        return
    _finalized = True
    profiling.flush_trace()
    try:
        world = tuple(range(int(_runtime.world_size)))
        if world in _aborted:  # the barrier below is collective: reset an aborted WORLD first
            resolve_group(None)
        _runtime.world_barrier()
    finally:
        if _runtime.owns_rendezvous_dir:
            shutil.rmtree(_runtime.rendezvous_dir, ignore_errors=True)


def _atexit() -> None:
    try:
        finalize()
    except Exception:  # pragma: no cover - a peer died: nothing sensible left to do at exit
        pass


def runtime() -> Any:
    """The native runtime, started on first use."""
    if _runtime is None:
        init()
    return _runtime


def is_initialized() -> bool:
    """Whether :func:`init` has run in this process."""
    return _runtime is not None


def world_size() -> int:
    """Ranks in the job: the framework job's, else the runtime's."""
    job = adapter.active().job()
    return job[1] if job is not None else int(runtime().world_size)


def global_rank() -> int:
    """This process's rank in the job: the framework job's, else the runtime's."""
    job = adapter.active().job()
    return job[0] if job is not None else int(runtime().rank)


@dataclass(frozen=True)
class GroupInfo:
    """A resolved group: its global ranks in group-rank order, this rank's index, the handle."""

    ranks: Tuple[int, ...]
    rank: int
    handle: Any
    label: str = ""
    #: prepared native launches of this group, keyed by (schedule, params, dtype, op, wire, sizes)
    prepared: Dict[Any, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def lane(self) -> str:
        """The trace ``tid`` of this group's events: ``group <runtime name>`` (e.g. ``group [0, 1]``),
        exactly as the executor names the lane of its step events, so both share one track."""
        return f"group {self.handle.name}"

    def describe(self) -> str:
        """``WORLD`` or the rank list, for profiler ranges and messages."""
        return self.label or str(list(self.ranks))


# fast path: the same group object resolves to the same GroupInfo (the object is kept so its
# id cannot be reused while cached)
_by_object: Dict[int, Tuple[Any, "GroupInfo"]] = {}


def group_ranks(group: Any, arg: str = "group") -> Tuple[int, ...]:
    """Global ranks of ``group`` in group-rank order: None = WORLD, a list or tuple of global
    ranks, or a framework group object (:meth:`~symsched.core.adapter.FrameworkAdapter.group_ranks`)."""
    fw = adapter.active()
    if group is None or fw.is_world(group):
        return tuple(range(world_size()))
    if isinstance(group, (list, tuple)):
        ranks = tuple(group)
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise SymschedTypeError(f"`{arg}` as a rank list must hold ints, got {list(group)!r}")
        return ranks
    return tuple(fw.group_ranks(group, arg))


def resolve_group(group: Any, arg: str = "group") -> GroupInfo:
    """Map a group (None = WORLD) to the runtime group, cached per rank list. Collective calls
    resolve their group through here: the first one sets the group up (every member takes
    part), and one on a group this rank saw aborted first runs the collective reset
    (:func:`symsched.core.aborts.reset`, then :func:`renew`)."""
    hit = _by_object.get(id(group))
    if hit is not None and hit[0] is group:
        info = hit[1]
    else:
        info = _resolve(group, arg)
        if not isinstance(group, (list, tuple)):
            _by_object[id(group)] = (group, info)
    if _aborted and info.ranks in _aborted:
        aborts.reset(info)
        info = renew(info)
    return info


def resolve_set_up(group: Any, what: str, arg: str = "group") -> GroupInfo:
    """The group of a one-sided op ``what``: it must have been set up by a collective call on
    this rank (one-sided ops never set a group up, which would be a hidden collective that
    blocks until every member arrives) and must not be aborted."""
    hit = _by_object.get(id(group))
    if hit is not None and hit[0] is group:
        info = hit[1]
    else:
        ranks = group_ranks(group, arg)
        with _lock:
            found = _groups.get(ranks)
        if found is None:
            _resolve_checks(ranks, arg)
            described = "WORLD" if ranks == tuple(range(world_size())) else str(list(ranks))
            raise GroupNotSetUpError(
                f"{what}: group {described} is not set up on this rank (rank {global_rank()}); one-sided "
                f"operations never set a group up. Call a collective on it first on every member — "
                f"symm.barrier(group) is the cheapest; symm.init() sets up WORLD")
        info = found
    if _aborted and info.ranks in _aborted:
        aborts.refuse_one_sided(info, what)
    return info


def mark_aborted(ranks: Tuple[int, ...]) -> None:
    """Remember that the group of ``ranks`` is aborted (its next collective call resets it)."""
    with _lock:
        _aborted.add(ranks)


def renew(info: GroupInfo) -> GroupInfo:
    """After a reset: the group's info over a renewed native handle (fresh launch epochs, no
    prepared launch), replacing ``info`` in every cache of this module."""
    with _lock:
        fresh = GroupInfo(ranks=info.ranks, rank=info.rank, handle=info.handle.renewed(), label=info.label)
        _groups[info.ranks] = fresh
        for k, (obj, old) in list(_by_object.items()):
            if old.ranks == info.ranks:
                _by_object[k] = (obj, fresh)
        _aborted.discard(info.ranks)
    return fresh


def _resolve_checks(ranks: Tuple[int, ...], arg: str) -> None:
    me = global_rank()
    if not ranks:
        raise SymschedArgumentError(f"`{arg}` is empty")
    if len(set(ranks)) != len(ranks):
        raise SymschedArgumentError(f"`{arg}` lists a rank twice: {list(ranks)}")
    world = world_size()
    bad = [r for r in ranks if not 0 <= r < world]
    if bad:
        raise SymschedArgumentError(f"`{arg}` names ranks {bad} outside the world of size {world}")
    if me not in ranks:
        raise SymschedArgumentError(f"`{arg}`: this rank ({me}) is not a member of group {list(ranks)}")


def _resolve(group: Any, arg: str) -> GroupInfo:
    ranks = group_ranks(group, arg)
    _resolve_checks(ranks, arg)
    me = global_rank()
    world = world_size()
    with _lock:
        info = _groups.get(ranks)
        if info is None:
            rt = runtime()
            try:
                # a group spanning nodes runs hierarchically (symsched.core.nodes)
                handle = nodes.handle_for(rt, ranks, me, adapter.active().host_engine)
                if handle is None:
                    handle = rt.group(list(ranks))
            except SymschedError:
                raise
            except Exception as exc:
                err = SymschedRuntimeError(f"cannot create group {list(ranks)}: {exc}")
                err._symsched_no_abort = True  # type: ignore[attr-defined]  # nothing to abort
                raise err from exc
            label = "WORLD" if ranks == tuple(range(world)) else str(list(ranks))
            info = GroupInfo(ranks=ranks, rank=ranks.index(me), handle=handle, label=label)
            _groups[ranks] = info
        return info


def check_peer(peer: Any, info: GroupInfo, arg: str) -> int:
    """A group-local rank in ``0..size-1``."""
    return check_peer_in(peer, info.ranks, arg)


def check_peer_in(peer: Any, ranks: Tuple[int, ...], arg: str) -> int:
    """A group-local rank of the group of global ``ranks``, in ``0..len(ranks)-1``."""
    if isinstance(peer, bool) or not isinstance(peer, int):
        raise SymschedTypeError(f"`{arg}` must be an int group-local rank, got {type(peer).__name__}")
    if not 0 <= peer < len(ranks):
        raise SymschedArgumentError(
            f"`{arg}`={peer} is outside the group (expected a group-local rank in 0..{len(ranks) - 1} "
            f"of group {list(ranks)})")
    return peer


def pair_ranks(peer: Any, group: Any, arg: str) -> Tuple[Tuple[int, ...], int, int]:
    """The two global ranks {this rank, group-local ``peer`` of ``group``} of a send/recv, sorted,
    and the indices of (this rank, the peer) in them. ``group`` only names the ranks: it is not
    set up, as only the pair takes part in a send/recv (setting the whole group up would be a
    collective its other members never enter)."""
    ranks = group_ranks(group)
    _resolve_checks(ranks, "group")
    p = check_peer_in(peer, ranks, arg)
    me_g, peer_g = global_rank(), ranks[p]
    if me_g == peer_g:
        raise SymschedArgumentError(f"`{arg}`={peer} is this rank itself; send/recv need a different peer")
    pair = (me_g, peer_g) if me_g < peer_g else (peer_g, me_g)
    return pair, pair.index(me_g), pair.index(peer_g)
