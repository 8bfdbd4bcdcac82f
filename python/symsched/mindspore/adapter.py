"""The MindSpore adapter: ``mindspore.Tensor``, MindSpore group names, msrun / symsched launch
jobs, ``mindspore._Function`` autograd, mstx ranges and mccl for symsched's core (the interface:
:class:`symsched.core.adapter.FrameworkAdapter`). Every MindSpore fact it relies on was measured
on MindSpore 2.10.0 CPU; the module that owns each one says how (``tensors``, ``groups``,
``launch``, ``mode``, ``autograd``, ``mccl``, ``profiler``)."""

from __future__ import annotations

import ctypes
import math
import os
from typing import Any, Callable, ContextManager, List, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np

from ..core import adapter as _adapter
from ..core.adapter import Span
from ..core.errors import SymschedArgumentError, SymschedTypeError
from . import autograd, groups, launch, mccl, mode, profiler, tensors

_Tensor = ms.Tensor
_record = autograd.recording
_ctx, _GRAPH, _jit_context = mode._ctx, mode._GRAPH, mode._jit_context  # noqa: SLF001 - the inlined guard
#: Graph-mode kernels hand the core numpy arrays (``mode.kernels``): accepted only while one runs.
_kernels = mode.kernels


def _zeros(shape: Tuple[int, ...], dtype: Any) -> ms.Tensor:
    # fp8 has no CPU kernel at all (not even Zeros): its tensors are raw uint8 bytes
    if dtype in (ms.float8_e4m3fn, ms.float8_e5m2):
        dtype = ms.uint8
    return ms.ops.zeros(tuple(shape), dtype)


def _numpy_span(a: np.ndarray, arg: str, names: Any) -> Span:
    """The span of a numpy array a graph-mode kernel hands the core (its dtype as the MindSpore
    dtype of the tensor it came from)."""
    dtype = tensors.FROM_NUMPY.get(a.dtype)
    if dtype is None:
        raise SymschedArgumentError(f"`{arg}` has dtype {a.dtype}, which symsched's graph-mode ops cannot carry")
    return Span(int(a.ctypes.data), a.nbytes, a.size, a.itemsize, dtype, names.get(dtype), tuple(a.shape),
                bool(a.flags.c_contiguous))


def _partial(t: ms.Tensor) -> bool:
    """Whether ``t`` views only part of its storage."""
    return int(t.storage_offset()) != 0 or int(t.untyped_storage().nbytes()) != t.size * tensors.ITEMSIZE[t.dtype]


