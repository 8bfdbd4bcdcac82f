"""The collectives' kernels (validated, not differentiable) and the call protocol they all follow.

The public in-place and functional forms (:mod:`symsched.core.collectives`,
:mod:`symsched.core.functional`) and the autograd rules wrap these.

**The call protocol.** Every collective call goes: *validate* (each argument, named in the
error, before anything is sent, so a bad call on one rank fails there without leaving a
half-started collective behind) → *bind* (group, schedule, role buffers as ``(address, bytes)``) → *record* the buffers it
communicates for the interop rule (:mod:`symsched.core.interop`; a forbidden mix raises here,
before anything is sent) → *launch* (the native prepared launch, inside the op's profiler
range and trace event when either watches). :func:`_call` is that path; a repeated call takes
its cached half, :func:`_fire` (record → launch), through the front-of-call cache below.
Every kernel is guarded (:func:`symsched.core.failure.collective`): whatever it raises, at any
step, first marks the group aborted, so the peers' calls raise
:class:`~symsched.core.errors.PeerAbortedError` naming this rank and its error at once instead
of waiting for the signal timeout; the group's next collective call on every member resets it.

**The front-of-call cache** (``_fast``): calls already validated once, per key of everything
their launch depends on (collective, ``id(group)``, dtypes, element counts, op, wire argument,
the knobs' raw values read, peers and counts): the group object (held so its id cannot be
reused while cached), the prepared native launch and the byte size of each role buffer. A hit
skips what only depends on the key (argument parsing, group mapping, schedule choice); what
depends on the tensors themselves (host memory, layout, contiguity: the adapter's
:meth:`~symsched.core.adapter.FrameworkAdapter.plain`; released memory) is still checked on
every call. Observed calls (profiler on, ``SYMSCHED_TRACE`` set) and rank lists passed as
``group`` (mutable) always take the full path.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Tuple

from . import adapter, dtypes, failure, knobs, launch, memory, schedules, state
from . import validate as v
from .adapter import Span
from .enums import ReduceOp, ReduceOpLike, parse_reduce_op
from .errors import SymschedArgumentError, SymschedError, SymschedTypeError
from .interop import local as _interop
from .interop import note_symsched

#: runtime names of the data types every collective accepts
DTYPES = tuple(dtypes.DATA)
FLOATS = tuple(sorted(dtypes.FLOATS))

_wire_env = knobs.LOW_PRECISION_DTYPE.raw
_one_shot_env = knobs.ALLREDUCE_ONE_SHOT_MAX_BYTES.raw
_ar_pull_env = knobs.ALLREDUCE_PULL_MIN_BYTES.raw
_pull_env = knobs.ALLGATHER_PULL_MIN_BYTES.raw
_ag_one_shot_env = knobs.ALLGATHER_ONE_SHOT_MAX_BYTES.raw
_rs_pull_env = knobs.REDUCE_SCATTER_PULL_MIN_BYTES.raw
_mc2_ag_pull_env = knobs.MC2_AG_PULL.raw
_mc2_rs_pull_env = knobs.MC2_RS_PULL.raw
_trace_env = knobs.TRACE.raw

# The adapter members the fast paths call, bound once it is installed (see ``_bind``).
_fw: Any = adapter.active()
_plain: Callable[[Any], Optional[Tuple[Any, int, int]]] = lambda t: None  # noqa: E731
_profiler_enabled: Callable[[], bool] = lambda: False  # noqa: E731
_Tensor: type = type(None)
#: the native cached alltoall (``_native.alltoall_hit``) when the adapter has one
_native_a2a: Optional[Callable[..., bool]] = None
#: the native cached launches' class (``_native.TensorHits``) when the adapter has one
_TensorHits: Optional[Callable[[], Any]] = None


@adapter.on_install
def _bind(fw: adapter.FrameworkAdapter) -> None:
    global _fw, _plain, _profiler_enabled, _Tensor, _native_a2a, _TensorHits
    _fw, _plain, _profiler_enabled, _Tensor = fw, fw.plain, fw.profiler_enabled, fw.tensor_type
    _native_a2a, _TensorHits = fw.native_alltoall_hit, fw.native_tensor_hits


def _observed() -> bool:
    """Whether the profiler or the trace watches ops (they take the instrumented path)."""
    return bool(_profiler_enabled() or _trace_env())


# ------------------------------------------------------------------------- the call protocol


Key = Optional[Tuple[Any, ...]]
_fast: Dict[Tuple[Any, ...], Tuple[Any, Any, Tuple[int, ...]]] = {}
_FAST_MAX = 4096
#: The native front-of-call cache of the all-reduce, all-gather and reduce-scatter (when the
#: adapter has ``native_tensor_hits``): per *head* — the ``_fast`` key without the tensors'
#: dtypes and element counts (collective, ``id(group)``, op, wire argument, knobs' raw values)
#: — the group object and a native ``TensorHits``, which reads the tensors, finds the launch
#: kept for their dtypes, counts and (where the schedule depends on it) kinds of buffer, checks
#: them as a hit here does (released memory included) and launches, in one call: at 8 B the
#: Python front was most of a call's time.
_hits: Dict[Tuple[Any, ...], Tuple[Any, Any]] = {}


@failure.on_abort
def _drop_cached() -> None:
    """An aborted group's cached launches count from epochs its reset voids: drop them all."""
    _fast.clear()
    _a2a_native.clear()
    _hits.clear()


