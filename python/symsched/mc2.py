"""MC2 fused communication + compute, with hyper-parallel's signatures.

The schedules ``allgather_matmul`` / ``matmul_reduce_scatter`` multiply each block as soon as it
arrives (resp. push each partial product as soon as it is computed). hyper-parallel's
``signal`` and ``symm_tensor`` workspaces are accepted for source compatibility but not needed:
each plan owns its signal slots and scratch. ``block_size`` is validated and otherwise unused
(the schedule's chunking is one block per rank).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from . import _coll
from . import _validate as v
from . import functional as F
from ._enums import ReduceOpLike
from ._errors import SymschedArgumentError


def _grad(*ts: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def fused_all_gather_matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, gather_out: torch.Tensor,
                            signal: Optional[torch.Tensor] = None, block_size: Optional[int] = None,
                            group: Any = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``gather_out`` ← allgather(a) (P·m×k); ``c`` ← gather_out @ b (P·m×n). Returns both."""
    if signal is not None:
        v.tensor(signal, "signal", contiguous=False)
    if block_size is not None and v.integer(block_size, "block_size", minimum=1) > max(a.shape[0], 1):
        raise SymschedArgumentError(f"`block_size` must be ≤ the rows of `a` ({a.shape[0]}), got {block_size}")
    if _grad(a, b):
        g, cc = F.all_gather_matmul(a, b, group)
        gather_out.copy_(g)
        c.copy_(cc)
        return gather_out, c
    _coll.allgather_matmul(a, b, gather_out, c, group)
    return gather_out, c


def fused_matmul_reduce_scatter(x1: torch.Tensor, x2: torch.Tensor, symm_tensor: Optional[torch.Tensor] = None,
                                signal: Optional[torch.Tensor] = None, reduce_op: ReduceOpLike = "sum",
                                group: Any = None) -> torch.Tensor:
    """Returns block ``rank`` (m/P × n) of reduce_scatter(x1 @ x2); x1 is m×k with P | m."""
    if symm_tensor is not None:
        v.tensor(symm_tensor, "symm_tensor", contiguous=False)
    if signal is not None:
        v.tensor(signal, "signal", contiguous=False)
    if _grad(x1, x2):
        return F.matmul_reduce_scatter(x1, x2, reduce_op, group)
    from . import _state

    info = _state.resolve_group(group)
    v.tensor(x1, "x1")
    v.tensor(x2, "x2")
    if x1.dim() != 2 or x2.dim() != 2:
        raise SymschedArgumentError(f"`x1` and `x2` must be matrices, got {tuple(x1.shape)} and {tuple(x2.shape)}")
    out = x1.new_empty((x1.shape[0] // info.size, x2.shape[1]))
    _coll.matmul_reduce_scatter(x1, x2, out, reduce_op, group)
    return out
