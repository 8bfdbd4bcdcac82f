"""symsched's collectives as PyTorch dispatcher ops: ``torch.ops.symsched.*``.

Every collective the RFC names — the differentiable functional forms, the MC2 fused ops and
the in-place forms — is a ``torch.library`` custom op in the ``symsched`` namespace, with a fake
kernel (shapes propagate without running: ``torch.compile``, ``FakeTensorMode``), ``mutates_args``
for the in-place forms, and autograd attached with ``register_autograd``: each differentiable
op's backward is a ``*_backward`` op whose kernel runs the same rule as eager autograd
(:mod:`symsched.core.rules`, which launches the dual schedule the compiler declared).

**Groups** travel as ``int[] group``: the group's global ranks in group-rank order, or ``[]`` for
WORLD — a constant the compiler bakes into the graph, as torch's functional collectives take a
group name or ranks + tag. :func:`group_arg` turns a ``group`` argument of the Python API (None,
a ProcessGroup, a rank list) into it, and does so inside a ``torch.compile`` trace too
(``dist.get_process_group_ranks`` is folded to a constant there). A group is identified by its
ranks alone: symsched's runtime group for a rank list is the same whatever object named it.

**Ordering.** Every op that mutates no argument is registered with an ordered effect: the
compiler keeps those ops of one graph in program order and never drops one whose result is
unused. Each rank compiles its own graph, and a collective whose ranks ran in different orders
(or one rank skipped) would deadlock; the ordered effect makes the compiled order the program
order on every rank. torch 2.13 cannot attach an effect to an op that mutates its arguments
(functionalization rewrites it first), so the in-place ops (``shmem_allreduce`` …, with
``mutates_args``) are ordered in a compiled graph by their data dependencies only, and the
in-place Python names trace as their functional op plus a copy into the output instead (as
torch's own in-place collectives do under ``torch.compile``). Call the in-place ops directly
where a graph's collectives are ordered by data anyway (the same graph on every rank, or a
chain through the tensors), to keep a symmetric tensor's update in place.

The Python API (``symm.shmem_allreduce``, ``symsched.functional.all_reduce`` …) stays what it
was in eager mode — the core's functions, with their cached fast path — and becomes a call of
these ops when ``torch.compile`` traces it (:mod:`symsched.torch.compile`). Calling the ops
directly works in eager mode too (through the dispatcher: several µs more per call).

Op kernels run the core's kernels and autograd rules directly (the autograd of the op is the
dispatcher's, above the kernel): what they compute, validate and launch is what the eager API
does for the same arguments.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch._library.effects import EffectType

from ..core import coll, dtypes, rules, schedules, state
from ..core import functional as _functional
from ..core.enums import ReduceOp, parse_reduce_op
from ..core.errors import SymschedArgumentError, SymschedTypeError

NAMESPACE = "symsched"

__all__ = ["NAMESPACE", "OPS", "group_arg", "op_arg", "wire_arg"]

# ----------------------------------------------------------------------- argument encoding


def group_arg(group: Any) -> List[int]:
    """A ``group`` argument of the Python API as the ops take it: ``[]`` for None (WORLD), the
    global ranks of a ProcessGroup (DeviceMesh groups included) or of a rank list. Traceable:
    ``torch.compile`` folds it to a constant."""
    if group is None:
        return []
    if isinstance(group, (list, tuple)):
        return list(group)
    if isinstance(group, dist.ProcessGroup):
        return dist.get_process_group_ranks(group)
    raise SymschedTypeError(
        f"`group` must be a torch.distributed ProcessGroup, a list of global ranks or None (WORLD), "
        f"got {type(group).__name__}")


_OPS_BY_ENUM = {ReduceOp.SUM: "sum", ReduceOp.AVG: "avg", ReduceOp.MAX: "max", ReduceOp.MIN: "min"}


def op_arg(op: Any) -> str:
    """A reduce op of the Python API as the ops take it: its name (``'sum'`` …). Traceable."""
    if isinstance(op, ReduceOp):
        return _OPS_BY_ENUM[op]
    if isinstance(op, str):
        return op
    return parse_reduce_op(op).value  # torch.distributed.ReduceOp and other enum-likes


_WIRE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float8_e4m3fn: "float8_e4m3fn",
               torch.float8_e5m2: "float8_e5m2"}


def wire_arg(low_precision_dtype: Any) -> Optional[str]:
    """A ``low_precision_dtype`` as the ops take it: None, or a name the core parses
    (``'bfloat16'``, ``'fp8'`` …; a torch dtype becomes its name). Traceable."""
    if low_precision_dtype is None or isinstance(low_precision_dtype, str):
        return low_precision_dtype
    if isinstance(low_precision_dtype, torch.dtype):
        return _WIRE_NAMES.get(low_precision_dtype, str(low_precision_dtype))
    raise SymschedTypeError(
        f"`low_precision_dtype` must be a torch dtype or a name, got {type(low_precision_dtype).__name__}")


#: Rank tuples by value: the core's front-of-call cache keys calls on the group object's
#: identity, so every call of one group hands it the same tuple.
_interned: Dict[Tuple[int, ...], Tuple[int, ...]] = {}


def _group(ranks: Sequence[int]) -> Optional[Tuple[int, ...]]:
    """An op's ``group`` as the core takes it: None (WORLD) or an interned rank tuple."""
    if not ranks:
        return None
    key = tuple(ranks)  # the dispatcher hands ``int[]`` over as Python ints
    return _interned.setdefault(key, key)


