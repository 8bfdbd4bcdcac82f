"""Scenario: ``torch.compile(fullgraph=True)`` of training steps that call symsched's functional
collectives, MC2 ops and in-place RFC forms: no graph break, the ``symsched`` ops in the graph,
and the same losses, outputs and gradients as the same step run eagerly."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import torch
import torch.distributed as dist

import symsched as symm
import symsched.functional as F

DT = torch.float64
TOL = dict(rtol=1e-10, atol=1e-12)


class Capture:
    """A backend that keeps the printed FX graphs — Dynamo's, and AOTAutograd's forward and
    backward graphs — and runs the AOT graphs through inductor (or as they are: ``aot_eager``)."""

    def __init__(self, inductor: bool) -> None:
        self.dynamo: List[str] = []
        self.forward: List[str] = []
        self.backward: List[str] = []
        self.inductor = inductor

    def _keep(self, gm: torch.fx.GraphModule, backward: bool) -> None:
        (self.backward if backward else self.forward).append(gm.print_readable(print_output=False))

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.dynamo.append(gm.print_readable(print_output=False))
        if self.inductor:
            from torch._inductor.compile_fx import compile_fx, compile_fx_inner

            def inner(g: torch.fx.GraphModule, inputs: Any, **kw: Any) -> Any:
                self._keep(g, kw.get("is_backward", False))
                return compile_fx_inner(g, inputs, **kw)

            return compile_fx(gm, example_inputs, inner_compile=inner)
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.aot_autograd import make_boxed_func

        def keep(backward: bool) -> Callable:
            def compile_graph(g: torch.fx.GraphModule, inputs: Any) -> Any:
                self._keep(g, backward)
                return make_boxed_func(g.forward)
            return compile_graph

        return aot_autograd(fw_compiler=keep(False), bw_compiler=keep(True))(gm, example_inputs)


def _params(world: int) -> Dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)

    def p(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, dtype=DT) * 0.5).requires_grad_()

    return {"w1": p(8, 6), "w2": p(6, 8), "w3": p(8, 5), "w4": p(5, 8)}


def _tp_step(params: Dict[str, torch.Tensor], x: torch.Tensor, group: Any, ranks: List[int],
             pg: Any) -> Dict[str, torch.Tensor]:
    """One forward of a tensor/sequence-parallel block through every functional collective and
    both MC2 ops, with in-place RFC forms on activations (autograd) and on statistics (none).
    ``group`` / ``ranks`` / ``pg`` name the same ranks three ways (None, a list, a ProcessGroup)."""
    w1, w2, w3, w4 = params["w1"], params["w2"], params["w3"], params["w4"]
    h = torch.relu(F.copy_to_group(x @ w1, pg))                         # Megatron f
    y = F.reduce_from_group(h @ w2, group)                              # Megatron g
    y = F.all_reduce(y, "avg", ranks, backward="adjoint")
    g = F.all_gather(y, pg)                                             # sequence-parallel gather
    s = F.reduce_scatter(g * 1.5, "sum", group)
    a = F.all_to_all(s, None, None, ranks)
    gathered, c = F.all_gather_matmul(a, w3, pg)                        # MC2 all-gather + matmul
    r = F.matmul_reduce_scatter(c, w4, "sum", group)                    # MC2 matmul + reduce-scatter
    b = F.broadcast(r * 1.0, 0, ranks)
    z = b * 1.0
    symm.shmem_allreduce(z, "sum", pg, backward="adjoint")             # in-place, autograd recording
    gout = torch.empty((z.shape[0] * len(ranks),) + tuple(z.shape[1:]), dtype=DT)
    symm.shmem_allgather(gout, z, group)                                # in-place, differentiable route
    loss = (gout * gout).mean() + (gathered * 0.1).sum() + (a * a).sum()
    # statistics: in-place forms outside autograd
    stat = torch.stack([loss.detach(), y.detach().abs().max()])
    symm.shmem_allreduce(stat, "max", pg)
    mean = loss.detach().reshape(1).repeat(len(ranks))
    part = torch.empty(1, dtype=DT)
    symm.shmem_reduce_scatter(part, mean, "avg", ranks)
    rows = z.detach().reshape(-1)
    moved = torch.empty_like(rows)
    n = rows.numel() // len(ranks)
    symm.shmem_alltoall(list(rows.split(n)), moved, [n] * len(ranks), group)
    root = z.detach().sum().reshape(1).clone()
    symm.shmem_broadcast(root, len(ranks) - 1, pg)
    return {"loss": loss, "stat": stat, "part": part, "moved": moved, "root": root, "gout": gout.detach()}


def _extras(params: Dict[str, torch.Tensor], x: torch.Tensor, me: int, p: int, group: Any) -> Dict[str, torch.Tensor]:
    """The rules the block above leaves out: max routing (its winners mask is computed by the
    compiled backward), reduce_scatter 'avg' over a bfloat16 wire, all_to_all with uneven,
    rank-dependent splits, and an in-place allreduce over a float16 wire; on ``group`` (``me``
    is this rank's index in it, ``p`` its size)."""
    h = x @ params["w1"]
    m = F.all_reduce(h, "max", group, backward="adjoint")
    r = F.reduce_scatter(torch.cat([h, m]), "avg", group, low_precision_dtype=torch.bfloat16)
    ins = [me + j + 1 for j in range(p)]
    outs = [j + me + 1 for j in range(p)]
    a = F.all_to_all(r.reshape(-1)[: sum(ins)], outs, ins, group)
    z = m * 1.0
    symm.shmem_allreduce(z, "sum", group, torch.float16, backward="identity")
    return {"loss": (m * m).sum() + (r * r).sum() + (a * a).sum() + (z * h).sum(), "a": a.detach()}


def _grad_sync(grads: List[torch.Tensor], pg: Any) -> None:
    """DDP's gradient averaging as in-place RFC calls (a compiled optimizer-side step), then the
    in-place dispatcher ops called directly on the last gradient (the same graph on every
    rank, so their order is fixed by data)."""
    for gr in grads[:-1]:
        symm.shmem_allreduce(gr, "avg", pg)
    last = grads[-1]
    world = dist.get_world_size()
    torch.ops.symsched.shmem_allreduce(last, "sum", [], None)
    part = torch.empty(last.shape[1], dtype=last.dtype)
    torch.ops.symsched.shmem_reduce_scatter(part, last[:world].reshape(-1), "sum", [], None)
    torch.ops.symsched.shmem_broadcast(part, world - 1, [])
    last[-1].copy_(part)


def _eager_and_compiled(fn: Callable, make_args: Callable, params: Dict[str, torch.Tensor],
                        compiled: Callable, failures: List[str], what: str) -> None:
    outs = {}
    for mode, f in (("eager", fn), ("compiled", compiled)):
        for p in params.values():
            p.grad = None
        res = f(params, *make_args())
        res["loss"].backward()
        outs[mode] = (res, {k: p.grad.clone() for k, p in params.items()})
    (re, ge), (rc, gc) = outs["eager"], outs["compiled"]
    for k in re:
        if not torch.allclose(re[k], rc[k], **TOL):
            failures.append(f"{what}: output {k}: eager {re[k].flatten()[:4]} compiled {rc[k].flatten()[:4]}")
    for k in ge:
        if not torch.allclose(ge[k], gc[k], **TOL):
            failures.append(f"{what}: grad {k}: eager {ge[k].flatten()[:4]} compiled {gc[k].flatten()[:4]}")


def training_step(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    """``args``: ``dynamic``, ``rows`` (batch sizes, run in turn through one compiled step),
    ``inductor``, ``extras`` (also the extra rules on WORLD), ``subgroups`` (only the extra
    rules, on halves of the world given as ProcessGroups and as rank lists)."""
    symm.init()
    failures: List[str] = []
    ranks = list(range(world))
    pg = dist.new_group(ranks)
    halves = [ranks[: world // 2], ranks[world // 2:]]
    pgs = [dist.new_group(h) for h in halves]
    params = _params(world)
    capture = Capture(inductor=args.get("inductor", True))
    dynamic = args.get("dynamic", False)

    def batch(rows: int) -> Callable:
        def make() -> tuple:
            g = torch.Generator().manual_seed(100 + rank)
            return (torch.randn(rows, 8, generator=g, dtype=DT), None, ranks, pg)
        return make

    def extras(group: Any, me: int, p: int, what: str) -> None:
        step = torch.compile(_extras, backend=capture, fullgraph=True, dynamic=dynamic)
        make = lambda: (batch(2 * p)()[0], me, p, group)  # noqa: E731
        _eager_and_compiled(_extras, make, {"w1": params["w1"]}, step, failures, what)

    if args.get("subgroups"):
        mine = 0 if rank in halves[0] else 1
        me = halves[mine].index(rank)
        extras(pgs[mine], me, len(halves[mine]), "extras on a half (ProcessGroup)")
        extras(halves[mine], me, len(halves[mine]), "extras on a half (rank list)")
        return {"failures": failures, "dynamo": capture.dynamo, "forward": capture.forward,
                "backward": capture.backward}

    step = torch.compile(_tp_step, backend=capture, fullgraph=True, dynamic=dynamic)
    for rows in args.get("rows", [2 * world]):
        _eager_and_compiled(_tp_step, batch(rows), params, step, failures, f"tp step rows={rows}")
    if args.get("extras", True):
        extras(None, rank, world, "extras on WORLD")

    # the gradient sync, compiled on its own (in-place forms on tensors outside autograd)
    grads = [torch.randn(5, 3, dtype=DT, generator=torch.Generator().manual_seed(rank + i)) for i in range(3)]
    eager = [g.clone() for g in grads]
    _grad_sync(eager, pg)
    sync = torch.compile(_grad_sync, backend=capture, fullgraph=True)
    sync(grads, pg)
    for i, (e, c) in enumerate(zip(eager, grads)):
        if not torch.equal(e, c):
            failures.append(f"grad sync {i}: eager {e.flatten()[:4]} compiled {c.flatten()[:4]}")
    return {"failures": failures, "dynamo": capture.dynamo, "forward": capture.forward,
            "backward": capture.backward}


def _pipeline(params: Dict[str, torch.Tensor], x: torch.Tensor, rank: int) -> Dict[str, torch.Tensor]:
    """Two pipeline stages: rank 0 computes and sends, rank 1 receives and computes the loss;
    the gradient travels back through recv's and send's backward. Plus the in-place send/recv."""
    w = params["w1"]
    side = torch.arange(4, dtype=DT)
    if rank == 0:
        token = F.send(x @ w, 1)
        symm.shmem_send(side * 2, 1)
        return {"loss": token.sum(), "side": side}
    h = F.recv((x.shape[0], w.shape[1]), DT, 0)
    got = torch.empty(4, dtype=DT)
    symm.shmem_recv(got, 0)
    return {"loss": (torch.tanh(h @ w.t()) * x).sum(), "side": got}


def pipeline(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    symm.init()
    failures: List[str] = []
    params = {"w1": (torch.randn(8, 6, generator=torch.Generator().manual_seed(3), dtype=DT)).requires_grad_()}
    capture = Capture(inductor=True)
    step = torch.compile(_pipeline, backend=capture, fullgraph=True)

    def make() -> tuple:
        return (torch.randn(3, 8, generator=torch.Generator().manual_seed(50 + rank), dtype=DT), rank)

    _eager_and_compiled(_pipeline, make, params, step, failures, "pipeline")
    return {"failures": failures, "dynamo": capture.dynamo, "forward": capture.forward,
            "backward": capture.backward}


class _Exported(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.all_reduce(x * 2, "sum", None, backward="identity")
        z = y.clone()
        symm.shmem_allreduce(z, "avg")
        return z


def export(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    """``torch.export.export(strict=True)`` traces with Dynamo, so through the twins: the exported
    program holds the symsched ops and runs; non-strict export (torch 2.13's default) runs the
    Python names on fake tensors, which the fast path cannot serve (documented)."""
    symm.init()
    failures: List[str] = []
    x = torch.arange(4, dtype=DT) + rank
    ep = torch.export.export(_Exported(), (x,), strict=True)
    graph = str(ep.graph)
    if "symsched.all_reduce" not in graph:
        failures.append(f"exported graph without the symsched op: {graph}")
    got = ep.module()(x)
    want = _Exported()(x)
    if not torch.equal(got, want):
        failures.append(f"exported {got} vs eager {want}")
    try:
        torch.export.export(_Exported(), (x,), strict=False)
        non_strict = "ran"
    except RuntimeError as exc:
        non_strict = str(exc).split("\n")[0]
    return {"failures": failures, "graph": graph, "non_strict": non_strict}
