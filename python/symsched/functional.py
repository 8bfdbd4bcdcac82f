"""Differentiable, out-of-place collectives.

Backward semantics (RFC §5.3, JAX transpose rules):

=====================  ==============================================================
forward                backward
=====================  ==============================================================
``all_gather``         reduce_scatter(sum) of the gradient
``reduce_scatter``     all_gather of the gradient ('avg' scales by 1/P; max/min raise)
``all_reduce``         **must be chosen**: ``backward='adjoint'`` = allreduce(sum) of the
                       gradient (true adjoint; every rank's copy feeds its own loss term)
                       or ``backward='identity'`` (RFC's form, Megatron's *g*; only right
                       when the downstream computation is replicated). 'avg' scales by 1/P;
                       'max'/'min' route the gradient to the winning element (lowest rank
                       on ties).
``copy_to_group``      Megatron's *f*: identity forward, allreduce(sum) backward
``reduce_from_group``  Megatron's *g*: all_reduce(sum) forward, identity backward
``all_to_all``         all_to_all of the gradient with the splits transposed
``broadcast``          reduce(sum) of the gradient to ``src``; zero on other ranks
``send``               the gradient arrives from the receiver (returns a token to add
                       to the loss so the backward runs)
``recv``               sends the gradient back to ``src``
``all_gather_matmul``  matmul_reduce_scatter(grad_c, bᵀ) (+ reduce_scatter(grad_g))
``matmul_reduce_scatter`` all_gather_matmul(grad_c, bᵀ)
=====================  ==============================================================

Every backward launches the dual schedule the compiler declared for the forward plan.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Union

import torch

from . import _autograd as A
from . import _state
from . import _validate as v
from ._coll import DTYPES
from ._dtypes import FLOAT_DATA, resolve_wire
from ._enums import ReduceOpLike, parse_reduce_op
from .core.errors import SymschedArgumentError, SymschedTypeError

WireLike = Union[None, str, torch.dtype]


def all_gather(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Concatenate every rank's ``x`` along dim 0 (a 0-d ``x`` gives shape ``(P,)``)."""
    v.tensor(x, "x", dtypes=DTYPES, contiguous=False)
    return A.AllGather.apply(x, group)


def reduce_scatter(x: torch.Tensor, op: ReduceOpLike = "sum", group: Any = None,
                   low_precision_dtype: WireLike = None) -> torch.Tensor:
    """Block ``rank`` (along dim 0) of the element-wise reduction of every rank's ``x``."""
    v.tensor(x, "x", dtypes=DTYPES, contiguous=False)
    r = parse_reduce_op(op)
    resolve_wire(low_precision_dtype, x.dtype)
    return A.ReduceScatter.apply(x, r, group, low_precision_dtype)


def all_reduce(x: torch.Tensor, op: ReduceOpLike = "sum", group: Any = None, *, backward: str,
               low_precision_dtype: WireLike = None) -> torch.Tensor:
    """Element-wise reduction over the group, returned on every rank.

    ``backward`` is required: ``'adjoint'`` (allreduce of the gradient) or ``'identity'``
    (replicated downstream). See the module docstring for when each one is right.
    """
    v.tensor(x, "x", dtypes=DTYPES, contiguous=False)
    r = parse_reduce_op(op)
    if backward not in (A.ADJOINT, A.IDENTITY):
        raise SymschedArgumentError(f"`backward` must be 'adjoint' or 'identity', got {backward!r}")
    return A.AllReduce.apply(x, r, group, low_precision_dtype, backward)