def _hit(key: Tuple[Any, ...], group: Any) -> Optional[Tuple[Any, Any, Tuple[int, ...]]]:
    """The cached launch for ``key``, or None when the full path must run."""
    try:
        hit = _fast.get(key)
    except TypeError:  # an unhashable argument: the full path reports it
        return None
    # _observed() inlined: every cached call pays it
    if hit is None or hit[0] is not group or _profiler_enabled() or _trace_env():
        return None
    return hit


def _native_hits(head: Tuple[Any, ...], group: Any) -> Any:
    """The native cached launches kept under ``head`` (see ``_hits``), or None when the call
    must take the Python path: nothing kept, an observed call (profiler, trace), or a call
    inside ``interop.step()`` (the Python path records its tensors first)."""
    try:
        h = _hits.get(head)
    except TypeError:  # an unhashable argument: the full path reports it
        return None
    # _observed() inlined: every cached call pays it
    if (h is None or h[0] is not group or _profiler_enabled() or _trace_env()
            or _interop.__dict__.get("records") is not None):
        return None
    return h[1]


def _keep_native(head: Key, group: Any, prepared: Any, spans: Sequence[Span],
                 kinds: Optional[Sequence[Optional[bool]]] = None) -> None:
    """Keep ``prepared`` under ``head`` in the native cache for tensors like ``spans`` (in
    buffer order) and, where ``kinds`` says, symmetric (True) or not (False) — the buffer kinds
    a ``_fast`` key holds — on the terms ``_remember`` keeps a launch in ``_fast``."""
    if _TensorHits is None or head is None or isinstance(group, list) or any(not s.nbytes for s in spans):
        return
    try:
        h = _hits.get(head)
        if h is None or h[0] is not group:
            if len(_hits) >= _FAST_MAX:
                _hits.clear()
            h = _hits[head] = (group, _TensorHits())
    except TypeError:  # an unhashable (but valid) argument: such calls take the Python path
        return
    kept = h[1].add([s.dtype for s in spans], [s.numel for s in spans], [s.nbytes for s in spans], prepared,
                    None if kinds is None else list(kinds))
    if not kept and not len(h[1]):
        del _hits[head]  # a launch across nodes (host steps) stays with the Python path


def _launch_failed(op_name: str, group: Any, failed: Tuple[Any, BaseException]) -> NoReturn:
    """Raise the error of a native cached launch (``TensorHits.run``) as :func:`_fire` raises
    ``Prepared.run``'s."""
    prepared, exc = failed
    if isinstance(exc, (SymschedError, TypeError)):
        raise exc
    _native_error(op_name, group, prepared, exc)  # type: ignore[arg-type]


def _remember(key: Key, group: Any, prepared: Any, nbytes: Tuple[int, ...]) -> None:
    # a rank list can be mutated in place behind an unchanged id: only immutable groups are
    # cached; nor are calls with an empty buffer (a tensor symm.free released has no elements
    # left: only the full path's checks tell it apart)
    if key is None or isinstance(group, list) or 0 in nbytes:
        return
    if len(_fast) >= _FAST_MAX:
        _fast.clear()
    try:
        _fast[key] = (group, prepared, nbytes)
    except TypeError:  # an unhashable (but valid) argument: such calls always take the full path
        pass


def _fire(op_name: str, group: Any, prepared: Any, buffers: List[Tuple[int, int]],
          counts: Optional[Tuple[List[int], Sequence[int]]] = None, written: Any = None) -> None:
    """The cached half of the protocol: record ``written`` (a tensor or a tuple of them) for
    the interop rule, then launch ``prepared``, mapping native errors as :func:`launch.run`.

    ``group`` is the caller's group argument, or an already resolved ``GroupInfo`` (backward
    passes, which record nothing: their buffers are fresh); it is only resolved to name the
    ranks in an error."""
    if written is not None and _interop.__dict__.get("records") is not None:
        note_symsched(written, op_name)
    try:
        if counts is None:
            prepared.run(buffers)
        else:
            prepared.run_counts(buffers, counts[0], counts[1])
    except (SymschedError, TypeError):
        raise
    except Exception as exc:
        _native_error(op_name, group, prepared, exc)


