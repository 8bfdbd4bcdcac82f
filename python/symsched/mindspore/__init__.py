"""symsched for MindSpore — ``import symsched.mindspore as symm``.

The same API as the PyTorch flavour (``import symsched as symm``), from the same framework-neutral
core, on ``mindspore.Tensor``::

    import mindspore as ms, numpy as np
    import symsched.mindspore as symm                 # under msrun, after mindspore.communication.init()
    buf = symm.empty((4, 1024), ms.float32)           # a mindspore.Tensor over the symmetric heap
    symm.shmem_allreduce(buf, "sum", group="dp")      # group: a MindSpore group name, None = WORLD
    y = symm.functional.all_gather(x, group="tp")     # differentiable (PyNative)

* ``group`` is a MindSpore group name (``mindspore.communication.create_group``), a list of
  world ranks, or None (WORLD); ranks passed to ops are group-local.
* The Python API is PyNative only: under ``GRAPH_MODE`` or inside ``ms.jit`` every call raises
  :class:`GraphModeError` (MindSpore would silently zero the gradients through it), and
  MindSpore's graph compiler refuses to compile a graph that calls it. Inside a graph use the
  graph-mode ops of ``symsched.mindspore.graph`` (``symm.graph.AllReduce(...)`` …), which
  run on every call with their gradients.
* Jobs: ``msrun`` (mccl on CPU), or ranks started by ``symsched launch`` (call
  :func:`init_mccl` there for MindSpore group names and mccl).

The pieces that differ from PyTorch are this package's modules (``adapter`` implements the
core's interface; ``tensors``, ``groups``, ``launch``, ``mode``, ``autograd``, ``mccl``,
``profiler``); everything else is :mod:`symsched.core`. See ``docs/mindspore.md``.
"""

from __future__ import annotations

import importlib
from typing import Any, List

#: The names the flavour serves; the pieces' modules (``tensors``, ``groups`` …) import on their
#: own without the core or the adapter.
__all__ = [
    "availability", "finalize", "init", "is_initialized", "is_shmem_available",
    "empty", "free", "is_symmetric", "symm_memory_stats",
    "shmem_put", "shmem_get", "shmem_signal_op", "shmem_wait_for_signal", "shmem_put_with_signal", "barrier",
    "shmem_allgather", "shmem_alltoall", "shmem_allreduce", "shmem_reduce_scatter", "shmem_send", "shmem_recv",
    "shmem_broadcast", "fused_all_gather_matmul", "fused_matmul_reduce_scatter",
    "functional", "interop", "flush_trace", "init_mccl",
    "CmpOp", "ReduceOp", "SignalOp", "AgreementError", "ForbiddenMixError", "NotSymmetricError", "StaleTensorError",
    "SymschedArgumentError", "SymschedConfigError", "SymschedError", "SymschedRuntimeError", "SymschedTypeError",
    "UnavailableError", "GraphModeError", "WrongFrameworkError", "GroupNotSetUpError", "PeerAbortedError",
]


def __getattr__(name: str) -> Any:
    """Install the MindSpore adapter and load the API on the first use of one of its names (PEP
    562); afterwards the names are plain module attributes."""
    if name == "graph":  # the graph-mode ops (symsched.mindspore.graph)
        return importlib.import_module(f"{__name__}.graph")
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    api = importlib.import_module(f"{__name__}.api")
    globals().update({n: getattr(api, n) for n in __all__})
    return globals()[name]


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
