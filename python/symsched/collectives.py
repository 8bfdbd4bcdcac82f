"""The RFC's in-place collectives (§5.1–5.2), differentiable (§5.3).

Symmetric tensors are used in place; ordinary tensors are staged through heap scratch by the
executor. When autograd is recording and an input requires grad, the call goes through the
functional form and the result is copied into the output, so gradients flow exactly as in
:mod:`symsched.functional`; ``shmem_allreduce`` then uses the RFC's identity backward unless
``backward='adjoint'`` is passed (see ``functional.all_reduce`` for when each is right).
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import torch

from . import _coll
from . import functional as F
from ._enums import ReduceOpLike

WireLike = Union[None, str, torch.dtype]
_grad_enabled = torch.is_grad_enabled


def _grad(*ts: Any) -> bool:
    """Whether autograd records a call on ``ts``: a plain loop, as every in-place call pays it
    (the generator ``any`` form cost ~0.8 µs)."""
    if not _grad_enabled():
        return False
    for t in ts:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            return True
    return False


def shmem_allgather(output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any = None) -> None:
    """``output_tensor`` ← every rank's ``input_tensor`` concatenated in group-rank order."""
    if _grad(input_tensor):
        y = F.all_gather(input_tensor.reshape(-1), group)
        output_tensor.view(-1).copy_(y)
        return
    _coll.allgather(output_tensor, input_tensor, group)


def shmem_reduce_scatter(output_tensor: torch.Tensor, input_tensor: torch.Tensor, op: ReduceOpLike = "sum",
                         group: Any = None, low_precision_dtype: WireLike = None) -> None:
    """``output_tensor`` ← this rank's block of the reduction of every rank's ``input_tensor``."""
    if _grad(input_tensor):
        y = F.reduce_scatter(input_tensor.reshape(-1), op, group, low_precision_dtype)
        output_tensor.view(-1).copy_(y)
        return
    _coll.reduce_scatter(output_tensor, input_tensor, op, group, low_precision_dtype)


def shmem_allreduce(tensor: torch.Tensor, op: ReduceOpLike = "sum", group: Any = None,
                    low_precision_dtype: WireLike = None, *, backward: str = "identity") -> None:
    """In-place allreduce. One-shot below ``SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES`` (256 KiB),
    two-shot above, the wire-format two-shot when a low-precision dtype applies (per call, or
    ``SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE``): cast to the wire type, transfer, accumulate in f32.
    """
    # inlined _grad: this is the hottest entry point
    if _grad_enabled() and isinstance(tensor, torch.Tensor) and tensor.requires_grad:
        y = F.all_reduce(tensor, op, group, backward=backward, low_precision_dtype=low_precision_dtype)
        tensor.copy_(y)
        return
    _coll.allreduce(tensor, op, group, low_precision_dtype)


def shmem_alltoall(send_tensor_list: Sequence[torch.Tensor], receive_tensor: torch.Tensor, receive_list: Any,
                   group: Any = None) -> None:
    """All-to-all-v (hyper-parallel's signature): ``send_tensor_list[j]`` goes to group rank j;
    ``receive_tensor`` gets ``receive_list[j]`` elements from each rank j, in rank order."""
    # the cached call first: it declines, sending nothing, when a send tensor requires grad
    grad = _grad_enabled()
    if _coll.alltoall_hit(send_tensor_list, receive_tensor, receive_list, group, grad):
        return
    if grad and _grad(*send_tensor_list):
        flat = torch.cat([t.reshape(-1) for t in send_tensor_list])
        counts = receive_list.tolist() if isinstance(receive_list, torch.Tensor) else list(receive_list)
        y = F.all_to_all(flat, counts, [t.numel() for t in send_tensor_list], group)
        receive_tensor.view(-1).copy_(y)
        return
    _coll.alltoall(send_tensor_list, receive_tensor, receive_list, group, tried=True)


def shmem_broadcast(tensor: torch.Tensor, src: int, group: Any = None) -> None:
    """In place: ``tensor`` ← ``src``'s tensor (``src`` group-local)."""
    if _grad(tensor):
        tensor.copy_(F.broadcast(tensor, src, group))
        return
    _coll.broadcast(tensor, src, group)


def shmem_send(tensor: torch.Tensor, dst_rank: int, group: Any = None) -> None:
    """Send ``tensor`` to ``dst_rank`` (group-local). Not differentiable in this in-place form:
    use ``functional.send`` to get the gradient back from the receiver."""
    _coll.send(tensor, dst_rank, group)


def shmem_recv(tensor: torch.Tensor, src_rank: int, group: Any = None) -> None:
    """Receive into ``tensor`` from ``src_rank`` (group-local); see ``functional.recv`` for autograd."""
    _coll.recv(tensor, src_rank, group)