def _call(key: Key, group: Any, op_name: str, info: state.GroupInfo, schedule: str,
          buffers: List[Tuple[int, int]], dtype: str, sizes: Dict[str, int], written: Any,
          cached: Tuple[int, ...], **launch_args: Any) -> Any:
    """The validated half of the protocol: record ``written`` for the interop rule, launch
    (profiled: :func:`launch.run`), and remember the launch under ``key`` with ``cached`` (the
    role buffers' byte sizes, and whatever else a hit needs). Returns the prepared launch."""
    note_symsched(written, op_name)
    prepared = launch.run(op_name, info, schedule, buffers, dtype, sizes, **launch_args)
    _remember(key, group, prepared, cached)
    return prepared


def _native_error(op_name: str, group: Any, prepared: Any, exc: Exception) -> NoReturn:
    if isinstance(group, _PairOf):
        info = pair(group.peer, group.group, group.arg)[0]
    else:
        info = group if isinstance(group, state.GroupInfo) else state.resolve_group(group)
    launch.native_error(op_name, info, prepared.schedule, exc)


def _buf(s: Span) -> Tuple[int, int]:
    return (s.ptr, s.nbytes)


def _bufs(ts: Sequence[Any], nbytes: Sequence[int]) -> List[Tuple[int, int]]:
    """``(address, bytes)`` of plain tensors ``ts`` with the cached byte sizes."""
    return [(_plain(t)[2], n) for t, n in zip(ts, nbytes)]  # type: ignore[index]


def _reduce_op(op: ReduceOpLike, s: Span) -> ReduceOp:
    r = parse_reduce_op(op)
    if r is ReduceOp.AVG and s.name not in dtypes.FLOATS:
        raise SymschedArgumentError(f"`op`='avg' needs a floating dtype, got {s.dtype}")
    return r


def _wire_for(r: ReduceOp, low_precision_dtype: Any, data: str) -> Optional[str]:
    """The wire format of a reduction: explicit or env default, never for max/min (a narrower
    wire would return values no rank holds), which is an error only when asked explicitly."""
    wire = v.wire(low_precision_dtype, data)
    if wire is not None and r in (ReduceOp.MAX, ReduceOp.MIN):
        if low_precision_dtype is not None:
            raise SymschedArgumentError(f"`low_precision_dtype` applies to 'sum'/'avg' only, got op='{r.value}'")
        return None
    return wire


def _symmetric(ptr: int) -> bool:
    """Whether a tensor at ``ptr`` starts in a live symmetric block (cheap when nothing was
    allocated): the all-gather schedules depend on it, so it is part of the call's cache key."""
    return bool(memory._starts) and memory.symmetric(ptr, 0)


# ------------------------------------------------------------------------------ collectives


# The cached halves of the all-gather, reduce-scatter and all-reduce are inlined in their entry
# points, which guard themselves (``failure.fail``) instead of going through the
# ``failure.collective`` wrapper: at 8 B a call's Python front is most of its time, and the
# wrapper's ``*args, **kwargs`` forwarding and (for the all-gather) the symmetric lookup were
# ~0.6 µs of it. A miss runs the guarded full path.


def allgather(output: Any, input: Any, group: Any = None) -> None:
    """``output`` (P·n elements) ← concatenation of every rank's ``input`` (n elements).

    Below ``SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES`` of output the one-shot schedule runs, for any
    kind of output. Above it, a symmetric ``output`` is written by the push schedule (peers put
    into it in place); a private one by the pull schedule at or above
    ``SYMSCHED_ALLGATHER_PULL_MIN_BYTES`` (each rank reads peers' staged inputs straight into
    its own output, with no staging of the output).

    The cache key holds the kind of output only when the schedule depends on it (at or above
    the one-shot threshold): a one-shot launch is cached under the key without it, looked up
    first."""
    key: Key = None
    head = ("allgather", id(group), _pull_env(), _ag_one_shot_env())
    try:
        h = _hits.get(head)
        # _observed() inlined; inside interop.step() the Python path records the tensors
        if (h is not None and h[0] is group and not _profiler_enabled() and not _trace_env()
                and _interop.__dict__.get("records") is None):
            done = h[1].run((input, output), memory._records if memory._dead else None, memory._frees)
            if done is not False:  # the launch it ran, or (launch, error)
                if type(done) is tuple:
                    _launch_failed("allgather", group, done)
                return
        po, pi = _plain(output), _plain(input)
        if po is not None and pi is not None:
            key = head + (po[0], po[1], pi[0], pi[1])
            hit = _fast.get(key)
            if hit is None:
                hit = _fast.get(key + (_symmetric(po[2]),))
            # _observed() inlined: every cached call pays it
            if (hit is not None and hit[0] is group and not _profiler_enabled() and not _trace_env()
                    and (not memory._dead or (memory.live(pi[2], hit[2][0]) and memory.live(po[2], hit[2][1])))):
                _fire("allgather", group, hit[1], [(pi[2], hit[2][0]), (po[2], hit[2][1])], None, output)
                return
    except BaseException as exc:
        failure.fail(exc, "allgather", group)
        raise
    _allgather_full(output, input, group, key, head)


