"""symsched for PyTorch: installs :class:`~symsched.torch.adapter.TorchAdapter` into the core and
assembles the API that ``import symsched as symm`` serves (``symsched/__init__.py`` loads this
package on first use).

The PyTorch-only modules are :mod:`symsched.torch.adapter` (the adapter), :mod:`symsched.torch.mc2`
(the ``torch.mm`` matmul engine), :mod:`symsched.torch.interop` (``torch.distributed``'s side
of the interop rule), :mod:`symsched.torch.ops` (the collectives as ``torch.ops.symsched``
dispatcher ops), :mod:`symsched.torch.compile` (what ``torch.compile`` traces in place of the
Python API) and :mod:`symsched.torch.hooks` (DDP and FSDP2 communication hooks); everything else
is the framework-neutral core.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Dict

from ..core import adapter as _adapter
from .adapter import TorchAdapter

_adapter.install(TorchAdapter())

from ..core import collectives, enums, errors, functional, memory, primitives, profiling, state  # noqa: E402
from . import compile, hooks, interop, mc2, ops  # noqa: E402

compile.install()

#: The public submodules of ``symsched`` (``symsched.functional`` is this ``functional`` …).
MODULES: Dict[str, ModuleType] = {
    "functional": functional, "collectives": collectives, "primitives": primitives, "memory": memory,
    "profiling": profiling, "interop": interop, "mc2": mc2, "hooks": hooks,
}

#: Every public name of ``import symsched as symm``.
API: Dict[str, Any] = {
    "CmpOp": enums.CmpOp, "ReduceOp": enums.ReduceOp, "SignalOp": enums.SignalOp,
    **{name: getattr(errors, name) for name in (
        "AgreementError", "ForbiddenMixError", "NotSymmetricError", "StaleTensorError", "SymschedArgumentError",
        "SymschedConfigError", "SymschedError", "SymschedRuntimeError", "SymschedTypeError", "UnavailableError",
        "GroupNotSetUpError", "PeerAbortedError")},
    **{name: getattr(state, name) for name in (
        "availability", "finalize", "init", "is_initialized", "is_shmem_available")},
    **{name: getattr(memory, name) for name in ("empty", "free", "is_symmetric", "symm_memory_stats")},
    **{name: getattr(primitives, name) for name in (
        "shmem_put", "shmem_get", "shmem_signal_op", "shmem_wait_for_signal", "shmem_put_with_signal", "barrier")},
    **{name: getattr(collectives, name) for name in (
        "shmem_allgather", "shmem_alltoall", "shmem_allreduce", "shmem_reduce_scatter", "shmem_send",
        "shmem_recv", "shmem_broadcast")},
    "fused_all_gather_matmul": mc2.fused_all_gather_matmul,
    "fused_matmul_reduce_scatter": mc2.fused_matmul_reduce_scatter,
    "functional": functional, "interop": interop, "flush_trace": profiling.flush_trace,
}


def module(name: str) -> ModuleType:
    """The module ``symsched.<name>`` stands for."""
    return MODULES[name]
