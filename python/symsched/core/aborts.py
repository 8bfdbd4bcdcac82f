"""A group's abort on this rank, below the group cache: the pending publication of this rank's
own abort (after a short grace), the collective reset of an aborted group, the refusal of
one-sided operations on one, and the mark on an exception that a guard already handled.

:mod:`symsched.core.state` (which resets an aborted group when a collective resolves it) and
:mod:`symsched.core.failure` (which aborts a group when a call fails, see its docs for the
contract) both use these; this module knows a group only as :class:`Group` (its ranks, native
handle and description), so it imports neither.
"""

from __future__ import annotations

import atexit
import threading
import time
from typing import Any, Dict, Optional, Protocol, Tuple

from .errors import PeerAbortedError, SymschedRuntimeError


class Group(Protocol):
    """What an abort needs of a group (:class:`symsched.core.state.GroupInfo` is one)."""

    ranks: Tuple[int, ...]
    handle: Any

    def describe(self) -> str: ...


def noted(exc: BaseException) -> bool:
    """Whether an inner guard already handled ``exc`` (guards nest: ``shmem_*`` → kernel)."""
    return bool(getattr(exc, "_symsched_failure_handled", False))


def mark_handled(exc: BaseException) -> None:
    try:
        exc._symsched_failure_handled = True  # type: ignore[attr-defined]
    except AttributeError:  # pragma: no cover - an exception type with __slots__
        pass


#: How long a rank that failed before launching waits before publishing the abort (its next
#: collective call on the group, or the process's exit, publishes it at once once this has
#: passed). The abort fails every call in flight on the group, so publishing it at once would
#: also fail a slower peer's *previous* call on the group, one it would have finished; the
#: grace lets it finish (typically well under a millisecond after a rank has left that call)
#: while peers waiting in the failed call still raise within the 100 ms the contract gives.
ABORT_GRACE_S = 0.04


class _Pending:
    __slots__ = ("info", "message", "deadline", "timer")

    def __init__(self, info: Group, message: str, deadline: float) -> None:
        self.info, self.message, self.deadline = info, message, deadline
        self.timer: Optional[threading.Timer] = None


_pending: Dict[Tuple[int, ...], _Pending] = {}
_pending_lock = threading.Lock()


def arm(info: Group, message: str, grace: float) -> None:
    """Publish this rank's abort of ``info``'s group after ``grace`` seconds (at once for 0)."""
    if grace <= 0:
        with _pending_lock:
            _pending.pop(info.ranks, None)
        info.handle.abort(message)
        return
    p = _Pending(info, message, time.monotonic() + grace)
    with _pending_lock:
        if info.ranks in _pending:
            return  # the first failure stays the one reported
        _pending[info.ranks] = p
    p.timer = threading.Timer(grace, fire, (info.ranks,))
    p.timer.daemon = True
    p.timer.start()


def fire(ranks: Tuple[int, ...], wait: bool = False) -> None:
    """Publish the pending abort of the group of ``ranks`` (``wait``: not before its grace)."""
    with _pending_lock:
        p = _pending.get(ranks)
    if p is None:
        return
    if wait:
        left = p.deadline - time.monotonic()
        if left > 0:
            time.sleep(left)
    with _pending_lock:
        if _pending.get(ranks) is not p:
            return
        del _pending[ranks]
        try:
            p.info.handle.abort(p.message)
        except Exception:  # noqa: BLE001 - a timer thread has nobody to report to
            pass
    if p.timer is not None and p.timer is not threading.current_thread():
        p.timer.cancel()


@atexit.register
def _publish_at_exit() -> None:
    """A rank that exits with a failure still pending publishes it (no peer may wait for it)."""
    for ranks in list(_pending):
        fire(ranks)


def reset(info: Group) -> None:
    """The collective reset of an aborted group (see :mod:`symsched.core.failure`); the caller
    then renews the group's info. Raises :class:`SymschedRuntimeError` when the reset cannot
    complete."""
    # this rank's own abort is published first (after its grace): the peers still waiting in
    # the failed call must learn of it, or they would never reach the reset
    fire(info.ranks, wait=True)
    try:
        info.handle.reset_after_abort()
    except Exception as exc:
        err = SymschedRuntimeError(
            f"group {info.describe()} was aborted and cannot be reset, so it is refused for good: {exc}")
        err._symsched_no_abort = True  # type: ignore[attr-defined]
        mark_handled(err)
        raise err from exc


def refuse_one_sided(info: Group, what: str) -> None:
    """One-sided ops never reset a group (the reset is collective): refuse them at once."""
    a: Optional[Tuple[Any, ...]] = None
    try:
        a = info.handle.aborted()
    except Exception:  # noqa: BLE001
        a = None
    who = f"rank {a[0]}: {a[2]}" if a is not None else "an earlier failure"
    err = PeerAbortedError(
        f"{what} on group {info.describe()}: the group is aborted ({who}); one-sided operations do not reset it: "
        f"call a collective on it first on every member (symm.barrier(group) is the cheapest)",
        rank=None if a is None else a[0], error=None if a is None else a[2], group=info.ranks)
    mark_handled(err)
    raise err