@failure.collective("allgather", 2)
def _allgather_full(output: Any, input: Any, group: Any, key: Key, head: Key) -> None:
    so = v.tensor(output, "output_tensor", names=DTYPES)
    si = v.tensor(input, "input_tensor", names=DTYPES)
    v.same_dtype(so, "output_tensor", si, "input_tensor")
    info = state.resolve_group(group)
    if so.numel != info.size * si.numel:
        raise SymschedArgumentError(
            f"`output_tensor` must have group size × input elements = {info.size} × {si.numel} = "
            f"{info.size * si.numel}, got {so.numel}")
    symmetric = _symmetric(so.ptr)
    schedule = schedules.allgather(so.nbytes, symmetric, info.size, schedules.allgather_candidates())
    if key is not None and schedule != "allgather_one_shot":
        key += (symmetric,)
    prepared = _call(key, group, "allgather", info, schedule, [_buf(si), _buf(so)], si.name, {"n": si.numel},
                     output, (si.nbytes, so.nbytes), nbytes=so.nbytes)
    if key is not None:
        _keep_native(head, group, prepared, (si, so), None if schedule == "allgather_one_shot" else (None, symmetric))


def reduce_scatter(output: Any, input: Any, op: ReduceOpLike = "sum", group: Any = None,
                   low_precision_dtype: Any = None) -> None:
    """``output`` (n) ← block ``rank`` of the element-wise reduction of every rank's ``input`` (P·n).

    With a wire format (per call, or ``SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE``) peers' blocks
    travel narrowed and are accumulated in f32; this rank's own block stays full precision.

    The cache key holds the kind of input only where the schedule depends on it (at or above
    ``SYMSCHED_REDUCE_SCATTER_PULL_MIN_BYTES``, no wire): a launch below is cached under the key
    without it, looked up first."""
    key: Key = None
    head = ("reduce_scatter", id(group), op, low_precision_dtype, _wire_env(), _rs_pull_env())
    try:
        h = _native_hits(head, group)
        if h is not None:
            done = h.run((input, output), memory._records if memory._dead else None, memory._frees)
            if done is not False:  # the launch it ran, or (launch, error)
                if type(done) is tuple:
                    _launch_failed("reduce_scatter", group, done)
                return
        po, pi = _plain(output), _plain(input)
        if po is not None and pi is not None:
            key = head + (po[0], po[1], pi[0], pi[1])
            hit = _hit(key, group)
            if hit is None:
                hit = _hit(key + (_symmetric(pi[2]),), group)
            if hit is not None and (not memory._dead or (memory.live(pi[2], hit[2][0])
                                                         and memory.live(po[2], hit[2][1]))):
                _fire("reduce_scatter", group, hit[1], [(pi[2], hit[2][0]), (po[2], hit[2][1])], None, input)
                return
    except BaseException as exc:
        failure.fail(exc, "reduce_scatter", group)
        raise
    _reduce_scatter_full(key, output, input, op, group, low_precision_dtype, head)


@failure.collective("reduce_scatter", 4)
def _reduce_scatter_full(key: Key, output: Any, input: Any, op: ReduceOpLike, group: Any,
                         low_precision_dtype: Any, head: Key) -> None:
    so = v.tensor(output, "output_tensor", names=DTYPES)
    si = v.tensor(input, "input_tensor", names=DTYPES)
    v.same_dtype(so, "output_tensor", si, "input_tensor")
    r = _reduce_op(op, si)
    wire = _wire_for(r, low_precision_dtype, si.name)
    info = state.resolve_group(group)
    if si.numel != info.size * so.numel:
        raise SymschedArgumentError(
            f"`input_tensor` must have group size × output elements = {info.size} × {so.numel} = "
            f"{info.size * so.numel}, got {si.numel}")
    symmetric = _symmetric(si.ptr)
    by_kind = wire is None and si.nbytes >= knobs.REDUCE_SCATTER_PULL_MIN_BYTES.get()
    if key is not None and by_kind:
        key += (symmetric,)
    prepared = _call(key, group, "reduce_scatter", info, schedules.reduce_scatter(wire, si.nbytes, symmetric),
                     [_buf(si), _buf(so)], si.name, {"n": so.numel}, input, (si.nbytes, so.nbytes), reduce=r,
                     wire=wire, nbytes=si.nbytes)
    if key is not None:
        _keep_native(head, group, prepared, (si, so), (symmetric, None) if by_kind else None)


