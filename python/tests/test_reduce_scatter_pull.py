"""The pull reduce-scatter (``examples/reduce_scatter_pull.sched``): which schedule each
reduce_scatter takes, that its results equal the push form's bit for bit (both fold in rank
order), and that its backward is the push form's (both declare the same all-gather duals).

- With a symmetric input of at least ``SYMSCHED_REDUCE_SCATTER_PULL_MIN_BYTES`` bytes (default
  8 KiB) ``shmem_reduce_scatter`` runs ``reduce_scatter_pull``, below it and with an ordinary
  input ``reduce_scatter_push``; on the full path and on cached calls.
- Raising the threshold sends the same call back to the push form, with an identical result; a
  malformed value is refused.

The scenario functions run inside the rank processes (``_harness.run`` imports this module).
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

import _harness

PULL = "reduce_scatter_pull"
PUSH = "reduce_scatter_push"
ENV = "SYMSCHED_REDUCE_SCATTER_PULL_MIN_BYTES"


def choice(rank: int, world: int, args: Any) -> Dict[str, Any]:
    import os

    import torch
    import torch.distributed as dist

    import symsched as symm
    import symsched.functional as F
    from _common import ScheduleChecks, data, reference_reduce
    from symsched.core.native import native

    symm.init()
    fails: List[str] = []
    checks = ScheduleChecks(fails)
    expect = checks.expect

    def case(m: int, dtype: torch.dtype, want_schedule: str) -> torch.Tensor:
        """reduce_scatter of world·m elements, ``want_schedule`` for a symmetric input (an
        ordinary one always pushes); returns this rank's block."""
        parts = [data(11 * r + m, world * m, dtype) for r in range(world)]
        ref = reference_reduce(parts, "sum")[rank * m:(rank + 1) * m]
        out = torch.empty(m, dtype=dtype)
        for _ in range(2):
            symm.shmem_reduce_scatter(out, parts[rank].clone())
            if not torch.equal(out, ref):
                fails.append(f"private reduce_scatter {dtype} m={m} differs from the rank-order fold")
        expect(f"private reduce_scatter {dtype} m={m}", [PUSH] * 2)
        sin, sout = symm.empty(world * m, dtype), symm.empty(m, dtype)
        for _ in range(2):
            # peers read a symmetric input in place: refill only once every rank is done with it
            dist.barrier()
            sin.copy_(parts[rank])
            dist.barrier()
            symm.shmem_reduce_scatter(sout, sin)
            if not torch.equal(sout, ref):
                fails.append(f"symmetric reduce_scatter {dtype} m={m} differs from the rank-order fold")
        expect(f"symmetric reduce_scatter {dtype} m={m}", [want_schedule] * 2)
        symm.free(sout)
        symm.free(sin)
        return out.clone()

    # default threshold (8 KiB of input): 10 001 f32 per rank's block pull, 3 do not; odd sizes
    big = {dtype: case(10_001, dtype, PULL) for dtype in (torch.float32, torch.float64)}
    case(3, torch.float32, PUSH)
    # the threshold sends the large message back to push: the same bits
    os.environ[ENV] = str(1 << 40)
    try:
        again = case(10_001, torch.float32, PUSH)
        if not torch.equal(again, big[torch.float32]):
            fails.append("push and pull reduce_scatter results differ")
    finally:
        del os.environ[ENV]
    checks.bad_knob(ENV, lambda: symm.shmem_reduce_scatter(torch.empty(4), torch.ones(4 * world)))

    # both forms declare the same duals, so the backward does not depend on the form that ran
    if native().schedule_duals(PULL, world, {}) != native().schedule_duals(PUSH, world, {}):
        fails.append("reduce_scatter_pull and reduce_scatter_push declare different duals")
    # and a differentiable call on a symmetric input above the threshold runs the pull form
    # forward, its gradient the all-gather of the output's gradient
    m = 10_001
    x = symm.empty(world * m, torch.float32)
    x.copy_(data(5 * rank, world * m, torch.float32))
    dist.barrier()
    x.requires_grad_()
    checks.seen.clear()
    y = F.reduce_scatter(x, "sum", None)
    if checks.seen[:1] != [PULL]:
        fails.append(f"a differentiable reduce_scatter of a symmetric input ran {checks.seen}, expected {PULL} "
                     "first")
    checks.restore()
    g = data(7 * rank + 1, m, torch.float32)
    y.backward(g)
    gathered = torch.cat([data(7 * r + 1, m, torch.float32) for r in range(world)])
    if not torch.equal(x.grad, gathered):
        fails.append("reduce_scatter backward (pull forward) is not the all-gather of the gradients")
    dist.barrier()
    symm.free(x)
    return {"failures": fails}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_reduce_scatter_pull_choice_and_results(world: int) -> None:
    _harness.ok(_harness.run("test_reduce_scatter_pull", "choice", world, timeout=240))
