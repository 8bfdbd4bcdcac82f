"""The RFC's in-place collectives (§5.1–5.2), differentiable (§5.3).

Symmetric tensors are used in place; ordinary tensors are staged through heap scratch by the
executor. When autograd is recording and an input requires grad, the call goes through the
functional form and the result is copied into the output, so gradients flow exactly as in
:mod:`symsched.functional`; ``shmem_allreduce`` then uses the RFC's identity backward unless
``backward='adjoint'`` is passed (see ``functional.all_reduce`` for when each is right).
"""

from __future__ import annotations

from typing import Any, Sequence

from . import adapter, coll, failure
from . import functional as F
from .enums import ReduceOpLike

_fw: Any = adapter.active()
_grad_enabled: Any = lambda: False  # noqa: E731
_Tensor: type = type(None)


@adapter.on_install
def _bind(fw: adapter.FrameworkAdapter) -> None:
    global _fw, _grad_enabled, _Tensor
    _fw, _grad_enabled, _Tensor = fw, fw.grad_enabled, fw.tensor_type


def _grad(*ts: Any) -> bool:
    """Whether autograd records a call on ``ts``: a plain loop, as every in-place call pays it
    (the generator ``any`` form cost ~0.8 µs)."""
    if not _grad_enabled():
        return False
    for t in ts:
        if isinstance(t, _Tensor) and _fw.requires_grad(t):
            return True
    return False


def shmem_allgather(output_tensor: Any, input_tensor: Any, group: Any = None) -> None:
    """``output_tensor`` ← every rank's ``input_tensor`` concatenated in group-rank order."""
    # inlined _grad, as in shmem_allreduce: a hot entry point
    if _grad_enabled() and isinstance(input_tensor, _Tensor) and _fw.requires_grad(input_tensor):
        _fw.copy_into(output_tensor, F.all_gather(_fw.reshape(input_tensor, (-1,)), group))
        return
    coll.allgather(output_tensor, input_tensor, group)


def shmem_reduce_scatter(output_tensor: Any, input_tensor: Any, op: ReduceOpLike = "sum", group: Any = None,
                         low_precision_dtype: Any = None) -> None:
    """``output_tensor`` ← this rank's block of the reduction of every rank's ``input_tensor``."""
    # inlined _grad, as in shmem_allreduce: a hot entry point
    if _grad_enabled() and isinstance(input_tensor, _Tensor) and _fw.requires_grad(input_tensor):
        y = F.reduce_scatter(_fw.reshape(input_tensor, (-1,)), op, group, low_precision_dtype)
        _fw.copy_into(output_tensor, y)
        return
    coll.reduce_scatter(output_tensor, input_tensor, op, group, low_precision_dtype)


def shmem_allreduce(tensor: Any, op: ReduceOpLike = "sum", group: Any = None, low_precision_dtype: Any = None,
                    *, backward: str = "identity") -> None:
    """In-place allreduce. One-shot below ``SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES`` (4 KiB),
    two-shot above, the wire-format two-shot when a low-precision dtype applies (per call, or
    ``SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE``): cast to the wire type, transfer, accumulate in f32.
    """
    # inlined _grad: this is the hottest entry point
    if _grad_enabled() and isinstance(tensor, _Tensor) and _fw.requires_grad(tensor):
        _fw.copy_into(tensor, F.all_reduce(tensor, op, group, backward=backward,
                                           low_precision_dtype=low_precision_dtype))
        return
    coll.allreduce(tensor, op, group, low_precision_dtype)


def shmem_alltoall(send_tensor_list: Sequence[Any], receive_tensor: Any, receive_list: Any,
                   group: Any = None) -> None:
    """All-to-all-v (hyper-parallel's signature): ``send_tensor_list[j]`` goes to group rank j;
    ``receive_tensor`` gets ``receive_list[j]`` elements from each rank j, in rank order."""
    # the cached call first: it declines, sending nothing, when a send tensor requires grad
    grad = _grad_enabled()
    if coll.alltoall_hit(send_tensor_list, receive_tensor, receive_list, group, grad):
        return
    if grad and _grad(*send_tensor_list):
        try:
            flat = _fw.concat(send_tensor_list)
            counts = list(_fw.as_list(receive_list))
            y = F.all_to_all(flat, counts, [_fw.span(t, "send_tensor_list").numel for t in send_tensor_list],
                             group)
            _fw.copy_into(receive_tensor, y)
        except BaseException as exc:
            failure.fail(exc, "alltoall", group)
            raise
        return
    coll.alltoall(send_tensor_list, receive_tensor, receive_list, group, tried=True)


def shmem_broadcast(tensor: Any, src: int, group: Any = None) -> None:
    """In place: ``tensor`` ← ``src``'s tensor (``src`` group-local)."""
    if _grad(tensor):
        _fw.copy_into(tensor, F.broadcast(tensor, src, group))
        return
    coll.broadcast(tensor, src, group)


def shmem_send(tensor: Any, dst_rank: int, group: Any = None) -> None:
    """Send ``tensor`` to ``dst_rank`` (group-local). Not differentiable in this in-place form:
    use ``functional.send`` to get the gradient back from the receiver."""
    coll.send(tensor, dst_rank, group)


def shmem_recv(tensor: Any, src_rank: int, group: Any = None) -> None:
    """Receive into ``tensor`` from ``src_rank`` (group-local); see ``functional.recv`` for autograd."""
    coll.recv(tensor, src_rank, group)
