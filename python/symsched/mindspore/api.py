"""The MindSpore flavour's API, assembled from the core with the MindSpore adapter installed
(``symsched.mindspore`` loads this module on the first use of one of its names)."""


from __future__ import annotations

import functools
import types
from typing import Any, Callable, Dict

from ..core import adapter as _adapter
from .adapter import MindSporeAdapter

_adapter.install(MindSporeAdapter())

from ..core import collectives as _collectives  # noqa: E402
from ..core import enums as _enums  # noqa: E402
from ..core import errors as _errors  # noqa: E402
from ..core import functional as _functional  # noqa: E402
from ..core import interop as _interop  # noqa: E402
from ..core import mc2 as _mc2  # noqa: E402
from ..core import memory as _memory  # noqa: E402
from ..core import primitives as _primitives  # noqa: E402
from ..core import profiling as _profiling  # noqa: E402
from ..core import state as _state  # noqa: E402
from . import mccl as _mccl  # noqa: E402
from . import mode as _mode  # noqa: E402
from .errors import GraphModeError, WrongFrameworkError  # noqa: E402
from .launch import init_mccl  # noqa: E402

_check = _mode.check


#: Entry points whose every call passes tensors through the adapter's ``plain``/``span``, which
#: hold the PyNative guard themselves: they are served unwrapped (a wrapper frame cost ~0.6 µs a
#: call, a third of an 8-byte allreduce's host time), and only registered with the compiler.
_TENSOR_CHECKED = frozenset({
    "shmem_allgather", "shmem_alltoall", "shmem_allreduce", "shmem_reduce_scatter", "shmem_send", "shmem_recv",
    "shmem_broadcast", "fused_all_gather_matmul", "fused_matmul_reduce_scatter", "all_gather", "reduce_scatter",
    "all_reduce", "copy_to_group", "reduce_from_group", "all_to_all", "broadcast", "send",
    "all_gather_matmul", "matmul_reduce_scatter"})


#: Diagnostics answer in any mode (they send nothing and compute no gradient).
_UNGUARDED = frozenset({"availability", "is_shmem_available", "is_initialized", "symm_memory_stats", "is_symmetric"})


