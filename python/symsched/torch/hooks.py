"""Ready-made communication hooks that put PyTorch's data-parallel wrappers on symsched
(``import symsched.hooks``).

**DDP** — :func:`ddp_comm_hook` (``DistributedDataParallel.register_comm_hook``) allreduces each
gradient bucket with ``symm.shmem_allreduce``: ``'avg'`` (DDP's default) or ``'sum'``, on any
group, optionally over a low-precision wire (``low_precision_dtype=torch.float16`` …: peers'
contributions travel narrowed and are accumulated in float32 — where torch's
``fp16_compress_hook`` also accumulates in float16). :func:`register_ddp_hook` registers it with
the wrapper's own process group by default::

    model = DistributedDataParallel(net)                     # gloo for everything else
    symsched.hooks.register_ddp_hook(model, op="avg", low_precision_dtype=torch.bfloat16)

**FSDP2** — torch 2.13's ``fully_shard`` modules take a custom all-gather and reduce-scatter
(``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter``, interfaces in
``torch.distributed.fsdp._fully_shard._fsdp_api``): :class:`FSDPAllGather` and
:class:`FSDPReduceScatter` run them with ``symm.shmem_allgather`` / ``symm.shmem_reduce_scatter``
on the group FSDP passes (the shard group of the mesh); :func:`register_fsdp_hooks` sets both on
every ``fully_shard`` module of a model. FSDP's other communication stays on its own process
group: HSDP's all-reduce across replicas calls ``torch.distributed.all_reduce`` directly (FSDP
has no hook for it).

The hooks run synchronously (the collective is done when they return; a completed future or no
``Work`` is handed back), on the thread that runs backward, as symsched's collectives always do.
Importing this module does not import FSDP (seconds): the FSDP classes are made on first use.
"""

# no `from __future__ import annotations` here: DDP compares the hook's annotations with
# dist.GradBucket and torch.futures.Future[torch.Tensor] as objects
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from ..core import collectives as _coll
from ..core.enums import ReduceOp, parse_reduce_op
from ..core.errors import SymschedArgumentError, SymschedTypeError

__all__ = ["DDPHookState", "ddp_comm_hook", "register_ddp_hook", "FSDPAllGather", "FSDPReduceScatter",
           "register_fsdp_hooks"]

_DATA_PARALLEL_OPS = (ReduceOp.SUM, ReduceOp.AVG)


def _data_parallel_op(op: Any, arg: str) -> ReduceOp:
    try:
        r: Optional[ReduceOp] = parse_reduce_op(op, arg)
    except (SymschedArgumentError, SymschedTypeError):  # PREMUL_SUM and the like: named below
        r = None
    if r not in _DATA_PARALLEL_OPS:
        raise SymschedArgumentError(f"`{arg}` must be 'sum' or 'avg' (ReduceOp.SUM / ReduceOp.AVG), got {op!r}")
    return r


# ----------------------------------------------------------------------------------- DDP


@dataclass(frozen=True)
class DDPHookState:
    """What :func:`ddp_comm_hook` does with each bucket: reduce it with ``op`` (``'avg'`` or
    ``'sum'``) over ``group`` (a ProcessGroup, a rank list, or None for WORLD), through the wire
    format ``low_precision_dtype`` if one is given (None: full precision unless
    ``SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE`` sets a default)."""

    group: Any = None
    op: str = "avg"
    low_precision_dtype: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "op", _data_parallel_op(self.op, "op").value)


