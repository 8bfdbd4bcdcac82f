"""``torch.compile`` support: what TorchDynamo traces in place of symsched's Python API.

The public functions (``symm.shmem_allreduce``, ``symsched.functional.all_gather``,
``symm.fused_all_gather_matmul`` …) are the core's, with the front-of-call cache that makes a
small eager call cost a few µs; their bodies read tensor addresses and Python-side caches,
which a tracer cannot follow. So each one is registered with Dynamo as having a *traceable
twin* (``torch.compiler.substitute_in_graph``): when Dynamo meets the public function while
tracing, it traces the twin instead — the same argument handling and autograd routing,
ending in a ``torch.ops.symsched`` op (:mod:`symsched.torch.ops`) — and outside a trace the
public function runs as it always did, with no check added to its fast path.

Dynamo is imported lazily (importing it costs seconds, and most symsched processes never
compile), so the twins are registered when ``torch._dynamo`` is imported: at once when it
already is, else by an import hook that runs :func:`register` right after ``torch._dynamo``
finishes loading (``torch.compile`` imports it).

What a twin evaluates at trace time becomes a constant of the graph: the group (its ranks),
the op, the wire format argument, split sizes given as lists. The environment knobs are read
when the compiled graph runs (by the op kernels), as in eager mode.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from typing import Any, Optional, Sequence

import torch

from ..core import collectives as _C
from ..core import functional as _F
from ..core import mc2 as _M
from ..core import rules
from ..core.errors import SymschedArgumentError
from .ops import group_arg, op_arg, wire_arg

__all__ = ["register", "install", "registered"]

_ops = torch.ops.symsched


def _grad(*ts: Any) -> bool:
    """Whether autograd records a call on ``ts`` (the eager forms' routing rule)."""
    if not torch.is_grad_enabled():
        return False
    for t in ts:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            return True
    return False


# ------------------------------------------------------------------- the functional forms


def all_gather(x: Any, group: Any = None) -> Any:
    return _ops.all_gather(x, group_arg(group))


def reduce_scatter(x: Any, op: Any = "sum", group: Any = None, low_precision_dtype: Any = None) -> Any:
    return _ops.reduce_scatter(x, op_arg(op), group_arg(group), wire_arg(low_precision_dtype))


def all_reduce(x: Any, op: Any = "sum", group: Any = None, *, backward: str, low_precision_dtype: Any = None) -> Any:
    if backward not in (rules.ADJOINT, rules.IDENTITY):
        raise SymschedArgumentError(f"`backward` must be 'adjoint' or 'identity', got {backward!r}")
    return _ops.all_reduce(x, op_arg(op), group_arg(group), wire_arg(low_precision_dtype), backward)


def copy_to_group(x: Any, group: Any = None) -> Any:
    return _ops.copy_to_group(x, group_arg(group))


def reduce_from_group(x: Any, group: Any = None) -> Any:
    return _ops.all_reduce(x, "sum", group_arg(group), None, rules.IDENTITY)


def _split_arg(s: Optional[Sequence[Any]]) -> Optional[list]:
    return None if s is None else list(s)


def all_to_all(x: Any, output_split_sizes: Any = None, input_split_sizes: Any = None, group: Any = None) -> Any:
    return _ops.all_to_all(x, _split_arg(output_split_sizes), _split_arg(input_split_sizes), group_arg(group))


def broadcast(x: Any, src: int, group: Any = None) -> Any:
    return _ops.broadcast(x, src, group_arg(group))


def send(x: Any, dst: int, group: Any = None) -> Any:
    return _ops.send(x, dst, group_arg(group))


#: recv's anchors: an empty leaf that autograd tracks, per float dtype, so that the received
#: tensor's backward (which sends the gradient back) runs. Dynamo cannot create a tensor that
#: requires grad inside a graph, so they are made here, once; nothing ever flows into them.
_ANCHORS = {dt: torch.empty(0, dtype=dt, requires_grad=True)
            for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16)}


def recv(shape: Any, dtype: Any, src: int, group: Any = None, requires_grad: bool = True) -> Any:
    shp = [shape] if isinstance(shape, int) else list(shape)
    anchor = _ANCHORS.get(dtype) if requires_grad else None
    if anchor is None:
        anchor = torch.empty(0, dtype=dtype)
    return _ops.recv(anchor, shp, dtype, src, group_arg(group))


def all_gather_matmul(a: Any, b: Any, group: Any = None) -> Any:
    return _ops.all_gather_matmul(a, b, group_arg(group))


def matmul_reduce_scatter(a: Any, b: Any, op: Any = "sum", group: Any = None) -> Any:
    return _ops.matmul_reduce_scatter(a, b, op_arg(op), group_arg(group))