def _group_size(ranks: Sequence[int]) -> int:
    """The size of an op's group, without touching the runtime (fake kernels run at trace time)."""
    return len(ranks) if ranks else state.world_size()


def _ints(xs: Optional[Sequence[Any]]) -> Optional[List[int]]:
    return None if xs is None else [int(x) for x in xs]


# ---------------------------------------------------------------- fake-kernel validation
# The fake kernels refuse what the eager call refuses, at trace time, with the same errors
# (the kernels check again when they run).

_DATA = frozenset(dtypes.DATA)
_FLOAT = frozenset(dtypes.FLOATS)
_NAMES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
          torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8"}


def _check(t: torch.Tensor, arg: str, names: frozenset = _DATA) -> None:
    if t.device.type != "cpu":
        raise SymschedArgumentError(f"`{arg}` must be on the CPU (the host is the device), got {t.device}")
    if _NAMES.get(t.dtype) not in names:
        raise SymschedArgumentError(f"`{arg}` has dtype {t.dtype}; expected one of: {dtypes.labels(sorted(names))}")


def _check_backward(backward: str) -> None:
    if backward not in (rules.ADJOINT, rules.IDENTITY):
        raise SymschedArgumentError(f"`backward` must be 'adjoint' or 'identity', got {backward!r}")


def _check_op(op: str, t: torch.Tensor) -> ReduceOp:
    r = parse_reduce_op(op)
    if r is ReduceOp.AVG and _NAMES.get(t.dtype) not in _FLOAT:
        raise SymschedArgumentError(f"`op`='avg' needs a floating dtype, got {t.dtype}")
    return r


def _check_matrix(t: torch.Tensor, arg: str) -> None:
    _check(t, arg, _FLOAT)
    if t.dim() != 2:
        raise SymschedArgumentError(f"`{arg}` must be a 2-d matrix, got shape {tuple(t.shape)}")


# ------------------------------------------------------------------------- registration

#: Every op of the namespace, by name (``torch.ops.symsched.<name>`` is the dispatcher's).
OPS: Dict[str, Any] = {}


def _op(name: str, schema: str, mutates: Tuple[str, ...] = ()) -> Any:
    """Decorator: register the kernel as ``symsched::<name>`` with ``schema`` (and an ordered
    effect unless it mutates an argument)."""

    def register(fn: Any) -> Any:
        op = torch.library.custom_op(f"{NAMESPACE}::{name}", fn, mutates_args=mutates, schema=schema)
        if not mutates:
            # functionalization rewrites a mutating op before it looks at effects (torch 2.13
            # drops the effect of such an op), so only the others carry one: see "Ordering"
            op.register_effect(EffectType.ORDERED)
        OPS[name] = op
        return op

    return register


class _Ctx:
    """The ``ctx`` a rule's forward or backward reads and writes, outside an autograd engine."""

    def __init__(self, **fields: Any) -> None:
        self.needs_input_grad = (False,) * 6
        self.saved_tensors: Tuple[Any, ...] = ()
        self.__dict__.update(fields)

    def save_for_backward(self, *tensors: Any) -> None:
        self.saved_tensors = tensors


