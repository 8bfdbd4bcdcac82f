"""The cached backward path (``symsched.core.rules._duals``): a repeated backward goes straight to
the prepared dual launch, gives the full path's gradients bit for bit, and still handles an
incoming gradient the forward's validation cannot vouch for.

- all_gather, reduce_scatter (sum, avg), all_reduce (adjoint sum/avg/max, identity sum/avg),
  copy_to_group and all_to_all (uneven splits that change between calls, so the cached launch
  must take each call's transposed counts) in float32, float64 and bfloat16: the first backward
  takes the full path (``_launch.run``), the next ones the cached launch (``_coll._fire``),
  and every gradient equals the exact analytic one (integer-valued data, so sums are exact).
- A non-contiguous incoming gradient (``y.sum()``'s expanded one, a strided view) is copied and
  gives the same gradient on the cached path.
- An incoming gradient of another dtype, size, device or layout, passed straight to
  ``grad_fn.apply``, is refused with a ``SymschedArgumentError`` naming the incoming gradient,
  before anything is sent (every rank refuses alike, so nobody waits on a half-started launch).

The scenario functions run inside the rank processes (``_harness.run`` imports this module).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import pytest

import _harness


def _ints(seed: int, n: int, dtype: Any) -> Any:
    """Small integer values in ``dtype``: every sum and every halving below is exact."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(-8, 8, (n,), generator=g, dtype=torch.int64).to(dtype) * 2


