"""Validated, non-differentiable collective kernels. The public in-place and functional forms
(``symsched.collectives``, ``symsched.functional``) wrap these with autograd.

Every argument is checked before anything is sent, so a bad call on one rank fails there
without leaving peers waiting on a half-started collective (peers still block in their own call
until the signal timeout; the error on the faulty rank names the argument).
"""

from __future__ import annotations

from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple, Union

import torch

from . import _launch, _state
from . import _validate as v
from . import memory as _memory
from ._dtypes import DATA_DTYPES, FLOAT_DATA, resolve_wire
from .core import knobs
from ._enums import ReduceOp, ReduceOpLike, parse_reduce_op
from .core.errors import SymschedArgumentError, SymschedError, SymschedRuntimeError, SymschedTypeError
from .interop import note_symsched

_STRIDED = torch.strided
_wire_env = knobs.LOW_PRECISION_DTYPE.raw
_one_shot_env = knobs.ALLREDUCE_ONE_SHOT_MAX_BYTES.raw
_ar_pull_env = knobs.ALLREDUCE_PULL_MIN_BYTES.raw
_pull_env = knobs.ALLGATHER_PULL_MIN_BYTES.raw
_trace_env = knobs.TRACE.raw
_profiler_enabled = torch._C._autograd._profiler_enabled


def _observed() -> bool:
    """Whether the profiler or the trace watches ops (they take the instrumented path)."""
    return bool(_profiler_enabled() or _trace_env())

DTYPES = tuple(DATA_DTYPES)


def _reduce_op(op: ReduceOpLike, dtype: torch.dtype) -> ReduceOp:
    r = parse_reduce_op(op)
    if r is ReduceOp.AVG and dtype not in FLOAT_DATA:
        raise SymschedArgumentError(f"`op`='avg' needs a floating dtype, got {dtype}")
    return r


#: Calls already validated once, per key of everything their launch depends on (collective,
#: ``id(group)``, dtypes, element counts, op, wire argument, the env values read, peers and
#: counts): the group object (held so its id cannot be reused while cached), the prepared
#: native launch and the byte size of each role buffer. A hit skips what only depends on the
#: key (argument parsing, group mapping, schedule choice); what depends on the tensors
#: themselves (device, layout, contiguity, released memory) is still checked on every call.
_fast: Dict[Tuple[Any, ...], Tuple[Any, Any, Tuple[int, ...]]] = {}
_FAST_MAX = 4096


def _hit(key: Optional[Tuple[Any, ...]], group: Any) -> Optional[Tuple[Any, Any, Tuple[int, ...]]]:
    """The cached launch for ``key``, or None when the full path must run."""
    if key is None:
        return None
    try:
        hit = _fast.get(key)
    except TypeError:  # an unhashable argument: the full path reports it
        return None
    if hit is None or hit[0] is not group or _observed():
        return None
    return hit


def _live(t: torch.Tensor) -> bool:
    """False when ``t`` views a block released with ``symm.free`` (the full path reports it).

    Checked per tensor rather than sending every call down the full path while any freed
    record is kept: records stay until a new allocation covers them, so after freeing one
    large buffer a program's small calls all paid the full path (perftest: ~25 µs per call at
    the sizes of an op that followed another op's frees)."""
    if not _memory._dead:
        return True
    a = _memory._lookup(t.data_ptr(), t.numel() * t.element_size())
    return a is None or a.live


def _plain(t: torch.Tensor) -> bool:
    """The per-tensor properties validation checks that a cache key cannot vouch for."""
    return t.is_cpu and t.layout is _STRIDED and t.is_contiguous() and (not _memory._dead or _live(t))


def _remember(key: Optional[Tuple[Any, ...]], group: Any, prepared: Any, nbytes: Tuple[int, ...]) -> None:
    # a rank list can be mutated in place behind an unchanged id: only immutable groups are cached
    if key is None or isinstance(group, list):
        return
    if len(_fast) >= _FAST_MAX:
        _fast.clear()
    try:
        _fast[key] = (group, prepared, nbytes)
    except TypeError:  # an unhashable (but valid) argument: such calls always take the full path
        pass


