"""Which standard-library schedule runs a call, and the thresholds that decide it.

Every choice depends only on what every rank of a consistent call has in common (sizes, the
wire format, the kind of output, the group size and the knobs), so every rank picks the same
schedule.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

from . import knobs
from .errors import SymschedRuntimeError
from .native import native

_schedule_names: Optional[frozenset] = None


def has_schedule(name: str) -> bool:
    """Whether this build's standard library has ``name``."""
    global _schedule_names
    if _schedule_names is None:
        _schedule_names = frozenset(native().schedules())
    return name in _schedule_names


def allreduce(nbytes: int, wire: Optional[str]) -> str:
    """One-shot for small messages, the pull two-shot above (the push two-shot only below a raised
    ``SYMSCHED_ALLREDUCE_PULL_MIN_BYTES``), the wire variant when narrowing; gloo's ring order
    when ``SYMSCHED_ALLREDUCE_ORDER=gloo``."""
    if wire is not None:
        return "allreduce_two_shot_wire"
    if knobs.ALLREDUCE_ORDER.get() == "gloo":
        return "allreduce_ring_gloo"
    if nbytes < knobs.ALLREDUCE_ONE_SHOT_MAX_BYTES.get():
        return "allreduce_one_shot"
    return "allreduce_two_shot_pull" if nbytes >= knobs.ALLREDUCE_PULL_MIN_BYTES.get() else "allreduce_two_shot"


def allgather_candidates() -> Tuple[str, ...]:
    """The all-gather schedules this build's standard library has (pull is newer than push,
    one-shot newer than pull)."""
    return tuple(s for s in ("allgather_push", "allgather_pull", "allgather_one_shot") if has_schedule(s))


def allgather_one_shot(nbytes: int, group_size: int) -> bool:
    """Whether an all-gather of ``nbytes`` output bytes runs the one-shot schedule (given the
    build has it): below ``SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES``, with a peer. It does not
    depend on the kind of output, so a call below the threshold need not look that up."""
    return group_size > 1 and nbytes < knobs.ALLGATHER_ONE_SHOT_MAX_BYTES.get()


def allgather(nbytes: int, symmetric_output: bool, group_size: int,
              candidates: Sequence[str] = ("allgather_push", "allgather_pull", "allgather_one_shot")) -> str:
    """An all-gather of ``nbytes`` output bytes among ``candidates``.

    Small messages take the one-shot schedule (:func:`allgather_one_shot`): every rank puts its
    input into a landing slot of each peer (free since the previous launch's exit credit) and
    copies the landed slots into its output, one signal round per call for any kind of output;
    push and pull need two or three (push waits for the peer to enter the launch before it
    writes into the peer's output). Above it, the push schedule puts into every peer's output,
    so a private output is staged (copied in and out of the heap, with a barrier); the pull
    schedule reads peers' staged inputs into an output only its owner writes, which the executor
    then uses in place. That choice depends on a per-rank property of the output: every rank of
    a group must pass the same kind of output (symmetric or not), as already required for roles
    peers access. A group of one has no peer: push is then a single local copy, and pull's
    staging copy would be pure overhead."""
    if "allgather_one_shot" in candidates and allgather_one_shot(nbytes, group_size):
        return "allgather_one_shot"
    if ("allgather_pull" in candidates and not symmetric_output and group_size > 1
            and nbytes >= knobs.ALLGATHER_PULL_MIN_BYTES.get()):
        return "allgather_pull"
    return "allgather_push" if "allgather_push" in candidates else candidates[0]


def reduce_scatter(wire: Optional[str], nbytes: Optional[int] = None, symmetric_input: bool = False) -> str:
    """The reduce-scatter schedule of a call with ``nbytes`` input bytes: the pull form (peers'
    blocks read where they are, two signal rounds) for a symmetric input at or above
    ``SYMSCHED_REDUCE_SCATTER_PULL_MIN_BYTES``; the push form (one round, landing writes into the
    peers' scratch) below it and for an ordinary input, which pull would first have to stage
    whole into the heap (measured slower: ``docs/performance.md``); the wire form when
    narrowing. Every rank of a call binds its input alike (the launch agreement checks it), so
    every rank picks the same. Both forms declare the same duals
    (``tests/test_reduce_scatter_pull.py`` checks it), so a backward that only needs the duals
    of the forward passes no size and gets the push form's name."""
    if wire is None:
        if (symmetric_input and nbytes is not None and nbytes >= knobs.REDUCE_SCATTER_PULL_MIN_BYTES.get()
                and has_schedule("reduce_scatter_pull")):
            return "reduce_scatter_pull"
        return "reduce_scatter_push"
    if has_schedule("reduce_scatter_push_wire"):
        return "reduce_scatter_push_wire"
    raise SymschedRuntimeError(  # pragma: no cover - only with a stale native module
        "low-precision reduce_scatter needs the wire-format schedule `reduce_scatter_push_wire`, "
        "which this build's standard library lacks; rebuild with scripts/python_env.sh")


def mc2(push: str, pull: str, knob: knobs.Knob, private_output: bool, group_size: int) -> str:
    """The MC2 schedule of a call: ``pull`` (peers read this rank's staged block or partial
    products where they are; a private output is written in place with no staging barrier or
    copy-out) when ``knob`` is on, the output is private (a symmetric one is better served by
    peers putting into it in place), there is a peer and the build has it; else ``push``. As
    for the all-gather, every rank of a group must pass the same kind of output (symmetric or
    not). ``SYMSCHED_MC2_AG_PULL`` (default on) and ``SYMSCHED_MC2_RS_PULL`` (default off:
    ``matmul_reduce_scatter_pull`` saves a landing copy of each partial product but adds a
    ``done`` round, which measured slower in wall time on the loaded 2-core host; see
    ``docs/performance.md``, "MC2 on the host") are the knobs."""
    if private_output and group_size > 1 and knob.get() and has_schedule(pull):
        return pull
    return push
