"""MindSpore group names ↔ member world ranks.

A ``group`` argument on the MindSpore side is one of:

* ``None`` — WORLD;
* a group name (``str``) as ``mindspore.communication.create_group(name, ranks)`` or
  ``mint.distributed.new_group`` made it, including the world group's own name
  (``mccl_world_group`` on CPU). Names need MindSpore's communication initialised
  (``mindspore.communication.init()`` under ``msrun``, or :func:`launch.init_mccl`);
* a list or tuple of world ranks — for jobs with no MindSpore communication at all
  (ranks started by ``symsched launch``).

Ranks passed to ops (``target_rank``, ``src``…) are group-local, as MindSpore's
``get_group_rank_from_world_rank`` numbers them: a member's index in the group's rank list.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Tuple

from .errors import SymschedArgumentError, SymschedTypeError

_lock = threading.Lock()
#: Member ranks per group name. MindSpore names are bound to one rank list for the life of the
#: group; ``forget`` drops a name after ``destroy_group`` (a later group may reuse it).
_by_name: Dict[str, Tuple[int, ...]] = {}


def mccl_initialized() -> bool:
    """Whether MindSpore's communication (mccl on CPU) is initialised in this process."""
    try:
        from mindspore.communication import GlobalComm
    except ImportError:  # pragma: no cover - every 2.x build has it
        return False
    return bool(getattr(GlobalComm, "INITED", False))


def world_group_name() -> Optional[str]:
    """The world group's name (``mccl_world_group`` on CPU), or None before initialisation."""
    if not mccl_initialized():
        return None
    from mindspore.communication import GlobalComm

    return str(GlobalComm.WORLD_COMM_GROUP)


def name_ranks(name: str, arg: str = "group") -> Tuple[int, ...]:
    """World ranks of the MindSpore group ``name``, in group-rank order (cached per name)."""
    with _lock:
        hit = _by_name.get(name)
    if hit is not None:
        return hit
    if not mccl_initialized():
        raise SymschedArgumentError(
            f"`{arg}`={name!r} is a MindSpore group name, but MindSpore's communication is not initialised "
            f"in this process: call mindspore.communication.init() (under msrun) or "
            f"symsched.mindspore.init_mccl() first, or pass None (WORLD) or a list of world ranks")
    from mindspore.communication import get_process_group_ranks

    try:
        ranks = tuple(int(r) for r in get_process_group_ranks(name))
    except Exception as exc:  # MindSpore raises ValueError/RuntimeError with its own text
        raise SymschedArgumentError(f"`{arg}`={name!r} is not a MindSpore group of this process: {exc}") from exc
    with _lock:
        _by_name[name] = ranks
    return ranks


def forget(name: str) -> None:
    """Drop the cached ranks of ``name`` (call after ``mindspore.communication.destroy_group``)."""
    with _lock:
        _by_name.pop(name, None)


def member_ranks(group: Any, world: int, arg: str = "group") -> Tuple[int, ...]:
    """World ranks of ``group`` in group-rank order (``None`` = WORLD of ``world`` ranks)."""
    if group is None:
        return tuple(range(world))
    if isinstance(group, str):
        if group == world_group_name():
            return tuple(range(world))
        return name_ranks(group, arg)
    if isinstance(group, (list, tuple)):
        ranks = tuple(group)
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise SymschedTypeError(f"`{arg}` as a rank list must hold ints, got {list(group)!r}")
        return ranks
    raise SymschedTypeError(
        f"`{arg}` must be a MindSpore group name (str), a list of world ranks or None (WORLD), "
        f"got {type(group).__name__}")


def check_members(ranks: Tuple[int, ...], me: int, world: int, arg: str = "group") -> int:
    """Validate a rank list against the world and return this rank's group-local index."""
    if not ranks:
        raise SymschedArgumentError(f"`{arg}` is empty")
    if len(set(ranks)) != len(ranks):
        raise SymschedArgumentError(f"`{arg}` lists a rank twice: {list(ranks)}")
    bad = [r for r in ranks if not 0 <= r < world]
    if bad:
        raise SymschedArgumentError(f"`{arg}` names ranks {bad} outside the world of size {world}")
    if me not in ranks:
        raise SymschedArgumentError(f"`{arg}`: this rank ({me}) is not a member of group {list(ranks)}")
    return ranks.index(me)


def group_rank_of(ranks: Tuple[int, ...], world_rank: int) -> int:
    """The group-local rank of ``world_rank`` (as ``get_group_rank_from_world_rank``)."""
    try:
        return ranks.index(world_rank)
    except ValueError:
        raise SymschedArgumentError(f"world rank {world_rank} is not a member of group {list(ranks)}") from None


def world_rank_of(ranks: Tuple[int, ...], group_rank: int) -> int:
    """The world rank of group-local ``group_rank`` (as ``get_world_rank_from_group_rank``)."""
    if isinstance(group_rank, bool) or not isinstance(group_rank, int):
        raise SymschedTypeError(f"a group-local rank must be an int, got {type(group_rank).__name__}")
    if not 0 <= group_rank < len(ranks):
        raise SymschedArgumentError(
            f"group rank {group_rank} is outside group {list(ranks)} (expected 0..{len(ranks) - 1})")
    return ranks[group_rank]