def _fire(op_name: str, group: Any, prepared: Any, buffers: List[Tuple[int, int]],
          counts: Optional[Tuple[List[int], List[int]]] = None) -> None:
    """Run a cached launch, mapping native errors like ``_launch.run`` does.

    ``group`` is the caller's group argument, or an already resolved ``GroupInfo`` (backward
    passes); it is only resolved to name the ranks in an error."""
    try:
        if counts is None:
            prepared.run(buffers)
        else:
            prepared.run_counts(buffers, counts[0], counts[1])
    except (SymschedError, TypeError):
        raise
    except Exception as exc:
        _native_error(op_name, group, prepared, exc)


def _native_error(op_name: str, group: Any, prepared: Any, exc: Exception) -> NoReturn:
    """Raise a cached launch's native error as ``_launch.run`` does: a ``ValueError`` (the
    binding and size checks) is the caller's argument error, anything else a runtime error."""
    if isinstance(exc, ValueError):
        raise SymschedArgumentError(f"symsched {op_name} ({prepared.schedule}): {exc}") from exc
    info = group if isinstance(group, _state.GroupInfo) else _state.resolve_group(group)
    raise SymschedRuntimeError(
        f"symsched {op_name} ({prepared.schedule}) on group {list(info.ranks)}: {exc}") from exc


def _tkey(t: Any) -> Any:
    """A tensor's part of a cache key (dtype and element count), or None for a non-tensor."""
    return (t.dtype, t.numel()) if isinstance(t, torch.Tensor) else None


def _symmetric_out(t: Any) -> bool:
    """Whether ``t`` is a symmetric tensor (cheap when nothing was allocated): the allgather
    schedule depends on it, so it is part of the call's cache key."""
    return bool(_memory._starts) and isinstance(t, torch.Tensor) and _memory.is_symmetric(t)


def allgather(output: torch.Tensor, input: torch.Tensor, group: Any = None) -> None:
    """``output`` (P·n elements) ← concatenation of every rank's ``input`` (n elements).

    A symmetric ``output`` is written by the push schedule (peers put into it in place); a
    private one by the pull schedule at or above ``SYMSCHED_ALLGATHER_PULL_MIN_BYTES`` (each rank
    reads peers' staged inputs straight into its own output, with no staging of the output)."""
    ko, ki = _tkey(output), _tkey(input)
    sym = _symmetric_out(output)
    key = (("allgather", id(group), ko, ki, sym, _pull_env())
           if ko is not None and ki is not None else None)
    hit = _hit(key, group)
    if hit is not None and _plain(output) and _plain(input):
        note_symsched(output, "allgather")
        _fire("allgather", group, hit[1], [(input.data_ptr(), hit[2][0]), (output.data_ptr(), hit[2][1])])
        return
    v.tensor(output, "output_tensor", dtypes=DTYPES)
    v.tensor(input, "input_tensor", dtypes=DTYPES)
    v.same_dtype(output, "output_tensor", input, "input_tensor")
    info = _state.resolve_group(group)
    if output.numel() != info.size * input.numel():
        raise SymschedArgumentError(
            f"`output_tensor` must have group size × input elements = {info.size} × {input.numel()} = "
            f"{info.size * input.numel()}, got {output.numel()}")
    note_symsched(output, "allgather")
    sizes = {"n": input.numel()}
    nbytes = output.numel() * output.element_size()
    schedule = _launch.allgather_schedule(nbytes, sym, info.size, _allgather_schedules())
    _launch.run("allgather", info, schedule, [input, output], input.dtype, sizes, nbytes=nbytes)
    _remember(key, group, _launch.prepared(info, schedule, None, input.dtype, None, None, sizes),
              (input.numel() * input.element_size(), nbytes))


def _allgather_schedules() -> Tuple[str, ...]:
    """The all-gather schedules this build's standard library has (pull is newer than push)."""
    return tuple(s for s in ("allgather_push", "allgather_pull") if _has_schedule(s))


_schedule_names: Optional[frozenset] = None


