"""MindSpore's own collectives (mccl on CPU, hccl on Ascend) through ``mindspore.mint.distributed``.

Used for the interop rule (the framework side of RFC §5.4), as the reference the tests compare
symsched with, for agreeing the job id, and for the host-collective step of hierarchical
schedules. ``group`` is a MindSpore group name or None (WORLD), as everywhere on this side;
roots are group-local here too (mint takes global ranks: this module converts).

mccl on CPU (MindSpore 2.10, measured in one job under ``symsched launch`` and ``msrun``):
``all_reduce`` (op sum only: MAX gives "AllReduce only support reduce sum on CPU"),
``all_gather`` (list form) and ``ops.AllGather``, ``broadcast`` and ``barrier`` work, for float32,
float16, bfloat16 and int32; float64 fails, and ``all_gather_into_tensor``,
``reduce_scatter(_tensor)``, ``all_to_all(_single)`` and ``ops.ReduceScatter``/``ops.AlltoAll``
have no CPU kernel ("The kernel DistCommReduceScatterTensor unregistered"); send/recv are
broken. So on CPU :func:`all_gather_into_tensor` runs the list form and copies,
:func:`reduce_scatter_tensor` is an ``all_reduce`` of a copy followed by taking this rank's
block (same sums, P× the traffic: a reference, not a baseline for speed), and
:func:`all_to_all_single` is refused. Calls mccl cannot run are refused here before anything is
sent, with a typed error on every rank that makes them.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import mindspore as ms
import numpy as np

from .errors import SymschedArgumentError, SymschedRuntimeError, UnavailableError
from .tensors import check_tensor, dtype_label

_OPS = {"sum": "sum", "max": "max", "min": "min", "prod": "prod"}
#: What mccl on CPU can reduce (the other ops and float64 fail inside MindSpore).
CPU_OPS = ("sum",)
CPU_DTYPES = (ms.float32, ms.float16, ms.bfloat16, ms.int32, ms.int8, ms.uint8, ms.int64)


def _dist() -> Any:
    import mindspore.mint.distributed as dist

    return dist


def on_cpu() -> bool:
    return ms.get_context("device_target") == "CPU"


def _check(t: Any, arg: str, op: Optional[str] = None) -> ms.Tensor:
    t = check_tensor(t, arg)
    if op is not None and op not in _OPS:
        raise SymschedArgumentError(f"`op` must be one of {sorted(_OPS)}, got {op!r}")
    if on_cpu():
        if op is not None and op not in CPU_OPS:
            raise SymschedArgumentError(f"mccl on CPU reduces only with op 'sum', got {op!r}")
        if t.dtype not in CPU_DTYPES:
            raise SymschedArgumentError(f"mccl on CPU cannot carry `{arg}` of dtype {dtype_label(t.dtype)}")
    return t


def _run(what: str, fn: Any, *args: Any, **kw: Any) -> Any:
    try:
        out = fn(*args, **kw)
        # MindSpore runs kernels asynchronously: a failing one would only raise at the next
        # read. data_ptr() drains the queue, so the failure surfaces here, named.
        for a in args:
            if isinstance(a, ms.Tensor):
                a.data_ptr()
        return out
    except (SymschedArgumentError, TypeError):
        raise
    except Exception as exc:  # MindSpore's RuntimeError with a C++ stack
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SymschedRuntimeError(f"mccl {what}: {first}") from exc


def global_rank(group: Optional[str], group_rank: int) -> int:
    """The world rank of ``group_rank`` in ``group`` (None = WORLD)."""
    if group is None:
        return group_rank
    from mindspore.communication import get_world_rank_from_group_rank

    return int(get_world_rank_from_group_rank(group, group_rank))


def all_reduce(tensor: ms.Tensor, op: str = "sum", group: Optional[str] = None) -> None:
    """In place: ``tensor`` ← reduction over ``group``."""
    t = _check(tensor, "tensor", op)
    _run("all_reduce", _dist().all_reduce, t, _OPS[op], group)


def _group_size(group: Optional[str]) -> int:
    from mindspore.communication import get_group_size

    return int(get_group_size(group) if group is not None else get_group_size())


def _group_rank(group: Optional[str]) -> int:
    from mindspore.communication import get_rank

    if group is None:
        return int(get_rank())
    from mindspore.communication import get_group_rank_from_world_rank

    return int(get_group_rank_from_world_rank(get_rank(), group))


def all_gather_into_tensor(output: ms.Tensor, input: ms.Tensor, group: Optional[str] = None) -> None:
    """``output`` (P·n) ← every rank's ``input`` (n), in group-rank order."""
    _check(input, "input")
    _check(output, "output")
    p = _group_size(group)
    if output.size != p * input.size:
        raise SymschedArgumentError(f"`output` must hold {p} × {input.size} elements, got {output.size}")
    if not on_cpu():  # pragma: no cover - Ascend/GPU have the fused kernel
        _run("all_gather_into_tensor", _dist().all_gather_into_tensor, output, input, group)
        return
    parts = [ms.Tensor(np.zeros(tuple(input.shape), dtype=ms.dtype_to_nptype(input.dtype)))
             if input.dtype != ms.bfloat16 else ms.ops.zeros(tuple(input.shape), input.dtype) for _ in range(p)]
    _run("all_gather", _dist().all_gather, parts, input, group)
    output.copy_(ms.ops.cat([x.reshape(-1) for x in parts]).reshape(tuple(output.shape)))
    output.data_ptr()


