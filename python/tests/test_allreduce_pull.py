"""The pull two-shot allreduce (``examples/allreduce_two_shot_pull.sched``): which schedule each
allreduce takes, and that its results equal the push two-shot's bit for bit.

- At or above ``SYMSCHED_ALLREDUCE_PULL_MIN_BYTES`` (default 0: wherever two-shot is used)
  ``shmem_allreduce`` runs ``allreduce_two_shot_pull``, below it ``allreduce_two_shot`` (and
  one-shot below ``SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES``, 4 KiB); on the full path and on cached (fast-path) calls, for private and
  symmetric tensors.
- Raising the threshold sends the same call back to the push two-shot, with an identical result;
  a malformed value is refused.

The scenario functions run inside the rank processes (``_harness.run`` imports this module).
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

import _harness

PULL = "allreduce_two_shot_pull"
PUSH = "allreduce_two_shot"
ENV = "SYMSCHED_ALLREDUCE_PULL_MIN_BYTES"


def choice(rank: int, world: int, args: Any) -> Dict[str, Any]:
    import os

    import torch
    import torch.distributed as dist

    import symsched as symm
    from _common import ScheduleChecks, data, reference_reduce

    symm.init()
    fails: List[str] = []
    checks = ScheduleChecks(fails)
    expect = checks.expect

    results: Dict[Any, torch.Tensor] = {}

    def case(n: int, dtype: torch.dtype, want_schedule: str) -> None:
        parts = [data(7 * r + n, n, dtype) for r in range(world)]
        ref = reference_reduce(parts, "sum")
        t = torch.empty(n, dtype=dtype)
        for _ in range(2):
            t.copy_(parts[rank])
            symm.shmem_allreduce(t)
            if not torch.equal(t, ref):
                fails.append(f"private allreduce {dtype} n={n} differs from the rank-order fold")
        expect(f"private allreduce {dtype} n={n}", [want_schedule] * 2)
        results[(n, dtype)] = t.clone()
        s = symm.empty(n, dtype)
        for _ in range(2):
            # peers read a symmetric `x` in place: refill only once every rank is done with it
            dist.barrier()
            s.copy_(parts[rank])
            dist.barrier()
            symm.shmem_allreduce(s)
            if not torch.equal(s, ref):
                fails.append(f"symmetric allreduce {dtype} n={n} differs from the rank-order fold")
        expect(f"symmetric allreduce {dtype} n={n}", [want_schedule] * 2)
        symm.free(s)

    # default threshold: every two-shot size pulls (300 001 f32 = 1.2 MB, 70 001 f32 = 280 KB,
    # sizes that do not split evenly)
    for n in (300_001, 70_001):
        for dtype in (torch.float32, torch.float64):
            case(n, dtype, PULL)
    # a threshold of 512 KiB: push below, pull at or above
    os.environ[ENV] = str(512 << 10)
    try:
        case(70_001, torch.float32, PUSH)
        case(300_001, torch.float32, PULL)
    finally:
        del os.environ[ENV]

    # the threshold sends the large message back to push: the same bits
    os.environ[ENV] = str(1 << 40)
    try:
        n = 300_001
        t = data(7 * rank + n, n, torch.float32)
        symm.shmem_allreduce(t)
        expect("allreduce above a raised threshold", [PUSH])
        if not torch.equal(t, results[(n, torch.float32)]):
            fails.append("push and pull two-shot results differ")
    finally:
        del os.environ[ENV]
    checks.bad_knob(ENV, lambda: symm.shmem_allreduce(torch.ones(1 << 18)))
    checks.restore()
    return {"failures": fails}


@pytest.mark.parametrize("world", [2, 3])
def test_allreduce_pull_choice_and_results(world: int) -> None:
    _harness.ok(_harness.run("test_allreduce_pull", "choice", world, timeout=300))