def _has_schedule(name: str) -> bool:
    global _schedule_names
    if _schedule_names is None:
        _schedule_names = frozenset(_state.native().schedules())
    return name in _schedule_names


def _rs_schedule(wire: Optional[torch.dtype]) -> str:
    if wire is None:
        return "reduce_scatter_push"
    if _has_schedule("reduce_scatter_push_wire"):
        return "reduce_scatter_push_wire"
    raise SymschedRuntimeError(  # pragma: no cover - only with a stale native module
        "low-precision reduce_scatter needs the wire-format schedule `reduce_scatter_push_wire`, "
        "which this build's standard library lacks; rebuild with scripts/python_env.sh")


def _wire_for(r: ReduceOp, low_precision_dtype: Union[None, str, torch.dtype], dtype: torch.dtype
              ) -> Optional[torch.dtype]:
    """The wire format of a reduction: explicit or env default, never for max/min (a narrower
    wire would return values no rank holds), which is an error only when asked explicitly."""
    wire = resolve_wire(low_precision_dtype, dtype)
    if wire is not None and r in (ReduceOp.MAX, ReduceOp.MIN):
        if low_precision_dtype is not None:
            raise SymschedArgumentError(f"`low_precision_dtype` applies to 'sum'/'avg' only, got op='{r.value}'")
        return None
    return wire


def reduce_scatter(output: torch.Tensor, input: torch.Tensor, op: ReduceOpLike = "sum", group: Any = None,
                   low_precision_dtype: Union[None, str, torch.dtype] = None) -> None:
    """``output`` (n) ← block ``rank`` of the element-wise reduction of every rank's ``input`` (P·n).

    With a wire format (per call, or ``SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE``) peers' blocks
    travel narrowed and are accumulated in f32; this rank's own block stays full precision."""
    ko, ki = _tkey(output), _tkey(input)
    key = (("reduce_scatter", id(group), ko, ki, op, low_precision_dtype, _wire_env())
           if ko is not None and ki is not None else None)
    hit = _hit(key, group)
    if hit is not None and _plain(output) and _plain(input):
        note_symsched(input, "reduce_scatter")
        _fire("reduce_scatter", group, hit[1], [(input.data_ptr(), hit[2][0]), (output.data_ptr(), hit[2][1])])
        return
    v.tensor(output, "output_tensor", dtypes=DTYPES)
    v.tensor(input, "input_tensor", dtypes=DTYPES)
    v.same_dtype(output, "output_tensor", input, "input_tensor")
    r = _reduce_op(op, input.dtype)
    wire = _wire_for(r, low_precision_dtype, input.dtype)
    info = _state.resolve_group(group)
    if input.numel() != info.size * output.numel():
        raise SymschedArgumentError(
            f"`input_tensor` must have group size × output elements = {info.size} × {output.numel()} = "
            f"{info.size * output.numel()}, got {input.numel()}")
    schedule = _rs_schedule(wire)
    note_symsched(input, "reduce_scatter")
    sizes = {"n": output.numel()}
    _launch.run("reduce_scatter", info, schedule, [input, output], input.dtype, sizes,
                reduce=r, wire=wire, nbytes=input.numel() * input.element_size())
    _remember(key, group, _launch.prepared(info, schedule, None, input.dtype, r, wire, sizes),
              (input.numel() * input.element_size(), output.numel() * output.element_size()))


def allreduce(tensor: torch.Tensor, op: ReduceOpLike = "sum", group: Any = None,
              low_precision_dtype: Union[None, str, torch.dtype] = None) -> None:
    """In place: ``tensor`` ← element-wise reduction over the group, identical on every rank."""
    key: Optional[Tuple[Any, ...]] = None
    if isinstance(tensor, torch.Tensor):
        key = ("allreduce", id(group), op, tensor.dtype, tensor.numel(), low_precision_dtype, _wire_env(),
               _one_shot_env(), _ar_pull_env())
        hit = _hit(key, group)
        if hit is not None and _plain(tensor):
            note_symsched(tensor, "allreduce")
            _fire("allreduce", group, hit[1], [(tensor.data_ptr(), hit[2][0])])
            return
    v.tensor(tensor, "tensor", dtypes=DTYPES)
    r = _reduce_op(op, tensor.dtype)
    wire = _wire_for(r, low_precision_dtype, tensor.dtype)
    info = _state.resolve_group(group)
    nbytes = tensor.numel() * tensor.element_size()
    note_symsched(tensor, "allreduce")
    schedule = _launch.allreduce_schedule(nbytes, wire)
    sizes = {"n": tensor.numel()}
    _launch.run("allreduce", info, schedule, [tensor], tensor.dtype, sizes, reduce=r, wire=wire, nbytes=nbytes)
    _remember(key, group, _launch.prepared(info, schedule, None, tensor.dtype, r, wire, sizes), (nbytes,))