def reduce_scatter_tensor(output: ms.Tensor, input: ms.Tensor, op: str = "sum", group: Optional[str] = None) -> None:
    """``output`` (n) ← this rank's block of the reduction of every rank's ``input`` (P·n).
    On CPU an all_reduce of a copy, then this rank's block (see the module docstring)."""
    _check(input, "input", op)
    _check(output, "output")
    p = _group_size(group)
    n = output.size
    if input.size != p * n:
        raise SymschedArgumentError(f"`input` must hold {p} × {n} elements, got {input.size}")
    if not on_cpu():  # pragma: no cover
        _run("reduce_scatter_tensor", _dist().reduce_scatter_tensor, output, input, _OPS[op], group)
        return
    full = input.reshape(-1).copy()
    _run("all_reduce", _dist().all_reduce, full, _OPS[op], group)
    me = _group_rank(group)
    # through numpy: InplaceCopy's CPU kernel refuses a sliced view as its source
    block = full.asnumpy().reshape(-1)[me * n:(me + 1) * n].reshape(tuple(output.shape))
    output.copy_(ms.Tensor.from_numpy(block.copy()).view(output.dtype) if output.dtype == ms.bfloat16
                 else ms.Tensor(block))
    output.data_ptr()


def broadcast(tensor: ms.Tensor, src: int, group: Optional[str] = None) -> None:
    """In place: ``tensor`` ← group rank ``src``'s tensor."""
    t = _check(tensor, "tensor")
    _run("broadcast", _dist().broadcast, t, global_rank(group, src), group)


def all_to_all_single(output: ms.Tensor, input: ms.Tensor, output_split_sizes: Optional[Sequence[int]] = None,
                      input_split_sizes: Optional[Sequence[int]] = None, group: Optional[str] = None) -> None:
    """All-to-all along dim 0 (rows ``input_split_sizes[j]`` go to group rank j); refused on CPU."""
    if on_cpu():
        raise UnavailableError("mccl on CPU has no all_to_all kernel (MindSpore 2.10: DistCommAllToAllVSingle "
                               "unregistered)")
    _check(input, "input")
    _check(output, "output")
    _run("all_to_all_single", _dist().all_to_all_single, output, input,
         None if output_split_sizes is None else list(output_split_sizes),
         None if input_split_sizes is None else list(input_split_sizes), group)


def barrier(group: Optional[str] = None) -> None:
    """Block until every rank of ``group`` arrived (mccl's barrier)."""
    _run("barrier", _dist().barrier, group)


