"""autograd.Functions of the collectives. Backward passes launch the dual schedule that the
compiler declared for the forward plan (its ``duals`` field, proven to be the adjoint by the
verifier); the group travels to backward through ``ctx``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.autograd import Function

from . import _coll, _launch, _state
from ._enums import ReduceOp
from .core.errors import SymschedArgumentError

#: Backward launches already made once, per (group info id, forward schedule, its params, dual
#: collective, dtype, op, wire, sizes, the choice's extra key): the group's info (held so its id
#: stays unique) and the dual's prepared launch. A hit goes straight to the native launch: the
#: forward validated the call, the gradient a backward allocates is fresh, and the only thing
#: left that can differ is the incoming gradient, which ``_grad_in`` checks.
_duals: Dict[Tuple[Any, ...], Tuple[_state.GroupInfo, Any]] = {}
_DUALS_MAX = 4096
_STRIDED = torch.strided


def _cached(info: _state.GroupInfo, key: Tuple[Any, ...]) -> Any:
    """The prepared dual launch cached for ``key``, or None when the full path must run (first
    call, or the profiler or the trace watch ops: they take the instrumented path)."""
    hit = _duals.get(key)
    if hit is None or hit[0] is not info or _coll._observed():
        return None
    return hit[1]


def _check_grad(gy: Any, dtype: torch.dtype, numel: int, op_name: str) -> None:
    """Refuse an incoming gradient the forward's validation does not vouch for.

    Only the incoming gradient can differ from what the forward validated: the engine hands
    backward a gradient of the output's shape and dtype, but a direct ``grad_fn.apply`` call
    can pass anything at all, which is refused here before anything is sent."""
    if (not isinstance(gy, torch.Tensor) or gy.dtype is not dtype or gy.numel() != numel or not gy.is_cpu
            or gy.layout is not _STRIDED):
        got = (f"{gy.layout} {gy.device} {gy.dtype} tensor of {gy.numel()} elements"
               if isinstance(gy, torch.Tensor) else type(gy).__name__)
        raise SymschedArgumentError(
            f"symsched {op_name}: the incoming gradient must be a strided CPU {dtype} tensor of {numel} "
            f"elements (the forward output's), got a {got}")
    if not _coll._live(gy):
        raise SymschedArgumentError(
            f"symsched {op_name}: the incoming gradient views symmetric memory released with symm.free")


def _grad_in(gy: Any, dtype: torch.dtype, numel: int, op_name: str) -> torch.Tensor:
    """The checked incoming gradient, contiguous: copied only when the downstream op produced
    another layout (the gradient of ``y.sum()`` is an expanded, stride-0 tensor)."""
    _check_grad(gy, dtype, numel, op_name)
    return gy if gy.is_contiguous() else gy.contiguous()


def _run_dual(info: _state.GroupInfo, fwd: str, fwd_params: dict, expect: str, op_name: str,
              buffers: List[torch.Tensor], dtype: torch.dtype, sizes: dict,
              choose: Optional[Callable[[List[str]], str]] = None, choose_key: Any = None,
              key: Optional[Tuple[Any, ...]] = None, **kw: Any) -> None:
    """Launch the dual of ``fwd`` whose collective is ``expect``: the first one declared, or the
    one ``choose`` picks by name among all declared ones (``choose_key`` is everything besides
    the sizes that its pick depends on). ``key`` is the caller's ``_duals`` key when it already
    built one (and found no hit); otherwise the generic key is built and tried here."""
    counts = (kw["send_counts"], kw["recv_counts"]) if "send_counts" in kw else None
    if key is None:
        key = (id(info), fwd, tuple(fwd_params.items()), expect, dtype, kw.get("reduce"), kw.get("wire"),
               tuple(sizes.items()), choose_key)
        hit = _cached(info, key)
        if hit is not None:
            _coll._fire(op_name, info, hit, [(b.data_ptr(), b.numel() * b.element_size()) for b in buffers], counts)
            return
    if choose is None:
        name, params = _launch.dual_schedule(info, fwd, fwd_params, expect)
    else:
        declared = dict(_launch.dual_schedules(info, fwd, fwd_params, expect))
        name = choose(list(declared))
        params = declared[name]
    _launch.run(op_name, info, name, buffers, dtype, sizes, params=params, **kw)
    if len(_duals) >= _DUALS_MAX:
        _duals.clear()
    _duals[key] = (info, _launch.prepared(info, name, params, dtype, kw.get("reduce"), kw.get("wire"), sizes))


def _gathered_shape(x: torch.Tensor, p: int) -> Tuple[int, ...]:
    return (p,) if x.dim() == 0 else (p * x.shape[0],) + tuple(x.shape[1:])


def _nonlinear(op: ReduceOp, what: str) -> None:
    if op in (ReduceOp.MAX, ReduceOp.MIN):
        raise RuntimeError(
            f"symsched: backward of {what} with op='{op.value}' is not supported (the gradient would "
            f"have to be routed to the winning rank per element); use functional.all_reduce, which "
            f"does route it, or detach the result")


class AllGather(Function):
    """y = concat_j x_j (dim 0); backward: reduce_scatter(sum) of grad_y (dual of allgather_push)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        info = _state.resolve_group(group)
        xc = x.contiguous()
        y = xc.new_empty(_gathered_shape(xc, info.size))
        _coll.allgather(y, xc, group)
        # a plain tuple: torch.empty parses it ~0.6 µs faster than a torch.Size
        ctx.group, ctx.shape, ctx.dtype, ctx.n = group, tuple(x.shape), x.dtype, xc.numel()
        return y

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Tuple[Optional[torch.Tensor], None]:
        info = _state.resolve_group(ctx.group)
        dtype, n = ctx.dtype, ctx.n
        g = _grad_in(gy, dtype, info.size * n, "allgather.backward")
        gx = torch.empty(ctx.shape, dtype=dtype)
        key = (id(info), "allgather_push", (), "reduce_scatter", dtype, ReduceOp.SUM, None, (("n", n),), None)
        hit = _cached(info, key)
        nbytes = info.size * n * g.element_size()
        if hit is not None:
            _coll._fire("allgather.backward", info, hit, [(g.data_ptr(), nbytes), (gx.data_ptr(), nbytes // info.size)])
        else:
            _run_dual(info, "allgather_push", {}, "reduce_scatter", "allgather.backward", [g, gx], dtype, {"n": n},
                      key=key, reduce=ReduceOp.SUM, nbytes=nbytes)
        return gx, None


class ReduceScatter(Function):
    """y = block rank of ⊕_j x_j; backward: allgather of grad_y, by the pull or push all-gather
    declared as duals of reduce_scatter_push (``_launch.allgather_schedule`` picks)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, op: ReduceOp, group: Any, wire: Any) -> torch.Tensor:
        info = _state.resolve_group(group)
        xc = x.contiguous()
        if xc.dim() == 0 or xc.shape[0] % info.size:
            raise SymschedArgumentError(
                f"`input` dim 0 must be a multiple of the group size {info.size}, got shape {tuple(x.shape)}")
        y = xc.new_empty((xc.shape[0] // info.size,) + tuple(xc.shape[1:]))
        _coll.reduce_scatter(y, xc, op, group, wire)
        # the backward is the dual declared by the schedule that actually ran
        ctx.schedule = _coll._rs_schedule(_coll._wire_for(op, wire, xc.dtype))
        ctx.group, ctx.op, ctx.shape, ctx.dtype, ctx.n = group, op, tuple(x.shape), x.dtype, y.numel()
        return y

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Tuple[Optional[torch.Tensor], None, None, None]:
        _nonlinear(ctx.op, "reduce_scatter")
        info = _state.resolve_group(ctx.group)
        dtype, n, p = ctx.dtype, ctx.n, info.size
        g = _grad_in(gy, dtype, n, "reduce_scatter.backward")
        gx = torch.empty(ctx.shape, dtype=dtype)
        nbytes = p * n * g.element_size()
        env = _coll._pull_env()
        key = (id(info), ctx.schedule, (), "allgather", dtype, None, None, (("n", n),), env)
        hit = _cached(info, key)
        if hit is not None:
            _coll._fire("reduce_scatter.backward", info, hit, [(g.data_ptr(), nbytes // p), (gx.data_ptr(), nbytes)])
        else:
            # gx is private: of the declared all-gather duals the pull one writes it in place
            _run_dual(info, ctx.schedule, {}, "allgather", "reduce_scatter.backward", [g, gx], dtype, {"n": n},
                      choose=lambda names: _launch.allgather_schedule(nbytes, False, p, names), choose_key=env,
                      key=key, nbytes=nbytes)
        if ctx.op is ReduceOp.AVG:
            gx.div_(p)
        return gx, None, None, None


def _adjoint(info: _state.GroupInfo, schedule: str, gy: torch.Tensor, dtype: torch.dtype, n: int, op_name: str
             ) -> torch.Tensor:
    """allreduce(sum) of ``gy`` (``n`` elements of ``dtype``) by the dual of the forward's
    ``schedule``, into a contiguous copy (the launch is in place, and the incoming gradient may
    be shared): one pass for any layout."""
    _check_grad(gy, dtype, n, op_name)
    g = gy.clone(memory_format=torch.contiguous_format)
    key = (id(info), schedule, (), "allreduce", dtype, ReduceOp.SUM, None, (("n", n),), None)
    hit = _cached(info, key)
    nbytes = n * g.element_size()
    if hit is not None:
        _coll._fire(op_name, info, hit, [(g.data_ptr(), nbytes)])
    else:
        _run_dual(info, schedule, {}, "allreduce", op_name, [g], dtype, {"n": n}, key=key, reduce=ReduceOp.SUM,
                  nbytes=nbytes)
    return g


#: The two named backward forms of all_reduce.
ADJOINT = "adjoint"
IDENTITY = "identity"


class AllReduce(Function):
    """y = ⊕_j x_j on every rank.

    backward='adjoint' (the true adjoint, Megatron's f-pair partner): grad_x = allreduce_sum(grad_y)
    — right when every rank's copy of y feeds a different loss term (the total loss sums them).
    backward='identity' (RFC §5.3, Megatron's g): grad_x = grad_y — right only when the computation
    downstream of y is replicated (every rank computes the same loss and it counts once).
    'avg' scales by 1/P; 'max'/'min' route the gradient to the winning element (lowest rank on ties).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, op: ReduceOp, group: Any, wire: Any, mode: str) -> torch.Tensor:
        y = x.detach().clone(memory_format=torch.contiguous_format)
        _coll.allreduce(y, op, group, wire)
        ctx.group, ctx.op, ctx.mode, ctx.dtype, ctx.n = group, op, mode, x.dtype, y.numel()
        ctx.schedule = _launch.allreduce_schedule(y.numel() * y.element_size(), None)
        if op in (ReduceOp.MAX, ReduceOp.MIN) and ctx.needs_input_grad[0]:
            info = _state.resolve_group(group)
            cand = torch.where(x.detach().reshape(-1) == y.reshape(-1), info.rank, info.size).to(torch.int32)
            _coll.allreduce(cand, "min", group)
            ctx.save_for_backward((cand == info.rank).view(x.shape))
        return y

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Tuple[Optional[torch.Tensor], None, None, None, None]:
        info = _state.resolve_group(ctx.group)
        if ctx.mode == ADJOINT:
            g = _adjoint(info, ctx.schedule, gy, ctx.dtype, ctx.n, "allreduce.backward")
            if ctx.op is ReduceOp.AVG:
                g.div_(info.size)
            elif ctx.op in (ReduceOp.MAX, ReduceOp.MIN):
                (mask,) = ctx.saved_tensors
                g.mul_(mask)
            return g, None, None, None, None
        # identity: nothing is launched and gy is only read, so it is not copied first
        if ctx.op is ReduceOp.AVG:
            return gy / info.size, None, None, None, None
        if ctx.op in (ReduceOp.MAX, ReduceOp.MIN):
            (mask,) = ctx.saved_tensors
            return gy * mask, None, None, None, None
        return gy, None, None, None, None


class CopyToGroup(Function):
    """Megatron's f: identity forward, allreduce(sum) of the gradient in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group, ctx.dtype, ctx.n = group, x.dtype, x.numel()
        ctx.schedule = _launch.allreduce_schedule(x.numel() * x.element_size(), None)
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Tuple[torch.Tensor, None]:
        info = _state.resolve_group(ctx.group)
        return _adjoint(info, ctx.schedule, gy, ctx.dtype, ctx.n, "copy_to_group.backward"), None


class AllToAll(Function):
    """y = alltoallv(x); backward: alltoallv(grad_y) with the splits transposed (dual alltoallv_push)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, out_splits: List[int], in_splits: List[int], group: Any) -> torch.Tensor:
        xc = x.contiguous()
        row = int(xc[0].numel()) if xc.dim() > 1 else 1
        y = xc.new_empty((sum(out_splits),) + tuple(xc.shape[1:]))
        send = list(torch.split(xc.reshape(-1), [s * row for s in in_splits]))
        _coll.alltoall(send, y.view(-1), [s * row for s in out_splits], group)
        ctx.group, ctx.row, ctx.out_splits, ctx.in_splits = group, row, out_splits, in_splits
        ctx.shape = tuple(x.shape)
        ctx.dtype = x.dtype
        return y

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Tuple[torch.Tensor, None, None, None]:
        info = _state.resolve_group(ctx.group)
        dtype, row = ctx.dtype, ctx.row
        send = [s * row for s in ctx.out_splits]
        recv = [s * row for s in ctx.in_splits]
        ns, nr = sum(send), sum(recv)
        g = _grad_in(gy, dtype, ns, "alltoall.backward")
        gx = torch.empty(ctx.shape, dtype=dtype)
        # the prepared plan does not depend on the counts: every launch passes (and exchanges) them
        key = (id(info), "alltoallv_push", (), "alltoallv", dtype, None, None, (), None)
        hit = _cached(info, key)
        es = g.element_size()
        if hit is not None:
            _coll._fire("alltoall.backward", info, hit, [(g.data_ptr(), ns * es), (gx.data_ptr(), nr * es)],
                        (send, recv))
        else:
            _run_dual(info, "alltoallv_push", {}, "alltoallv", "alltoall.backward", [g, gx], dtype, {}, key=key,
                      send_counts=send, recv_counts=recv, nbytes=ns * es)
        return gx, None, None, None


class Broadcast(Function):
    """y = x of ``src``; backward: reduce(sum) of grad_y to ``src`` (dual reduce_push), zero elsewhere."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, src: int, group: Any) -> torch.Tensor:
        y = x.detach().clone(memory_format=torch.contiguous_format)
        _coll.broadcast(y, src, group)
        ctx.group, ctx.src = group, src
        return y

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Tuple[torch.Tensor, None, None]:
        info = _state.resolve_group(ctx.group)
        g = gy.clone(memory_format=torch.contiguous_format)
        flat = g.view(-1)
        _run_dual(info, "broadcast_push", {"root": ctx.src}, "reduce", "broadcast.backward", [flat], flat.dtype,
                  {"n": flat.numel()}, reduce=ReduceOp.SUM, nbytes=flat.numel() * flat.element_size())
        if info.rank != ctx.src:
            g.zero_()
        return g, None, None


class Send(Function):
    """Returns an empty token; its backward receives grad_x from the receiver (dual sendrecv_pair)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dst: int, group: Any) -> torch.Tensor:
        _coll.send(x.detach().contiguous(), dst, group)
        ctx.group, ctx.dst, ctx.shape, ctx.dtype = group, dst, x.shape, x.dtype
        return x.new_zeros(0)

    @staticmethod
    def backward(ctx: Any, _gtoken: torch.Tensor) -> Tuple[torch.Tensor, None, None]:
        pinfo, me, peer = _coll._pair(ctx.dst, _state.resolve_group(ctx.group), "dst_rank")
        gx = torch.empty(ctx.shape, dtype=ctx.dtype)
        flat = gx.view(-1)
        _run_dual(pinfo, "sendrecv_pair", {"src": me, "dst": peer}, "sendrecv", "send.backward", [flat],
                  flat.dtype, {"n": flat.numel()}, nbytes=flat.numel() * flat.element_size())
        return gx, None, None


class Recv(Function):
    """y = the tensor ``src`` sent; backward sends grad_y back to ``src`` (dual sendrecv_pair)."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, shape: Tuple[int, ...], dtype: torch.dtype, src: int,
                group: Any) -> torch.Tensor:
        y = torch.empty(shape, dtype=dtype)
        _coll.recv(y.view(-1), src, group)
        ctx.group, ctx.src = group, src
        return y

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Tuple[None, None, None, None, None]:
        pinfo, me, peer = _coll._pair(ctx.src, _state.resolve_group(ctx.group), "src_rank")
        flat = gy.clone(memory_format=torch.contiguous_format).view(-1)
        _run_dual(pinfo, "sendrecv_pair", {"src": peer, "dst": me}, "sendrecv", "recv.backward", [flat],
                  flat.dtype, {"n": flat.numel()}, nbytes=flat.numel() * flat.element_size())
        return None, None, None, None, None


class AllGatherMatmul(Function):
    """(g, c) = (allgather(a), allgather(a) @ b); backward uses the dual matmul_reduce_scatter:
    grad_a = matmul_reduce_scatter(grad_c, bᵀ) + reduce_scatter(grad_g); grad_b = gᵀ @ grad_c."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, group: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        info = _state.resolve_group(group)
        a_, b_ = a.detach().contiguous(), b.detach().contiguous()
        g = a_.new_empty((info.size * a_.shape[0], a_.shape[1]))
        c = a_.new_empty((info.size * a_.shape[0], b_.shape[1]))
        _coll.allgather_matmul(a_, b_, g, c, group)
        ctx.group = group
        ctx.save_for_backward(g, b_)
        return g, c

    @staticmethod
    def backward(ctx: Any, gg: Optional[torch.Tensor], gc: Optional[torch.Tensor]
                 ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor], None]:
        info = _state.resolve_group(ctx.group)
        g, b = ctx.saved_tensors
        m, k, n = g.shape[0] // info.size, g.shape[1], b.shape[1]
        gb = None
        if gc is not None:
            # the dual writes every element of its output (as the forward's `out`): no zero fill
            ga = g.new_empty((m, k))
            gcc = gc.contiguous()
            bt = b.t().contiguous()
            _run_dual(info, "allgather_matmul", {}, "matmul_reduce_scatter", "fused_all_gather_matmul.backward",
                      [gcc, bt, ga], g.dtype, {"m": m, "k": n, "n": k}, reduce=ReduceOp.SUM,
                      nbytes=gcc.numel() * gcc.element_size())
            gb = g.t() @ gcc
        else:
            ga = g.new_zeros((m, k))
        if gg is not None:
            part = g.new_empty((m, k))
            _coll.reduce_scatter(part.view(-1), gg.contiguous().view(-1), "sum", ctx.group)
            ga.add_(part)
        return ga, gb, None


class MatmulReduceScatter(Function):
    """c = block rank of Σ_j a_j @ b_j; backward uses the dual allgather_matmul:
    (G, grad_a) = allgather_matmul(grad_c, bᵀ), grad_b = aᵀ @ G (scaled by 1/P for 'avg')."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, op: ReduceOp, group: Any) -> torch.Tensor:
        info = _state.resolve_group(group)
        a_, b_ = a.detach().contiguous(), b.detach().contiguous()
        out = a_.new_empty((a_.shape[0] // max(info.size, 1), b_.shape[1]))
        _coll.matmul_reduce_scatter(a_, b_, out, op, group)
        ctx.group, ctx.op = group, op
        ctx.save_for_backward(a_, b_)
        return out

    @staticmethod
    def backward(ctx: Any, gc: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, None, None]:
        info = _state.resolve_group(ctx.group)
        a, b = ctx.saved_tensors
        m, n, k = gc.shape[0], gc.shape[1], b.shape[0]
        gcc = gc.contiguous()
        bt = b.t().contiguous()
        big = a.new_empty((info.size * m, n))
        ga = a.new_empty((info.size * m, k))
        _run_dual(info, "matmul_reduce_scatter", {}, "allgather_matmul", "fused_matmul_reduce_scatter.backward",
                  [gcc, bt, big, ga], a.dtype, {"m": m, "k": n, "n": k}, nbytes=big.numel() * big.element_size())
        gb = a.t() @ big
        if ctx.op is ReduceOp.AVG:
            ga.div_(info.size)
            gb.div_(info.size)
        return ga, gb, None, None