def cached(rank: int, world: int, args: Any) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist

    import symsched as symm
    import symsched.functional as F
    from symsched.core import coll as _coll
    from symsched.core import launch as _launch
    from symsched.core import rules as _autograd

    symm.init()
    fails: List[str] = []
    P = world
    calls = {"full": 0, "cached": 0}
    run, fire = _launch.run, _coll._fire

    def spy_run(op_name, *a, **kw):  # type: ignore[no-untyped-def]
        if op_name.endswith(".backward"):
            calls["full"] += 1
        return run(op_name, *a, **kw)

    def spy_fire(op_name, *a, **kw):  # type: ignore[no-untyped-def]
        if op_name.endswith(".backward"):
            calls["cached"] += 1
        return fire(op_name, *a, **kw)

    _launch.run, _coll._fire = spy_run, spy_fire

    def grads(what: str, make: Callable[[], Any], x: Any, gy: Callable[[Any], Any], want: Any) -> None:
        """Three backwards of fresh graphs: the first on the full path, the others cached; each
        gradient must equal ``want`` exactly."""
        _autograd._duals.clear()
        for it in range(3):
            calls["full"] = calls["cached"] = 0
            y = make()
            (gx,) = torch.autograd.grad(y, x, gy(y))
            if gx.dtype != want.dtype or gx.shape != want.shape or not torch.equal(gx, want):
                fails.append(f"{what} it={it}: gradient {gx.flatten()[:6]} expected {want.flatten()[:6]}")
            path = (calls["full"], calls["cached"])
            if path != ((1, 0) if it == 0 else (0, 1)):
                fails.append(f"{what} it={it}: (full, cached) launches {path}, expected "
                             f"{(1, 0) if it == 0 else (0, 1)}")

    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        n = 12
        xs = [_ints(10 + r, n, dtype) for r in range(P)]
        ws = [_ints(20 + r, P * n, dtype) for r in range(P)]
        x = xs[rank].clone().view(3, 4).requires_grad_()
        big = _ints(30 + rank, P * n, dtype).view(P * 3, 4).requires_grad_()
        w = ws[rank].view(P * 3, 4)
        # all_gather: grad x = sum over ranks of their block `rank` of the output gradient
        want = sum(v[rank * n:(rank + 1) * n] for v in ws).view(3, 4)
        grads(f"all_gather {dtype}", lambda: F.all_gather(x), x, lambda y: w, want)
        # ... with a stride-0 incoming gradient (from y.sum()) and a strided one
        grads(f"all_gather {dtype} expanded grad", lambda: F.all_gather(x), x,
              lambda y: torch.ones((), dtype=dtype).expand(y.shape), torch.full((3, 4), float(P), dtype=dtype))
        wide = torch.stack([w, w], dim=-1)  # wide[..., 0] is w, with strides (8, 2)
        grads(f"all_gather {dtype} strided grad", lambda: F.all_gather(x), x, lambda y: wide[..., 0], want)
        # reduce_scatter: grad big = every rank's output gradient, concatenated
        cs = [_ints(40 + r, n, dtype) for r in range(P)]
        grads(f"reduce_scatter {dtype}", lambda: F.reduce_scatter(big), big, lambda y: cs[rank].view(3, 4),
              torch.cat(cs).view(P * 3, 4))
        if P in (2, 4):  # dividing by P is exact
            grads(f"reduce_scatter avg {dtype}", lambda: F.reduce_scatter(big, "avg"), big,
                  lambda y: cs[rank].view(3, 4), (torch.cat(cs) / P).view(P * 3, 4))
        # all_reduce adjoint: grad x = sum over ranks of their output gradients
        gs = [_ints(50 + r, n, dtype).view(3, 4) for r in range(P)]
        total = sum(gs)
        grads(f"all_reduce adjoint {dtype}", lambda: F.all_reduce(x, backward="adjoint"), x,
              lambda y: gs[rank], total)
        grads(f"all_reduce adjoint {dtype} expanded grad", lambda: F.all_reduce(x, backward="adjoint"), x,
              lambda y: torch.ones((), dtype=dtype).expand(y.shape), torch.full((3, 4), float(P), dtype=dtype))
        if P in (2, 4):
            grads(f"all_reduce adjoint avg {dtype}", lambda: F.all_reduce(x, "avg", backward="adjoint"), x,
                  lambda y: gs[rank], total / P)
        grads(f"copy_to_group {dtype}", lambda: F.copy_to_group(x), x, lambda y: gs[rank], total)
        # all_reduce adjoint max: the summed gradient goes to the winning rank's element
        distinct = (torch.arange(n, dtype=torch.float64).view(3, 4) * P + ((torch.arange(n).view(3, 4) + rank) % P)
                    ).to(dtype).requires_grad_()
        winner = ((torch.arange(n).view(3, 4) + rank) % P) == P - 1
        grads(f"all_reduce adjoint max {dtype}", lambda: F.all_reduce(distinct, "max", backward="adjoint"),
              distinct, lambda y: gs[rank], total * winner)
        # identity: no launch, the incoming gradient itself (or 1/P of it)
        _autograd._duals.clear()
        for it in range(2):
            calls["full"] = calls["cached"] = 0
            (gx,) = torch.autograd.grad(F.all_reduce(x, backward="identity"), x, gs[rank])
            if not torch.equal(gx, gs[rank]) or calls != {"full": 0, "cached": 0}:
                fails.append(f"all_reduce identity {dtype} it={it}: {gx.flatten()[:6]} launches {calls}")
        # all_to_all, uneven splits that change between calls: rank r sends (r + j + it) % 3 + 1
        # rows to rank j
        _autograd._duals.clear()
        for it in range(4):
            calls["full"] = calls["cached"] = 0
            ins = [(rank + j + it) % 3 + 1 for j in range(P)]
            outs = [(r + rank + it) % 3 + 1 for r in range(P)]
            xa = _ints(60 + rank + it, sum(ins) * 2, dtype).view(sum(ins), 2).requires_grad_()
            ga = [_ints(70 + r + it, sum((r + j + it) % 3 + 1 for j in range(P)) * 2, dtype).view(-1, 2)
                  for r in range(P)]
            y = F.all_to_all(xa, outs, ins)
            (gx,) = torch.autograd.grad(y, xa, ga[rank])
            # rank j's gradient block from me holds the rows I sent it, in j's received order
            want_rows = []
            for j in range(P):
                off = sum((r + j + it) % 3 + 1 for r in range(rank))
                want_rows.append(ga[j][off:off + ins[j]])
            want = torch.cat(want_rows)
            if not torch.equal(gx, want):
                fails.append(f"all_to_all {dtype} it={it}: gradient differs")
            path = (calls["full"], calls["cached"])
            if path != ((1, 0) if it == 0 else (0, 1)):
                fails.append(f"all_to_all {dtype} it={it}: (full, cached) launches {path}")

    # a gradient the forward did not validate, straight to grad_fn.apply on the cached path
    x = torch.ones(6, requires_grad=True)
    big = torch.ones(P * 6, requires_grad=True)
    cases = [
        ("all_gather", lambda: F.all_gather(x), x, P * 6),
        ("reduce_scatter", lambda: F.reduce_scatter(big), big, 6),
        ("all_reduce adjoint", lambda: F.all_reduce(x, backward="adjoint"), x, 6),
        ("copy_to_group", lambda: F.copy_to_group(x), x, 6),
        ("all_to_all", lambda: F.all_to_all(big), big, P * 6),
    ]
    for what, make, inp, m in cases:
        y = make()
        torch.autograd.grad(y, inp, torch.ones_like(y))  # fills the cache
        for bad_what, bad in (("float64", torch.ones(m, dtype=torch.float64)), ("size", torch.ones(m + 1)),
                              ("meta", torch.ones(m, device="meta")), ("sparse", torch.ones(m).to_sparse()),
                              ("not a tensor", 1.0)):
            calls["full"] = calls["cached"] = 0
            try:
                make().grad_fn.apply(bad)
                fails.append(f"{what}: a {bad_what} incoming gradient did not raise")
            except symm.SymschedArgumentError as e:
                if "incoming gradient" not in str(e):
                    fails.append(f"{what} {bad_what}: unclear message {e}")
            except Exception as e:  # noqa: BLE001 - the wrong type is the failure reported
                fails.append(f"{what} {bad_what}: raised {type(e).__name__}: {e}")
            if calls != {"full": 0, "cached": 0}:
                fails.append(f"{what} {bad_what}: launched {calls} before refusing")
    # a cached launch still runs after the refusals (no rank was left half-way)
    (gx,) = torch.autograd.grad(F.all_gather(x), x, torch.ones(P * 6))
    if not torch.equal(gx, torch.full((6,), float(P))):
        fails.append(f"all_gather after refusals: {gx}")
    _launch.run, _coll._fire = run, fire
    dist.barrier()
    return {"failures": fails}


@pytest.mark.timeout(200)
@pytest.mark.parametrize("world", [2, 3])
def test_cached_backward_exact_and_checked(world: int) -> None:
    _harness.ok(_harness.run("test_autograd_fast", "cached", world, timeout=180))
