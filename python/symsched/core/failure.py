"""Failure propagation: one rank's failure inside a collective fails its peers at once.

A rank that raises between entering a collective and finishing it — a bad argument seen only
there, an exception in the adapter or the framework, a native error, ``KeyboardInterrupt`` —
would leave its peers waiting in their own call until the signal timeout. Instead the call's
guard (:func:`collective`, on every collective entry point: the kernels of
:mod:`symsched.core.coll`, the functional forms, the MC2 calls and every backward) marks the
group **aborted** with the error (``Group.abort`` over the runtime's abort record, which every
wait of every member watches) and re-raises it unchanged, with a note. Each peer's call then
raises :class:`~symsched.core.errors.PeerAbortedError` naming the failing rank and its error
within milliseconds, whatever the signal timeout.

**The group afterwards** (``docs/reliability.md``): every rank that saw the failure (its own
error or a ``PeerAbortedError``) remembers the group as aborted and drops its cached launches
for it. The next *collective* call on that group on each member — any collective, its
backward, or ``symm.barrier(group)`` — first runs the runtime's collective reset
(``reset_after_abort``, bounded by the signal timeout) and continues on a renewed group handle
whose launch epochs start again at 0; so a job that catches the error on every rank and goes on
calling collectives in the same order keeps working. One-sided operations (``shmem_put`` …) on
an aborted group raise at once (they must not run a collective reset): call a collective first.
If the reset cannot complete (a member exited, or does not reach a collective on the group in
time), the group is refused for good: every later call raises at once naming the first error.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional, TypeVar

from . import state
from .aborts import ABORT_GRACE_S, arm, mark_handled, noted
from .errors import AgreementError, PeerAbortedError, SymschedRuntimeError

F = TypeVar("F", bound=Callable[..., Any])

#: hooks that drop launch caches holding an aborted group's prepared launches (registered by
#: the modules that keep them: ``coll``, ``rules``)
_droppers: list = []


def on_abort(drop: Callable[[], None]) -> Callable[[], None]:
    """Register ``drop``, called when a group this rank uses is aborted (caches of prepared
    launches must go: after the reset they would count from stale epochs)."""
    _droppers.append(drop)
    return drop


def noticed(info: state.GroupInfo) -> None:
    """Remember that ``info``'s group is aborted on this rank: its next collective call resets
    it; cached launches of every group are dropped (aborts are rare, the caches refill)."""
    state.mark_aborted(info.ranks)
    for drop in _droppers:
        drop()


#: ``peer`` of a call that is not a send/recv
NO_PEER: Any = object()


def _group_info(group: Any, exc: BaseException, peer: Any = NO_PEER) -> Optional[state.GroupInfo]:
    """The resolved group a failed call used, or None when it cannot be named (a bad ``group``
    or ``peer`` argument, no runtime, or the failure was the group's own set-up). A send/recv
    (``peer`` given) runs on the pair {this rank, peer}: that is the group its peer waits in,
    and ``group`` itself is not set up by a send/recv."""
    if getattr(exc, "_symsched_no_abort", False):
        return None
    try:
        if peer is not NO_PEER:
            ranks, _me, _other = state.pair_ranks(peer, group, "peer")
            return state.resolve_group(list(ranks))
        return state.resolve_group(group)
    except BaseException:  # noqa: BLE001 - the original error is what the caller must see
        return None


def fail(exc: BaseException, op_name: str, group: Any, peer: Any = NO_PEER) -> None:
    """Abort ``group`` (a send/recv's pair with ``peer``) because this rank's ``op_name`` raised
    ``exc`` (see the module docs). Never raises: the caller re-raises ``exc``."""
    if noted(exc):
        return
    mark_handled(exc)
    if isinstance(exc, PeerAbortedError):
        return  # a peer's failure: the mapping already noted it
    if isinstance(exc, AgreementError):
        return  # raised alike on every rank before anything moved: nobody waits for this rank
    if isinstance(exc, GeneratorExit):
        return
    info = _group_info(group, exc, peer)
    if info is None:
        return
    try:
        message = f"{op_name}: {type(exc).__name__}: {exc}"
        # a native failure happened inside the launch (its waits are broken already): at once
        arm(info, message, 0.0 if isinstance(exc, SymschedRuntimeError) else ABORT_GRACE_S)
        noticed(info)
    except BaseException:  # noqa: BLE001 - never mask the original error
        return
    try:
        exc.add_note(f"symsched: this rank aborted group {info.describe()} (its peers raise PeerAbortedError); "
                     f"the group's next collective call on every member resets it")
    except AttributeError:  # pragma: no cover
        pass


def collective(op_name: str, group_at: int, peer_at: Optional[int] = None) -> Callable[[F], F]:
    """Guard a collective entry point whose ``group`` argument is positional argument
    ``group_at`` (or the keyword ``group``): any exception marks the group aborted first. A
    send/recv names its peer at ``peer_at``: its pair with the peer is the group aborted."""

    def wrap(fn: F) -> F:
        peer_name = list(inspect.signature(fn).parameters)[peer_at] if peer_at is not None else ""

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                group = kwargs["group"] if "group" in kwargs else (args[group_at] if len(args) > group_at else None)
                peer = NO_PEER
                if peer_at is not None:
                    peer = kwargs[peer_name] if peer_name in kwargs else (
                        args[peer_at] if len(args) > peer_at else None)
                fail(exc, op_name, group, peer)
                raise

        return guarded  # type: ignore[return-value]

    return wrap


def backward(op_name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Guard a rule's ``backward(ctx, *grads)``: the group travels in ``ctx.group`` (and a
    send/recv's peer in ``ctx.p2p_peer``)."""

    @functools.wraps(fn)
    def guarded(ctx: Any, *grads: Any) -> Any:
        try:
            return fn(ctx, *grads)
        except BaseException as exc:
            fail(exc, op_name, getattr(ctx, "group", None), getattr(ctx, "p2p_peer", NO_PEER))
            raise

    return guarded


def peer_aborted(op_name: str, info: state.GroupInfo, exc: BaseException) -> Optional[PeerAbortedError]:
    """The :class:`PeerAbortedError` a native error ``exc`` of ``op_name`` on ``info`` stands
    for (noting the abort), or None when the group is not aborted."""
    try:
        a = info.handle.aborted()
    except Exception:  # noqa: BLE001
        return None
    if a is None:
        return None
    rank, _local, message, permanent, _when = a
    noticed(info)
    err = PeerAbortedError(
        f"symsched {op_name} on group {info.describe()}: rank {rank} failed inside a collective on this group: "
        f"{message}" + ("" if not permanent else " (the group cannot be reset: it is refused for good)")
        + f"; the group's next collective call on every member resets it [{exc}]",
        rank=rank, error=message, group=info.ranks)
    mark_handled(err)
    return err