def allreduce(tensor: Any, op: ReduceOpLike = "sum", group: Any = None, low_precision_dtype: Any = None) -> None:
    """In place: ``tensor`` ← element-wise reduction over the group, identical on every rank."""
    key: Key = None
    head = ("allreduce", id(group), op, low_precision_dtype, _wire_env(), _one_shot_env(), _ar_pull_env())
    try:
        try:  # _native_hits() inlined: the hottest entry point
            h = _hits.get(head)
        except TypeError:  # an unhashable argument: the full path reports it
            h = None
        if (h is not None and h[0] is group and not _profiler_enabled() and not _trace_env()
                and _interop.__dict__.get("records") is None):
            done = h[1].run((tensor,), memory._records if memory._dead else None, memory._frees)
            if done is not False:  # the launch it ran, or (launch, error)
                if type(done) is tuple:
                    _launch_failed("allreduce", group, done)
                return
        p = _plain(tensor)
        if p is not None:
            key = head + (p[0], p[1])
            hit = _hit(key, group)
            if hit is not None and (not memory._dead or memory.live(p[2], hit[2][0])):
                _fire("allreduce", group, hit[1], [(p[2], hit[2][0])], None, tensor)
                return
    except BaseException as exc:
        failure.fail(exc, "allreduce", group)
        raise
    _allreduce_full(key, tensor, op, group, low_precision_dtype, head)


@failure.collective("allreduce", 3)
def _allreduce_full(key: Key, tensor: Any, op: ReduceOpLike, group: Any, low_precision_dtype: Any,
                    head: Key) -> None:
    s = v.tensor(tensor, "tensor", names=DTYPES)
    r = _reduce_op(op, s)
    wire = _wire_for(r, low_precision_dtype, s.name)
    info = state.resolve_group(group)
    prepared = _call(key, group, "allreduce", info, schedules.allreduce(s.nbytes, wire), [_buf(s)], s.name,
                     {"n": s.numel}, tensor, (s.nbytes,), reduce=r, wire=wire, nbytes=s.nbytes)
    if key is not None:
        _keep_native(head, group, prepared, (s,))


#: The native cached alltoall per ``(id(group), dtype)``: the group object (held so its id
#: cannot be reused while cached) and the prepared ``alltoallv_push`` launch, which does not
#: depend on the counts. ``_native_a2a`` checks a call's tensors and counts against it and
#: launches in one native call (see ``alltoall_hit``).
_a2a_native: Dict[Tuple[int, Any], Tuple[Any, Any]] = {}


def alltoall_hit(send_tensor_list: Any, receive_tensor: Any, receive_list: Any, group: Any, grad: bool) -> bool:
    """Run an alltoall whose group and dtype were launched before, in one native call that
    makes the cached path's checks (``_native.alltoall_hit``, released memory included), and
    return True; return False, having sent nothing, when the call is not such a hit or a check
    declines (the full path then validates and reports). ``grad``: autograd is recording, so a
    send tensor that requires grad declines (it takes the differentiable form). Guarded as
    :func:`failure.collective` guards, inline: this is a hot entry point."""
    if not isinstance(receive_tensor, _Tensor):
        return False
    try:
        dtype = receive_tensor.dtype
        hit = _a2a_native.get((id(group), dtype))
        # _observed() inlined: every call pays it
        if hit is None or hit[0] is not group or _profiler_enabled() or _trace_env():
            return False
        native_hit = _native_a2a
        if native_hit is None:
            return False
        note_symsched(receive_tensor, "alltoall")  # inside interop.step(), a mix raises here
        try:
            # with released records kept, the native call looks heap buffers up in them (and
            # keeps spans found live in ``memory._live_ok``, as ``memory.live`` does)
            return native_hit(hit[1], send_tensor_list, receive_tensor, dtype, receive_list, grad,
                              memory._records if memory._dead else None, memory._released or None)
        except (SymschedError, TypeError):
            raise
        except Exception as exc:
            _native_error("alltoall", group, hit[1], exc)
    except BaseException as exc:
        failure.fail(exc, "alltoall", group)
        raise