# -------------------------------------------------------------------- the in-place forms
# Traced, an in-place form runs its functional op and copies the result into the output (as
# torch's own in-place collectives do under torch.compile): the functional ops carry the
# ordered effect that keeps every rank's collectives in program order, which the compiler
# cannot attach to an op that mutates its arguments. With autograd recording this is also the
# eager forms' route (symsched.core.collectives), so gradients flow the same way.


def shmem_allgather(output_tensor: Any, input_tensor: Any, group: Any = None) -> None:
    output_tensor.copy_(all_gather(input_tensor.reshape(-1), group).reshape(output_tensor.shape))


def shmem_reduce_scatter(output_tensor: Any, input_tensor: Any, op: Any = "sum", group: Any = None,
                         low_precision_dtype: Any = None) -> None:
    y = reduce_scatter(input_tensor.reshape(-1), op, group, low_precision_dtype)
    output_tensor.copy_(y.reshape(output_tensor.shape))


def shmem_allreduce(tensor: Any, op: Any = "sum", group: Any = None, low_precision_dtype: Any = None, *,
                    backward: str = "identity") -> None:
    # outside autograd the eager form ignores `backward`: so does this one
    mode = backward if _grad(tensor) else rules.IDENTITY
    tensor.copy_(all_reduce(tensor, op, group, backward=mode, low_precision_dtype=low_precision_dtype))


def shmem_alltoall(send_tensor_list: Any, receive_tensor: Any, receive_list: Any, group: Any = None) -> None:
    sends = list(send_tensor_list)
    flat = torch.cat([t.reshape(-1) for t in sends])
    y = all_to_all(flat, list(receive_list), [t.numel() for t in sends], group)
    receive_tensor.copy_(y.reshape(receive_tensor.shape))


def shmem_broadcast(tensor: Any, src: int, group: Any = None) -> None:
    tensor.copy_(broadcast(tensor, src, group))


def shmem_send(tensor: Any, dst_rank: int, group: Any = None) -> None:
    _ops.shmem_send(tensor, dst_rank, group_arg(group))


def shmem_recv(tensor: Any, src_rank: int, group: Any = None) -> None:
    got = _ops.recv(torch.empty(0, dtype=tensor.dtype), list(tensor.shape), tensor.dtype, src_rank, group_arg(group))
    tensor.copy_(got)


def fused_all_gather_matmul(a: Any, b: Any, c: Any, gather_out: Any, signal: Optional[Any] = None,
                            block_size: Optional[int] = None, group: Any = None) -> Any:
    if block_size is not None:
        rows = a.shape[0] if a.dim() else 0
        if isinstance(block_size, bool) or not isinstance(block_size, int) or not 1 <= block_size <= max(rows, 1):
            raise SymschedArgumentError(f"`block_size` must be an int in 1..{max(rows, 1)} (the rows of `a`), "
                                        f"got {block_size!r}")
    g, cc = all_gather_matmul(a, b, group)
    gather_out.copy_(g)
    c.copy_(cc)
    return gather_out, c


def fused_matmul_reduce_scatter(x1: Any, x2: Any, symm_tensor: Optional[Any] = None, signal: Optional[Any] = None,
                                reduce_op: Any = "sum", group: Any = None) -> Any:
    return matmul_reduce_scatter(x1, x2, reduce_op, group)


#: Each public function of the core and its traceable twin.
TWINS = tuple((getattr(module, name), globals()[name]) for module, names in (
    (_F, ("all_gather", "reduce_scatter", "all_reduce", "copy_to_group", "reduce_from_group", "all_to_all",
          "broadcast", "send", "recv", "all_gather_matmul", "matmul_reduce_scatter")),
    (_C, ("shmem_allgather", "shmem_reduce_scatter", "shmem_allreduce", "shmem_alltoall", "shmem_broadcast",
          "shmem_send", "shmem_recv")),
    (_M, ("fused_all_gather_matmul", "fused_matmul_reduce_scatter")),
) for name in names)

# ------------------------------------------------------------------------- registration

_lock = threading.Lock()
_registered = False


def registered() -> bool:
    """Whether Dynamo knows the twins (it was imported since the PyTorch flavour loaded)."""
    return _registered


def register() -> None:
    """Register every twin with Dynamo (idempotent; imports ``torch._dynamo``)."""
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
        for public, twin in TWINS:
            torch.compiler.substitute_in_graph(public)(twin)


class _AfterDynamo(importlib.abc.MetaPathFinder):
    """Runs :func:`register` once ``torch._dynamo`` has been imported (then removes itself)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if name != "torch._dynamo":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module  # type: ignore[attr-defined]

        def exec_module(module: Any) -> None:
            run(module)
            register()

        loader.exec_module = exec_module  # type: ignore[attr-defined]
        return spec


def install() -> None:
    """Make Dynamo trace the twins: now if ``torch._dynamo`` is loaded, else when it loads."""
    if "torch._dynamo" in sys.modules:
        register()
    elif not any(isinstance(f, _AfterDynamo) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamo())