def copy_to_group(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Megatron's *f*: identity forward, allreduce(sum) of the gradient backward."""
    v.tensor(x, "x", dtypes=FLOAT_DATA, contiguous=False)
    return A.CopyToGroup.apply(x, group)


def reduce_from_group(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Megatron's *g*: allreduce(sum) forward, identity backward (replicated downstream)."""
    return all_reduce(x, "sum", group, backward=A.IDENTITY)


def _splits(s: Optional[Sequence[int]], arg: str, rows: int, p: int) -> List[int]:
    if s is None:
        if rows % p:
            raise SymschedArgumentError(f"`{arg}` is None so dim 0 ({rows}) must divide by the group size {p}")
        return [rows // p] * p
    if isinstance(s, torch.Tensor):
        s = s.tolist()
    if not isinstance(s, (list, tuple)):
        raise SymschedTypeError(f"`{arg}` must be a list of {p} ints or None")
    if len(s) != p:
        raise SymschedArgumentError(f"`{arg}` must have one entry per group rank ({p}), got {len(s)}")
    return [v.integer(x, f"{arg}[{i}]") for i, x in enumerate(s)]


def all_to_all(x: torch.Tensor, output_split_sizes: Optional[Sequence[int]] = None,
               input_split_sizes: Optional[Sequence[int]] = None, group: Any = None) -> torch.Tensor:
    """All-to-all along dim 0 (like ``all_to_all_single``): rows ``input_split_sizes[j]`` go to rank j;
    the result holds ``output_split_sizes[j]`` rows from each rank j, in rank order."""
    v.tensor(x, "x", dtypes=DTYPES, contiguous=False)
    if x.dim() == 0:
        raise SymschedArgumentError("`x` must have at least one dimension")
    info = _state.resolve_group(group)
    ins = _splits(input_split_sizes, "input_split_sizes", x.shape[0], info.size)
    if sum(ins) != x.shape[0]:
        raise SymschedArgumentError(f"`input_split_sizes` must sum to dim 0 of x ({x.shape[0]}), got {sum(ins)}")
    outs = _splits(output_split_sizes, "output_split_sizes", x.shape[0], info.size)
    return A.AllToAll.apply(x, outs, ins, group)


def broadcast(x: torch.Tensor, src: int, group: Any = None) -> torch.Tensor:
    """``src``'s ``x`` (group-local ``src``) on every rank."""
    v.tensor(x, "x", dtypes=DTYPES, contiguous=False)
    return A.Broadcast.apply(x, src, group)


def send(x: torch.Tensor, dst: int, group: Any = None) -> torch.Tensor:
    """Send ``x`` to ``dst``; returns a 0-element token. Add ``token.sum()`` to the loss so the
    backward runs: it receives ``x``'s gradient from ``dst`` (which calls ``recv``'s backward)."""
    v.tensor(x, "x", dtypes=DTYPES, contiguous=False)
    return A.Send.apply(x, dst, group)


def recv(shape: Sequence[int], dtype: torch.dtype, src: int, group: Any = None,
         requires_grad: bool = True) -> torch.Tensor:
    """Receive a tensor of ``shape``/``dtype`` from ``src``; its gradient is sent back to ``src``."""
    if not isinstance(dtype, torch.dtype) or dtype not in DTYPES:
        raise SymschedArgumentError(f"`dtype` must be one of the supported data dtypes, got {dtype!r}")
    shp = tuple(v.integer(d, "shape") for d in ([shape] if isinstance(shape, int) else shape))
    anchor = torch.empty(0, dtype=dtype, requires_grad=requires_grad and dtype.is_floating_point)
    return A.Recv.apply(anchor, shp, dtype, src, group)


def all_gather_matmul(a: torch.Tensor, b: torch.Tensor, group: Any = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """MC2: ``(allgather(a), allgather(a) @ b)`` computed block by block as blocks arrive."""
    v.tensor(a, "a", dtypes=FLOAT_DATA, contiguous=False)
    v.tensor(b, "b", dtypes=FLOAT_DATA, contiguous=False)
    return A.AllGatherMatmul.apply(a, b, group)


def matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, op: ReduceOpLike = "sum", group: Any = None
                          ) -> torch.Tensor:
    """MC2: block ``rank`` (rows) of reduce_scatter(a @ b), each partial product pushed as computed."""
    v.tensor(a, "a", dtypes=FLOAT_DATA, contiguous=False)
    v.tensor(b, "b", dtypes=FLOAT_DATA, contiguous=False)
    return A.MatmulReduceScatter.apply(a, b, parse_reduce_op(op), group)