@failure.collective("alltoall", 3)
def alltoall(send_tensor_list: Sequence[Any], receive_tensor: Any, receive_list: Any, group: Any = None, *,
             tried: bool = False) -> None:
    """All-to-all-v: ``send_tensor_list[j]`` goes to rank j; ``receive_tensor`` holds, in rank
    order, ``receive_list[j]`` elements from each rank j.

    One round per call: the runtime's eager protocol sends each rank a header carrying the
    sender's send and receive counts (with chunks up to 4 KiB inline) into a landing slot of
    the receiver, which checks the whole count matrix (a mismatch is an argument error on every
    rank, with no output written) and then copies the chunks out; larger chunks it copies
    straight from the sender's memory. Chunks of a symmetric send list (views of one
    ``symm.empty`` tensor) go this way at any size; chunks over 64 KiB of an ordinary send list
    run the ``alltoallv_push`` plan after that round, with the matrix the headers carried.
    Under ``SYMSCHED_TRACE`` each call's steps appear as ``alltoallv_eager`` events.

    A call whose group and dtype ran before is checked and launched natively
    (``alltoall_hit``), unless the caller already tried that (``tried``); a send list that is
    not one buffer in order takes the cached Python path below, which concatenates it."""
    if not tried and alltoall_hit(send_tensor_list, receive_tensor, receive_list, group, False):
        return
    key: Key = None
    if isinstance(send_tensor_list, (list, tuple)) and isinstance(receive_list, (list, tuple)) and send_tensor_list:
        pr = _plain(receive_tensor)
        scan = None if pr is None else _fw.scan_list(send_tensor_list, pr[0], _fw.itemsize(pr[0]),
                                                     memory.live if memory._dead else None)
        if pr is not None and scan is not None:
            send, span = scan
            # every send tensor has the receive tensor's dtype (checked by the scan), so the
            # dtype once and the counts identify the call; the types too: True == 1 must not
            # let a bool count past validation
            key = ("alltoall", id(group), pr[0], pr[1], tuple(send), tuple(receive_list),
                   tuple(map(type, receive_list)))
            hit = _hit(key, group)
            if hit is not None and (not memory._dead or memory.live(pr[2], hit[2][1])):
                flat = None
                if span is None:
                    flat = _fw.concat(send_tensor_list)
                    span = (_plain(flat)[2], hit[2][0])  # type: ignore[index]
                _fire("alltoall", group, hit[1], [span, (pr[2], hit[2][1])], (send, receive_list), receive_tensor)
                return
    info = state.resolve_group(group)
    if not isinstance(send_tensor_list, (list, tuple)):
        raise SymschedTypeError("`send_tensor_list` must be a list of tensors, one per group rank")
    if len(send_tensor_list) != info.size:
        raise SymschedArgumentError(
            f"`send_tensor_list` must have one tensor per group rank ({info.size}), got {len(send_tensor_list)}")
    sr = v.tensor(receive_tensor, "receive_tensor", names=DTYPES)
    sends = []
    for i, t in enumerate(send_tensor_list):
        s = v.tensor(t, f"send_tensor_list[{i}]", names=DTYPES, contiguous=False)
        v.same_dtype(s, f"send_tensor_list[{i}]", sr, "receive_tensor")
        sends.append(s.numel)
    recv = v.counts(receive_list, "receive_list", info.size)
    if sum(recv) != sr.numel:
        raise SymschedArgumentError(
            f"`receive_tensor` must hold sum(receive_list) = {sum(recv)} elements, got {sr.numel}")
    flat = _fw.packed(send_tensor_list)
    if flat is None:
        flat = _fw.concat(send_tensor_list) if sum(sends) else _fw.empty((0,), sr.dtype)
    sf = _fw.span(flat, "send_tensor_list")
    prepared = _call(key, group, "alltoall", info, "alltoallv_push", [_buf(sf), _buf(sr)], sr.name, {},
                     receive_tensor, (sf.nbytes, sr.nbytes), send_counts=sends, recv_counts=recv, nbytes=sf.nbytes)
    # a rank list can change behind an unchanged id; an adapter may have no native call
    if _native_a2a is not None and not isinstance(group, list):
        if len(_a2a_native) >= _FAST_MAX:
            _a2a_native.clear()
        _a2a_native[(id(group), sr.dtype)] = (group, prepared)


@failure.collective("broadcast", 2)
def broadcast(tensor: Any, src: int, group: Any = None) -> None:
    """In place: ``tensor`` ← ``src``'s tensor (``src`` group-local)."""
    p = _plain(tensor)
    key: Key = None
    if p is not None:
        key = ("broadcast", id(group), p[0], p[1], src, type(src))
        hit = _hit(key, group)
        if hit is not None and (not memory._dead or memory.live(p[2], hit[2][0])):
            _fire("broadcast", group, hit[1], [(p[2], hit[2][0])], None, tensor)
            return
    s = v.tensor(tensor, "tensor", names=DTYPES)
    info = state.resolve_group(group)
    root = state.check_peer(src, info, "src")
    _call(key, group, "broadcast", info, "broadcast_push", [_buf(s)], s.name, {"n": s.numel}, tensor, (s.nbytes,),
          params={"root": root}, nbytes=s.nbytes)


