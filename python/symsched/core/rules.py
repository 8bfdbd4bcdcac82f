"""The autograd rules of the collectives: what each forward computes and what its backward
launches, for every framework alike. The adapter registers each rule with its framework's
autograd (:meth:`~symsched.core.adapter.FrameworkAdapter.differentiable`); :data:`apply` holds
the registered callables (``apply.AllGather(x, group)`` …).

Backward passes launch the dual schedule that the compiler declared for the forward plan (its
``duals`` field, proven to be the adjoint by the verifier); the group travels to backward
through ``ctx``. Rules use only the adapter's tensor operations, and use the result of every
``…_`` operation (a framework may return a new tensor instead of updating in place).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import adapter, coll, failure, launch, memory, schedules, state
from .enums import ReduceOp
from .errors import SymschedArgumentError

#: Backward launches already made once, per (group info id, forward schedule, its params, dual
#: collective, dtype, op, wire, sizes, the choice's extra key): the group's info (held so its id
#: stays unique) and the dual's prepared launch. A hit goes straight to the native launch: the
#: forward validated the call, the gradient a backward allocates is fresh, and the only thing
#: left that can differ is the incoming gradient, which ``_grad_in`` checks.
_duals: Dict[Tuple[Any, ...], Tuple[state.GroupInfo, Any]] = {}
_DUALS_MAX = 4096

_fw: Any = adapter.active()

#: The rules registered with the framework's autograd, by rule name (filled at install).
apply = SimpleNamespace()


def _cached(info: state.GroupInfo, key: Tuple[Any, ...]) -> Any:
    """The prepared dual launch cached for ``key``, or None when the full path must run (first
    call, or the profiler or the trace watch ops: they take the instrumented path)."""
    hit = _duals.get(key)
    if hit is None or hit[0] is not info or coll._observed():
        return None
    return hit[1]


def _check_grad(gy: Any, dtype: Any, numel: int, op_name: str) -> Tuple[int, bool]:
    """Refuse an incoming gradient the forward's validation does not vouch for; its address and
    whether it is contiguous.

    Only the incoming gradient can differ from what the forward validated: the engine hands
    backward a gradient of the output's shape and dtype, but a direct call of the backward can
    pass anything at all, which is refused here before anything is sent."""
    span = None
    if isinstance(gy, _fw.tensor_type):
        try:
            span = _fw.span(gy, "gradient")
        except SymschedArgumentError:
            span = None
    if span is None or span.dtype is not dtype or span.numel != numel:
        raise SymschedArgumentError(
            f"symsched {op_name}: the incoming gradient must be a strided CPU {dtype} tensor of {numel} "
            f"elements (the forward output's), got a {_fw.describe(gy)}")
    if not memory.live(span.ptr, span.nbytes):
        raise SymschedArgumentError(
            f"symsched {op_name}: the incoming gradient views symmetric memory released with symm.free")
    return span.ptr, span.contiguous


def _grad_in(gy: Any, dtype: Any, numel: int, op_name: str) -> Tuple[Any, int]:
    """The checked incoming gradient, contiguous, and its address: copied only when the
    downstream op produced another layout (the gradient of ``y.sum()`` is an expanded, stride-0
    tensor)."""
    ptr, contiguous = _check_grad(gy, dtype, numel, op_name)
    if contiguous:
        return gy, ptr
    g = _fw.contiguous(gy)
    return g, _fw.plain(g)[2]


def _addr(t: Any) -> int:
    """The address of a tensor a rule made itself (fresh, contiguous)."""
    return _fw.plain(t)[2]


def _run_dual(info: state.GroupInfo, fwd: str, fwd_params: dict, expect: str, op_name: str,
              buffers: List[Tuple[int, int]], dtype: str, sizes: dict,
              choose: Optional[Callable[[List[str]], str]] = None, choose_key: Any = None,
              key: Optional[Tuple[Any, ...]] = None, **kw: Any) -> None:
    """Launch the dual of ``fwd`` whose collective is ``expect``: the first one declared, or the
    one ``choose`` picks by name among all declared ones (``choose_key`` is everything besides
    the sizes that its pick depends on). ``key`` is the caller's ``_duals`` key when it already
    built one (and found no hit); otherwise the generic key is built and tried here. ``dtype``
    is the runtime name."""
    counts = (kw["send_counts"], kw["recv_counts"]) if "send_counts" in kw else None
    if key is None:
        key = (id(info), fwd, tuple(fwd_params.items()), expect, dtype, kw.get("reduce"), kw.get("wire"),
               tuple(sizes.items()), choose_key)
        hit = _cached(info, key)
        if hit is not None:
            coll._fire(op_name, info, hit, buffers, counts)
            return
    if choose is None:
        name, params = launch.dual_schedule(info, fwd, fwd_params, expect)
    else:
        declared = dict(launch.dual_schedules(info, fwd, fwd_params, expect))
        name = choose(list(declared))
        params = declared[name]
    prepared = launch.run(op_name, info, name, buffers, dtype, sizes, params=params, **kw)
    if len(_duals) >= _DUALS_MAX:
        _duals.clear()
    _duals[key] = (info, prepared)


def _name(dtype: Any) -> str:
    return _fw.dtype_names[dtype]


def _gathered_shape(shape: Tuple[int, ...], p: int) -> Tuple[int, ...]:
    return (p,) if not shape else (p * shape[0],) + tuple(shape[1:])


def _nonlinear(op: ReduceOp, what: str) -> None:
    if op in (ReduceOp.MAX, ReduceOp.MIN):
        raise RuntimeError(
            f"symsched: backward of {what} with op='{op.value}' is not supported (the gradient would "
            f"have to be routed to the winning rank per element); use functional.all_reduce, which "
            f"does route it, or detach the result")


class AllGather:
    """y = concat_j x_j (dim 0); backward: reduce_scatter(sum) of grad_y (dual of allgather_push)."""

    @staticmethod
    def forward(ctx: Any, x: Any, group: Any) -> Any:
        info = state.resolve_group(group)
        xc = _fw.contiguous(x)
        shape = _fw.shape(xc)
        y = _fw.empty(_gathered_shape(shape, info.size), x.dtype)
        coll.allgather(y, xc, group)
        ctx.group, ctx.shape, ctx.dtype, ctx.n = group, shape, x.dtype, _fw.plain(xc)[1]
        return y

    @staticmethod
    def backward(ctx: Any, gy: Any) -> Tuple[Optional[Any], None]:
        info = state.resolve_group(ctx.group)
        dtype, n = ctx.dtype, ctx.n
        g, gp = _grad_in(gy, dtype, info.size * n, "allgather.backward")
        gx = _fw.empty(ctx.shape, dtype)
        name = _name(dtype)
        key = (id(info), "allgather_push", (), "reduce_scatter", name, ReduceOp.SUM, None, (("n", n),), None)
        hit = _cached(info, key)
        nbytes = info.size * n * _fw.itemsize(dtype)
        bufs = [(gp, nbytes), (_addr(gx), nbytes // info.size)]
        if hit is not None:
            coll._fire("allgather.backward", info, hit, bufs)
        else:
            _run_dual(info, "allgather_push", {}, "reduce_scatter", "allgather.backward", bufs, name, {"n": n},
                      key=key, reduce=ReduceOp.SUM, nbytes=nbytes)
        return gx, None


class ReduceScatter:
    """y = block rank of ⊕_j x_j; backward: allgather of grad_y, by the pull or push all-gather
    declared as duals of reduce_scatter_push (``schedules.allgather`` picks)."""

    @staticmethod
    def forward(ctx: Any, x: Any, op: ReduceOp, group: Any, wire: Any) -> Any:
        info = state.resolve_group(group)
        xc = _fw.contiguous(x)
        shape = _fw.shape(xc)
        if not shape or shape[0] % info.size:
            raise SymschedArgumentError(
                f"`input` dim 0 must be a multiple of the group size {info.size}, got shape {shape}")
        y = _fw.empty((shape[0] // info.size,) + shape[1:], x.dtype)
        coll.reduce_scatter(y, xc, op, group, wire)
        # the backward is the dual declared by the schedule that actually ran
        ctx.schedule = schedules.reduce_scatter(coll._wire_for(op, wire, _name(x.dtype)))
        ctx.group, ctx.op, ctx.shape, ctx.dtype, ctx.n = group, op, shape, x.dtype, _fw.plain(y)[1]
        return y

    @staticmethod
    def backward(ctx: Any, gy: Any) -> Tuple[Optional[Any], None, None, None]:
        _nonlinear(ctx.op, "reduce_scatter")
        info = state.resolve_group(ctx.group)
        dtype, n, p = ctx.dtype, ctx.n, info.size
        g, gp = _grad_in(gy, dtype, n, "reduce_scatter.backward")
        gx = _fw.empty(ctx.shape, dtype)
        nbytes = p * n * _fw.itemsize(dtype)
        name = _name(dtype)
        env = coll._pull_env()
        key = (id(info), ctx.schedule, (), "allgather", name, None, None, (("n", n),), env)
        hit = _cached(info, key)
        bufs = [(gp, nbytes // p), (_addr(gx), nbytes)]
        if hit is not None:
            coll._fire("reduce_scatter.backward", info, hit, bufs)
        else:
            # gx is private: of the declared all-gather duals the pull one writes it in place
            _run_dual(info, ctx.schedule, {}, "allgather", "reduce_scatter.backward", bufs, name, {"n": n},
                      choose=lambda names: schedules.allgather(nbytes, False, p, names), choose_key=env,
                      key=key, nbytes=nbytes)
        if ctx.op is ReduceOp.AVG:
            gx = _fw.div_(gx, p)
        return gx, None, None, None


def _adjoint(info: state.GroupInfo, schedule: str, gy: Any, dtype: Any, n: int, op_name: str) -> Any:
    """allreduce(sum) of ``gy`` (``n`` elements of ``dtype``) by the dual of the forward's
    ``schedule``, into a contiguous copy (the launch is in place, and the incoming gradient may
    be shared): one pass for any layout."""
    _check_grad(gy, dtype, n, op_name)
    g = _fw.detached_copy(gy)
    name = _name(dtype)
    key = (id(info), schedule, (), "allreduce", name, ReduceOp.SUM, None, (("n", n),), None)
    hit = _cached(info, key)
    bufs = [(_addr(g), n * _fw.itemsize(dtype))]
    if hit is not None:
        coll._fire(op_name, info, hit, bufs)
    else:
        _run_dual(info, schedule, {}, "allreduce", op_name, bufs, name, {"n": n}, key=key, reduce=ReduceOp.SUM,
                  nbytes=bufs[0][1])
    return g


def winner_mask(x: Any, y: Any, group: Any) -> Any:
    """Where this rank's ``x`` won the max/min allreduce ``y`` (lowest rank on ties): the mask
    ``AllReduce``'s backward routes the gradient by. Collective over ``group`` (one allreduce
    of the candidates), so every rank computes it at the same point: the eager forward, or the
    backward op of a compiled graph (``symsched.torch.ops``)."""
    info = state.resolve_group(group)
    cand = _fw.winners(_fw.detached(x), y, info.rank, info.size)
    coll.allreduce(cand, "min", group)
    return _fw.mask(cand, info.rank, _fw.shape(x))


#: The two named backward forms of all_reduce.
ADJOINT = "adjoint"
IDENTITY = "identity"


class AllReduce:
    """y = ⊕_j x_j on every rank.

    backward='adjoint' (the true adjoint, Megatron's f-pair partner): grad_x = allreduce_sum(grad_y)
    — right when every rank's copy of y feeds a different loss term (the total loss sums them).
    backward='identity' (RFC §5.3, Megatron's g): grad_x = grad_y — right only when the computation
    downstream of y is replicated (every rank computes the same loss and it counts once).
    'avg' scales by 1/P; 'max'/'min' route the gradient to the winning element (lowest rank on ties).
    """

    @staticmethod
    def forward(ctx: Any, x: Any, op: ReduceOp, group: Any, wire: Any, mode: str) -> Any:
        y = _fw.detached_copy(x)
        coll.allreduce(y, op, group, wire)
        _, n, _ = _fw.plain(y)
        ctx.group, ctx.op, ctx.mode, ctx.dtype, ctx.n = group, op, mode, x.dtype, n
        ctx.schedule = schedules.allreduce(n * _fw.itemsize(x.dtype), None)
        if op in (ReduceOp.MAX, ReduceOp.MIN) and _fw.needs_input_grad(ctx, 0):
            _fw.save(ctx, winner_mask(x, y, group))
        return y

    @staticmethod
    def backward(ctx: Any, gy: Any) -> Tuple[Optional[Any], None, None, None, None]:
        info = state.resolve_group(ctx.group)
        if ctx.mode == ADJOINT:
            g = _adjoint(info, ctx.schedule, gy, ctx.dtype, ctx.n, "allreduce.backward")
            if ctx.op is ReduceOp.AVG:
                g = _fw.div_(g, info.size)
            elif ctx.op in (ReduceOp.MAX, ReduceOp.MIN):
                (mask,) = _fw.saved(ctx)
                g = _fw.mul_(g, mask)
            return g, None, None, None, None
        # identity: nothing is launched and gy is only read, so it is not copied first
        if ctx.op is ReduceOp.AVG:
            return _fw.div(gy, info.size), None, None, None, None
        if ctx.op in (ReduceOp.MAX, ReduceOp.MIN):
            (mask,) = _fw.saved(ctx)
            return _fw.mul(gy, mask), None, None, None, None
        return gy, None, None, None, None


class CopyToGroup:
    """Megatron's f: identity forward, allreduce(sum) of the gradient in backward."""

    @staticmethod
    def forward(ctx: Any, x: Any, group: Any) -> Any:
        n = _fw.span(x, "x").numel
        ctx.group, ctx.dtype, ctx.n = group, x.dtype, n
        ctx.schedule = schedules.allreduce(n * _fw.itemsize(x.dtype), None)
        return _fw.alias(x)

    @staticmethod
    def backward(ctx: Any, gy: Any) -> Tuple[Any, None]:
        info = state.resolve_group(ctx.group)
        return _adjoint(info, ctx.schedule, gy, ctx.dtype, ctx.n, "copy_to_group.backward"), None


class AllToAll:
    """y = alltoallv(x); backward: alltoallv(grad_y) with the splits transposed (dual alltoallv_push)."""

    @staticmethod
    def forward(ctx: Any, x: Any, out_splits: List[int], in_splits: List[int], group: Any) -> Any:
        xc = _fw.contiguous(x)
        shape = _fw.shape(xc)
        row = 1
        for d in shape[1:]:
            row *= d
        y = _fw.empty((sum(out_splits),) + shape[1:], x.dtype)
        send = _fw.split(_fw.reshape(xc, (-1,)), [s * row for s in in_splits])
        coll.alltoall(send, _fw.reshape(y, (-1,)), [s * row for s in out_splits], group)
        ctx.group, ctx.row, ctx.out_splits, ctx.in_splits = group, row, out_splits, in_splits
        ctx.shape, ctx.dtype = shape, x.dtype
        return y

    @staticmethod
    def backward(ctx: Any, gy: Any) -> Tuple[Any, None, None, None]:
        info = state.resolve_group(ctx.group)
        dtype, row = ctx.dtype, ctx.row
        send = [s * row for s in ctx.out_splits]
        recv = [s * row for s in ctx.in_splits]
        ns, nr = sum(send), sum(recv)
        g, gp = _grad_in(gy, dtype, ns, "alltoall.backward")
        gx = _fw.empty(ctx.shape, dtype)
        name = _name(dtype)
        # the prepared plan does not depend on the counts: every launch passes (and exchanges) them
        key = (id(info), "alltoallv_push", (), "alltoallv", name, None, None, (), None)
        hit = _cached(info, key)
        es = _fw.itemsize(dtype)
        bufs = [(gp, ns * es), (_addr(gx), nr * es)]
        if hit is not None:
            coll._fire("alltoall.backward", info, hit, bufs, (send, recv))
        else:
            _run_dual(info, "alltoallv_push", {}, "alltoallv", "alltoall.backward", bufs, name, {}, key=key,
                      send_counts=send, recv_counts=recv, nbytes=ns * es)
        return gx, None, None, None


class Broadcast:
    """y = x of ``src``; backward: reduce(sum) of grad_y to ``src`` (dual reduce_push), zero elsewhere."""

    @staticmethod
    def forward(ctx: Any, x: Any, src: int, group: Any) -> Any:
        y = _fw.detached_copy(x)
        coll.broadcast(y, src, group)
        ctx.group, ctx.src = group, src
        ctx.p2p_peer = src
        return y

    @staticmethod
    def backward(ctx: Any, gy: Any) -> Tuple[Any, None, None]:
        info = state.resolve_group(ctx.group)
        g = _fw.detached_copy(gy)
        _, n, ptr = _fw.plain(g)
        _run_dual(info, "broadcast_push", {"root": ctx.src}, "reduce", "broadcast.backward",
                  [(ptr, n * _fw.itemsize(g.dtype))], _name(g.dtype), {"n": n}, reduce=ReduceOp.SUM,
                  nbytes=n * _fw.itemsize(g.dtype))
        if info.rank != ctx.src:
            g = _fw.zero_(g)
        return g, None, None


class Send:
    """Returns an empty token; its backward receives grad_x from the receiver (dual sendrecv_pair)."""

    @staticmethod
    def forward(ctx: Any, x: Any, dst: int, group: Any) -> Any:
        coll.send(_fw.contiguous(_fw.detached(x)), dst, group)
        ctx.group, ctx.dst, ctx.shape, ctx.dtype = group, dst, _fw.shape(x), x.dtype
        ctx.p2p_peer = dst  # a failing backward aborts the pair (failure.backward)
        return _fw.zeros((0,), x.dtype)

    @staticmethod
    def backward(ctx: Any, _gtoken: Any) -> Tuple[Any, None, None]:
        pinfo, me, peer = coll.pair(ctx.dst, ctx.group, "dst_rank")
        gx = _fw.empty(ctx.shape, ctx.dtype)
        _, n, ptr = _fw.plain(gx)
        nbytes = n * _fw.itemsize(ctx.dtype)
        _run_dual(pinfo, "sendrecv_pair", {"src": me, "dst": peer}, "sendrecv", "send.backward", [(ptr, nbytes)],
                  _name(ctx.dtype), {"n": n}, nbytes=nbytes)
        return gx, None, None


class Recv:
    """y = the tensor ``src`` sent; backward sends grad_y back to ``src`` (dual sendrecv_pair)."""

    @staticmethod
    def forward(ctx: Any, anchor: Any, shape: Tuple[int, ...], dtype: Any, src: int, group: Any) -> Any:
        y = _fw.empty(shape, dtype)
        coll.recv(_fw.reshape(y, (-1,)), src, group)
        ctx.group, ctx.src = group, src
        ctx.p2p_peer = src
        return y

    @staticmethod
    def backward(ctx: Any, gy: Any) -> Tuple[None, None, None, None, None]:
        pinfo, me, peer = coll.pair(ctx.src, ctx.group, "src_rank")
        g = _fw.detached_copy(gy)
        _, n, ptr = _fw.plain(g)
        nbytes = n * _fw.itemsize(g.dtype)
        _run_dual(pinfo, "sendrecv_pair", {"src": peer, "dst": me}, "sendrecv", "recv.backward", [(ptr, nbytes)],
                  _name(g.dtype), {"n": n}, nbytes=nbytes)
        return None, None, None, None, None


class AllGatherMatmul:
    """(g, c) = (allgather(a), allgather(a) @ b); backward uses the dual matmul_reduce_scatter:
    grad_a = matmul_reduce_scatter(grad_c, bᵀ) + reduce_scatter(grad_g); grad_b = gᵀ @ grad_c."""

    @staticmethod
    def forward(ctx: Any, a: Any, b: Any, group: Any) -> Tuple[Any, Any]:
        info = state.resolve_group(group)
        a_, b_ = _fw.contiguous(_fw.detached(a)), _fw.contiguous(_fw.detached(b))
        (m, k), (_, n) = _fw.shape(a_), _fw.shape(b_)
        g = _fw.empty((info.size * m, k), a.dtype)
        c = _fw.empty((info.size * m, n), a.dtype)
        coll.allgather_matmul(a_, b_, g, c, group)
        ctx.group = group
        _fw.save(ctx, g, b_)
        return g, c

    @staticmethod
    def backward(ctx: Any, gg: Optional[Any], gc: Optional[Any]) -> Tuple[Optional[Any], Optional[Any], None]:
        info = state.resolve_group(ctx.group)
        g, b = _fw.saved(ctx)
        (gm, k), (_, n) = _fw.shape(g), _fw.shape(b)
        m = gm // info.size
        gb = None
        if gc is not None:
            # the dual writes every element of its output (as the forward's `out`): no zero fill
            ga = _fw.empty((m, k), g.dtype)
            gcc = _fw.contiguous(gc)
            bt = _fw.contiguous(_fw.transpose(b))
            bufs = [(_addr(t), nb) for t, nb in ((gcc, _fw.span(gcc, "gc").nbytes), (bt, _fw.span(bt, "b").nbytes),
                                                  (ga, _fw.span(ga, "ga").nbytes))]
            _run_dual(info, "allgather_matmul", {}, "matmul_reduce_scatter", "fused_all_gather_matmul.backward",
                      bufs, _name(g.dtype), {"m": m, "k": n, "n": k}, reduce=ReduceOp.SUM, nbytes=bufs[0][1])
            gb = _fw.matmul(_fw.transpose(g), gcc)
        else:
            ga = _fw.zeros((m, k), g.dtype)
        if gg is not None:
            part = _fw.empty((m, k), g.dtype)
            coll.reduce_scatter(_fw.reshape(part, (-1,)), _fw.reshape(_fw.contiguous(gg), (-1,)), "sum", ctx.group)
            ga = _fw.add_(ga, part)
        return ga, gb, None


class MatmulReduceScatter:
    """c = block rank of Σ_j a_j @ b_j; backward uses the dual allgather_matmul:
    (G, grad_a) = allgather_matmul(grad_c, bᵀ), grad_b = aᵀ @ G (scaled by 1/P for 'avg')."""

    @staticmethod
    def forward(ctx: Any, a: Any, b: Any, op: ReduceOp, group: Any) -> Any:
        info = state.resolve_group(group)
        a_, b_ = _fw.contiguous(_fw.detached(a)), _fw.contiguous(_fw.detached(b))
        (mp, _), (_, n) = _fw.shape(a_), _fw.shape(b_)
        out = _fw.empty((mp // max(info.size, 1), n), a.dtype)
        coll.matmul_reduce_scatter(a_, b_, out, op, group)
        ctx.group, ctx.op = group, op
        _fw.save(ctx, a_, b_)
        return out

    @staticmethod
    def backward(ctx: Any, gc: Any) -> Tuple[Any, Any, None, None]:
        info = state.resolve_group(ctx.group)
        a, b = _fw.saved(ctx)
        (m, n), k = _fw.shape(gc), _fw.shape(b)[0]
        gcc = _fw.contiguous(gc)
        bt = _fw.contiguous(_fw.transpose(b))
        big = _fw.empty((info.size * m, n), a.dtype)
        ga = _fw.empty((info.size * m, k), a.dtype)
        bufs = [(_addr(t), _fw.span(t, "t").nbytes) for t in (gcc, bt, big, ga)]
        _run_dual(info, "matmul_reduce_scatter", {}, "allgather_matmul", "fused_matmul_reduce_scatter.backward",
                  bufs, _name(a.dtype), {"m": m, "k": n, "n": k}, nbytes=bufs[2][1])
        gb = _fw.matmul(_fw.transpose(a), big)
        if ctx.op is ReduceOp.AVG:
            ga = _fw.div_(ga, info.size)
            gb = _fw.div_(gb, info.size)
        return ga, gb, None, None


RULES = (AllGather, ReduceScatter, AllReduce, CopyToGroup, AllToAll, Broadcast, Send, Recv, AllGatherMatmul,
         MatmulReduceScatter)

# A backward is a collective call too: a failure inside it aborts the group (the forward is
# guarded by its entry point). Wrapped on the classes themselves, once, so every caller of a
# rule (the autograd registrations, the dispatcher ops of symsched.torch.ops) gets the guard.
for _rule in RULES:
    _rule.backward = staticmethod(failure.backward(f"{_rule.__name__}.backward", _rule.backward))


@adapter.on_install
def _register(fw: adapter.FrameworkAdapter) -> None:
    global _fw
    _fw = fw
    for rule in RULES:
        setattr(apply, rule.__name__, fw.differentiable(rule))


@failure.on_abort
def _drop_cached() -> None:
    """An aborted group's cached backward launches count from epochs its reset voids."""
    _duals.clear()