def _pynative(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` behind the PyNative guard, and refused by MindSpore's graph compiler."""
    if fn.__name__ in _UNGUARDED:
        return fn
    if fn.__name__ in _TENSOR_CHECKED and fn.__module__.startswith("symsched.core"):
        _mode.forbid_in_graph(fn)
        return fn

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _check(fn.__name__)
        return fn(*args, **kwargs)

    guarded.__module__ = __name__
    guarded.__qualname__ = fn.__name__
    return _mode.forbid_in_graph(guarded)


def _namespace(name: str, doc: str, members: Dict[str, Any]) -> types.ModuleType:
    mod = types.ModuleType(f"{__name__}.{name}", doc)
    for k, v in members.items():
        setattr(mod, k, _pynative(v) if callable(v) and not isinstance(v, type) else v)
    return mod


_GUARDED = {
    **{n: getattr(_state, n) for n in ("availability", "finalize", "init", "is_initialized", "is_shmem_available")},
    **{n: getattr(_memory, n) for n in ("empty", "free", "is_symmetric", "symm_memory_stats")},
    **{n: getattr(_primitives, n) for n in (
        "shmem_put", "shmem_get", "shmem_signal_op", "shmem_wait_for_signal", "shmem_put_with_signal", "barrier")},
    **{n: getattr(_collectives, n) for n in (
        "shmem_allgather", "shmem_alltoall", "shmem_allreduce", "shmem_reduce_scatter", "shmem_send",
        "shmem_recv", "shmem_broadcast")},
    "fused_all_gather_matmul": _mc2.fused_all_gather_matmul,
    "fused_matmul_reduce_scatter": _mc2.fused_matmul_reduce_scatter,
}
def versions_reason(ms_version: str, np_version: str) -> Any:
    """Why this MindSpore/numpy pair cannot serve symsched (None when it can). MindSpore 2.10's
    wheel is built against numpy 1.x: under numpy 2 its bfloat16 fails ("The Numpy bfloat16 data
    type is not supported now") and it warns of an ABI mismatch on import."""
    if int(np_version.split(".")[0]) >= 2:
        return (f"numpy {np_version} with MindSpore {ms_version}: MindSpore's CPU wheel is built against numpy 1.x "
                f"(bfloat16 tensors fail under numpy 2); install numpy<2 (scripts/ms_env.sh does)")
    return None


def availability() -> Any:
    """None when symmetric memory can be used in this process, else the reason it cannot
    (the MindSpore/numpy versions first, then the core's checks)."""
    import mindspore
    import numpy

    return versions_reason(mindspore.__version__, numpy.__version__) or _state.availability()


def is_shmem_available() -> bool:
    """True when :func:`availability` reports no problem."""
    return availability() is None


def init() -> None:
    """``symm.init`` (collective): refuses a MindSpore/numpy pair that cannot work, then starts
    the runtime."""
    import mindspore
    import numpy

    why = versions_reason(mindspore.__version__, numpy.__version__)
    if why is not None:
        raise _errors.UnavailableError(why)
    _state.init()


_GUARDED.update({"availability": availability, "is_shmem_available": is_shmem_available, "init": init})
globals().update({n: _pynative(f) for n, f in _GUARDED.items()})
flush_trace = _profiling.flush_trace

def recv(shape: Any, dtype: Any, src: int, group: Any = None, requires_grad: bool = True, *,
         anchor: Any = None) -> Any:
    """``functional.recv`` (a tensor of ``shape``/``dtype`` from ``src``; its gradient goes back to
    ``src``). MindSpore runs a backward only on the path from the inputs ``ms.grad``
    differentiates, and nothing connects a received tensor to them: pass one of those inputs as
    ``anchor`` (a zero-size slice of it becomes the op's input, so its backward runs). Without an
    anchor the forward is the same, and the sender's backward would wait for a gradient that is
    never sent (until the signal timeout)."""
    if anchor is None:
        return _functional.recv(shape, dtype, src, group, requires_grad)
    from ..core import rules as _rules
    from ..core import validate as _v

    shp = tuple(_v.integer(d, "shape") for d in ([shape] if isinstance(shape, int) else shape))
    if not isinstance(anchor, _adapter.active().tensor_type):
        raise _errors.SymschedTypeError(f"`anchor` must be a mindspore.Tensor, got {type(anchor).__name__}")
    return _rules.apply.Recv(anchor.reshape(-1)[:0].astype(dtype), shp, dtype, src, group)


#: ``symm.functional``: the differentiable forms (same names and backward table as PyTorch's).
functional = _namespace("functional", _functional.__doc__ or "", {
    **{n: getattr(_functional, n) for n in (
        "all_gather", "reduce_scatter", "all_reduce", "copy_to_group", "reduce_from_group", "all_to_all",
        "broadcast", "send", "all_gather_matmul", "matmul_reduce_scatter")},
    "recv": recv})

#: ``symm.interop``: the mixing rule (``step``) and mccl's collectives, recorded for it.
interop = _namespace("interop", _interop.__doc__ or "", {
    "step": _interop.step,
    "all_reduce": _mccl.all_reduce, "all_gather_into_tensor": _mccl.all_gather_into_tensor,
    "reduce_scatter_tensor": _mccl.reduce_scatter_tensor, "broadcast": _mccl.broadcast, "barrier": _mccl.barrier,
})

CmpOp, ReduceOp, SignalOp = _enums.CmpOp, _enums.ReduceOp, _enums.SignalOp
for _name in ("AgreementError", "ForbiddenMixError", "NotSymmetricError", "StaleTensorError", "SymschedArgumentError",
              "SymschedConfigError", "SymschedError", "SymschedRuntimeError", "SymschedTypeError", "UnavailableError"):
    globals()[_name] = getattr(_errors, _name)
for _name in ("GroupNotSetUpError", "PeerAbortedError"):
    globals()[_name] = getattr(_errors, _name)

__all__ = sorted(list(_GUARDED) + [
    "CmpOp", "ReduceOp", "SignalOp", "AgreementError", "ForbiddenMixError", "NotSymmetricError", "StaleTensorError",
    "SymschedArgumentError", "SymschedConfigError", "SymschedError", "SymschedRuntimeError", "SymschedTypeError",
    "UnavailableError", "GraphModeError", "WrongFrameworkError", "GroupNotSetUpError", "PeerAbortedError",
    "functional", "interop", "flush_trace",
    "init_mccl"])