@failure.collective("reduce", 3)
def reduce(tensor: Any, dst: int, op: ReduceOpLike = "sum", group: Any = None) -> None:
    """In place on ``dst``: ``tensor`` ← reduction over the group; other ranks' tensors unspecified."""
    p = _plain(tensor)
    key: Key = None
    if p is not None:
        key = ("reduce", id(group), p[0], p[1], dst, type(dst), op)
        hit = _hit(key, group)
        if hit is not None and (not memory._dead or memory.live(p[2], hit[2][0])):
            _fire("reduce", group, hit[1], [(p[2], hit[2][0])], None, tensor)
            return
    s = v.tensor(tensor, "tensor", names=DTYPES)
    r = _reduce_op(op, s)
    info = state.resolve_group(group)
    root = state.check_peer(dst, info, "dst")
    _call(key, group, "reduce", info, "reduce_push", [_buf(s)], s.name, {"n": s.numel}, tensor, (s.nbytes,),
          params={"root": root}, reduce=r, nbytes=s.nbytes)


def pair(peer: int, group: Any, arg: str) -> Tuple[state.GroupInfo, int, int]:
    """The two-rank group {me, peer} of a send/recv on ``group`` (sorted by global rank; set up
    by its first send/recv, the pair's first collective) and the local indices of (me, peer).
    ``group`` itself is not set up (:func:`symsched.core.state.pair_ranks`)."""
    ranks, me, other = state.pair_ranks(peer, group, arg)
    return state.resolve_group(list(ranks), arg="group"), me, other


class _PairOf:
    """A cached send/recv's pair, resolved only to name it in an error: its native error is the
    pair's (its abort record), and the group passed may not be set up on this rank."""

    __slots__ = ("peer", "group", "arg")

    def __init__(self, peer: int, group: Any, arg: str) -> None:
        self.peer, self.group, self.arg = peer, group, arg


def _p2p(op_name: str, tensor: Any, peer: int, group: Any, arg: str, sending: bool) -> None:
    p = _plain(tensor)
    key: Key = None
    if p is not None:
        key = (op_name, id(group), p[0], p[1], peer, type(peer))
        hit = _hit(key, group)
        if hit is not None and (not memory._dead or memory.live(p[2], hit[2][0])):
            _fire(op_name, _PairOf(peer, group, arg), hit[1], [(p[2], hit[2][0])], None, tensor)
            return
    s = v.tensor(tensor, "tensor", names=DTYPES)
    pinfo, me, other = pair(peer, group, arg)
    params = {"src": me, "dst": other} if sending else {"src": other, "dst": me}
    _call(key, group, op_name, pinfo, "sendrecv_pair", [_buf(s)], s.name, {"n": s.numel}, tensor, (s.nbytes,),
          params=params, nbytes=s.nbytes)


@failure.collective("send", 2, peer_at=1)
def send(tensor: Any, dst_rank: int, group: Any = None) -> None:
    """Point-to-point send to ``dst_rank`` (group-local); pairs with ``recv`` on that rank."""
    _p2p("send", tensor, dst_rank, group, "dst_rank", True)


@failure.collective("recv", 2, peer_at=1)
def recv(tensor: Any, src_rank: int, group: Any = None) -> None:
    """Point-to-point receive from ``src_rank`` (group-local) into ``tensor`` (same numel and dtype)."""
    _p2p("recv", tensor, src_rank, group, "src_rank", False)


# ------------------------------------------------------------------------------------- MC2


def _mc2_front(name: str, group: Any, ts: Sequence[Any], *extra: Any) -> Tuple[Key, List[int]]:
    """The cache key of an MC2 call — every operand's dtype and shape (validation relates the
    shapes, not just the element counts), plus what the schedule choice reads — and the
    operands' addresses; ``(None, [])`` when an operand is not plain."""
    key: List[Any] = [name, id(group)]
    ptrs: List[int] = []
    for t in ts:
        p = _plain(t)
        if p is None:
            return None, []
        key += (p[0], _fw.shape(t))
        ptrs.append(p[2])
    return tuple(key) + extra, ptrs


def _all_live(ptrs: Sequence[int], nbytes: Sequence[int]) -> bool:
    return all(memory.live(p, n) for p, n in zip(ptrs, nbytes))


