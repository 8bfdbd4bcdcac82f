"""MC2 fused communication + compute, with hyper-parallel's signatures.

The schedules ``allgather_matmul`` / ``matmul_reduce_scatter`` multiply each block as soon as it
arrives (resp. push each partial product as soon as it is computed). hyper-parallel's
``signal`` and ``symm_tensor`` workspaces are accepted for source compatibility but not needed:
each plan owns its signal slots and scratch. ``block_size`` is validated and otherwise unused
(the schedule's chunking is one block per rank).

**Matmul engine.** The executor hands every ``compute c = matmul(a, b)`` step of a plan to a
pluggable engine, on the launching thread, in the schedule's order (so each block is still
multiplied as soon as its wait completes). By default the framework's own matmul runs it
(:meth:`~symsched.core.adapter.FrameworkAdapter.matmul_engine`; for PyTorch
:class:`symsched.mc2.TorchMatmul`, ``torch.mm`` on zero-copy views of the operands), as real
MC2 fuses communication with the framework's matmul kernel. The executor's built-in kernel
(``engine='builtin'``) is the deterministic reference that the Ascend C lowering reproduces bit
for bit; its rounding contract (every product and partial sum rounded, no fused multiply-add)
and portable loops make it several times slower. ``SYMSCHED_MATMUL_ENGINE=builtin|<framework>``
or :func:`set_matmul_engine` chooses; the choice is per process, like the framework's own
kernel settings.

GIL: launches run with the GIL released. float32/float64 steps whose operands are aligned may
call the ``sgemm_``/``dgemm_`` of the BLAS the framework links straight from the executor,
without the GIL (a Python round trip costs several µs per step and a launch makes P of them);
``SYMSCHED_MATMUL_BLAS=0`` sends every step through the framework's callback. A Python
exception in the engine aborts the launch on this rank (the peers then time out as for any
failed step), so the engine validates everything it can before computing.

Schedules: a private ``gather_out`` runs ``allgather_matmul_pull`` (peers' blocks are read
straight into it, no staging barrier or copy-out), a symmetric one ``allgather_matmul`` (peers
put into it in place); ``SYMSCHED_MC2_AG_PULL=0`` runs the push form for both. Every rank of a
group must pass the same kind of ``gather_out`` (symmetric or not).
``fused_matmul_reduce_scatter`` runs ``matmul_reduce_scatter`` (push);
``SYMSCHED_MC2_RS_PULL=1`` runs ``matmul_reduce_scatter_pull``, whose reduce reads peers'
partial products where they were computed (one copy fewer, one more signal round: slower in
wall time on the loaded 2-core host, ``docs/performance.md``). Repeated calls with the same
shapes take a cached launch.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import adapter, coll, failure, knobs
from . import functional as F
from . import validate as v
from .enums import ReduceOpLike
from .errors import SymschedArgumentError, SymschedConfigError, UnavailableError
from .native import native

#: Environment variable choosing the matmul engine: the framework's name (default) or ``builtin``.
ENGINE_ENV = knobs.MATMUL_ENGINE.name

_engine_name = "builtin"


def engines() -> Tuple[str, str]:
    """The engines this process can choose: the framework's and ``'builtin'``."""
    return (adapter.active().name, "builtin")


def set_matmul_engine(engine: str) -> None:
    """Choose the kernel of MC2 matmul steps for this process: the framework's name (its own
    matmul, the default) or ``'builtin'`` (the executor's deterministic reference kernel, which
    the Ascend C lowering reproduces bit for bit). Every rank should choose the same (results
    differ by rounding)."""
    global _engine_name
    choices = engines()
    if engine not in choices:
        raise SymschedArgumentError(f"`engine` must be one of {list(choices)}, got {engine!r}")
    nat = native()
    if engine == "builtin":
        nat.set_matmul_engine(None)
    else:
        callback, blas = adapter.active().matmul_engine()
        try:
            nat.set_matmul_engine(callback, blas)
        except ValueError:  # the library is not loaded under that name: every step via the callback
            nat.set_matmul_engine(callback)
    _engine_name = engine


def matmul_engine() -> str:
    """The current MC2 matmul engine: the framework's name or ``'builtin'``."""
    return _engine_name


@adapter.on_install
def _engine_from_env(fw: adapter.FrameworkAdapter) -> None:
    """Apply ``SYMSCHED_MATMUL_ENGINE`` when the adapter is installed, if it is valid here; a
    bad value is left to :func:`symsched.init`, which validates every knob and reports it."""
    try:
        engine = knobs.MATMUL_ENGINE.get() or fw.name
    except SymschedConfigError:
        engine = fw.name
    if engine not in (fw.name, "builtin"):
        engine = fw.name
    try:
        set_matmul_engine(engine)
    except UnavailableError:
        pass  # no native module: nothing runs plans, and every op reports the reason itself


@failure.collective("fused_all_gather_matmul", 6)
def fused_all_gather_matmul(a: Any, b: Any, c: Any, gather_out: Any, signal: Optional[Any] = None,
                            block_size: Optional[int] = None, group: Any = None) -> Tuple[Any, Any]:
    """``gather_out`` ← allgather(a) (P·m×k); ``c`` ← gather_out @ b (P·m×n). Returns both."""
    fw = adapter.active()
    if signal is not None:
        v.tensor(signal, "signal", contiguous=False)
    if block_size is not None:
        rows = fw.shape(a)[0] if isinstance(a, fw.tensor_type) and fw.shape(a) else 0
        if v.integer(block_size, "block_size", minimum=1) > max(rows, 1):
            raise SymschedArgumentError(f"`block_size` must be ≤ the rows of `a` ({rows}), got {block_size}")
    if fw.grad_enabled() and (fw.requires_grad(a) or fw.requires_grad(b)):
        g, cc = F.all_gather_matmul(a, b, group)
        fw.copy_into(gather_out, g)
        fw.copy_into(c, cc)
        return gather_out, c
    coll.allgather_matmul(a, b, gather_out, c, group)
    return gather_out, c


@failure.collective("fused_matmul_reduce_scatter", 5)
def fused_matmul_reduce_scatter(x1: Any, x2: Any, symm_tensor: Optional[Any] = None, signal: Optional[Any] = None,
                                reduce_op: ReduceOpLike = "sum", group: Any = None) -> Any:
    """Returns block ``rank`` (m/P × n) of reduce_scatter(x1 @ x2); x1 is m×k with P | m."""
    fw = adapter.active()
    if symm_tensor is not None:
        v.tensor(symm_tensor, "symm_tensor", contiguous=False)
    if signal is not None:
        v.tensor(signal, "signal", contiguous=False)
    if fw.grad_enabled() and (fw.requires_grad(x1) or fw.requires_grad(x2)):
        return F.matmul_reduce_scatter(x1, x2, reduce_op, group)
    return coll.matmul_reduce_scatter(x1, x2, None, reduce_op, group)
