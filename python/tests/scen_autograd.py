"""Scenario: gradients of every differentiable collective, vs analytic values, gloo and
torch.distributed.nn.functional."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as tdnn

import symsched as symm
import symsched.functional as F
from _common import data, make_groups


def _close(a, b, what, failures, tol=1e-5):
    if a is None or b is None or a.shape != b.shape or not torch.allclose(a, b, rtol=tol, atol=tol):
        failures.append(f"{what}: got {None if a is None else a.flatten()[:4]} expected {b.flatten()[:4]}")


def grads(rank: int, world: int, args) -> dict:
    symm.init()
    failures: list = []
    groups = make_groups(world)
    shapes = [k for k in ("world_none", "halves", "strided", "singleton") if k in groups]
    for gname in shapes:
        pg, ranks = groups[gname]
        me, p = ranks.index(rank), len(ranks)
        n = 6
        ws = [data(500 + r, p * n, torch.float64) for r in ranks]  # per-rank loss weights
        xs = [data(900 + r, n, torch.float64) for r in ranks]

        # all_gather <-> reduce_scatter(sum)
        x = xs[me].clone().requires_grad_()
        (F.all_gather(x, pg) * ws[me]).sum().backward()
        _close(x.grad, sum(w[me * n:(me + 1) * n] for w in ws), f"all_gather grad {gname}", failures)

        # reduce_scatter(sum) <-> all_gather
        big = data(300 + rank, p * n, torch.float64).requires_grad_()
        (F.reduce_scatter(big, "sum", pg) * ws[me][:n]).sum().backward()
        _close(big.grad, torch.cat([w[:n] for w in ws]), f"reduce_scatter grad {gname}", failures)
        big.grad = None
        (F.reduce_scatter(big, "avg", pg) * ws[me][:n]).sum().backward()
        _close(big.grad, torch.cat([w[:n] for w in ws]) / p, f"reduce_scatter avg grad {gname}", failures)

        # all_reduce: adjoint vs torch.distributed.nn.functional.all_reduce on gloo; identity
        w = ws[me][:n]
        x = xs[me].clone().requires_grad_()
        (F.all_reduce(x, "sum", pg, backward="adjoint") * w).sum().backward()
        xr = xs[me].clone().requires_grad_()
        (tdnn.all_reduce(xr, group=pg if pg is not None else dist.group.WORLD) * w).sum().backward()
        _close(x.grad, xr.grad, f"all_reduce adjoint vs tdnn {gname}", failures)
        x.grad = None
        (F.all_reduce(x, "sum", pg, backward="identity") * w).sum().backward()
        _close(x.grad, w, f"all_reduce identity {gname}", failures)
        x.grad = None
        (F.all_reduce(x, "avg", pg, backward="adjoint") * w).sum().backward()
        _close(x.grad, sum(v[:n] for v in ws) / p, f"all_reduce avg adjoint {gname}", failures)
        # max routes to the winner (lowest rank on ties)
        x.grad = None
        (F.all_reduce(x, "max", pg, backward="adjoint") * w).sum().backward()
        stacked = torch.stack(xs)
        winner = stacked.argmax(0)  # first maximal index = lowest rank
        _close(x.grad, torch.where(winner == me, sum(v[:n] for v in ws), torch.zeros(n, dtype=torch.float64)),
               f"all_reduce max routing {gname}", failures)
        x.grad = None
        (F.reduce_from_group(x, pg) * w).sum().backward()
        _close(x.grad, w, f"reduce_from_group {gname}", failures)
        x.grad = None
        (F.copy_to_group(x, pg) * w).sum().backward()
        _close(x.grad, sum(v[:n] for v in ws), f"copy_to_group {gname}", failures)

        # all_to_all with uneven splits: grad = alltoall of the weights with splits transposed (gloo)
        ins = [me + j + 1 for j in range(p)]
        outs = [j + me + 1 for j in range(p)]
        xa = data(40 + rank, sum(ins), torch.float64).requires_grad_()
        wy = data(60 + rank, sum(outs), torch.float64)
        (F.all_to_all(xa, outs, ins, pg) * wy).sum().backward()
        ref = torch.empty(sum(ins), dtype=torch.float64)
        if p > 1:
            dist.all_to_all_single(ref, wy, output_split_sizes=ins, input_split_sizes=outs, group=pg)
        else:
            ref = wy.clone()
        _close(xa.grad, ref, f"all_to_all grad {gname}", failures)

        # broadcast: grad on src = sum of weights, zero elsewhere
        xb = xs[me].clone().requires_grad_()
        (F.broadcast(xb, 0, pg) * w).sum().backward()
        _close(xb.grad, sum(v[:n] for v in ws) if me == 0 else torch.zeros(n, dtype=torch.float64),
               f"broadcast grad {gname}", failures)

        # send/recv pair 0 -> 1
        if p >= 2 and me in (0, 1):
            if me == 0:
                xs0 = xs[0].clone().requires_grad_()
                tok = F.send(xs0, 1, pg)
                tok.sum().backward()
                _close(xs0.grad, ws[1][:n], f"send grad {gname}", failures)
            else:
                y = F.recv((n,), torch.float64, 0, pg)
                _close(y.detach(), xs[0], f"recv value {gname}", failures)
                (y * ws[1][:n]).sum().backward()

        # in-place RFC forms: autograd flows through them too
        xi = xs[me].clone().requires_grad_()
        t = xi * 1.0
        symm.shmem_allreduce(t, group=pg)  # identity backward (RFC)
        (t * w).sum().backward()
        _close(xi.grad, w, f"shmem_allreduce in-place identity {gname}", failures)

        # MC2 vs separate
        a = data(70 + rank, 4 * 3, torch.float64).view(4, 3).requires_grad_()
        b = data(80 + rank, 3 * 5, torch.float64).view(3, 5).requires_grad_()
        wc = data(90 + rank, p * 4 * 5, torch.float64).view(p * 4, 5)
        g, c = F.all_gather_matmul(a, b, pg)
        (c * wc).sum().backward()
        a2 = a.detach().clone().requires_grad_()
        b2 = b.detach().clone().requires_grad_()
        (((F.all_gather(a2, pg)) @ b2) * wc).sum().backward()
        _close(c.detach(), (F.all_gather(a.detach(), pg) @ b.detach()), f"all_gather_matmul value {gname}", failures)
        _close(a.grad, a2.grad, f"all_gather_matmul grad a {gname}", failures)
        _close(b.grad, b2.grad, f"all_gather_matmul grad b {gname}", failures)

        am = data(110 + rank, p * 2 * 3, torch.float64).view(p * 2, 3).requires_grad_()
        bm = data(120 + rank, 3 * 4, torch.float64).view(3, 4).requires_grad_()
        wm = data(130 + rank, 2 * 4, torch.float64).view(2, 4)
        (F.matmul_reduce_scatter(am, bm, "sum", pg) * wm).sum().backward()
        am2 = am.detach().clone().requires_grad_()
        bm2 = bm.detach().clone().requires_grad_()
        (F.reduce_scatter(am2 @ bm2, "sum", pg) * wm).sum().backward()
        _close(am.grad, am2.grad, f"matmul_reduce_scatter grad a {gname}", failures)
        _close(bm.grad, bm2.grad, f"matmul_reduce_scatter grad b {gname}", failures)

    # reduce_scatter(max) backward raises clearly
    big = data(1, world * 3, torch.float64).requires_grad_()
    try:
        F.reduce_scatter(big, "max").sum().backward()
        failures.append("reduce_scatter max backward did not raise")
    except RuntimeError as e:
        if "max" not in str(e):
            failures.append(f"unclear max backward error: {e}")
    return {"failures": failures}