def _fresh(result: torch.Tensor, *inputs: Optional[torch.Tensor]) -> torch.Tensor:
    """A custom op's output may not alias an input: copy a rule's result that does."""
    ptr = result.untyped_storage().data_ptr()
    for t in inputs:
        if t is not None and t.numel() and result.numel() and t.untyped_storage().data_ptr() == ptr:
            return result.clone()
    return result


# ----------------------------------------------------------------- the functional forms


@_op("all_gather", "(Tensor x, int[] group) -> Tensor")
def _all_gather(x: torch.Tensor, group: List[int]) -> torch.Tensor:
    _check(x, "x")
    return rules.AllGather.forward(_Ctx(), x, _group(group))


@_all_gather.register_fake
def _(x: torch.Tensor, group: List[int]) -> torch.Tensor:
    _check(x, "x")
    p = _group_size(group)
    shape = (p,) if x.dim() == 0 else (p * x.shape[0],) + tuple(x.shape[1:])
    return x.new_empty(shape)


@_op("all_gather_backward", "(Tensor grad, SymInt[] shape, int[] group) -> Tensor")
def _all_gather_backward(grad: torch.Tensor, shape: List[int], group: List[int]) -> torch.Tensor:
    shp = tuple(int(s) for s in shape)
    ctx = _Ctx(group=_group(group), shape=shp, dtype=grad.dtype, n=math.prod(shp))
    return rules.AllGather.backward(ctx, grad)[0]


@_all_gather_backward.register_fake
def _(grad: torch.Tensor, shape: List[int], group: List[int]) -> torch.Tensor:
    return grad.new_empty(shape)


def _all_gather_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    ctx.shape, ctx.group = list(inputs[0].shape), inputs[1]


