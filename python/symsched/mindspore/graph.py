"""symsched's collectives as graph-mode ops: usable inside ``GRAPH_MODE`` and ``@mindspore.jit``.

The Python API (``symm.functional.*``, ``symm.shmem_*``) runs in PyNative only: a compiled graph
turns a Python call into a ``PyExecute`` node whose gradient is silently zero
(:mod:`symsched.mindspore.mode`). These ops are the graph's counterpart of the PyTorch side's
``torch.ops.symsched``: each is a primitive (``mindspore.ops.Custom``, ``func_type='pyfunc'``)
made once with its static arguments (group, reduce op, splits, peer …) and called inside the
graph, the way MindSpore's own ``ops.AllReduce(op, group)`` is::

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.ar = symm.graph.AllReduce("sum", group=[0, 1], backward="adjoint")
        def construct(self, x):
            return self.ar(x)

Measured on MindSpore 2.10 CPU (``docs/mindspore.md``, Graph mode):

* the kernel (a Python function on numpy arrays) runs on every call of the compiled graph, in
  ``GRAPH_MODE`` and under ``@ms.jit`` (ast capture), on a MindSpore worker thread;
* each op's ``bprop`` is compiled into the gradient graph: it calls the backward op, which
  launches the dual schedule the compiler declared for the forward (as the PyNative backward
  does: the same ``(forward schedule, dual collective)`` pairs as :mod:`symsched.core.rules`);
* every op carries ``side_effect_mem``: the compiler keeps the ops of one graph in program
  order and never drops one whose result is unused (without it an unused op never ran). The
  gradient graph may run a backward op before the forward op when its input does not depend
  on the forward's result (measured); each backward op therefore takes the forward's output as
  an input (unread), so it runs after the forward on every rank;
* a kernel must not touch MindSpore tensors' data: under ``@ms.jit`` ``Tensor.data_ptr()``,
  ``asnumpy()`` and any PyNative op inside a kernel wait for the graph that runs the kernel
  (deadlock). The kernels therefore hand the core numpy arrays (the adapter accepts them while
  a kernel runs, ``mode.kernels``) and allocate their results with numpy.

Groups are what the Python API takes (None = WORLD, a rank list, a MindSpore group name); the
ops are made after ``symm.init()`` (the group's size fixes the output shapes). Data dtypes:
float32, float64, float16, int32, int64 (bfloat16 and fp8: what MindSpore hands a pyfunc kernel
for them was not measured, and the kernels refuse what they cannot map to a MindSpore dtype).
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from . import api as _api  # noqa: F401 - installs the MindSpore adapter first
from . import mode, tensors
from ..core import adapter as _adapter
from ..core import coll, failure, rules, schedules, state
from ..core.enums import ReduceOp, parse_reduce_op
from ..core.errors import SymschedArgumentError, SymschedTypeError

__all__ = ["AllGather", "AllReduce", "AllToAll", "Broadcast", "CopyToGroup", "ReduceFromGroup", "ReduceScatter",
           "Recv", "Send"]

_kernels = mode.kernels
_NP = {d: np.dtype(n) for d, n in ((ms.float32, "float32"), (ms.float64, "float64"), (ms.float16, "float16"),
                                   (ms.int32, "int32"), (ms.int64, "int64"))}
_FLOATS = (ms.float32, ms.float64, ms.float16)


def _group_arg(group: Any) -> Any:
    """The group as the core caches it: rank lists become tuples (a list is never cached)."""
    if group is None or isinstance(group, str):
        return group
    if isinstance(group, (list, tuple)):
        return tuple(int(r) for r in group)
    raise SymschedTypeError(f"`group` must be a MindSpore group name, a list of world ranks or None (WORLD), "
                            f"got {type(group).__name__}")


def _size(group: Any) -> int:
    if group is None:
        return state.world_size()
    if isinstance(group, tuple):
        return len(group)
    return len(_adapter.active().group_ranks(group, "group"))


def _kernel(name: str, fn: Callable[..., np.ndarray], arity: int) -> Callable[..., np.ndarray]:
    """``fn`` as a pyfunc kernel of ``arity`` arrays (MindSpore reads the kernel's signature: a
    ``*args`` kernel is refused as a tuple input): the adapter takes numpy arrays while it runs."""

    def run(*arrays: np.ndarray) -> np.ndarray:
        _kernels[0] += 1
        try:
            return fn(*arrays)
        finally:
            _kernels[0] -= 1

    if arity == 1:
        def kernel(a: np.ndarray) -> np.ndarray:
            return run(a)
    elif arity == 3:
        def kernel(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:  # type: ignore[misc]
            return run(a, b, c)
    else:  # pragma: no cover - every op here has one input, every backward three
        raise ValueError(f"no kernel of arity {arity}")
    kernel.__name__ = kernel.__qualname__ = "symsched_" + name.replace(".", "_")
    return kernel


def _guarded(name: str, group: Any, fn: Callable[..., np.ndarray], arity: int,
             peer: Any = failure.NO_PEER) -> Callable[..., np.ndarray]:
    """A kernel guarded as the Python API's collectives are: a failure on this rank aborts the
    group (a send/recv's pair), so its peers raise ``PeerAbortedError`` instead of waiting."""

    def guarded(*arrays: np.ndarray) -> np.ndarray:
        try:
            return fn(*arrays)
        except BaseException as exc:
            failure.fail(exc, name, group, peer)
            raise

    return _kernel(name, guarded, arity)


def _prim(name: str, group: Any, fwd: Callable[..., np.ndarray], shape: Callable[..., Any],
          dtype: Callable[..., Any], bprop: Optional[Callable[..., Any]] = None, peer: Any = failure.NO_PEER,
          arity: int = 1) -> Any:
    """A guarded pyfunc primitive with side effects (kept, and kept in program order, by the
    compiler)."""
    op = ops.Custom(_guarded(name, group, fwd, arity, peer), shape, dtype, func_type="pyfunc", bprop=bprop)
    op.add_prim_attr("side_effect_mem", True)
    return op


def _same(*xs: Any) -> Any:
    return xs[0]


def _second(*xs: Any) -> Any:
    return xs[1]


def _grad_op(name: str, group: Any, fn: Callable[..., np.ndarray], peer: Any = failure.NO_PEER) -> Any:
    """The backward primitive ``(dout, x, out) -> dx`` (shape and dtype of ``x``): ``x`` gives the
    shape, ``out`` makes it run after the forward (the gradient graph may otherwise run it first)."""
    return _prim(name, group, lambda gy, x, _out: fn(_c(gy), x), _second, _second, peer=peer, arity=3)


def _dtype_of(d: Any) -> str:
    n = tensors.DATA_DTYPES.get(d)
    if n is None:
        raise SymschedArgumentError(f"dtype {d} has no runtime name")
    return n


def _c(a: np.ndarray) -> np.ndarray:
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _check_dtype(d: Any, what: str, floats: bool = False) -> None:
    allowed = _FLOATS if floats else tuple(_NP)
    if d not in allowed:
        raise SymschedArgumentError(f"symsched.graph.{what}: dtype {d} is not supported by the graph-mode ops "
                                    f"(one of: {', '.join(str(x) for x in allowed)})")


class _Op(nn.Cell):
    """A graph-mode collective: a Cell around one primitive (``self.prim``) made with the op's
    static arguments; call it inside ``construct`` or an ``@ms.jit`` function."""

    prim: Any

    def construct(self, x: Any) -> Any:
        return self.prim(x)


# ---------------------------------------------------------------------------------- all_gather


class AllGather(_Op):
    """``functional.all_gather`` in a graph: every rank's ``x`` concatenated along dim 0 (a 0-d
    ``x`` gives ``(P,)``); backward: reduce_scatter(sum) of the gradient, by the dual declared
    for ``allgather_push`` (as in PyNative)."""

    def __init__(self, group: Any = None) -> None:
        super().__init__()
        g = _group_arg(group)
        p = _size(g)

        def fwd(x: np.ndarray) -> np.ndarray:
            x = _c(x)
            out = np.empty((p,) if x.ndim == 0 else (p * x.shape[0],) + x.shape[1:], x.dtype)
            coll.allgather(out, x, g)
            return out

        def bwd(gy: np.ndarray, x: np.ndarray) -> np.ndarray:
            info = state.resolve_group(g)
            gx = np.empty(x.shape, gy.dtype)
            n, nb = gx.size, gy.nbytes
            rules._run_dual(info, "allgather_push", {}, "reduce_scatter", "allgather.backward",  # noqa: SLF001
                            [(gy.ctypes.data, nb), (gx.ctypes.data, gx.nbytes)], _name(gy), {"n": n},
                            reduce=ReduceOp.SUM, nbytes=nb)
            return gx

        back = _grad_op("allgather.backward", g, bwd)

        def bprop(x: Any, out: Any, dout: Any) -> Any:
            return (back(dout, x, out),)

        self.prim = _prim("all_gather", g, fwd, lambda s: [p] if not s else [p * s[0]] + list(s[1:]), _same, bprop)


def _name(a: np.ndarray) -> str:
    return _dtype_of(tensors.FROM_NUMPY[a.dtype])


# ------------------------------------------------------------------------------ reduce_scatter


class ReduceScatter(_Op):
    """``functional.reduce_scatter`` in a graph: block ``rank`` (dim 0) of the reduction of every
    rank's ``x``; backward ('sum'/'avg'): all_gather of the gradient by the dual the forward's
    schedule declares ('avg' scales by 1/P)."""

    def __init__(self, op: Any = "sum", group: Any = None, low_precision_dtype: Any = None) -> None:
        super().__init__()
        g = _group_arg(group)
        p = _size(g)
        r = parse_reduce_op(op)
        wire = low_precision_dtype

        def fwd(x: np.ndarray) -> np.ndarray:
            x = _c(x)
            if x.ndim == 0 or x.shape[0] % p:
                raise SymschedArgumentError(f"`input` dim 0 must be a multiple of the group size {p}, "
                                            f"got shape {x.shape}")
            out = np.empty((x.shape[0] // p,) + x.shape[1:], x.dtype)
            coll.reduce_scatter(out, x, r, g, wire)
            return out

        def bwd(gy: np.ndarray, x: np.ndarray) -> np.ndarray:
            rules._nonlinear(r, "reduce_scatter")  # noqa: SLF001
            info = state.resolve_group(g)
            name = _name(gy)
            gx = np.empty(x.shape, gy.dtype)
            nb = gx.nbytes
            fwd_schedule = schedules.reduce_scatter(coll._wire_for(r, wire, name))  # noqa: SLF001
            rules._run_dual(info, fwd_schedule, {}, "allgather", "reduce_scatter.backward",  # noqa: SLF001
                            [(gy.ctypes.data, gy.nbytes), (gx.ctypes.data, nb)], name, {"n": gy.size},
                            choose=lambda names: schedules.allgather(nb, False, info.size, names),
                            choose_key=coll._pull_env(), nbytes=nb)  # noqa: SLF001
            if r is ReduceOp.AVG:
                gx = (gx / gx.dtype.type(info.size)).astype(gx.dtype)
            return gx

        back = _grad_op("reduce_scatter.backward", g, bwd)

        def bprop(x: Any, out: Any, dout: Any) -> Any:
            return (back(dout, x, out),)

        self.prim = _prim("reduce_scatter", g, fwd, lambda s: [s[0] // p] + list(s[1:]) if s else s, _same, bprop)


# ---------------------------------------------------------------------------------- all_reduce


def _adjoint(info: state.GroupInfo, gy: np.ndarray, op_name: str) -> np.ndarray:
    """allreduce(sum) of a copy of ``gy`` by the dual of the forward's all-reduce schedule (the
    PyNative rules' ``_adjoint``)."""
    gx = np.array(gy, copy=True, order="C")
    rules._run_dual(info, schedules.allreduce(gx.nbytes, None), {}, "allreduce", op_name,  # noqa: SLF001
                    [(gx.ctypes.data, gx.nbytes)], _name(gx), {"n": gx.size}, reduce=ReduceOp.SUM,
                    nbytes=gx.nbytes)
    return gx


class AllReduce(_Op):
    """``functional.all_reduce`` in a graph: the element-wise reduction over the group, on every
    rank. ``backward`` as in PyNative: ``'adjoint'`` (allreduce(sum) of the gradient, by the
    dual of the forward's schedule) or ``'identity'`` (the gradient itself, graph arithmetic:
    nothing is launched); 'avg' scales by 1/P; 'max'/'min' route the gradient to the winning
    element (lowest rank on ties: the backward computes the winners with one allreduce(min), as
    the PyTorch side's compiled backward does)."""

    def __init__(self, op: Any = "sum", group: Any = None, *, backward: str,
                 low_precision_dtype: Any = None) -> None:
        super().__init__()
        if backward not in (rules.ADJOINT, rules.IDENTITY):
            raise SymschedArgumentError(f"`backward` must be 'adjoint' or 'identity', got {backward!r}")
        g = _group_arg(group)
        p = _size(g)
        r = parse_reduce_op(op)
        wire = low_precision_dtype
        winners = r in (ReduceOp.MAX, ReduceOp.MIN)

        def fwd(x: np.ndarray) -> np.ndarray:
            y = np.array(x, copy=True, order="C")
            coll.allreduce(y, r, g, wire)
            return y

        def mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            info = state.resolve_group(g)
            cand = np.where(x.reshape(-1) == y.reshape(-1), info.rank, info.size).astype(np.int32)
            coll.allreduce(cand, "min", g)
            return (cand == info.rank).reshape(x.shape)

        def adjoint(gy: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
            info = state.resolve_group(g)
            gx = _adjoint(info, gy, "allreduce.backward")
            if r is ReduceOp.AVG:
                gx = (gx / gx.dtype.type(info.size)).astype(gx.dtype)
            elif winners:
                gx = gx * mask(x, y).astype(gx.dtype)
            return gx

        def identity_winners(gy: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
            return gy * mask(x, y).astype(gy.dtype)

        def back_prim(name: str, fn: Callable[..., np.ndarray]) -> Any:
            return _prim(name, g, lambda gy, x, y: fn(_c(gy), _c(x), _c(y)), _second, _second, arity=3)

        if backward == rules.ADJOINT:
            back = back_prim("allreduce.backward", adjoint)

            def bprop(x: Any, out: Any, dout: Any) -> Any:
                return (back(dout, x, out),)
        elif winners:
            back = back_prim("allreduce.backward", identity_winners)

            def bprop(x: Any, out: Any, dout: Any) -> Any:
                return (back(dout, x, out),)
        elif r is ReduceOp.AVG:
            def bprop(x: Any, out: Any, dout: Any) -> Any:
                return (dout / p,)
        else:
            def bprop(x: Any, out: Any, dout: Any) -> Any:
                return (dout,)

        self.prim = _prim("all_reduce", g, fwd, _same, _same, bprop)


class CopyToGroup(_Op):
    """``functional.copy_to_group`` in a graph (Megatron's *f*): identity forward, allreduce(sum)
    of the gradient backward."""

    def __init__(self, group: Any = None) -> None:
        super().__init__()
        g = _group_arg(group)

        def fwd(x: np.ndarray) -> np.ndarray:
            return np.array(x, copy=True, order="C")

        def bwd(gy: np.ndarray, x: np.ndarray) -> np.ndarray:
            return _adjoint(state.resolve_group(g), gy, "copy_to_group.backward")

        back = _grad_op("copy_to_group.backward", g, bwd)

        def bprop(x: Any, out: Any, dout: Any) -> Any:
            return (back(dout, x, out),)

        self.prim = _prim("copy_to_group", g, fwd, _same, _same, bprop)


def ReduceFromGroup(group: Any = None) -> AllReduce:  # noqa: N802 - an op maker, named as the ops
    """``functional.reduce_from_group`` in a graph (Megatron's *g*): allreduce(sum) forward,
    identity backward."""
    return AllReduce("sum", group, backward=rules.IDENTITY)


# ---------------------------------------------------------------------------------- all_to_all


class AllToAll(_Op):
    """``functional.all_to_all`` in a graph (dim 0; ``input_split_sizes[j]`` rows go to rank j,
    the result holds ``output_split_sizes[j]`` rows from each rank j; None = equal splits, static
    either way); backward: all_to_all of the gradient with the splits transposed, by the dual of
    ``alltoallv_push``."""

    def __init__(self, output_split_sizes: Optional[Sequence[int]] = None,
                 input_split_sizes: Optional[Sequence[int]] = None, group: Any = None) -> None:
        super().__init__()
        g = _group_arg(group)
        p = _size(g)
        outs = None if output_split_sizes is None else [int(v) for v in output_split_sizes]
        ins = None if input_split_sizes is None else [int(v) for v in input_split_sizes]
        for arg, s in (("output_split_sizes", outs), ("input_split_sizes", ins)):
            if s is not None and len(s) != p:
                raise SymschedArgumentError(f"`{arg}` must have one entry per group rank ({p}), got {len(s)}")

        def splits(rows: int) -> Tuple[List[int], List[int]]:
            if (outs is None or ins is None) and rows % p:
                raise SymschedArgumentError(f"dim 0 ({rows}) must divide by the group size {p} for equal splits")
            i = ins if ins is not None else [rows // p] * p
            o = outs if outs is not None else [rows // p] * p
            if sum(i) != rows:
                raise SymschedArgumentError(f"`input_split_sizes` must sum to dim 0 of x ({rows}), got {sum(i)}")
            return o, i

        def fwd(x: np.ndarray) -> np.ndarray:
            x = _c(x)
            o, i = splits(x.shape[0])
            row = int(np.prod(x.shape[1:], dtype=np.int64))
            y = np.empty((sum(o),) + x.shape[1:], x.dtype)
            flat, at, send = x.reshape(-1), 0, []
            for s in i:
                send.append(flat[at:at + s * row])
                at += s * row
            coll.alltoall(send, y.reshape(-1), [s * row for s in o], g)
            return y

        def bwd(gy: np.ndarray, x: np.ndarray) -> np.ndarray:
            info = state.resolve_group(g)
            o, i = splits(x.shape[0])
            row = int(np.prod(x.shape[1:], dtype=np.int64))
            send, recv = [s * row for s in o], [s * row for s in i]
            gx = np.empty(x.shape, gy.dtype)
            rules._run_dual(info, "alltoallv_push", {}, "alltoallv", "alltoall.backward",  # noqa: SLF001
                            [(gy.ctypes.data, gy.nbytes), (gx.ctypes.data, gx.nbytes)], _name(gy), {},
                            send_counts=send, recv_counts=recv, nbytes=gy.nbytes)
            return gx

        back = _grad_op("alltoall.backward", g, bwd)

        def bprop(x: Any, out: Any, dout: Any) -> Any:
            return (back(dout, x, out),)

        def shape(s: List[int]) -> List[int]:
            if not s:
                raise SymschedArgumentError("`x` must have at least one dimension")
            return [sum(splits(s[0])[0])] + list(s[1:])

        self.prim = _prim("all_to_all", g, fwd, shape, _same, bprop)


# ----------------------------------------------------------------------------------- broadcast


class Broadcast(_Op):
    """``functional.broadcast`` in a graph: ``src``'s ``x`` (group-local ``src``) on every rank;
    backward: reduce(sum) of the gradient to ``src`` by the dual of ``broadcast_push``, zero on
    the other ranks."""

    def __init__(self, src: int, group: Any = None) -> None:
        super().__init__()
        g = _group_arg(group)
        src = int(src)

        def fwd(x: np.ndarray) -> np.ndarray:
            y = np.array(x, copy=True, order="C")
            coll.broadcast(y, src, g)
            return y

        def bwd(gy: np.ndarray, x: np.ndarray) -> np.ndarray:
            info = state.resolve_group(g)
            gx = np.array(gy, copy=True, order="C")
            rules._run_dual(info, "broadcast_push", {"root": src}, "reduce", "broadcast.backward",  # noqa: SLF001
                            [(gx.ctypes.data, gx.nbytes)], _name(gx), {"n": gx.size}, reduce=ReduceOp.SUM,
                            nbytes=gx.nbytes)
            if info.rank != src:
                gx[...] = 0
            return gx

        back = _grad_op("broadcast.backward", g, bwd)

        def bprop(x: Any, out: Any, dout: Any) -> Any:
            return (back(dout, x, out),)

        self.prim = _prim("broadcast", g, fwd, _same, _same, bprop)


# ----------------------------------------------------------------------------------- send/recv


class Send(_Op):
    """``functional.send`` in a graph: sends ``x`` to ``dst`` (group-local) and returns a
    one-element zero token (add ``token.sum()`` to the loss so the backward runs: it receives
    ``x``'s gradient from ``dst``, whose :class:`Recv` backward sends it)."""

    def __init__(self, dst: int, group: Any = None) -> None:
        super().__init__()
        g = _group_arg(group)
        dst = int(dst)

        def fwd(x: np.ndarray) -> np.ndarray:
            coll.send(_c(x), dst, g)
            return np.zeros((1,), x.dtype)

        def bwd(_gt: np.ndarray, x: np.ndarray) -> np.ndarray:
            pinfo, me, peer = coll.pair(dst, g, "dst_rank")
            gx = np.empty(x.shape, x.dtype)
            rules._run_dual(pinfo, "sendrecv_pair", {"src": me, "dst": peer}, "sendrecv",  # noqa: SLF001
                            "send.backward", [(gx.ctypes.data, gx.nbytes)], _name(gx), {"n": gx.size},
                            nbytes=gx.nbytes)
            return gx

        back = _grad_op("send.backward", g, bwd, peer=dst)

        def bprop(x: Any, out: Any, dout: Any) -> Any:
            return (back(dout, x, out),)

        self.prim = _prim("send", g, fwd, lambda s: [1], _same, bprop, peer=dst)


class Recv(_Op):
    """``functional.recv`` in a graph: a tensor of ``shape``/``dtype`` from ``src``. It is called
    on an ``anchor`` tensor (``recv(anchor)``), one of the inputs the gradient is taken for: the
    gradient graph runs the backward (sending the gradient back to ``src``) only on a path from
    those inputs, as in PyNative. The anchor's gradient from this op is zero."""

    def __init__(self, shape: Sequence[int], dtype: Any, src: int, group: Any = None) -> None:
        super().__init__()
        g = _group_arg(group)
        src = int(src)
        shp = [int(d) for d in ([shape] if isinstance(shape, int) else shape)]
        _check_dtype(dtype, "Recv")
        npd = _NP[dtype]

        def fwd(_anchor: np.ndarray) -> np.ndarray:
            y = np.empty(shp, npd)
            coll.recv(y.reshape(-1), src, g)
            return y

        def bwd(gy: np.ndarray, anchor: np.ndarray) -> np.ndarray:
            pinfo, me, peer = coll.pair(src, g, "src_rank")
            rules._run_dual(pinfo, "sendrecv_pair", {"src": peer, "dst": me}, "sendrecv",  # noqa: SLF001
                            "recv.backward", [(gy.ctypes.data, gy.nbytes)], _name(gy), {"n": gy.size},
                            nbytes=gy.nbytes)
            return np.zeros(anchor.shape, anchor.dtype)

        back = _grad_op("recv.backward", g, bwd, peer=src)

        def bprop(anchor: Any, out: Any, dout: Any) -> Any:
            return (back(dout, anchor, out),)

        self.prim = _prim("recv", g, fwd, lambda s: shp, lambda d: dtype, bprop, peer=src)