def _counts(lst: Any, arg: str, size: int) -> List[int]:
    if isinstance(lst, torch.Tensor):
        lst = lst.tolist()
    if not isinstance(lst, (list, tuple)):
        raise SymschedTypeError(f"`{arg}` must be a list (or 1-d tensor) of {size} element counts")
    if len(lst) != size:
        raise SymschedArgumentError(f"`{arg}` must have one entry per group rank ({size}), got {len(lst)}")
    return [v.integer(c, f"{arg}[{i}]") for i, c in enumerate(lst)]


def _packed(tensors: Sequence[torch.Tensor]) -> Optional[torch.Tensor]:
    """The flat tensor the list already is, when its members are consecutive views of one buffer."""
    if not tensors:
        return None
    first = tensors[0]
    ptr = first.data_ptr()
    for t in tensors:
        if t.data_ptr() != ptr or not t.is_contiguous():
            return None
        ptr += t.numel() * t.element_size()
    total = sum(t.numel() for t in tensors)
    base = first.untyped_storage()
    if any(t.untyped_storage().data_ptr() != base.data_ptr() for t in tensors):
        return None
    return torch.empty(0, dtype=first.dtype).set_(base, first.storage_offset(), (total,))


def _a2a_scan(tensors: Sequence[torch.Tensor], dtype: torch.dtype, esize: int) -> Any:
    """One pass over an alltoall send list for the cached path: None when a member is not a
    strided CPU tensor of ``dtype`` or views freed symmetric memory (the full path reports it);
    else ``(counts, span)`` with ``span`` the ``(address, bytes)`` of the list when its members
    are contiguous and lie back to back in memory (e.g. ``x.split(...)`` of one contiguous
    tensor, bound without a copy), or None. Every attribute read costs ~0.1 µs and this loop is
    most of a small alltoall's host cost, so each tensor is visited once."""
    dead = _memory._dead
    start = end = tensors[0].data_ptr() if isinstance(tensors[0], torch.Tensor) else 0
    packed = True
    counts: List[int] = []
    for t in tensors:
        if (not isinstance(t, torch.Tensor) or t.dtype is not dtype or not t.is_cpu
                or t.layout is not _STRIDED or (dead and not _live(t))):
            return None
        c = t.numel()
        counts.append(c)
        if packed and (t.data_ptr() != end or not t.is_contiguous()):
            packed = False
        end += c * esize
    return counts, ((start, end - start) if packed else None)


#: The native cached alltoall per ``(id(group), dtype)``: the group object (held so its id
#: cannot be reused while cached) and the prepared ``alltoallv_push`` launch, which does not
#: depend on the counts. ``_native.alltoall_hit`` checks a call's tensors and counts against it
#: and launches in one native call (see ``alltoall_hit``).
_a2a_native: Dict[Tuple[int, torch.dtype], Tuple[Any, Any]] = {}
_native_a2a = getattr(_state._native, "alltoall_hit", None)


