"""The pull all-gather (``examples/allgather_pull.sched``): which schedule each all-gather takes,
and that results and gradients stay exact through it.

- ``shmem_allgather`` into a private output runs ``allgather_pull`` (at or above
  ``SYMSCHED_ALLGATHER_PULL_MIN_BYTES``), into a symmetric output ``allgather_push``; both on the
  full path and on cached (fast-path) calls.
- The backward of ``reduce_scatter`` (plain and low-precision wire forward) runs
  ``allgather_pull``, one of the all-gather duals the compiler verified for the forward schedule;
  the gradient equals the concatenation of every rank's output gradient, bit for bit.
- The threshold variable, and a group of one, send both back to ``allgather_push``.
- Below ``SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES`` (``one_shot``) every all-gather with a peer runs
  ``allgather_one_shot`` (``examples/allgather_one_shot.sched``), private or symmetric output,
  full and cached path, exact; at the threshold push/pull again. The push/pull cases above run
  with the one-shot threshold at 0.

The scenario functions run inside the rank processes (``_harness.run`` imports this module).
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

import _harness


def _spy() -> List[str]:
    """Record the schedule of every launch, on the full path and on both cached paths."""
    from symsched.core import rules as _autograd
    from _common import spy_schedules

    seen: List[str] = []
    spy_schedules(seen)
    # cached backward launches skip `_launch.run`: start every case on the full path
    _autograd._duals.clear()
    return seen


def choice(rank: int, world: int, args: Any) -> Dict[str, Any]:
    import os

    import torch
    import torch.distributed as dist

    import symsched as symm
    import symsched.functional as F
    from symsched.core import coll as _coll
    from symsched.core import rules as _autograd
    from _common import DTYPES, data

    symm.init()
    fails: List[str] = []
    seen = _spy()
    P = world
    # the push/pull choice: no all-gather is small enough for the one-shot schedule
    os.environ["SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES"] = "0"

    def expect(what: str, want: List[str]) -> None:
        if seen != want:
            fails.append(f"{what}: schedules {seen}, expected {want}")
        seen.clear()

    # shmem_allgather: private output -> pull, symmetric output -> push; twice (fast path).
    for dtype in DTYPES:
        for n in (1, 7, 4099):
            x = data(10 * rank + n, n, dtype)
            want = torch.cat([data(10 * r + n, n, dtype) for r in range(P)])
            out = torch.full((P * n,), 3, dtype=dtype)
            for _ in range(2):
                out.fill_(3)
                symm.shmem_allgather(out, x)
                if not torch.equal(out, want):
                    fails.append(f"private allgather {dtype} n={n} differs")
            expect(f"private allgather {dtype} n={n}", ["allgather_pull"] * 2)
            sout = symm.empty(P * n, dtype)
            sout.fill_(3)
            # peers write into a symmetric output: none may start before it is filled, and
            # refilling it between calls would race with a fast peer's next call
            dist.barrier()
            for _ in range(2):
                symm.shmem_allgather(sout, x)
                if not torch.equal(sout, want):
                    fails.append(f"symmetric allgather {dtype} n={n} differs")
            expect(f"symmetric allgather {dtype} n={n}", ["allgather_push"] * 2)
            symm.free(sout)
    # a private output whose input is symmetric still pulls (the input is staged by the schedule)
    sx = symm.empty(5, torch.float32)
    sx.copy_(data(rank, 5, torch.float32))
    out = torch.empty(P * 5)
    symm.shmem_allgather(out, sx)
    if not torch.equal(out, torch.cat([data(r, 5, torch.float32) for r in range(P)])):
        fails.append("symmetric input, private output differs")
    expect("symmetric input, private output", ["allgather_pull"])
    symm.free(sx)

    # reduce_scatter backward: a verified all-gather dual, the pull one; exact gradient.
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        for wire in (None, torch.bfloat16):
            if wire is not None and dtype != torch.float32:
                continue
            n = 1000
            x = data(100 + rank, P * n, dtype).requires_grad_()
            w = data(200 + rank, n, dtype)
            y = F.reduce_scatter(x, "sum", None, wire) if wire is not None else F.reduce_scatter(x)
            seen.clear()
            (gx,) = torch.autograd.grad(y, x, w)
            want = torch.cat([data(200 + r, n, dtype) for r in range(P)])
            if not torch.equal(gx, want):
                fails.append(f"reduce_scatter backward {dtype} wire={wire} differs")
            expect(f"reduce_scatter backward {dtype} wire={wire}", ["allgather_pull"])
            # the cached backward launch is the same pull plan
            y = F.reduce_scatter(x, "sum", None, wire) if wire is not None else F.reduce_scatter(x)
            torch.autograd.grad(y, x, w)
            cached = [p.schedule for k, (_, p) in _autograd._duals.items() if k[3] == "allgather"]
            if cached != ["allgather_pull"]:
                fails.append(f"cached reduce_scatter backward {dtype} wire={wire}: {cached}")
            _autograd._duals.clear()
            seen.clear()

    # a group of one has no peer to pull from: push (one local copy) for both
    singles = [dist.new_group([r]) for r in range(P)]
    one = singles[rank]
    out = torch.empty(4)
    symm.shmem_allgather(out, torch.arange(4.0), one)
    if not torch.equal(out, torch.arange(4.0)):
        fails.append("singleton allgather differs")
    expect("singleton allgather", ["allgather_push"])
    x = torch.ones(4, requires_grad=True)
    y = F.reduce_scatter(x, "sum", one)
    seen.clear()
    torch.autograd.grad(y, x, torch.ones(4))
    expect("singleton reduce_scatter backward", ["allgather_push"])

    # the threshold sends both back to push
    os.environ["SYMSCHED_ALLGATHER_PULL_MIN_BYTES"] = str(1 << 40)
    try:
        out = torch.empty(P * 8)
        symm.shmem_allgather(out, torch.ones(8))
        expect("allgather above the threshold", ["allgather_push"])
        x = torch.ones(P * 8, requires_grad=True)
        y = F.reduce_scatter(x)
        seen.clear()
        torch.autograd.grad(y, x, torch.ones(8))
        expect("reduce_scatter backward above the threshold", ["allgather_push"])
    finally:
        del os.environ["SYMSCHED_ALLGATHER_PULL_MIN_BYTES"]
    os.environ["SYMSCHED_ALLGATHER_PULL_MIN_BYTES"] = "lots"
    try:
        symm.shmem_allgather(torch.empty(P * 3), torch.ones(3))
        fails.append("a bad SYMSCHED_ALLGATHER_PULL_MIN_BYTES did not raise")
    except symm.SymschedArgumentError as e:
        if "SYMSCHED_ALLGATHER_PULL_MIN_BYTES" not in str(e):
            fails.append(f"bad threshold message: {e}")
    finally:
        del os.environ["SYMSCHED_ALLGATHER_PULL_MIN_BYTES"]
    del os.environ["SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES"]
    _coll._fast.clear()
    dist.barrier()
    return {"failures": fails}


def one_shot(rank: int, world: int, args: Any) -> Dict[str, Any]:
    import os

    import torch
    import torch.distributed as dist

    import symsched as symm
    from symsched.core import coll as _coll
    from _common import data

    symm.init()
    fails: List[str] = []
    seen = _spy()
    P = world

    def expect(what: str, want: List[str]) -> None:
        if seen != want:
            fails.append(f"{what}: schedules {seen}, expected {want}")
        seen.clear()

    # below the default threshold (32 KiB of output): one-shot for a private and a symmetric
    # output alike, on the full path and then cached; the second kind of output with the same
    # shapes hits the first one's cached launch (the key leaves the kind out below the threshold)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int32):
        for n in (1, 7, 1000):
            x = data(10 * rank + n, n, dtype)
            want = torch.cat([data(10 * r + n, n, dtype) for r in range(P)])
            out = torch.full((P * n,), 3, dtype=dtype)
            sout = symm.empty(P * n, dtype)
            for kind, o in (("private", out), ("symmetric", sout)):
                for _ in range(2):
                    o.fill_(3)
                    symm.shmem_allgather(o, x)
                    if not torch.equal(o, want):
                        fails.append(f"{kind} one-shot allgather {dtype} n={n} differs")
            expect(f"one-shot allgather {dtype} n={n}", ["allgather_one_shot"] * 4)
            symm.free(sout)
    # many calls back to back: the landing slots are reused only after every peer copied out
    x = data(rank, 64, torch.float32)
    want = torch.cat([data(r, 64, torch.float32) for r in range(P)])
    out = torch.empty(P * 64)
    for i in range(200):
        symm.shmem_allgather(out, x + i)
        if not torch.equal(out, want + i):
            fails.append(f"back-to-back one-shot allgather {i} differs")
            break
    seen.clear()
    # at the threshold the kind of output decides again
    n = 64
    os.environ["SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES"] = str(P * n * 4)
    try:
        x = data(rank, n, torch.float32)
        out, sout = torch.empty(P * n), symm.empty(P * n, torch.float32)
        dist.barrier()
        for o in (out, out, sout, sout):
            symm.shmem_allgather(o, x)
            dist.barrier()  # peers put into the symmetric output in place
        expect("allgather at the one-shot threshold", ["allgather_pull"] * 2 + ["allgather_push"] * 2)
        symm.free(sout)
        os.environ["SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES"] = str(P * n * 4 + 1)
        symm.shmem_allgather(out, x)
        expect("allgather just below the one-shot threshold", ["allgather_one_shot"])
    finally:
        del os.environ["SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES"]
    # a group of one has no peer: push (one local copy)
    singles = [dist.new_group([r]) for r in range(P)]
    out = torch.empty(4)
    symm.shmem_allgather(out, torch.arange(4.0), singles[rank])
    expect("singleton allgather below the one-shot threshold", ["allgather_push"])
    os.environ["SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES"] = "some"
    try:
        symm.shmem_allgather(torch.empty(P * 3), torch.ones(3))
        fails.append("a bad SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES did not raise")
    except symm.SymschedArgumentError as e:
        if "SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES" not in str(e):
            fails.append(f"bad one-shot threshold message: {e}")
    finally:
        del os.environ["SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES"]
    _coll._fast.clear()
    dist.barrier()
    return {"failures": fails}


@pytest.mark.timeout(200)
@pytest.mark.parametrize("world", [2, 3])
def test_allgather_schedule_choice_and_exact_results(world: int) -> None:
    _harness.ok(_harness.run("test_allgather_pull", "choice", world, timeout=180))


@pytest.mark.timeout(200)
@pytest.mark.parametrize("world", [2, 3])
def test_allgather_one_shot_below_its_threshold(world: int) -> None:
    _harness.ok(_harness.run("test_allgather_pull", "one_shot", world, timeout=180))