def ddp_comm_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: ``shmem_allreduce`` of the bucket, in place.

    ``state`` is a :class:`DDPHookState`, or — as torch's own hooks take it — the process group
    itself (or None for WORLD; the bucket is then averaged). Register with
    ``ddp_model.register_comm_hook(state, ddp_comm_hook)`` or :func:`register_ddp_hook`."""
    if not isinstance(state, DDPHookState):
        state = DDPHookState(group=state)
    buf = bucket.buffer()
    _coll.shmem_allreduce(buf, state.op, state.group, state.low_precision_dtype)
    fut: "torch.futures.Future[torch.Tensor]" = torch.futures.Future()
    fut.set_result(buf)
    return fut


_DEFAULT = object()


def register_ddp_hook(model: Any, group: Any = _DEFAULT, op: str = "avg",
                      low_precision_dtype: Any = None) -> DDPHookState:
    """Register :func:`ddp_comm_hook` with a ``DistributedDataParallel`` model; ``group``
    defaults to the model's own process group. Returns the hook's state."""
    if group is _DEFAULT:
        group = getattr(model, "process_group", None)
    state = DDPHookState(group=group, op=op, low_precision_dtype=low_precision_dtype)
    model.register_comm_hook(state, ddp_comm_hook)
    return state


# ---------------------------------------------------------------------------------- FSDP2


def _disjoint(inp: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``inp``, or a copy of it when it lies inside ``out`` (FSDP gathers in place: its input
    is this rank's block of the output); the collective's roles must not overlap."""
    if inp.numel() == 0 or out.numel() == 0:
        return inp
    start, end = inp.data_ptr(), inp.data_ptr() + inp.numel() * inp.element_size()
    ostart = out.data_ptr()
    if start < ostart + out.numel() * out.element_size() and ostart < end:
        return inp.clone()
    return inp


_classes: Optional[Tuple[type, type]] = None


def _fsdp_classes() -> Tuple[type, type]:
    """The FSDP2 comm classes, made on first use (they subclass FSDP's interfaces)."""
    global _classes
    if _classes is not None:
        return _classes
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter
    except ImportError as exc:  # pragma: no cover - torch without FSDP2's custom-comm interface
        raise SymschedArgumentError(
            f"this torch ({torch.__version__}) has no FSDP2 custom all-gather / reduce-scatter interface "
            f"(torch.distributed.fsdp._fully_shard._fsdp_api): {exc}") from exc

    class _Alloc:
        def allocate(self, size: Sequence[Any], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
            # ordinary host memory: FSDP keeps reduce-scatter outputs as the sharded gradients,
            # so a buffer cannot be recycled behind its back; the executor stages it
            return torch.empty(*size, dtype=dtype, device=device)

    class FSDPAllGather(_Alloc, AllGather):
        """FSDP2's parameter all-gather on ``symm.shmem_allgather`` (``set_custom_all_gather``)."""

        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any,
                     async_op: bool = False) -> None:
            _coll.shmem_allgather(output_tensor, _disjoint(input_tensor, output_tensor), group)
            return None

    class FSDPReduceScatter(_Alloc, ReduceScatter):
        """FSDP2's gradient reduce-scatter on ``symm.shmem_reduce_scatter``
        (``set_custom_reduce_scatter``), optionally over a low-precision wire with float32
        accumulation. FSDP passes ``ReduceOp.AVG`` or ``SUM`` (``PREMUL_SUM``, used for a
        custom gradient divide factor, is refused)."""

        def __init__(self, low_precision_dtype: Any = None) -> None:
            self.low_precision_dtype = low_precision_dtype

        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any, op: Any,
                     async_op: bool = False) -> None:
            r = _data_parallel_op(op, "op")
            _coll.shmem_reduce_scatter(output_tensor, input_tensor, r.value, group, self.low_precision_dtype)
            return None

    for cls in (FSDPAllGather, FSDPReduceScatter):
        cls.__qualname__ = cls.__name__  # made here, named as module attributes
    _classes = (FSDPAllGather, FSDPReduceScatter)
    return _classes


def register_fsdp_hooks(model: Any, low_precision_dtype: Any = None) -> int:
    """Set symsched's all-gather and reduce-scatter on every ``fully_shard`` module of ``model``
    (``model`` itself included); ``low_precision_dtype`` is the reduce-scatter's wire format.
    Returns how many modules were set."""
    from torch.distributed.fsdp import FSDPModule

    ag_cls, rs_cls = _fsdp_classes()
    ag, rs = ag_cls(), rs_cls(low_precision_dtype)
    count = 0
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_custom_all_gather(ag)
            m.set_custom_reduce_scatter(rs)
            count += 1
    if not count:
        raise SymschedArgumentError("`model` has no fully_shard module: call fully_shard(...) on it first")
    return count


def __getattr__(name: str) -> Any:
    if name == "FSDPAllGather":
        return _fsdp_classes()[0]
    if name == "FSDPReduceScatter":
        return _fsdp_classes()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
