"""The PyTorch adapter: torch tensors, ProcessGroups, ``torch.distributed`` jobs, autograd and
profiler for symsched's core (the interface: :class:`symsched.core.adapter.FrameworkAdapter`)."""

from __future__ import annotations

from typing import Any, Callable, ContextManager, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from ..core import adapter as _adapter
from ..core.adapter import Span
from ..core.errors import SymschedArgumentError, SymschedTypeError
from ..core.native import module as _native
from . import interop as _interop
from . import mc2 as _mc2

_Tensor = torch.Tensor
_STRIDED = torch.strided


class TorchAdapter(_adapter.FrameworkAdapter):
    """symsched for PyTorch: CPU tensors (the host is the device), ``torch.distributed`` groups
    and jobs (gloo for the framework side), ``torch.autograd.Function``, ``torch.profiler``."""

    name = "torch"
    collectives_label = "gloo"
    job_hint = ("no distributed job: call torch.distributed.init_process_group(...) (or run under "
                "torchrun) before using symsched")
    tensor_type = torch.Tensor
    dtype_type = torch.dtype
    dtype_names = {
        torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
        torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8",
        torch.float8_e4m3fn: "f8e4m3", torch.float8_e5m2: "f8e5m2",
    }
    default_dtype = torch.float32
    grad_enabled = staticmethod(torch.is_grad_enabled)
    profiler_enabled = staticmethod(torch._C._autograd._profiler_enabled)
    native_alltoall_hit = staticmethod(_native.alltoall_hit) if hasattr(_native, "alltoall_hit") else None
    native_tensor_hits = getattr(_native, "TensorHits", None)

    # ------------------------------------------------------- tensors <-> heap spans

    @staticmethod
    def plain(t: Any) -> Optional[Tuple[Any, int, int]]:
        if (isinstance(t, _Tensor) and t.is_cpu and t.layout is _STRIDED and t.is_contiguous()):
            return t.dtype, t.numel(), t.data_ptr()
        return None

    def span(self, t: Any, arg: str) -> Span:
        if not isinstance(t, _Tensor):
            raise SymschedTypeError(f"`{arg}` must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cpu":
            raise SymschedArgumentError(f"`{arg}` must be on the CPU (the host is the device), got {t.device}")
        if t.is_sparse or t.is_quantized or t.layout is not _STRIDED:
            raise SymschedArgumentError(f"`{arg}` must be a dense tensor")
        n, es = t.numel(), t.element_size()
        return Span(t.data_ptr(), n * es, n, es, t.dtype, self.dtype_names.get(t.dtype), tuple(t.shape),
                    t.is_contiguous())

    @staticmethod
    def scan_list(tensors: Sequence[Any], dtype: Any, itemsize: int,
                  live: Optional[Callable[[int, int], bool]]) -> Optional[Tuple[List[int], Optional[Tuple[int, int]]]]:
        # every attribute read costs ~0.1 µs and this loop is most of a small alltoall's host
        # cost, so each tensor is visited once
        first = tensors[0]
        start = end = first.data_ptr() if isinstance(first, _Tensor) else 0
        packed = True
        counts: List[int] = []
        for t in tensors:
            if not isinstance(t, _Tensor) or t.dtype is not dtype or not t.is_cpu or t.layout is not _STRIDED:
                return None
            c = t.numel()
            if live is not None and not live(t.data_ptr(), c * itemsize):
                return None
            counts.append(c)
            if packed and (t.data_ptr() != end or not t.is_contiguous()):
                packed = False
            end += c * itemsize
        return counts, ((start, end - start) if packed else None)

    @staticmethod
    def packed(tensors: Sequence[Any]) -> Optional[Any]:
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

    @staticmethod
    def concat(tensors: Sequence[Any]) -> Any:
        return torch.cat([t.reshape(-1) for t in tensors])

    @staticmethod
    def shape(t: Any) -> Tuple[int, ...]:
        return tuple(t.shape)

    @staticmethod
    def describe(t: Any) -> str:
        if isinstance(t, _Tensor):
            return f"{t.layout} {t.device} {t.dtype} tensor of {t.numel()} elements"
        return type(t).__name__

    @staticmethod
    def as_int(v: Any) -> Any:
        if isinstance(v, _Tensor) and v.numel() == 1 and not v.dtype.is_floating_point:
            return int(v.item())
        return v

    @staticmethod
    def as_list(v: Any) -> Any:
        return v.tolist() if isinstance(v, _Tensor) else v

    # --------------------------------------------------------- the symmetric heap as tensors

    @staticmethod
    def from_heap(block: Any, nbytes: int, dtype: Any, shape: Tuple[int, ...]) -> Tuple[Any, int]:
        raw = torch.frombuffer(block, dtype=torch.uint8)
        return raw[:nbytes].view(dtype).view(shape), raw.data_ptr()

    @staticmethod
    def storage_address(t: Any) -> int:
        return t.untyped_storage().data_ptr()

    @staticmethod
    def release(t: Any) -> None:
        # no_grad: a symmetric tensor may require grad (a leaf of a differentiable collective),
        # and autograd refuses in-place changes to a view of such a leaf
        with torch.no_grad():
            t.set_(torch.empty(0, dtype=t.dtype))

    @staticmethod
    def itemsize(dtype: Any) -> int:
        return dtype.itemsize

    @staticmethod
    def interop_key(t: Any) -> Optional[Tuple[int, Any]]:
        if not isinstance(t, _Tensor) or t.numel() == 0:
            return None
        storage = t.untyped_storage()
        return storage.data_ptr(), storage

    # --------------------------------------------------------------------- tensor arithmetic

    @staticmethod
    def empty(shape: Tuple[int, ...], dtype: Any) -> Any:
        return torch.empty(shape, dtype=dtype)

    @staticmethod
    def zeros(shape: Tuple[int, ...], dtype: Any) -> Any:
        return torch.zeros(shape, dtype=dtype)

    @staticmethod
    def contiguous(t: Any) -> Any:
        return t.contiguous()

    @staticmethod
    def detached_copy(t: Any) -> Any:
        return t.detach().clone(memory_format=torch.contiguous_format)

    @staticmethod
    def detached(t: Any) -> Any:
        return t.detach()

    @staticmethod
    def alias(t: Any) -> Any:
        return t.view_as(t)

    @staticmethod
    def reshape(t: Any, shape: Tuple[int, ...]) -> Any:
        return t.view(shape)

    @staticmethod
    def split(t: Any, sizes: Sequence[int]) -> List[Any]:
        return list(torch.split(t, list(sizes)))

    @staticmethod
    def copy_into(dst: Any, src: Any) -> None:
        dst.copy_(src.reshape(dst.shape))

    @staticmethod
    def div_(t: Any, divisor: int) -> Any:
        return t.div_(divisor)

    @staticmethod
    def div(t: Any, divisor: int) -> Any:
        return t / divisor

    @staticmethod
    def mul_(t: Any, mask: Any) -> Any:
        return t.mul_(mask)

    @staticmethod
    def mul(t: Any, mask: Any) -> Any:
        return t * mask

    @staticmethod
    def add_(t: Any, other: Any) -> Any:
        return t.add_(other)

    @staticmethod
    def zero_(t: Any) -> Any:
        return t.zero_()

    @staticmethod
    def matmul(a: Any, b: Any) -> Any:
        return a @ b

    @staticmethod
    def transpose(t: Any) -> Any:
        return t.t()

    @staticmethod
    def winners(x: Any, y: Any, rank: int, others: int) -> Any:
        return torch.where(x.reshape(-1) == y.reshape(-1), rank, others).to(torch.int32)

    @staticmethod
    def mask(winners: Any, rank: int, shape: Tuple[int, ...]) -> Any:
        return (winners == rank).view(shape)

    # ------------------------------------------------------------------------ autograd

    @staticmethod
    def differentiable(rule: type) -> Callable[..., Any]:
        fn = type(rule.__name__, (torch.autograd.Function,), {
            "__doc__": rule.__doc__, "__module__": __name__,
            "forward": staticmethod(rule.forward), "backward": staticmethod(rule.backward)})
        return fn.apply

    @staticmethod
    def save(ctx: Any, *tensors: Any) -> None:
        ctx.save_for_backward(*tensors)

    @staticmethod
    def saved(ctx: Any) -> Tuple[Any, ...]:
        return ctx.saved_tensors

    @staticmethod
    def needs_input_grad(ctx: Any, index: int) -> bool:
        return bool(ctx.needs_input_grad[index])

    @staticmethod
    def requires_grad(t: Any) -> bool:
        return isinstance(t, _Tensor) and t.requires_grad

    @staticmethod
    def anchor(dtype: Any, requires_grad: bool) -> Any:
        return torch.empty(0, dtype=dtype, requires_grad=requires_grad and dtype.is_floating_point)

    # ---------------------------------------------------------------- groups and the job

    @staticmethod
    def group_ranks(group: Any, arg: str) -> Tuple[int, ...]:
        if not isinstance(group, dist.ProcessGroup):
            raise SymschedTypeError(
                f"`{arg}` must be a torch.distributed ProcessGroup or None (WORLD), got {type(group).__name__}")
        try:
            return tuple(dist.get_process_group_ranks(group))
        except Exception as exc:
            raise SymschedArgumentError(f"`{arg}`: cannot read the ranks of this ProcessGroup: {exc}") from exc

    @staticmethod
    def is_world(group: Any) -> bool:
        return dist.is_initialized() and group is dist.group.WORLD

    @staticmethod
    def job() -> Optional[Tuple[int, int]]:
        if not dist.is_initialized():
            return None
        return dist.get_rank(), dist.get_world_size()

    @staticmethod
    def share_from_rank0(key: str, value: Optional[str]) -> str:
        try:
            store = dist.distributed_c10d._get_default_store()  # noqa: SLF001 - the job's own store
        except Exception:  # pragma: no cover - stores are always present for gloo jobs
            store = None
        if store is not None:
            if value is not None:
                store.set(key, value)
            return store.get(key).decode()
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return str(box[0])

    # ------------------------------------------------------------------------ profiling

    @staticmethod
    def profile_range(name: str) -> ContextManager[Any]:
        return torch.profiler.record_function(name)

    # -------------------------------------------------------- the framework's collectives

    @staticmethod
    def watch_collectives(note: Callable[[Any, str], None]) -> Callable[[], None]:
        return _interop.watch(note)

    @staticmethod
    def matmul_engine() -> Tuple[Callable[..., None], Optional[str]]:
        return _mc2.TorchMatmul(), _mc2._torch_blas()

    @staticmethod
    def make_host_engine() -> Any:
        from .hostcoll import TorchHostEngine

        return TorchHostEngine()

