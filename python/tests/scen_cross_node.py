"""Scenarios for groups across emulated nodes: ``args["per_node"]`` ranks per node, node ``b``
holding global ranks ``b·L … b·L + L - 1``. Each node bootstraps on its own (``SYMSCHED_NODE_ID``,
``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` per node, set before symsched starts), so nothing is shared
across nodes; gloo is the framework engine and the reference."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

import torch
import torch.distributed as dist

from _common import data, reference_reduce, spy_schedules


def _node_env(rank: int, per_node: int) -> None:
    os.environ["SYMSCHED_NODE_ID"] = f"node-{rank // per_node}"
    os.environ["LOCAL_RANK"] = str(rank % per_node)
    os.environ["LOCAL_WORLD_SIZE"] = str(per_node)


def _groups(world: int, per_node: int) -> Dict[str, Tuple[Any, List[int]]]:
    """Cross-node groups this rank belongs to (name -> (ProcessGroup or None, ranks)); created on
    every rank in one order (``dist.new_group`` is collective over WORLD)."""
    rank = dist.get_rank()
    out: Dict[str, Tuple[Any, List[int]]] = {"world": (None, list(range(world)))}
    if per_node > 1:
        for l in range(per_node):
            ranks = list(range(l, world, per_node))  # one rank per node
            pg = dist.new_group(ranks)
            if rank in ranks:
                out["one_per_node"] = (pg, ranks)
    return out


def _tol(dtype: torch.dtype, parts: List[torch.Tensor]) -> torch.Tensor:
    """Bound on |hierarchical − sequential fold|: a 16-bit result is rounded once inside the node
    and once across (f32 accumulation each time), so 2u·Σ|x| + u of the result; f32/f64 differ by
    the order of the sums: 2·P·eps·Σ|x|; integers are exact."""
    if not dtype.is_floating_point:
        return torch.zeros(parts[0].shape)
    absum = torch.stack([p.double().abs() for p in parts]).sum(0)
    eps = torch.finfo(dtype).eps
    if dtype in (torch.float16, torch.bfloat16):
        return 2 * eps * absum + torch.finfo(dtype).tiny
    return 2 * len(parts) * eps * absum


def _close(got: torch.Tensor, want: torch.Tensor, tol: torch.Tensor) -> bool:
    return bool(((got.double() - want.double()).abs() <= tol).all())


def collectives(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    """allreduce / reduce_scatter / allgather on cross-node groups × dtypes × ops vs the
    sequential fold and gloo; the hierarchical schedule ran; a single-node group is unaffected."""
    per_node = args["per_node"]
    _node_env(rank, per_node)
    import symsched as symm

    fails: List[str] = []
    checked = 0
    seen: List[str] = []
    restore = spy_schedules(seen)
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]
    _groups_seen = _groups(world, per_node)
    for gname, (pg, ranks) in _groups_seen.items():
        p, me = len(ranks), ranks.index(rank)
        for dt in dtypes:
            ops = ["sum", "avg", "max", "min"] if dt.is_floating_point else ["sum", "max", "min"]
            for op in ops:
                for n in args["sizes"]:
                    what = f"{gname} {dt} {op} n={n}"
                    parts = [data(1000 * r + n, n, dt) for r in ranks]
                    ref = reference_reduce(parts, op)
                    tol = _tol(dt, parts)
                    x = parts[me].clone()
                    symm.shmem_allreduce(x, op=op, group=pg)
                    if not _close(x, ref, tol):
                        fails.append(f"allreduce {what}: max err {float((x.double() - ref.double()).abs().max())}")
                    if op in ("sum", "max", "min"):
                        g = parts[me].clone().double() if dt.is_floating_point else parts[me].clone()
                        dist.all_reduce(g, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                                               "min": dist.ReduceOp.MIN}[op], group=pg)
                        if not _close(x, g.to(dt), tol + _tol(dt, parts)):
                            fails.append(f"allreduce {what} differs from gloo")
                    # reduce_scatter: P·n in, n out
                    rparts = [data(2000 * r + n, p * n, dt) for r in ranks]
                    rref = reference_reduce(rparts, op)[me * n:(me + 1) * n]
                    out = torch.empty(n, dtype=dt)
                    symm.shmem_reduce_scatter(out, rparts[me].clone(), op=op, group=pg)
                    if not _close(out, rref, _tol(dt, [q[me * n:(me + 1) * n] for q in rparts])):
                        fails.append(f"reduce_scatter {what}")
                    checked += 2
                # allgather (exact for every dtype)
                n = args["sizes"][-1]
                ag = torch.empty(p * n, dtype=dt)
                symm.shmem_allgather(ag, data(3000 * rank + n, n, dt), group=pg)
                want = torch.cat([data(3000 * r + n, n, dt) for r in ranks])
                if not torch.equal(ag, want):
                    fails.append(f"allgather {gname} {dt} n={n}")
                checked += 1
    # symmetric tensors are staged like ordinary ones
    st = symm.empty(8, torch.float32)
    st.fill_(float(rank + 1))
    symm.shmem_allreduce(st)
    if not torch.equal(st, torch.full((8,), float(sum(range(1, world + 1))))):
        fails.append(f"allreduce of a symmetric tensor: {st.tolist()}")
    symm.free(st)
    restore()
    # what actually ran: every prepared launch of a cross-node group is hierarchical
    from symsched.core import nodes, state

    for gname, (pg, ranks) in _groups_seen.items():
        info = state.resolve_group(pg)
        if not isinstance(info.handle, nodes.CrossNodeHandle):
            fails.append(f"{gname}: not a cross-node group ({type(info.handle).__name__})")
        ran = {p.schedule for p in info.prepared.values() if hasattr(p, "schedule")}
        if ran != {"allreduce_hier", "reduce_scatter_hier", "allgather_hier"}:
            fails.append(f"{gname}: schedules prepared {sorted(ran)}")
    # a group inside one node keeps the single-node schedules
    if per_node > 1:
        node = list(range(rank - rank % per_node, rank - rank % per_node + per_node))
        pgs = [dist.new_group(list(range(b, b + per_node))) for b in range(0, world, per_node)]
        local = pgs[rank // per_node]
        seen.clear()
        restore = spy_schedules(seen)
        x = torch.ones(16)
        symm.shmem_allreduce(x, group=local)
        restore()
        if not torch.equal(x, torch.full((16,), float(len(node)))) or any(s.endswith("_hier") for s in seen):
            fails.append(f"node-local group: {x[:2].tolist()} via {seen}")
    return {"failures": fails, "checked": checked}


def gradients(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    """The differentiable forms on a cross-node group: gradients vs analytic values."""
    per_node = args["per_node"]
    _node_env(rank, per_node)
    import symsched as symm
    import symsched.functional as F

    fails: List[str] = []
    n = 5
    w = float(rank + 1)
    total = float(sum(range(1, world + 1)))
    # all_reduce adjoint: y = Σ x_r; loss_r = (r+1)·Σ y → dx_r = Σ_s (s+1)
    x = torch.full((n,), w, requires_grad=True)
    y = F.all_reduce(x, "sum", None, backward="adjoint")
    (y * w).sum().backward()
    if not torch.equal(y.detach(), torch.full((n,), total)):
        fails.append(f"all_reduce forward {y.tolist()}")
    if not torch.equal(x.grad, torch.full((n,), total)):
        fails.append(f"all_reduce adjoint grad {x.grad.tolist()}")
    # identity backward
    x = torch.full((n,), w, requires_grad=True)
    (F.all_reduce(x, "sum", None, backward="identity") * w).sum().backward()
    if not torch.equal(x.grad, torch.full((n,), w)):
        fails.append(f"all_reduce identity grad {x.grad.tolist()}")
    # all_gather backward = reduce_scatter of the gradients (cross-node dual)
    x = torch.full((n,), w, requires_grad=True)
    g = F.all_gather(x)
    if not torch.equal(g.detach(), torch.cat([torch.full((n,), float(r + 1)) for r in range(world)])):
        fails.append(f"all_gather forward {g.tolist()}")
    (g * w).sum().backward()
    if not torch.equal(x.grad, torch.full((n,), total)):
        fails.append(f"all_gather grad {x.grad.tolist()}")
    # reduce_scatter backward = all_gather of the gradients
    x = torch.arange(world * n, dtype=torch.float32).mul(w).requires_grad_(True)
    y = F.reduce_scatter(x, "sum", None)
    want = torch.arange(world * n, dtype=torch.float32)[rank * n:(rank + 1) * n] * total
    if not torch.equal(y.detach(), want):
        fails.append(f"reduce_scatter forward {y.tolist()}")
    y.backward(torch.full((n,), w))
    if not torch.equal(x.grad, torch.cat([torch.full((n,), float(r + 1)) for r in range(world)])):
        fails.append(f"reduce_scatter grad {x.grad.tolist()}")
    # avg: the gradient of a mean over the group
    x = torch.full((n,), w, requires_grad=True)
    y = F.all_reduce(x, "avg", None, backward="adjoint")
    y.sum().backward()
    if not torch.allclose(y.detach(), torch.full((n,), total / world)):
        fails.append(f"all_reduce avg forward {y.tolist()}")
    return {"failures": fails}


def precision(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    """The RFC precision table across nodes: a narrow wire (the inter-node step sends the wire
    type and accumulates in f32) within the wire's bound; 16-bit data accumulated in f32."""
    per_node = args["per_node"]
    _node_env(rank, per_node)
    import symsched as symm

    fails: List[str] = []
    errs: Dict[str, float] = {}
    n = 4096
    parts = [data(4242 + r, n, torch.float32) for r in range(world)]
    exact = torch.stack([p.double() for p in parts]).sum(0)
    full = parts[rank].clone()
    symm.shmem_allreduce(full)
    absum = torch.stack([p.double().abs() for p in parts]).sum(0)
    f32 = torch.finfo(torch.float32).eps
    if not bool(((full.double() - exact).abs() <= 2 * world * f32 * absum).all()):
        fails.append("f32 allreduce across nodes exceeds the f32 folding bound")
    for wire in (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        t = parts[rank].clone()
        symm.shmem_allreduce(t, low_precision_dtype=wire)
        # what crosses nodes is each node's partial sum rounded once to the wire (relative error
        # u = eps/2, plus half the subnormal spacing), accumulated in f32, rounded once to f32
        fi = torch.finfo(wire)
        u = fi.eps / 2
        bound = u * absum + (world // per_node) * fi.smallest_normal * u + 2 * world * f32 * absum
        err = (t.double() - exact).abs()
        errs[str(wire)] = float((err / exact.abs().clamp_min(1e-3)).median())
        if not bool((err <= bound).all()):
            fails.append(f"{wire} wire: max err {float(err.max())} exceeds the wire bound")
        if wire in (torch.bfloat16, torch.float8_e4m3fn) and torch.equal(t, full):
            fails.append(f"{wire} wire had no effect across nodes")
        gathered = [torch.empty(n) for _ in range(world)]
        dist.all_gather(gathered, t)
        if not all(torch.equal(gathered[0], q) for q in gathered):
            fails.append(f"{wire}: ranks disagree")
    # 16-bit data: f32 accumulation, one rounding per level (node, then across)
    for dt in (torch.float16, torch.bfloat16):
        h = [p.to(dt) for p in parts]
        t = h[rank].clone()
        symm.shmem_allreduce(t)
        want = torch.stack([q.double() for q in h]).sum(0)
        err = (t.double() - want).abs()
        habs = torch.stack([q.double().abs() for q in h]).sum(0)
        errs[f"{dt} data"] = float((err / want.abs().clamp_min(1e-3)).median())
        if not bool((err <= torch.finfo(dt).eps * habs + torch.finfo(dt).tiny).all()):
            fails.append(f"{dt} data: max err {float(err.max())} exceeds two roundings")
    # reduce_scatter with a wire
    rs_in = [data(777 + r, world * n, torch.float32) for r in range(world)]
    mine = slice(rank * n, (rank + 1) * n)
    rs_exact = torch.stack([q[mine].double() for q in rs_in]).sum(0)
    rs_abs = torch.stack([q[mine].double().abs() for q in rs_in]).sum(0)
    out = torch.empty(n)
    symm.shmem_reduce_scatter(out, rs_in[rank].clone(), low_precision_dtype=torch.bfloat16)
    u = torch.finfo(torch.bfloat16).eps / 2
    if not bool(((out.double() - rs_exact).abs() <= u * rs_abs + 2 * world * f32 * rs_abs).all()):
        fails.append("reduce_scatter bf16 wire across nodes exceeds the wire bound")
    return {"failures": fails, "errors": errs}


def refusals(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    """Primitives and other collectives on a cross-node group: a typed error naming the nodes,
    raised before anything is sent; the group still works afterwards."""
    per_node = args["per_node"]
    _node_env(rank, per_node)
    import symsched as symm
    from symsched import SymschedArgumentError

    fails: List[str] = []
    buf = symm.empty(4, torch.float32)
    far = (rank + per_node) % world  # same node-local index, next node

    def expect(what: str, fn: Any) -> None:
        try:
            fn()
        except SymschedArgumentError as exc:
            msg = str(exc)
            if "node-0" not in msg or "node-1" not in msg:
                fails.append(f"{what}: message does not name the nodes: {msg}")
        except Exception as exc:  # noqa: BLE001 - the wrong type is the failure
            fails.append(f"{what}: {type(exc).__name__}: {exc}")
        else:
            fails.append(f"{what}: no error")

    expect("put", lambda: symm.shmem_put(buf, 0, buf, 0, 4, far))
    expect("get", lambda: symm.shmem_get(buf, 0, buf, 0, 4, far))
    sig = symm.empty(1, torch.int64)
    expect("signal", lambda: symm.shmem_signal_op(sig, 0, 1, "add", far))
    expect("alltoall", lambda: symm.shmem_alltoall([torch.ones(1) for _ in range(world)], torch.empty(world),
                                                   [1] * world))
    expect("broadcast", lambda: symm.shmem_broadcast(torch.ones(3), 0))
    # the group is intact: a barrier across nodes and an allreduce still work
    symm.barrier()
    x = torch.ones(3)
    symm.shmem_allreduce(x)
    if not torch.equal(x, torch.full((3,), float(world))):
        fails.append(f"allreduce after refusals: {x.tolist()}")
    symm.free(sig)
    symm.free(buf)
    # nothing shared across nodes: the runtime started only this node's ranks
    from symsched.core import state
    from symsched._native import node_info

    node, local_world, _ = node_info(state.runtime())
    if node != f"node-{rank // per_node}" or local_world != per_node:
        fails.append(f"node info {node!r}, {local_world}")
    return {"failures": fails}


def host_failure(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    """A Python exception in the framework's host step is a typed runtime error of the launch,
    on every rank, within the signal timeout."""
    per_node = args["per_node"]
    _node_env(rank, per_node)
    import symsched as symm
    from symsched import SymschedRuntimeError
    from symsched.torch import hostcoll

    fails: List[str] = []
    x = torch.ones(4)
    symm.shmem_allreduce(x)  # creates the group and its sub-groups
    orig = hostcoll.TorchHostEngine.__call__

    def broken(self: Any, *a: Any, **kw: Any) -> None:
        raise OSError("gloo connection reset (injected)")

    hostcoll.TorchHostEngine.__call__ = broken  # type: ignore[method-assign]
    try:
        symm.shmem_allreduce(torch.ones(4))
    except SymschedRuntimeError as exc:
        msg = str(exc)
        if "OSError" not in msg or "injected" not in msg or "allreduce_hier" not in msg:
            fails.append(f"message: {msg}")
    except Exception as exc:  # noqa: BLE001
        fails.append(f"{type(exc).__name__}: {exc}")
    else:
        fails.append("no error")
    finally:
        hostcoll.TorchHostEngine.__call__ = orig  # type: ignore[method-assign]
    return {"failures": fails}
