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

Every backward launches the dual schedule the compiler declared for the forward plan
(:mod:`symsched.core.rules`); the framework's autograd runs it.

Every form and every backward is a guarded collective call (:mod:`symsched.core.failure`):
an exception on one rank aborts the group, so its peers raise ``PeerAbortedError`` at once.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from . import adapter, dtypes, failure, rules, state
from . import validate as v
from .enums import ReduceOpLike, parse_reduce_op
from .errors import SymschedArgumentError, SymschedTypeError

_DATA = tuple(dtypes.DATA)
_FLOATS = tuple(sorted(dtypes.FLOATS))


@failure.collective("functional.all_gather", 1)
def all_gather(x: Any, group: Any = None) -> Any:
    """Concatenate every rank's ``x`` along dim 0 (a 0-d ``x`` gives shape ``(P,)``)."""
    v.tensor(x, "x", names=_DATA, contiguous=False)
    return rules.apply.AllGather(x, group)


@failure.collective("functional.reduce_scatter", 2)
def reduce_scatter(x: Any, op: ReduceOpLike = "sum", group: Any = None, low_precision_dtype: Any = None) -> Any:
    """Block ``rank`` (along dim 0) of the element-wise reduction of every rank's ``x``."""
    s = v.tensor(x, "x", names=_DATA, contiguous=False)
    r = parse_reduce_op(op)
    v.wire(low_precision_dtype, s.name)
    return rules.apply.ReduceScatter(x, r, group, low_precision_dtype)


@failure.collective("functional.all_reduce", 2)
def all_reduce(x: Any, op: ReduceOpLike = "sum", group: Any = None, *, backward: str,
               low_precision_dtype: Any = None) -> Any:
    """Element-wise reduction over the group, returned on every rank.

    ``backward`` is required: ``'adjoint'`` (allreduce of the gradient) or ``'identity'``
    (replicated downstream). See the module docstring for when each one is right.
    """
    v.tensor(x, "x", names=_DATA, contiguous=False)
    r = parse_reduce_op(op)
    if backward not in (rules.ADJOINT, rules.IDENTITY):
        raise SymschedArgumentError(f"`backward` must be 'adjoint' or 'identity', got {backward!r}")
    return rules.apply.AllReduce(x, r, group, low_precision_dtype, backward)


@failure.collective("functional.copy_to_group", 1)
def copy_to_group(x: Any, group: Any = None) -> Any:
    """Megatron's *f*: identity forward, allreduce(sum) of the gradient backward."""
    v.tensor(x, "x", names=_FLOATS, contiguous=False)
    return rules.apply.CopyToGroup(x, group)


@failure.collective("functional.reduce_from_group", 1)
def reduce_from_group(x: Any, group: Any = None) -> Any:
    """Megatron's *g*: allreduce(sum) forward, identity backward (replicated downstream)."""
    return all_reduce(x, "sum", group, backward=rules.IDENTITY)


def _splits(s: Optional[Sequence[int]], arg: str, rows: int, p: int) -> List[int]:
    if s is None:
        if rows % p:
            raise SymschedArgumentError(f"`{arg}` is None so dim 0 ({rows}) must divide by the group size {p}")
        return [rows // p] * p
    s = adapter.active().as_list(s)
    if not isinstance(s, (list, tuple)):
        raise SymschedTypeError(f"`{arg}` must be a list of {p} ints or None")
    if len(s) != p:
        raise SymschedArgumentError(f"`{arg}` must have one entry per group rank ({p}), got {len(s)}")
    return [v.integer(x, f"{arg}[{i}]") for i, x in enumerate(s)]


@failure.collective("functional.all_to_all", 3)
def all_to_all(x: Any, output_split_sizes: Optional[Sequence[int]] = None,
               input_split_sizes: Optional[Sequence[int]] = None, group: Any = None) -> Any:
    """All-to-all along dim 0 (like ``all_to_all_single``): rows ``input_split_sizes[j]`` go to rank j;
    the result holds ``output_split_sizes[j]`` rows from each rank j, in rank order."""
    s = v.tensor(x, "x", names=_DATA, contiguous=False)
    if not s.shape:
        raise SymschedArgumentError("`x` must have at least one dimension")
    info = state.resolve_group(group)
    ins = _splits(input_split_sizes, "input_split_sizes", s.shape[0], info.size)
    if sum(ins) != s.shape[0]:
        raise SymschedArgumentError(f"`input_split_sizes` must sum to dim 0 of x ({s.shape[0]}), got {sum(ins)}")
    outs = _splits(output_split_sizes, "output_split_sizes", s.shape[0], info.size)
    return rules.apply.AllToAll(x, outs, ins, group)


@failure.collective("functional.broadcast", 2)
def broadcast(x: Any, src: int, group: Any = None) -> Any:
    """``src``'s ``x`` (group-local ``src``) on every rank."""
    v.tensor(x, "x", names=_DATA, contiguous=False)
    return rules.apply.Broadcast(x, src, group)


@failure.collective("functional.send", 2, peer_at=1)
def send(x: Any, dst: int, group: Any = None) -> Any:
    """Send ``x`` to ``dst``; returns a 0-element token. Add ``token.sum()`` to the loss so the
    backward runs: it receives ``x``'s gradient from ``dst`` (which calls ``recv``'s backward)."""
    v.tensor(x, "x", names=_DATA, contiguous=False)
    return rules.apply.Send(x, dst, group)


@failure.collective("functional.recv", 3, peer_at=2)
def recv(shape: Sequence[int], dtype: Any, src: int, group: Any = None, requires_grad: bool = True) -> Any:
    """Receive a tensor of ``shape``/``dtype`` from ``src``; its gradient is sent back to ``src``."""
    fw = adapter.active()
    if not isinstance(dtype, fw.dtype_type) or fw.dtype_names.get(dtype) not in _DATA:
        raise SymschedArgumentError(f"`dtype` must be one of the supported data dtypes, got {dtype!r}")
    shp = tuple(v.integer(d, "shape") for d in ([shape] if isinstance(shape, int) else shape))
    return rules.apply.Recv(fw.anchor(dtype, requires_grad), shp, dtype, src, group)


@failure.collective("functional.all_gather_matmul", 2)
def all_gather_matmul(a: Any, b: Any, group: Any = None) -> Tuple[Any, Any]:
    """MC2: ``(allgather(a), allgather(a) @ b)`` computed block by block as blocks arrive."""
    v.tensor(a, "a", names=_FLOATS, contiguous=False)
    v.tensor(b, "b", names=_FLOATS, contiguous=False)
    return rules.apply.AllGatherMatmul(a, b, group)


@failure.collective("functional.matmul_reduce_scatter", 3)
def matmul_reduce_scatter(a: Any, b: Any, op: ReduceOpLike = "sum", group: Any = None) -> Any:
    """MC2: block ``rank`` (rows) of reduce_scatter(a @ b), each partial product pushed as computed."""
    v.tensor(a, "a", names=_FLOATS, contiguous=False)
    v.tensor(b, "b", names=_FLOATS, contiguous=False)
    return rules.apply.MatmulReduceScatter(a, b, parse_reduce_op(op), group)