class MindSporeAdapter(_adapter.FrameworkAdapter):
    """symsched for MindSpore (PyNative): host tensors, group names, msrun or symsched launch."""

    name = "mindspore"
    collectives_label = "mccl"
    job_hint = launch.unavailable_reason({}) or ""
    tensor_type = ms.Tensor
    dtype_type = ms.dtype.Type
    dtype_names = {**tensors.DATA_DTYPES, **{d: n for d, n in tensors.WIRE_DTYPES.items()
                                            if d not in tensors.DATA_DTYPES}}
    default_dtype = ms.float32
    #: MindSpore has no per-tensor ``requires_grad`` for ``ms.grad``'s inputs: while it records,
    #: every tensor is treated as possibly differentiated (``requires_grad`` below)
    grad_enabled = staticmethod(autograd.recording_fn())
    profiler_enabled = staticmethod(profiler.enabled_fn())
    native_alltoall_hit = None  # the native cached alltoall reads torch tensors
    native_tensor_hits = None  # so do the native cached all-reduce / all-gather / reduce-scatter

    # ------------------------------------------------------- tensors <-> heap spans

    @staticmethod
    def plain(t: Any) -> Optional[Tuple[Any, int, int]]:
        # Every collective's cached call passes here first, so the PyNative guard lives here
        # (and in span, for the full path) rather than in a wrapper around each entry point:
        # under graph mode the full path runs and span raises GraphModeError.
        if isinstance(t, _Tensor) and t.is_contiguous() and _ctx._mode != _GRAPH and _jit_context() is None:
            # data_ptr() last: it drains MindSpore's op queue (tensors module docstring)
            return t.dtype, t.size, t.data_ptr()
        if _kernels[0] and isinstance(t, np.ndarray) and t.flags.c_contiguous and t.dtype in tensors.FROM_NUMPY:
            return tensors.FROM_NUMPY[t.dtype], t.size, t.ctypes.data
        return None

    def span(self, t: Any, arg: str) -> Span:
        if _kernels[0] and isinstance(t, np.ndarray):
            return _numpy_span(t, arg, self.dtype_names)
        mode.check(arg)
        t = tensors.check_tensor(t, arg)
        dtype = t.dtype
        shape = tuple(t.shape)
        n = math.prod(shape)
        es = tensors.ITEMSIZE.get(dtype)
        if es is None:
            raise SymschedArgumentError(f"`{arg}` has dtype {tensors.dtype_label(dtype)}, which symsched cannot "
                                        f"carry")
        return Span(int(t.data_ptr()), n * es, n, es, dtype, self.dtype_names.get(dtype), shape, t.is_contiguous())

    @staticmethod
    def scan_list(tensors_: Sequence[Any], dtype: Any, itemsize: int,
                  live: Optional[Callable[[int, int], bool]]) -> Optional[Tuple[List[int], Optional[Tuple[int, int]]]]:
        counts: List[int] = []
        start = end = 0
        packed = True
        for i, t in enumerate(tensors_):
            if not isinstance(t, _Tensor) or t.dtype != dtype:
                return None
            c = t.size
            ptr = t.data_ptr()
            if live is not None and not live(ptr, c * itemsize):
                return None
            if i == 0:
                start = end = ptr
            counts.append(c)
            if packed and (ptr != end or not t.is_contiguous()):
                packed = False
            end += c * itemsize
        return counts, ((start, end - start) if packed else None)

    @staticmethod
    def packed(tensors_: Sequence[Any]) -> Optional[Any]:
        # MindSpore offers no public way to make one tensor over a run of views: concatenate
        return None

    @staticmethod
    def concat(tensors_: Sequence[Any]) -> Any:
        if tensors_ and isinstance(tensors_[0], np.ndarray):  # inside a graph-mode kernel
            return np.concatenate([t.reshape(-1) for t in tensors_])
        return ms.ops.cat([t.reshape(-1) for t in tensors_])

    @staticmethod
    def shape(t: Any) -> Tuple[int, ...]:
        return tuple(t.shape)

    @staticmethod
    def describe(t: Any) -> str:
        if isinstance(t, _Tensor):
            layout = "contiguous" if t.is_contiguous() else "strided"
            return f"{layout} {tensors.dtype_label(t.dtype)} mindspore.Tensor of {t.size} elements"
        return type(t).__name__

    @staticmethod
    def as_int(v: Any) -> Any:
        if isinstance(v, _Tensor) and v.size == 1 and v.dtype in (ms.int32, ms.int64, ms.int8, ms.uint8, ms.int16):
            return int(v.asnumpy().reshape(-1)[0])
        return v

    @staticmethod
    def as_list(v: Any) -> Any:
        return v.asnumpy().tolist() if isinstance(v, _Tensor) else v

    # --------------------------------------------------------- the symmetric heap as tensors

    @staticmethod
    def from_heap(block: Any, nbytes: int, dtype: Any, shape: Tuple[int, ...]) -> Tuple[Any, int]:
        t = tensors.from_buffer(block, dtype, shape)
        return t, int(np.frombuffer(block, dtype=np.uint8, count=1).ctypes.data)

    @staticmethod
    def storage_address(t: Any) -> int:
        return int(t.data_ptr()) - int(t.storage_offset()) * tensors.ITEMSIZE[t.dtype]

    @staticmethod
    def release(t: Any) -> None:
        tensors.release(t)

    @staticmethod
    def itemsize(dtype: Any) -> int:
        return tensors.ITEMSIZE[dtype]

    @staticmethod
    def interop_key(t: Any) -> Optional[Tuple[int, Any]]:
        if not isinstance(t, _Tensor) or t.size == 0:
            return None
        return MindSporeAdapter.storage_address(t), t

    # --------------------------------------------------------------------- tensor arithmetic
    # MindSpore's CPU in-place methods are unreliable (add_/mul_ return a new tensor and leave
    # the input unchanged, zero_/fill_ have no kernel): the "…_" members return new tensors,
    # as the interface allows; copy_ and slice assignment do write in place.

    @staticmethod
    def empty(shape: Tuple[int, ...], dtype: Any) -> Any:
        return _zeros(shape, dtype)

    @staticmethod
    def zeros(shape: Tuple[int, ...], dtype: Any) -> Any:
        return _zeros(shape, dtype)

    @staticmethod
    def contiguous(t: Any) -> Any:
        return t if t.is_contiguous() else t.contiguous()

    @staticmethod
    def detached_copy(t: Any) -> Any:
        c = ms.ops.stop_gradient(t).copy()
        return c if c.is_contiguous() else c.contiguous()

    @staticmethod
    def detached(t: Any) -> Any:
        return ms.ops.stop_gradient(t)

    @staticmethod
    def alias(t: Any) -> Any:
        return t.view(tuple(t.shape))

    @staticmethod
    def reshape(t: Any, shape: Tuple[int, ...]) -> Any:
        return t.reshape(shape)

    @staticmethod
    def split(t: Any, sizes: Sequence[int]) -> List[Any]:
        out, at = [], 0
        for s in sizes:
            out.append(t[at:at + s])
            at += s
        return out

    @staticmethod
    def copy_into(dst: Any, src: Any) -> None:
        # MindSpore 2.10 CPU's InplaceCopy fails on a source that views part of a larger storage
        # from its start, and a copy_ into such a view of the destination silently writes
        # nothing (both measured): own the source, and write a partial view through memory
        s = src.reshape(tuple(dst.shape))
        if not s.is_contiguous() or _partial(s):
            s = s.copy()
        if _partial(dst):
            nbytes = dst.size * tensors.ITEMSIZE[dst.dtype]
            if nbytes:
                ctypes.memmove(int(dst.data_ptr()), int(s.data_ptr()), nbytes)
            return
        dst.copy_(s)

    @staticmethod
    def div_(t: Any, divisor: int) -> Any:
        return t / divisor

    @staticmethod
    def div(t: Any, divisor: int) -> Any:
        return t / divisor

    @staticmethod
    def mul_(t: Any, mask: Any) -> Any:
        return t * mask.astype(t.dtype)

    @staticmethod
    def mul(t: Any, mask: Any) -> Any:
        return t * mask.astype(t.dtype)

    @staticmethod
    def add_(t: Any, other: Any) -> Any:
        return t + other

    @staticmethod
    def zero_(t: Any) -> Any:
        return ms.ops.zeros_like(t)

    @staticmethod
    def matmul(a: Any, b: Any) -> Any:
        return ms.ops.matmul(a, b)

    @staticmethod
    def transpose(t: Any) -> Any:
        return t.T

    @staticmethod
    def winners(x: Any, y: Any, rank: int, others: int) -> Any:
        eq = (x.reshape(-1) == y.reshape(-1)).asnumpy()
        return ms.Tensor(np.where(eq, rank, others).astype(np.int32))

    @staticmethod
    def mask(winners: Any, rank: int, shape: Tuple[int, ...]) -> Any:
        return (winners == rank).reshape(tuple(shape))

    # ------------------------------------------------------------------------ autograd

    @staticmethod
    def differentiable(rule: type) -> Callable[..., Any]:
        name = rule.__name__
        fwd, bwd = rule.forward, rule.backward

        def forward(ctx: Any, *args: Any) -> Any:
            # bytecode-captured ms.jit runs this Python but drops its gradient: refuse it here
            mode.check_differentiable(name)
            return fwd(ctx, *args)

        fn = type(name, (autograd.Function,), {"__doc__": rule.__doc__, "__module__": __name__,
                                               "forward": staticmethod(forward), "backward": staticmethod(bwd)})
        return fn.apply

    @staticmethod
    def save(ctx: Any, *tensors_: Any) -> None:
        ctx.save_for_backward(*tensors_)

    @staticmethod
    def saved(ctx: Any) -> Tuple[Any, ...]:
        return tuple(ctx.saved_tensors)

    @staticmethod
    def needs_input_grad(ctx: Any, index: int) -> bool:
        flags = getattr(ctx, "needs_input_grad", None)
        return True if flags is None else bool(flags[index])

    @staticmethod
    def requires_grad(t: Any) -> bool:
        return isinstance(t, _Tensor) and _record()

    @staticmethod
    def anchor(dtype: Any, requires_grad: bool) -> Any:
        return _zeros((0,), dtype)

    # ---------------------------------------------------------------- groups and the job

    @staticmethod
    def group_ranks(group: Any, arg: str) -> Tuple[int, ...]:
        if not isinstance(group, str):
            raise SymschedTypeError(
                f"`{arg}` must be a MindSpore group name (str), a list of world ranks or None (WORLD), "
                f"got {type(group).__name__}")
        world = groups.world_group_name()
        if world is not None and group == world:
            from mindspore.communication import get_group_size

            return tuple(range(int(get_group_size())))
        return groups.name_ranks(group, arg)

    @staticmethod
    def is_world(group: Any) -> bool:
        return isinstance(group, str) and group == groups.world_group_name()

    @staticmethod
    def job() -> Optional[Tuple[int, int]]:
        # The core hands the runtime RANK/WORLD_SIZE from this; the node-local ranks and the port
        # that names the rendezvous directory are this launcher's to give, so they are set here
        # (never overriding variables a launcher already set).
        info = launch.discover(os.environ)
        if info.launcher == launch.MSRUN and info.port is not None:
            os.environ.setdefault("MASTER_PORT", info.port)
        if groups.mccl_initialized():
            from mindspore.communication import get_group_size, get_local_rank, get_local_rank_size, get_rank

            os.environ.setdefault("LOCAL_RANK", str(int(get_local_rank())))
            os.environ.setdefault("LOCAL_WORLD_SIZE", str(int(get_local_rank_size())))
            return int(get_rank()), int(get_group_size())
        if info.launcher == launch.MSRUN:
            return info.rank, info.world
        return None

    @staticmethod
    def share_from_rank0(key: str, value: Optional[str]) -> str:
        info = launch.discover(os.environ)
        if info.job_id:
            return info.job_id
        if groups.mccl_initialized() and info.world > 1:
            return mccl.broadcast_str(value if value is not None else "", 0)
        return launch.agree_job_id(info)

    # ------------------------------------------------------------------------ profiling

    @staticmethod
    def profile_range(name: str) -> ContextManager[Any]:
        return profiler.named_range(name)

    # -------------------------------------------------------- the framework's collectives

    @staticmethod
    def watch_collectives(note: Callable[[Any, str], None]) -> Callable[[], None]:
        return mccl.watch(note)

    @staticmethod
    def make_host_engine() -> Any:
        from .hostcoll import MindSporeHostEngine

        return MindSporeHostEngine()

    @staticmethod
    def matmul_engine() -> Tuple[Callable[..., None], Optional[str]]:
        return NumpyMatmul(), None


_NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16}


class NumpyMatmul:
    """The MC2 matmul engine of a MindSpore process: ``c = a @ b`` with numpy's GEMM on
    zero-copy views of the operands (MindSpore's own CPU MatMul has no bfloat16 kernel and would
    need a tensor made around every operand; numpy is already the bridge to MindSpore memory).
    bfloat16 and fp8 operands are widened to float32 through their bits and the product is rounded
    once into ``c`` (bf16: round to nearest even). Called by the executor with the addresses of
    ``c``, ``a``, ``b`` (row-major m×n, m×k, k×n) and their dtype names; the ranges are live for the
    launch."""

    def __call__(self, c: int, a: int, b: int, m: int, k: int, n: int, dc: str, da: str, db: str) -> None:
        va, vb = _operand(a, da, m, k), _operand(b, db, k, n)
        if dc in _NP and da == db == dc:
            out = np.ctypeslib.as_array((ctypes.c_byte * (m * n * np.dtype(_NP[dc]).itemsize)).from_address(c)
                                        ).view(_NP[dc]).reshape(m, n) if m * n else np.empty((m, n), _NP[dc])
            np.matmul(va, vb, out=out)
            return
        prod = np.matmul(va.astype(np.float64 if "f64" in (da, db, dc) else np.float32),
                         vb.astype(np.float64 if "f64" in (da, db, dc) else np.float32))
        _store(c, dc, prod)


def _raw(addr: int, nbytes: int) -> np.ndarray:
    if nbytes == 0:
        return np.empty(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(addr))


def _operand(addr: int, name: str, rows: int, cols: int) -> np.ndarray:
    n = rows * cols
    if name in _NP:
        return _raw(addr, n * np.dtype(_NP[name]).itemsize).view(_NP[name]).reshape(rows, cols)
    if name == "bf16":
        bits = _raw(addr, 2 * n).view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(rows, cols)
    raise SymschedArgumentError(f"matmul engine: unsupported operand dtype `{name}`")


def _store(addr: int, name: str, value: np.ndarray) -> None:
    flat = value.reshape(-1)
    if name in _NP:
        _raw(addr, flat.size * np.dtype(_NP[name]).itemsize).view(_NP[name])[:] = flat
        return
    if name == "bf16":
        bits = flat.astype(np.float32).view(np.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        _raw(addr, 2 * flat.size).view(np.uint16)[:] = rounded.astype(np.uint16)
        return
    raise SymschedArgumentError(f"matmul engine: unsupported result dtype `{name}`")

