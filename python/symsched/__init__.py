"""symsched: collectives over symmetric memory for PyTorch — ``import symsched as symm``.

The RFC's API (HyperParallel Symmetric Memory, §5.1–5.7) on any ``torch.distributed`` job
(gloo for the framework side):

* allocation — :func:`empty`, :func:`free`, :func:`symm_memory_stats`;
* one-sided primitives — :func:`shmem_put`, :func:`shmem_get`, :func:`shmem_signal_op`,
  :func:`shmem_wait_for_signal`, :func:`shmem_put_with_signal`, :func:`barrier`;
* collectives — :func:`shmem_allgather`, :func:`shmem_alltoall`, :func:`shmem_allreduce`,
  :func:`shmem_reduce_scatter`, :func:`shmem_send`, :func:`shmem_recv`, :func:`shmem_broadcast`;
* MC2 — :func:`fused_all_gather_matmul`, :func:`fused_matmul_reduce_scatter`;
* autograd — :mod:`symsched.functional`; interop rule — :mod:`symsched.interop`;
* diagnostics — :func:`is_shmem_available`, :func:`availability`, ``SYMSCHED_TRACE``,
  ``torch.profiler`` ranges ``symsched::<op>``.

Every ``group`` argument is a torch ``ProcessGroup`` (``dist.new_group``, ``dist.split_group``,
DeviceMesh groups), a list of global ranks, or None for WORLD; ranks passed to ops are
group-local.

Layout: :mod:`symsched.core` is the framework-neutral implementation and :mod:`symsched.torch`
its PyTorch adapter (see :mod:`symsched.core.adapter` for the interface and how another
framework plugs in). This package is the PyTorch flavour, loaded on first use of a name below
(``symm.init``, ``symm.empty`` …), so that importing another flavour (``symsched.mindspore``)
never imports torch; ``symsched.functional``, ``symsched.interop``, ``symsched.memory`` … are the
modules that implement them.
"""

from __future__ import annotations

import importlib
from typing import Any, List

from .core.enums import CmpOp, ReduceOp, SignalOp
from .core.errors import (AgreementError, ForbiddenMixError, GroupNotSetUpError, NotSymmetricError, PeerAbortedError,
                          StaleTensorError, SymschedArgumentError, SymschedConfigError, SymschedError,
                          SymschedRuntimeError, SymschedTypeError, UnavailableError)

__all__ = [
    "CmpOp", "ReduceOp", "SignalOp",
    "AgreementError", "ForbiddenMixError", "NotSymmetricError", "StaleTensorError", "SymschedArgumentError", "SymschedConfigError",
    "SymschedError", "SymschedRuntimeError", "SymschedTypeError", "UnavailableError",
    "GroupNotSetUpError", "PeerAbortedError",
    "availability", "finalize", "init", "is_initialized", "is_shmem_available",
    "empty", "free", "is_symmetric", "symm_memory_stats",
    "shmem_put", "shmem_get", "shmem_signal_op", "shmem_wait_for_signal", "shmem_put_with_signal", "barrier",
    "shmem_allgather", "shmem_alltoall", "shmem_allreduce", "shmem_reduce_scatter", "shmem_send", "shmem_recv",
    "shmem_broadcast", "fused_all_gather_matmul", "fused_matmul_reduce_scatter",
    "functional", "interop", "flush_trace",
]

#: The public submodules (``import symsched.functional`` …), served by the PyTorch flavour.
_MODULES = ("functional", "collectives", "primitives", "memory", "profiling", "interop", "mc2", "hooks")


def _version() -> str:
    """The crate's version, as the compiled module carries it (the installed distribution's when
    the module cannot load): the same number as the wheel's and ``python -m symsched --version``."""
    try:
        from ._native import __version__ as version  # type: ignore[attr-defined]

        return str(version)
    except ImportError:
        from importlib.metadata import PackageNotFoundError, version as dist_version

        try:
            return dist_version("symsched")
        except PackageNotFoundError:
            return "unknown"


def __getattr__(name: str) -> Any:
    """Load the PyTorch flavour on the first use of one of its names (PEP 562); afterwards the
    names are plain module attributes, found without this call. ``__version__`` is read from
    the compiled module on first use (importing the package loads neither it nor torch)."""
    if name == "__version__":
        globals()["__version__"] = v = _version()
        return v
    if name.startswith("__") or (name not in __all__ and name not in _MODULES):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import torch as flavour  # installs the PyTorch adapter

    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    globals().update(flavour.API)
    return flavour.API[name]


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__) | set(_MODULES))