@failure.collective("fused_all_gather_matmul", 4)
def allgather_matmul(a: Any, b: Any, gather_out: Any, c: Any, group: Any = None) -> None:
    """MC2: ``gather_out`` ← allgather(a) (P·m×k) and ``c`` ← gather_out @ b (P·m×n), each block
    multiplied as soon as it arrives. A private ``gather_out`` runs the pull schedule, a
    symmetric one the push schedule (:func:`schedules.mc2`)."""
    ts = (a, b, gather_out, c)
    key, ptrs = _mc2_front("allgather_matmul", group, ts)
    if key is not None:
        key += (_symmetric(ptrs[2]), _mc2_ag_pull_env())
        hit = _hit(key, group)
        if hit is not None and (not memory._dead or _all_live(ptrs, hit[2])):
            _fire("fused_all_gather_matmul", group, hit[1], list(zip(ptrs, hit[2])), None, (gather_out, c))
            return
    sa, sb = v.matrix(a, "a", FLOATS), v.matrix(b, "b", FLOATS)
    sg, sc = v.matrix(gather_out, "gather_out", FLOATS), v.matrix(c, "c", FLOATS)
    for name, s in (("b", sb), ("gather_out", sg), ("c", sc)):
        v.same_dtype(s, name, sa, "a")
    info = state.resolve_group(group)
    m, k = sa.shape
    k2, n = sb.shape
    if k2 != k:
        raise SymschedArgumentError(f"`b` must have {k} rows (a is {m}×{k}), got {k2}")
    if sg.shape != (info.size * m, k):
        raise SymschedArgumentError(f"`gather_out` must be {info.size * m}×{k}, got {sg.shape}")
    if sc.shape != (info.size * m, n):
        raise SymschedArgumentError(f"`c` must be {info.size * m}×{n}, got {sc.shape}")
    schedule = schedules.mc2("allgather_matmul", "allgather_matmul_pull", knobs.MC2_AG_PULL,
                             not _symmetric(sg.ptr), info.size)
    spans = (sa, sb, sg, sc)
    _call(key, group, "fused_all_gather_matmul", info, schedule, [_buf(s) for s in spans], sa.name,
          {"m": m, "k": k, "n": n}, (gather_out, c), tuple(s.nbytes for s in spans), nbytes=sg.nbytes)


@failure.collective("fused_matmul_reduce_scatter", 4)
def matmul_reduce_scatter(a: Any, b: Any, out: Optional[Any], op: ReduceOpLike = "sum", group: Any = None) -> Any:
    """MC2: ``out`` (m×n) ← block ``rank`` of reduce_scatter(a @ b) with a P·m×k, b k×n; a new
    tensor when ``out`` is None. Returns ``out``. Runs the push schedule unless
    ``SYMSCHED_MC2_RS_PULL=1``."""
    key, ptrs = _mc2_front("matmul_reduce_scatter", group, (a, b) if out is None else (a, b, out))
    if key is not None:
        key += (op, _mc2_rs_pull_env(), out is None)
        hit = _hit(key, group)
        if hit is not None and (not memory._dead or _all_live(ptrs, hit[2])):
            # the cached sizes: the three role buffers' bytes, then the output's shape (for a new output)
            nbytes, shape = hit[2][:3], hit[2][3:]
            if out is None:
                out = _fw.empty(shape, a.dtype)
                ptrs.append(_plain(out)[2])  # type: ignore[index]
            _fire("fused_matmul_reduce_scatter", group, hit[1], list(zip(ptrs, nbytes)), None, out)
            return out
    sa, sb = v.matrix(a, "x1", FLOATS), v.matrix(b, "x2", FLOATS)
    v.same_dtype(sb, "x2", sa, "x1")
    r = _reduce_op(op, sa)
    if r not in (ReduceOp.SUM, ReduceOp.AVG):
        raise SymschedArgumentError(f"`reduce_op` must be 'sum' or 'avg' for matmul_reduce_scatter, got '{r.value}'")
    info = state.resolve_group(group)
    mp, k = sa.shape
    k2, n = sb.shape
    if k2 != k:
        raise SymschedArgumentError(f"`x2` must have {k} rows (x1 is {mp}×{k}), got {k2}")
    if mp % info.size:
        raise SymschedArgumentError(f"`x1` rows ({mp}) must be a multiple of the group size {info.size}")
    m = mp // info.size
    if out is None:
        out = _fw.empty((m, n), sa.dtype)
    so = v.matrix(out, "output", FLOATS)
    v.same_dtype(so, "output", sa, "x1")
    if so.shape != (m, n):
        raise SymschedArgumentError(f"`output` must be {m}×{n}, got {so.shape}")
    schedule = schedules.mc2("matmul_reduce_scatter", "matmul_reduce_scatter_pull", knobs.MC2_RS_PULL, True,
                             info.size)
    _call(key, group, "fused_matmul_reduce_scatter", info, schedule, [_buf(sa), _buf(sb), _buf(so)], sa.name,
          {"m": m, "k": k, "n": n}, out, (sa.nbytes, sb.nbytes, so.nbytes, m, n), reduce=r,
          nbytes=so.nbytes * info.size)
    return out
