"""Helpers shared by the scenarios (run inside rank processes)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.distributed as dist

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def make_groups(world: int) -> Dict[str, Tuple[object, List[int]]]:
    """Every group shape of the test matrix this rank belongs to: name -> (ProcessGroup, ranks).

    ``dist.new_group`` is collective over WORLD, so every rank creates every group in one order.
    """
    rank = dist.get_rank()
    shapes: Dict[str, List[List[int]]] = {"world": [list(range(world))]}
    if world >= 2 and world % 2 == 0:
        h = world // 2
        shapes["halves"] = [list(range(h)), list(range(h, world))]
        shapes["strided"] = [list(range(0, world, 2)), list(range(1, world, 2))]
    shapes["singleton"] = [[r] for r in range(world)]
    out: Dict[str, Tuple[object, List[int]]] = {"world_none": (None, list(range(world)))}
    for name, lists in shapes.items():
        for ranks in lists:
            pg = dist.new_group(ranks)
            if rank in ranks:
                out[name] = (pg, ranks)
    return out


def data(seed: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(dtype)
    return torch.randint(-1000, 1000, (n,), generator=g, dtype=torch.int64).to(dtype)


def reference_reduce(parts: List[torch.Tensor], op: str) -> torch.Tensor:
    """Sequential fold in rank order, accumulating 16-bit floats in f32 and rounding once."""
    dtype = parts[0].dtype
    acc_t = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    acc = parts[0].to(acc_t).clone()
    for p in parts[1:]:
        q = p.to(acc_t)
        if op in ("sum", "avg"):
            acc = acc + q
        elif op == "max":
            acc = torch.maximum(acc, q)
        else:
            acc = torch.minimum(acc, q)
    if op == "avg":
        acc = acc / len(parts)
    return acc.to(dtype)


def spy_native_hits(on_launch: Callable[[Any], None]) -> Callable[[], None]:
    """Call ``on_launch(prepared)`` for every launch of the native cached calls
    (``_coll._hits``: the all-reduce, all-gather and reduce-scatter), as the Python cached path
    is watched through ``_coll._fire``. Drops the launches kept before (they would run unseen).
    Returns the function that removes the spy."""
    from symsched.core import coll as _coll

    hits = _coll._TensorHits

    class SpyHits:
        def __init__(self) -> None:
            self.hits = hits()

        def add(self, *a):  # type: ignore[no-untyped-def]
            return self.hits.add(*a)

        def __len__(self) -> int:
            return len(self.hits)

        def run(self, *a):  # type: ignore[no-untyped-def]
            done = self.hits.run(*a)
            if done is not False and type(done) is not tuple:
                on_launch(done)
            return done

    def restore() -> None:
        _coll._TensorHits = hits
        _coll._hits.clear()

    if hits is not None:
        _coll._TensorHits = SpyHits
        _coll._hits.clear()
    return restore


def spy_schedules(seen: List[str]) -> Callable[[], None]:
    """Record the schedule of every launch into ``seen``: the full path (``_launch.run``) and the
    cached launches of forwards and backwards (``_coll._fire``). Returns the function that
    removes the spies."""
    from symsched.core import coll as _coll
    from symsched.core import launch as _launch

    run, fire = _launch.run, _coll._fire

    def spy_run(op_name, info, schedule, *a, **kw):  # type: ignore[no-untyped-def]
        seen.append(schedule)
        return run(op_name, info, schedule, *a, **kw)

    def spy_fire(op_name, group, prepared, *a, **kw):  # type: ignore[no-untyped-def]
        seen.append(prepared.schedule)
        return fire(op_name, group, prepared, *a, **kw)

    restore_hits = spy_native_hits(lambda prepared: seen.append(prepared.schedule))

    def restore() -> None:
        _launch.run, _coll._fire = run, fire
        restore_hits()

    _launch.run, _coll._fire = spy_run, spy_fire
    return restore


class ScheduleChecks:
    """The schedules launched since the last check, against the expected ones: ``expect`` adds
    a failure to ``fails`` when they differ; ``bad_knob`` checks that a malformed value of a
    schedule-choosing knob makes ``call`` raise an error naming it. Spies on every launch until
    ``restore``."""

    def __init__(self, fails: List[str]) -> None:
        self.fails = fails
        self.seen: List[str] = []
        self.restore = spy_schedules(self.seen)

    def expect(self, what: str, want: List[str]) -> None:
        if self.seen != want:
            self.fails.append(f"{what}: schedules {self.seen}, expected {want}")
        self.seen.clear()

    def bad_knob(self, env: str, call: Callable[[], None]) -> None:
        import os

        import symsched as symm

        os.environ[env] = "lots"
        try:
            call()
            self.fails.append(f"a bad {env} did not raise")
        except symm.SymschedArgumentError as e:
            if env not in str(e):
                self.fails.append(f"bad {env} error does not name it: {e}")
        finally:
            del os.environ[env]
        self.seen.clear()