def group_name(ranks: Sequence[int]) -> str:
    """A MindSpore group name for world ``ranks`` (``mint.distributed.new_group``; every member
    calls it, in the same order as its other group creations)."""
    return str(_run("new_group", _dist().new_group, list(ranks)))


# mccl on CPU has no int64 all-gather kernel ("DistCommAllGatherIntoTensor unregistered"): the
# int helpers below move 62-bit values as two non-negative int32 halves.
_HALF = 1 << 31


def _halves(values: List[int]) -> np.ndarray:
    if any(not 0 <= v < _HALF * _HALF for v in values):
        raise SymschedArgumentError(f"values must lie in [0, 2**62), got {values}")
    return np.array([h for v in values for h in divmod(v, _HALF)], dtype=np.int32)


def _join(arr: np.ndarray) -> List[int]:
    return [int(hi) * _HALF + int(lo) for hi, lo in arr.reshape(-1, 2)]


def broadcast_int(value: int, src: int = 0, group: Optional[str] = None) -> int:
    """Group rank ``src``'s ``value`` (in [0, 2**62)) on every rank of ``group``."""
    t = ms.Tensor(_halves([value if value >= 0 else 0]))
    broadcast(t, src, group)
    return _join(t.asnumpy())[0]


def all_gather_ints(values: List[int], group: Optional[str] = None, size: Optional[int] = None) -> List[List[int]]:
    """Every rank's list of ints in [0, 2**62) (same length everywhere), in group-rank order."""
    from mindspore.communication import get_group_size

    p = size if size is not None else (get_group_size(group) if group is not None else get_group_size())
    x = ms.Tensor(_halves(values))
    out = ms.Tensor(np.zeros(p * 2 * len(values), dtype=np.int32))
    all_gather_into_tensor(out, x, group)
    flat = _join(out.asnumpy())
    n = len(values)
    return [flat[i * n:(i + 1) * n] for i in range(p)]


def broadcast_str(value: str, src: int = 0, group: Optional[str] = None, width: int = 64) -> str:
    """Group rank ``src``'s ``value`` (ASCII, at most ``width`` bytes) on every rank of ``group``."""
    raw = value.encode("ascii")
    if len(raw) > width:
        raise SymschedArgumentError(f"broadcast_str carries at most {width} bytes, got {len(raw)}")
    t = ms.Tensor(np.frombuffer(raw.ljust(width, b"\0"), dtype=np.uint8).astype(np.int32))
    broadcast(t, src, group)
    return bytes(t.asnumpy().astype(np.uint8)).rstrip(b"\0").decode("ascii")


#: mint.distributed's collectives the interop rule watches (their tensor arguments are noted)
WATCHED = ("all_reduce", "all_gather_into_tensor", "all_gather", "reduce_scatter_tensor", "reduce_scatter",
           "broadcast", "all_to_all_single", "all_to_all", "reduce")


def watch(note: Any) -> Any:
    """Until the returned function is called, pass every tensor a ``mindspore.mint.distributed``
    collective receives (and so every call of this module) to ``note(tensor, op)`` before the
    collective runs. ``note`` raises on a forbidden mix: nothing is sent then."""
    dist = _dist()
    saved = {}

    def wrap(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for a in list(args) + list(kwargs.values()):
                if isinstance(a, ms.Tensor):
                    note(a, name)
                elif isinstance(a, (list, tuple)):
                    for x in a:
                        if isinstance(x, ms.Tensor):
                            note(x, name)
            return fn(*args, **kwargs)

        wrapper.__symsched_wrapped__ = fn  # type: ignore[attr-defined]
        wrapper.__name__ = getattr(fn, "__name__", name)
        return wrapper

    for name in WATCHED:
        fn = getattr(dist, name, None)
        if fn is not None and not hasattr(fn, "__symsched_wrapped__"):
            saved[name] = fn
            setattr(dist, name, wrap(name, fn))

    def restore() -> None:
        for name, fn in saved.items():
            setattr(dist, name, fn)

    return restore
