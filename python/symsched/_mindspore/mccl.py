"""MindSpore's own collectives (mccl on CPU, hccl on Ascend) through ``mindspore.mint.distributed``.

Used for the interop rule (the framework side of RFC §5.4), as the reference the tests compare
symsched with, for agreeing the job id, and for the host-collective step of hierarchical
schedules. ``group`` is a MindSpore group name or None (WORLD), as everywhere on this side;
roots are group-local here too (mint takes global ranks: this module converts).

mccl on CPU (MindSpore 2.10, measured): all_reduce only with op sum (MAX: "AllReduce only
support reduce sum on CPU"), no float64 (the kernel fails), send/recv broken. Those calls are
refused here before anything is sent, with a typed error on every rank that makes them.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import mindspore as ms
import numpy as np

from .._errors import SymschedArgumentError, SymschedRuntimeError
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
        return fn(*args, **kw)
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


def all_gather_into_tensor(output: ms.Tensor, input: ms.Tensor, group: Optional[str] = None) -> None:
    """``output`` (P·n) ← every rank's ``input`` (n), in group-rank order."""
    _check(input, "input")
    _check(output, "output")
    _run("all_gather_into_tensor", _dist().all_gather_into_tensor, output, input, group)


def reduce_scatter_tensor(output: ms.Tensor, input: ms.Tensor, op: str = "sum", group: Optional[str] = None) -> None:
    """``output`` (n) ← this rank's block of the reduction of every rank's ``input`` (P·n)."""
    _check(input, "input", op)
    _check(output, "output")
    _run("reduce_scatter_tensor", _dist().reduce_scatter_tensor, output, input, _OPS[op], group)


def broadcast(tensor: ms.Tensor, src: int, group: Optional[str] = None) -> None:
    """In place: ``tensor`` ← group rank ``src``'s tensor."""
    t = _check(tensor, "tensor")
    _run("broadcast", _dist().broadcast, t, global_rank(group, src), group)


def all_to_all_single(output: ms.Tensor, input: ms.Tensor, output_split_sizes: Optional[Sequence[int]] = None,
                      input_split_sizes: Optional[Sequence[int]] = None, group: Optional[str] = None) -> None:
    """All-to-all along dim 0 (rows ``input_split_sizes[j]`` go to group rank j)."""
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


def broadcast_int(value: int, src: int = 0, group: Optional[str] = None) -> int:
    """Rank ``src``'s ``value`` (a signed 64-bit int) on every rank of ``group``."""
    t = ms.Tensor(np.array([value], dtype=np.int64))
    broadcast(t, src, group)
    return int(t.asnumpy()[0])


def all_gather_ints(values: List[int], group: Optional[str] = None, size: Optional[int] = None) -> List[List[int]]:
    """Every rank's list of ints (same length everywhere), in group-rank order."""
    from mindspore.communication import get_group_size

    p = size if size is not None else (get_group_size(group) if group is not None else get_group_size())
    x = ms.Tensor(np.array(values, dtype=np.int64))
    out = ms.Tensor(np.zeros(p * len(values), dtype=np.int64))
    all_gather_into_tensor(out, x, group)
    arr = out.asnumpy().reshape(p, len(values))
    return [list(map(int, row)) for row in arr]