def _all_gather_grad(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
    return torch.ops.symsched.all_gather_backward(grad, ctx.shape, ctx.group), None


_all_gather.register_autograd(_all_gather_grad, setup_context=_all_gather_setup)


@_op("reduce_scatter", "(Tensor x, str op, int[] group, str? low_precision_dtype) -> Tensor")
def _reduce_scatter(x: torch.Tensor, op: str, group: List[int], low_precision_dtype: Optional[str]) -> torch.Tensor:
    _check(x, "x")
    return rules.ReduceScatter.forward(_Ctx(), x, parse_reduce_op(op), _group(group), low_precision_dtype)


@_reduce_scatter.register_fake
def _(x: torch.Tensor, op: str, group: List[int], low_precision_dtype: Optional[str]) -> torch.Tensor:
    _check(x, "x")
    _check_op(op, x)
    p = _group_size(group)
    if x.dim() == 0:
        raise SymschedArgumentError(f"`input` dim 0 must be a multiple of the group size {p}, got shape ()")
    torch._check(x.shape[0] % p == 0, lambda: f"`input` dim 0 must be a multiple of the group size {p}")
    return x.new_empty((x.shape[0] // p,) + tuple(x.shape[1:]))


@_op("reduce_scatter_backward",
     "(Tensor grad, SymInt[] shape, str op, int[] group, str? low_precision_dtype) -> Tensor")
def _reduce_scatter_backward(grad: torch.Tensor, shape: List[int], op: str, group: List[int],
                             low_precision_dtype: Optional[str]) -> torch.Tensor:
    r = parse_reduce_op(op)
    name = _NAMES[grad.dtype]
    ctx = _Ctx(group=_group(group), op=r, shape=tuple(int(s) for s in shape), dtype=grad.dtype, n=grad.numel(),
               schedule=schedules.reduce_scatter(coll._wire_for(r, low_precision_dtype, name)))
    return rules.ReduceScatter.backward(ctx, grad)[0]


@_reduce_scatter_backward.register_fake
def _(grad: torch.Tensor, shape: List[int], op: str, group: List[int],
      low_precision_dtype: Optional[str]) -> torch.Tensor:
    return grad.new_empty(shape)


def _reduce_scatter_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    ctx.shape, ctx.args = list(inputs[0].shape), inputs[1:]


def _reduce_scatter_grad(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None, None, None]:
    op, group, wire = ctx.args
    return torch.ops.symsched.reduce_scatter_backward(grad, ctx.shape, op, group, wire), None, None, None


_reduce_scatter.register_autograd(_reduce_scatter_grad, setup_context=_reduce_scatter_setup)


@_op("all_reduce", "(Tensor x, str op, int[] group, str? low_precision_dtype, str backward) -> Tensor")
def _all_reduce(x: torch.Tensor, op: str, group: List[int], low_precision_dtype: Optional[str],
                backward: str) -> torch.Tensor:
    _check(x, "x")
    _check_backward(backward)
    return rules.AllReduce.forward(_Ctx(), x, parse_reduce_op(op), _group(group), low_precision_dtype, backward)


@_all_reduce.register_fake
def _(x: torch.Tensor, op: str, group: List[int], low_precision_dtype: Optional[str], backward: str) -> torch.Tensor:
    _check(x, "x")
    _check_op(op, x)
    _check_backward(backward)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@_op("all_reduce_backward",
     "(Tensor grad, Tensor? x, Tensor? y, str op, int[] group, str backward) -> Tensor")
def _all_reduce_backward(grad: torch.Tensor, x: Optional[torch.Tensor], y: Optional[torch.Tensor], op: str,
                         group: List[int], backward: str) -> torch.Tensor:
    r = parse_reduce_op(op)
    g = _group(group)
    n = grad.numel()
    ctx = _Ctx(group=g, op=r, mode=backward, dtype=grad.dtype, n=n,
               schedule=schedules.allreduce(n * grad.element_size(), None))
    if r in (ReduceOp.MAX, ReduceOp.MIN):
        # the winners mask the eager forward computes, computed here instead (every rank of the
        # group runs this backward, so the extra allreduce pairs up as in the forward)
        assert x is not None and y is not None
        ctx.saved_tensors = (rules.winner_mask(x, y, g),)
    return _fresh(rules.AllReduce.backward(ctx, grad)[0], grad)


@_all_reduce_backward.register_fake
def _(grad: torch.Tensor, x: Optional[torch.Tensor], y: Optional[torch.Tensor], op: str, group: List[int],
      backward: str) -> torch.Tensor:
    return torch.empty_like(grad, memory_format=torch.contiguous_format)


def _all_reduce_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    x, op, group, _, backward = inputs
    ctx.args = (op, group, backward)
    ctx.winners = parse_reduce_op(op) in (ReduceOp.MAX, ReduceOp.MIN)
    if ctx.winners:
        ctx.save_for_backward(x, output)


def _all_reduce_grad(ctx: Any, grad: torch.Tensor) -> Tuple[Any, None, None, None, None]:
    op, group, backward = ctx.args
    if not ctx.winners and backward == rules.IDENTITY:
        # the identity backward launches nothing: keep it in the graph as arithmetic
        return (grad / _group_size(group) if parse_reduce_op(op) is ReduceOp.AVG else grad), None, None, None, None
    x, y = ctx.saved_tensors if ctx.winners else (None, None)
    return torch.ops.symsched.all_reduce_backward(grad, x, y, op, group, backward), None, None, None, None


_all_reduce.register_autograd(_all_reduce_grad, setup_context=_all_reduce_setup)


@_op("copy_to_group", "(Tensor x, int[] group) -> Tensor")
def _copy_to_group(x: torch.Tensor, group: List[int]) -> torch.Tensor:
    _check(x, "x", _FLOAT)
    return x.clone()  # the identity forward (Megatron's f); an op's output may not alias its input


@_copy_to_group.register_fake
def _(x: torch.Tensor, group: List[int]) -> torch.Tensor:
    _check(x, "x", _FLOAT)
    return torch.empty_like(x)


@_op("copy_to_group_backward", "(Tensor grad, int[] group) -> Tensor")
def _copy_to_group_backward(grad: torch.Tensor, group: List[int]) -> torch.Tensor:
    n = grad.numel()
    ctx = _Ctx(group=_group(group), dtype=grad.dtype, n=n, schedule=schedules.allreduce(n * grad.element_size(), None))
    return rules.CopyToGroup.backward(ctx, grad)[0]


@_copy_to_group_backward.register_fake
def _(grad: torch.Tensor, group: List[int]) -> torch.Tensor:
    return torch.empty_like(grad, memory_format=torch.contiguous_format)


def _copy_to_group_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    ctx.group = inputs[1]


def _copy_to_group_grad(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
    return torch.ops.symsched.copy_to_group_backward(grad, ctx.group), None


_copy_to_group.register_autograd(_copy_to_group_grad, setup_context=_copy_to_group_setup)


@_op("all_to_all",
     "(Tensor x, SymInt[]? output_split_sizes, SymInt[]? input_split_sizes, int[] group) -> Tensor")
def _all_to_all(x: torch.Tensor, output_split_sizes: Optional[List[int]], input_split_sizes: Optional[List[int]],
                group: List[int]) -> torch.Tensor:
    # the core's functional form validates the splits and fills in the defaults; no input
    # requires grad here (the op's own autograd is above this kernel)
    return _functional.all_to_all(x, _ints(output_split_sizes), _ints(input_split_sizes), _group(group))


@_all_to_all.register_fake
def _(x: torch.Tensor, output_split_sizes: Optional[List[int]], input_split_sizes: Optional[List[int]],
      group: List[int]) -> torch.Tensor:
    _check(x, "x")
    if x.dim() == 0:
        raise SymschedArgumentError("`x` must have at least one dimension")
    p = _group_size(group)
    for arg, s in (("output_split_sizes", output_split_sizes), ("input_split_sizes", input_split_sizes)):
        if s is not None and len(s) != p:
            raise SymschedArgumentError(f"`{arg}` must have one entry per group rank ({p}), got {len(s)}")
    rows = x.shape[0] if output_split_sizes is None else sum(output_split_sizes)
    return x.new_empty((rows,) + tuple(x.shape[1:]))


def _splits(s: Optional[List[int]], rows: int, p: int) -> List[int]:
    return [rows // p] * p if s is None else [int(v) for v in s]


@_op("all_to_all_backward",
     "(Tensor grad, SymInt[] shape, SymInt[]? output_split_sizes, SymInt[]? input_split_sizes, int[] group) -> Tensor")
def _all_to_all_backward(grad: torch.Tensor, shape: List[int], output_split_sizes: Optional[List[int]],
                         input_split_sizes: Optional[List[int]], group: List[int]) -> torch.Tensor:
    g = _group(group)
    shp = tuple(int(s) for s in shape)
    p = state.resolve_group(g).size
    ctx = _Ctx(group=g, row=math.prod(shp[1:]), shape=shp, dtype=grad.dtype,
               out_splits=_splits(output_split_sizes, shp[0], p), in_splits=_splits(input_split_sizes, shp[0], p))
    return rules.AllToAll.backward(ctx, grad)[0]


@_all_to_all_backward.register_fake
def _(grad: torch.Tensor, shape: List[int], output_split_sizes: Optional[List[int]],
      input_split_sizes: Optional[List[int]], group: List[int]) -> torch.Tensor:
    return grad.new_empty(shape)


def _all_to_all_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    ctx.shape, ctx.args = list(inputs[0].shape), inputs[1:]


def _all_to_all_grad(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None, None, None]:
    return torch.ops.symsched.all_to_all_backward(grad, ctx.shape, *ctx.args), None, None, None


_all_to_all.register_autograd(_all_to_all_grad, setup_context=_all_to_all_setup)


@_op("broadcast", "(Tensor x, int src, int[] group) -> Tensor")
def _broadcast(x: torch.Tensor, src: int, group: List[int]) -> torch.Tensor:
    _check(x, "x")
    return rules.Broadcast.forward(_Ctx(), x, src, _group(group))


@_broadcast.register_fake
def _(x: torch.Tensor, src: int, group: List[int]) -> torch.Tensor:
    _check(x, "x")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@_op("broadcast_backward", "(Tensor grad, int src, int[] group) -> Tensor")
def _broadcast_backward(grad: torch.Tensor, src: int, group: List[int]) -> torch.Tensor:
    return rules.Broadcast.backward(_Ctx(group=_group(group), src=src), grad)[0]


@_broadcast_backward.register_fake
def _(grad: torch.Tensor, src: int, group: List[int]) -> torch.Tensor:
    return torch.empty_like(grad, memory_format=torch.contiguous_format)


def _broadcast_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    ctx.args = inputs[1:]


def _broadcast_grad(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None, None]:
    return torch.ops.symsched.broadcast_backward(grad, *ctx.args), None, None


_broadcast.register_autograd(_broadcast_grad, setup_context=_broadcast_setup)


@_op("send", "(Tensor x, int dst, int[] group) -> Tensor")
def _send(x: torch.Tensor, dst: int, group: List[int]) -> torch.Tensor:
    _check(x, "x")
    return rules.Send.forward(_Ctx(), x, dst, _group(group))


@_send.register_fake
def _(x: torch.Tensor, dst: int, group: List[int]) -> torch.Tensor:
    _check(x, "x")
    return x.new_empty((0,))


@_op("send_backward", "(Tensor token_grad, SymInt[] shape, ScalarType dtype, int dst, int[] group) -> Tensor")
def _send_backward(token_grad: torch.Tensor, shape: List[int], dtype: torch.dtype, dst: int,
                   group: List[int]) -> torch.Tensor:
    ctx = _Ctx(group=_group(group), dst=dst, shape=tuple(int(s) for s in shape), dtype=dtype)
    return rules.Send.backward(ctx, token_grad)[0]


@_send_backward.register_fake
def _(token_grad: torch.Tensor, shape: List[int], dtype: torch.dtype, dst: int, group: List[int]) -> torch.Tensor:
    return token_grad.new_empty(shape, dtype=dtype)


def _send_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    x, ctx.dst, ctx.group = inputs
    ctx.shape, ctx.dtype = list(x.shape), x.dtype


def _send_grad(ctx: Any, token_grad: torch.Tensor) -> Tuple[torch.Tensor, None, None]:
    return torch.ops.symsched.send_backward(token_grad, ctx.shape, ctx.dtype, ctx.dst, ctx.group), None, None


_send.register_autograd(_send_grad, setup_context=_send_setup)


@_op("recv", "(Tensor anchor, SymInt[] shape, ScalarType dtype, int src, int[] group) -> Tensor")
def _recv(anchor: torch.Tensor, shape: List[int], dtype: torch.dtype, src: int, group: List[int]) -> torch.Tensor:
    return _functional.recv([int(s) for s in shape], dtype, src, _group(group), requires_grad=False)


@_recv.register_fake
def _(anchor: torch.Tensor, shape: List[int], dtype: torch.dtype, src: int, group: List[int]) -> torch.Tensor:
    if _NAMES.get(dtype) not in _DATA:
        raise SymschedArgumentError(f"`dtype` must be one of the supported data dtypes, got {dtype!r}")
    return anchor.new_empty(shape, dtype=dtype)


@_op("recv_backward", "(Tensor grad, Tensor anchor, int src, int[] group) -> Tensor")
def _recv_backward(grad: torch.Tensor, anchor: torch.Tensor, src: int, group: List[int]) -> torch.Tensor:
    rules.Recv.backward(_Ctx(group=_group(group), src=src), grad)
    # the anchor's gradient: nothing flows into it, but returning it keeps this op in the graph
    return torch.zeros_like(anchor)


@_recv_backward.register_fake
def _(grad: torch.Tensor, anchor: torch.Tensor, src: int, group: List[int]) -> torch.Tensor:
    return torch.empty_like(anchor)


def _recv_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    anchor, _, _, ctx.src, ctx.group = inputs
    ctx.save_for_backward(anchor)


def _recv_grad(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None, None, None, None]:
    (anchor,) = ctx.saved_tensors
    return torch.ops.symsched.recv_backward(grad, anchor, ctx.src, ctx.group), None, None, None, None


_recv.register_autograd(_recv_grad, setup_context=_recv_setup)


# ---------------------------------------------------------------------------------- MC2


@_op("all_gather_matmul", "(Tensor a, Tensor b, int[] group) -> (Tensor, Tensor)")
def _all_gather_matmul(a: torch.Tensor, b: torch.Tensor, group: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    _check(a, "a", _FLOAT)
    _check(b, "b", _FLOAT)
    return rules.AllGatherMatmul.forward(_Ctx(), a, b, _group(group))


@_all_gather_matmul.register_fake
def _(a: torch.Tensor, b: torch.Tensor, group: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    _check_matrix(a, "a")
    _check_matrix(b, "b")
    torch._check(a.shape[1] == b.shape[0], lambda: f"`b` must have {a.shape[1]} rows")
    p = _group_size(group)
    return a.new_empty((p * a.shape[0], a.shape[1])), a.new_empty((p * a.shape[0], b.shape[1]))


@_op("all_gather_matmul_backward",
     "(Tensor grad_gathered, Tensor grad_c, Tensor gathered, Tensor b, int[] group) -> (Tensor, Tensor)")
def _all_gather_matmul_backward(grad_gathered: torch.Tensor, grad_c: torch.Tensor, gathered: torch.Tensor,
                                b: torch.Tensor, group: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    ctx = _Ctx(group=_group(group), saved_tensors=(gathered, b.contiguous()))
    ga, gb, _ = rules.AllGatherMatmul.backward(ctx, grad_gathered, grad_c)
    return ga, gb


@_all_gather_matmul_backward.register_fake
def _(grad_gathered: torch.Tensor, grad_c: torch.Tensor, gathered: torch.Tensor, b: torch.Tensor,
      group: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    p = _group_size(group)
    return gathered.new_empty((gathered.shape[0] // p, gathered.shape[1])), torch.empty_like(b)


def _all_gather_matmul_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    _, b, ctx.group = inputs
    ctx.save_for_backward(output[0], b)


def _all_gather_matmul_grad(ctx: Any, grad_gathered: Optional[torch.Tensor],
                            grad_c: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, None]:
    gathered, b = ctx.saved_tensors
    if grad_gathered is None:
        grad_gathered = torch.zeros_like(gathered)
    if grad_c is None:
        grad_c = gathered.new_zeros((gathered.shape[0], b.shape[1]))
    ga, gb = torch.ops.symsched.all_gather_matmul_backward(grad_gathered, grad_c, gathered, b, ctx.group)
    return ga, gb, None


_all_gather_matmul.register_autograd(_all_gather_matmul_grad, setup_context=_all_gather_matmul_setup)


@_op("matmul_reduce_scatter", "(Tensor a, Tensor b, str op, int[] group) -> Tensor")
def _matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, op: str, group: List[int]) -> torch.Tensor:
    _check(a, "a", _FLOAT)
    _check(b, "b", _FLOAT)
    return rules.MatmulReduceScatter.forward(_Ctx(), a, b, parse_reduce_op(op), _group(group))


@_matmul_reduce_scatter.register_fake
def _(a: torch.Tensor, b: torch.Tensor, op: str, group: List[int]) -> torch.Tensor:
    _check_matrix(a, "x1")
    _check_matrix(b, "x2")
    r = _check_op(op, a)
    if r not in (ReduceOp.SUM, ReduceOp.AVG):
        raise SymschedArgumentError(f"`reduce_op` must be 'sum' or 'avg' for matmul_reduce_scatter, got '{r.value}'")
    p = _group_size(group)
    torch._check(a.shape[1] == b.shape[0], lambda: f"`x2` must have {a.shape[1]} rows")
    torch._check(a.shape[0] % p == 0, lambda: f"`x1` rows must be a multiple of the group size {p}")
    return a.new_empty((a.shape[0] // p, b.shape[1]))


@_op("matmul_reduce_scatter_backward",
     "(Tensor grad, Tensor a, Tensor b, str op, int[] group) -> (Tensor, Tensor)")
def _matmul_reduce_scatter_backward(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor, op: str,
                                    group: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    ctx = _Ctx(group=_group(group), op=parse_reduce_op(op), saved_tensors=(a.contiguous(), b.contiguous()))
    ga, gb, _, _ = rules.MatmulReduceScatter.backward(ctx, grad)
    return ga, gb


@_matmul_reduce_scatter_backward.register_fake
def _(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor, op: str,
      group: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(a, memory_format=torch.contiguous_format), torch.empty_like(b)


def _matmul_reduce_scatter_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    a, b, ctx.op, ctx.group = inputs
    ctx.save_for_backward(a, b)


def _matmul_reduce_scatter_grad(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, None, None]:
    a, b = ctx.saved_tensors
    ga, gb = torch.ops.symsched.matmul_reduce_scatter_backward(grad, a, b, ctx.op, ctx.group)
    return ga, gb, None, None


_matmul_reduce_scatter.register_autograd(_matmul_reduce_scatter_grad, setup_context=_matmul_reduce_scatter_setup)


@_op("fused_all_gather_matmul", "(Tensor a, Tensor b, Tensor(a!) c, Tensor(b!) gather_out, int[] group) -> ()",
     mutates=("c", "gather_out"))
def _fused_all_gather_matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, gather_out: torch.Tensor,
                             group: List[int]) -> None:
    coll.allgather_matmul(a, b, gather_out, c, _group(group))


@_fused_all_gather_matmul.register_fake
def _(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, gather_out: torch.Tensor, group: List[int]) -> None:
    for arg, t in (("a", a), ("b", b), ("c", c), ("gather_out", gather_out)):
        _check_matrix(t, arg)


# -------------------------------------------------------------------- the in-place forms


@_op("shmem_allgather", "(Tensor(a!) output_tensor, Tensor input_tensor, int[] group) -> ()",
     mutates=("output_tensor",))
def _shmem_allgather(output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: List[int]) -> None:
    coll.allgather(output_tensor, input_tensor, _group(group))


@_shmem_allgather.register_fake
def _(output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: List[int]) -> None:
    _check(output_tensor, "output_tensor")
    _check(input_tensor, "input_tensor")
    p = _group_size(group)
    torch._check(output_tensor.numel() == p * input_tensor.numel(),
                 lambda: f"`output_tensor` must have group size × input elements ({p} × {input_tensor.numel()})")


@_op("shmem_reduce_scatter",
     "(Tensor(a!) output_tensor, Tensor input_tensor, str op, int[] group, str? low_precision_dtype) -> ()",
     mutates=("output_tensor",))
def _shmem_reduce_scatter(output_tensor: torch.Tensor, input_tensor: torch.Tensor, op: str, group: List[int],
                          low_precision_dtype: Optional[str]) -> None:
    coll.reduce_scatter(output_tensor, input_tensor, op, _group(group), low_precision_dtype)


@_shmem_reduce_scatter.register_fake
def _(output_tensor: torch.Tensor, input_tensor: torch.Tensor, op: str, group: List[int],
      low_precision_dtype: Optional[str]) -> None:
    _check(output_tensor, "output_tensor")
    _check(input_tensor, "input_tensor")
    _check_op(op, input_tensor)
    p = _group_size(group)
    torch._check(input_tensor.numel() == p * output_tensor.numel(),
                 lambda: f"`input_tensor` must have group size × output elements ({p} × {output_tensor.numel()})")


@_op("shmem_allreduce", "(Tensor(a!) tensor, str op, int[] group, str? low_precision_dtype) -> ()",
     mutates=("tensor",))
def _shmem_allreduce(tensor: torch.Tensor, op: str, group: List[int], low_precision_dtype: Optional[str]) -> None:
    coll.allreduce(tensor, op, _group(group), low_precision_dtype)


@_shmem_allreduce.register_fake
def _(tensor: torch.Tensor, op: str, group: List[int], low_precision_dtype: Optional[str]) -> None:
    _check(tensor, "tensor")
    _check_op(op, tensor)


@_op("shmem_alltoall",
     "(Tensor[] send_tensor_list, Tensor(a!) receive_tensor, SymInt[] receive_list, int[] group) -> ()",
     mutates=("receive_tensor",))
def _shmem_alltoall(send_tensor_list: List[torch.Tensor], receive_tensor: torch.Tensor, receive_list: List[int],
                    group: List[int]) -> None:
    coll.alltoall(send_tensor_list, receive_tensor, [int(c) for c in receive_list], _group(group))


@_shmem_alltoall.register_fake
def _(send_tensor_list: List[torch.Tensor], receive_tensor: torch.Tensor, receive_list: List[int],
      group: List[int]) -> None:
    _check(receive_tensor, "receive_tensor")
    p = _group_size(group)
    if len(send_tensor_list) != p:
        raise SymschedArgumentError(
            f"`send_tensor_list` must have one tensor per group rank ({p}), got {len(send_tensor_list)}")
    if len(receive_list) != p:
        raise SymschedArgumentError(f"`receive_list` must have one entry per group rank ({p}), got {len(receive_list)}")


@_op("shmem_broadcast", "(Tensor(a!) tensor, int src, int[] group) -> ()", mutates=("tensor",))
def _shmem_broadcast(tensor: torch.Tensor, src: int, group: List[int]) -> None:
    coll.broadcast(tensor, src, _group(group))


@_shmem_broadcast.register_fake
def _(tensor: torch.Tensor, src: int, group: List[int]) -> None:
    _check(tensor, "tensor")


@_op("shmem_send", "(Tensor tensor, int dst_rank, int[] group) -> ()")
def _shmem_send(tensor: torch.Tensor, dst_rank: int, group: List[int]) -> None:
    coll.send(tensor, dst_rank, _group(group))


@_shmem_send.register_fake
def _(tensor: torch.Tensor, dst_rank: int, group: List[int]) -> None:
    _check(tensor, "tensor")


@_op("shmem_recv", "(Tensor(a!) tensor, int src_rank, int[] group) -> ()", mutates=("tensor",))
def _shmem_recv(tensor: torch.Tensor, src_rank: int, group: List[int]) -> None:
    coll.recv(tensor, src_rank, _group(group))


@_shmem_recv.register_fake
def _(tensor: torch.Tensor, src_rank: int, group: List[int]) -> None:
    _check(tensor, "tensor")
