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
DeviceMesh groups) or None for WORLD; ranks passed to ops are group-local.
"""

from __future__ import annotations

from . import functional, interop
from ._enums import CmpOp, ReduceOp, SignalOp
from .core.errors import (ForbiddenMixError, NotSymmetricError, StaleTensorError, SymschedArgumentError,
                          SymschedConfigError, SymschedError, SymschedRuntimeError, SymschedTypeError, UnavailableError)
from ._state import availability, finalize, init, is_initialized, is_shmem_available
from .collectives import (shmem_allgather, shmem_allreduce, shmem_alltoall, shmem_broadcast, shmem_recv,
                          shmem_reduce_scatter, shmem_send)
from .mc2 import fused_all_gather_matmul, fused_matmul_reduce_scatter
from .memory import empty, free, is_symmetric, symm_memory_stats
from .primitives import (barrier, shmem_get, shmem_put, shmem_put_with_signal, shmem_signal_op,
                         shmem_wait_for_signal)
from .profiling import flush_trace

__all__ = [
    "CmpOp", "ReduceOp", "SignalOp",
    "ForbiddenMixError", "NotSymmetricError", "StaleTensorError", "SymschedArgumentError", "SymschedConfigError",
    "SymschedError",
    "SymschedRuntimeError", "SymschedTypeError", "UnavailableError",
    "availability", "finalize", "init", "is_initialized", "is_shmem_available",
    "empty", "free", "is_symmetric", "symm_memory_stats",
    "shmem_put", "shmem_get", "shmem_signal_op", "shmem_wait_for_signal", "shmem_put_with_signal", "barrier",
    "shmem_allgather", "shmem_alltoall", "shmem_allreduce", "shmem_reduce_scatter", "shmem_send", "shmem_recv",
    "shmem_broadcast", "fused_all_gather_matmul", "fused_matmul_reduce_scatter",
    "functional", "interop", "flush_trace",
]