def alltoall_hit(send_tensor_list: Any, receive_tensor: Any, receive_list: Any, group: Any, grad: bool) -> bool:
    """Run an alltoall whose group and dtype were launched before, in one native call that
    makes the cached path's checks (``_native.alltoall_hit``), and return True; return False,
    having sent nothing, when the call is not such a hit or a check declines (the full path
    then validates and reports). ``grad``: autograd is recording, so a send tensor that
    requires grad declines (it takes the differentiable form)."""
    if not isinstance(receive_tensor, torch.Tensor):
        return False
    dtype = receive_tensor.dtype
    hit = _a2a_native.get((id(group), dtype))
    # _observed() inlined: every call pays it
    if hit is None or hit[0] is not group or _profiler_enabled() or _trace_env():
        return False
    note_symsched(receive_tensor, "alltoall")  # inside interop.step(), a mix raises here
    try:
        # with released records kept, the native call looks heap buffers up in them
        return _native_a2a(hit[1], send_tensor_list, receive_tensor, dtype, receive_list, grad,
                           (_memory._starts, _memory._allocs) if _memory._dead else None)
    except (SymschedError, TypeError):
        raise
    except Exception as exc:
        _native_error("alltoall", group, hit[1], exc)


def alltoall(send_tensor_list: Sequence[torch.Tensor], receive_tensor: torch.Tensor,
             receive_list: Any, group: Any = None, *,
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
    key: Optional[Tuple[Any, ...]] = None
    if (isinstance(send_tensor_list, (list, tuple)) and isinstance(receive_list, (list, tuple))
            and isinstance(receive_tensor, torch.Tensor) and send_tensor_list):
        rdt = receive_tensor.dtype
        scan = _a2a_scan(send_tensor_list, rdt, receive_tensor.element_size())
        if scan is not None:
            send, span = scan
            # every send tensor has the receive tensor's dtype (checked by the scan), so the
            # dtype once and the counts identify the call; the types too: True == 1 must not
            # let a bool count past validation
            key = ("alltoall", id(group), rdt, receive_tensor.numel(), tuple(send), tuple(receive_list),
                   tuple(map(type, receive_list)))
            hit = _hit(key, group)
            if hit is not None and _plain(receive_tensor):
                if span is None:
                    flat = torch.cat([t.reshape(-1) for t in send_tensor_list])
                    span = (flat.data_ptr(), hit[2][0])
                note_symsched(receive_tensor, "alltoall")
                _fire("alltoall", group, hit[1], [span, (receive_tensor.data_ptr(), hit[2][1])],
                      (send, receive_list))
                return
    info = _state.resolve_group(group)
    if not isinstance(send_tensor_list, (list, tuple)):
        raise SymschedTypeError("`send_tensor_list` must be a list of tensors, one per group rank")
    if len(send_tensor_list) != info.size:
        raise SymschedArgumentError(
            f"`send_tensor_list` must have one tensor per group rank ({info.size}), got {len(send_tensor_list)}")
    v.tensor(receive_tensor, "receive_tensor", dtypes=DTYPES)
    for i, t in enumerate(send_tensor_list):
        v.tensor(t, f"send_tensor_list[{i}]", dtypes=DTYPES, contiguous=False)
        v.same_dtype(t, f"send_tensor_list[{i}]", receive_tensor, "receive_tensor")
    recv = _counts(receive_list, "receive_list", info.size)
    if sum(recv) != receive_tensor.numel():
        raise SymschedArgumentError(
            f"`receive_tensor` must hold sum(receive_list) = {sum(recv)} elements, got {receive_tensor.numel()}")
    send = [int(t.numel()) for t in send_tensor_list]
    flat = _packed(send_tensor_list)
    if flat is None:
        flat = torch.cat([t.reshape(-1) for t in send_tensor_list]) if sum(send) else receive_tensor.new_empty(0)
    note_symsched(receive_tensor, "alltoall")
    _launch.run("alltoall", info, "alltoallv_push", [flat, receive_tensor], receive_tensor.dtype, {},
                send_counts=send, recv_counts=recv, nbytes=flat.numel() * flat.element_size())
    prepared = _launch.prepared(info, "alltoallv_push", None, receive_tensor.dtype, None, None, {})
    _remember(key, group, prepared,
              (flat.numel() * flat.element_size(), receive_tensor.numel() * receive_tensor.element_size()))
    # a rank list can change behind an unchanged id; an older native module lacks the call
    if _native_a2a is not None and not isinstance(group, list):
        if len(_a2a_native) >= _FAST_MAX:
            _a2a_native.clear()
        _a2a_native[(id(group), receive_tensor.dtype)] = (group, prepared)


def broadcast(tensor: torch.Tensor, src: int, group: Any = None) -> None:
    """In place: ``tensor`` ← ``src``'s tensor (``src`` group-local)."""
    kt = _tkey(tensor)
    key = ("broadcast", id(group), kt, src, type(src)) if kt is not None else None
    hit = _hit(key, group)
    if hit is not None and _plain(tensor):
        note_symsched(tensor, "broadcast")
        _fire("broadcast", group, hit[1], [(tensor.data_ptr(), hit[2][0])])
        return
    v.tensor(tensor, "tensor", dtypes=DTYPES)
    info = _state.resolve_group(group)
    root = _state.check_peer(src, info, "src")
    note_symsched(tensor, "broadcast")
    sizes, params = {"n": tensor.numel()}, {"root": root}
    nbytes = tensor.numel() * tensor.element_size()
    _launch.run("broadcast", info, "broadcast_push", [tensor], tensor.dtype, sizes, params=params, nbytes=nbytes)
    _remember(key, group, _launch.prepared(info, "broadcast_push", params, tensor.dtype, None, None, sizes),
              (nbytes,))


def reduce(tensor: torch.Tensor, dst: int, op: ReduceOpLike = "sum", group: Any = None) -> None:
    """In place on ``dst``: ``tensor`` ← reduction over the group; other ranks' tensors unspecified."""
    kt = _tkey(tensor)
    key = ("reduce", id(group), kt, dst, type(dst), op) if kt is not None else None
    hit = _hit(key, group)
    if hit is not None and _plain(tensor):
        _fire("reduce", group, hit[1], [(tensor.data_ptr(), hit[2][0])])
        return
    v.tensor(tensor, "tensor", dtypes=DTYPES)
    r = _reduce_op(op, tensor.dtype)
    info = _state.resolve_group(group)
    root = _state.check_peer(dst, info, "dst")
    sizes, params = {"n": tensor.numel()}, {"root": root}
    nbytes = tensor.numel() * tensor.element_size()
    _launch.run("reduce", info, "reduce_push", [tensor], tensor.dtype, sizes, params=params, reduce=r, nbytes=nbytes)
    _remember(key, group, _launch.prepared(info, "reduce_push", params, tensor.dtype, r, None, sizes), (nbytes,))


def _pair(peer: int, info: _state.GroupInfo, arg: str) -> Tuple[_state.GroupInfo, int, int]:
    """The two-rank group {me, peer} (sorted by global rank) and the local indices of (me, peer)."""
    p = _state.check_peer(peer, info, arg)
    if p == info.rank:
        raise SymschedArgumentError(f"`{arg}`={peer} is this rank itself; send/recv need a different peer")
    me_g, peer_g = info.ranks[info.rank], info.ranks[p]
    pair = tuple(sorted((me_g, peer_g)))
    pinfo = _state.resolve_group(list(pair), arg="group")
    return pinfo, pair.index(me_g), pair.index(peer_g)


def _p2p(op_name: str, tensor: torch.Tensor, peer: int, group: Any, arg: str, sending: bool) -> None:
    kt = _tkey(tensor)
    key = (op_name, id(group), kt, peer, type(peer)) if kt is not None else None
    hit = _hit(key, group)
    if hit is not None and _plain(tensor):
        _fire(op_name, group, hit[1], [(tensor.data_ptr(), hit[2][0])])
        return
    v.tensor(tensor, "tensor", dtypes=DTYPES)
    pinfo, me, other = _pair(peer, _state.resolve_group(group), arg)
    sizes = {"n": tensor.numel()}
    params = {"src": me, "dst": other} if sending else {"src": other, "dst": me}
    nbytes = tensor.numel() * tensor.element_size()
    _launch.run(op_name, pinfo, "sendrecv_pair", [tensor], tensor.dtype, sizes, params=params, nbytes=nbytes)
    _remember(key, group, _launch.prepared(pinfo, "sendrecv_pair", params, tensor.dtype, None, None, sizes),
              (nbytes,))


def send(tensor: torch.Tensor, dst_rank: int, group: Any = None) -> None:
    """Point-to-point send to ``dst_rank`` (group-local); pairs with ``recv`` on that rank."""
    _p2p("send", tensor, dst_rank, group, "dst_rank", True)


def recv(tensor: torch.Tensor, src_rank: int, group: Any = None) -> None:
    """Point-to-point receive from ``src_rank`` (group-local) into ``tensor`` (same numel and dtype)."""
    _p2p("recv", tensor, src_rank, group, "src_rank", False)


def _matrix(t: Any, arg: str, dtypes: Sequence[torch.dtype]) -> torch.Tensor:
    v.tensor(t, arg, dtypes=dtypes)
    if t.dim() != 2:
        raise SymschedArgumentError(f"`{arg}` must be a 2-d matrix, got shape {tuple(t.shape)}")
    return t


#: Which MC2 ops run their pull schedules: ``SYMSCHED_MC2_AG_PULL`` (default 1: a private
#: ``gather_out`` runs ``allgather_matmul_pull``) and ``SYMSCHED_MC2_RS_PULL`` (default 0:
#: ``matmul_reduce_scatter_pull`` saves a landing copy of each partial product but adds a
#: ``done`` round, which measured slower in wall time on the loaded 2-core host; see
#: ``docs/performance.md``, "MC2 on the host"). 0 / 1 turn either off / on.
MC2_AG_PULL_ENV = knobs.MC2_AG_PULL.name
MC2_RS_PULL_ENV = knobs.MC2_RS_PULL.name
_mc2_ag_pull_env = knobs.MC2_AG_PULL.raw
_mc2_rs_pull_env = knobs.MC2_RS_PULL.raw


def _mc2_schedule(push: str, pull: str, knob: knobs.Knob, private_output: bool, group_size: int) -> str:
    """The MC2 schedule of a call: ``pull`` (peers read this rank's staged block or partial
    products where they are; a private output is written in place with no staging barrier or
    copy-out) when ``knob`` is on, the output is private (a
    symmetric one is better served by peers putting into it in place), there is a peer and the
    build has it; else ``push``. As for the all-gather, every rank of a group must pass the same
    kind of output (symmetric or not)."""
    if private_output and group_size > 1 and knob.get() and _has_schedule(pull):
        return pull
    return push


def _mc2_key(name: str, group: Any, ts: Sequence[Any], *extra: Any) -> Optional[Tuple[Any, ...]]:
    """The cache key of an MC2 call: every operand's dtype and shape (validation relates the
    shapes, not just the element counts), plus what the schedule choice reads."""
    key: List[Any] = [name, id(group)]
    for t in ts:
        if not isinstance(t, torch.Tensor):
            return None
        key += (t.dtype, t.shape)
    return tuple(key) + extra


def _bufs(ts: Sequence[torch.Tensor], nbytes: Sequence[int]) -> List[Tuple[int, int]]:
    return [(t.data_ptr(), n) for t, n in zip(ts, nbytes)]


def allgather_matmul(a: torch.Tensor, b: torch.Tensor, gather_out: torch.Tensor, c: torch.Tensor,
                     group: Any = None) -> None:
    """MC2: ``gather_out`` ← allgather(a) (P·m×k) and ``c`` ← gather_out @ b (P·m×n), each block
    multiplied as soon as it arrives. A private ``gather_out`` runs the pull schedule, a
    symmetric one the push schedule (see ``_mc2_schedule``)."""
    ts = (a, b, gather_out, c)
    sym = _symmetric_out(gather_out)
    key = _mc2_key("allgather_matmul", group, ts, sym, _mc2_ag_pull_env())
    hit = _hit(key, group)
    if hit is not None and _plain(a) and _plain(b) and _plain(gather_out) and _plain(c):
        _fire("fused_all_gather_matmul", group, hit[1], _bufs(ts, hit[2]))
        return
    fl = FLOAT_DATA
    _matrix(a, "a", fl), _matrix(b, "b", fl), _matrix(gather_out, "gather_out", fl), _matrix(c, "c", fl)
    for name, t in (("b", b), ("gather_out", gather_out), ("c", c)):
        v.same_dtype(t, name, a, "a")
    info = _state.resolve_group(group)
    m, k = a.shape
    k2, n = b.shape
    if k2 != k:
        raise SymschedArgumentError(f"`b` must have {k} rows (a is {m}×{k}), got {k2}")
    if tuple(gather_out.shape) != (info.size * m, k):
        raise SymschedArgumentError(f"`gather_out` must be {info.size * m}×{k}, got {tuple(gather_out.shape)}")
    if tuple(c.shape) != (info.size * m, n):
        raise SymschedArgumentError(f"`c` must be {info.size * m}×{n}, got {tuple(c.shape)}")
    schedule = _mc2_schedule("allgather_matmul", "allgather_matmul_pull", knobs.MC2_AG_PULL, not sym, info.size)
    sizes = {"m": m, "k": k, "n": n}
    _launch.run("fused_all_gather_matmul", info, schedule, list(ts), a.dtype, sizes,
                nbytes=gather_out.numel() * gather_out.element_size())
    _remember(key, group, _launch.prepared(info, schedule, None, a.dtype, None, None, sizes),
              tuple(t.numel() * t.element_size() for t in ts))


def matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, out: Optional[torch.Tensor], op: ReduceOpLike = "sum",
                          group: Any = None) -> torch.Tensor:
    """MC2: ``out`` (m×n) ← block ``rank`` of reduce_scatter(a @ b) with a P·m×k, b k×n; a new
    tensor when ``out`` is None. Returns ``out``. Runs the push schedule unless
    ``SYMSCHED_MC2_RS_PULL=1`` (see ``MC2_RS_PULL_ENV``)."""
    key = _mc2_key("matmul_reduce_scatter", group, (a, b), op, _mc2_rs_pull_env(),
                   None if out is None else (out.dtype, out.shape) if isinstance(out, torch.Tensor) else out)
    hit = _hit(key, group)
    if hit is not None and _plain(a) and _plain(b) and (out is None or _plain(out)):
        nbytes, shape = hit[2][:3], hit[2][3:]
        if out is None:
            out = torch.empty(shape, dtype=a.dtype)
        _fire("fused_matmul_reduce_scatter", group, hit[1], _bufs((a, b, out), nbytes))
        return out
    fl = FLOAT_DATA
    _matrix(a, "x1", fl), _matrix(b, "x2", fl)
    v.same_dtype(b, "x2", a, "x1")
    r = _reduce_op(op, a.dtype)
    if r not in (ReduceOp.SUM, ReduceOp.AVG):
        raise SymschedArgumentError(f"`reduce_op` must be 'sum' or 'avg' for matmul_reduce_scatter, got '{r.value}'")
    info = _state.resolve_group(group)
    mp, k = a.shape
    k2, n = b.shape
    if k2 != k:
        raise SymschedArgumentError(f"`x2` must have {k} rows (x1 is {mp}×{k}), got {k2}")
    if mp % info.size:
        raise SymschedArgumentError(f"`x1` rows ({mp}) must be a multiple of the group size {info.size}")
    m = mp // info.size
    if out is None:
        out = torch.empty((m, n), dtype=a.dtype)
    _matrix(out, "output", fl)
    v.same_dtype(out, "output", a, "x1")
    if tuple(out.shape) != (m, n):
        raise SymschedArgumentError(f"`output` must be {m}×{n}, got {tuple(out.shape)}")
    schedule = _mc2_schedule("matmul_reduce_scatter", "matmul_reduce_scatter_pull", knobs.MC2_RS_PULL, True,
                             info.size)
    sizes = {"m": m, "k": k, "n": n}
    _launch.run("fused_matmul_reduce_scatter", info, schedule, [a, b, out], a.dtype, sizes,
                reduce=r, nbytes=out.numel() * out.element_size() * info.size)
    # the cached sizes: the three role buffers' bytes, then the output's shape (for a new output)
    _remember(key, group, _launch.prepared(info, schedule, None, a.dtype, r, None, sizes),
              (a.numel() * a.element_size(), b.numel() * b.element_size(), out.numel() * out.element_size(), m, n))
    return out
