"""Fault-injection scenarios (run by ``test_faults.py`` through ``_harness.run_faulty``): each
ends on every rank with a clear error within a bound, and the survivors record what they saw.

Times are ``time.monotonic()`` (``CLOCK_MONOTONIC``: one clock for every process of the
machine), so a survivor can tell how long after the fault it raised."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any, Dict, List

import torch

import symsched as symm
from symsched import functional as F

VICTIM = 1


def _mark(name: str) -> None:
    """Record the time of the fault in the run's directory (read by the survivors)."""
    path = os.path.join(sys.argv[3], name)
    with open(path + ".part", "w") as f:
        f.write(repr(time.monotonic()))
    os.replace(path + ".part", path)


def _marked(name: str) -> float:
    path = os.path.join(sys.argv[3], name)
    for _ in range(200):
        if os.path.exists(path):
            with open(path) as f:
                return float(f.read())
        time.sleep(0.01)
    return float("nan")


def _loop_until_error(rank: int, world: int, steps: int, fault: Any = None) -> Dict[str, Any]:
    """allreduce in a loop; ``fault(i)`` runs before step ``i`` on every rank. Returns the first
    error and when it was raised."""
    x = torch.ones(64)
    for i in range(steps):
        if fault is not None:
            fault(i)
        try:
            symm.shmem_allreduce(x)
        except Exception as e:  # noqa: BLE001 - the error is the result
            return {"error": f"{type(e).__name__}: {e}", "type": type(e).__name__, "at": time.monotonic(),
                    "step": i, "peer_aborted": isinstance(e, symm.PeerAbortedError),
                    "runtime": isinstance(e, symm.SymschedRuntimeError)}
    return {"error": None}


def kill9(rank: int, world: int, args: Any) -> Dict[str, Any]:
    """The victim SIGKILLs itself in the middle of a loop of allreduces."""
    symm.init()
    symm.barrier()

    def fault(i: int) -> None:
        if rank == VICTIM and i == 20:
            _mark("fault")
            os.kill(os.getpid(), signal.SIGKILL)

    out = _loop_until_error(rank, world, 100000, fault)
    out["fault_at"] = _marked("fault")
    out["failures"] = []
    return out


def sigstop(rank: int, world: int, args: Any) -> Dict[str, Any]:
    """The victim SIGSTOPs itself (a stall: alive but silent) in a loop of allreduces."""
    symm.init()
    symm.barrier()

    def fault(i: int) -> None:
        if rank == VICTIM and i == 20:
            _mark("fault")
            os.kill(os.getpid(), signal.SIGSTOP)

    out = _loop_until_error(rank, world, 100000, fault)
    out["fault_at"] = _marked("fault")
    out["failures"] = []
    return out


def exception(rank: int, world: int, args: Any) -> Dict[str, Any]:
    """One rank raises inside a collective — an argument only it gets wrong, then an exception
    of the framework adapter — while its peers wait in theirs; every rank raises at once, then
    the group is reset by the next collective call and works again."""
    symm.init()
    fails: List[str] = []
    out: Dict[str, Any] = {"cases": {}}
    from symsched.core import coll

    def bad_arg() -> None:
        x = torch.ones(8, 8)
        # only the victim passes a non-contiguous tensor: it fails validation, its peers launch
        symm.shmem_allreduce(x.t() if rank == VICTIM else x)

    def adapter_raises() -> None:
        x = torch.ones(6, 4, requires_grad=True)
        if rank == VICTIM:
            real = coll._fw.contiguous

            def boom(t: Any) -> Any:
                raise IndexError("injected adapter failure")

            coll._fw.contiguous = boom
            try:
                F.all_to_all(x)
            finally:
                coll._fw.contiguous = real
        else:
            F.all_to_all(x)

    # every rank loads the plans of both calls first: a rank that fails before loading a plan
    # its peers loaded leaves the group's signal-slot registry diverged, which the runtime then
    # reports on every rank as a SIGNAL SLOT MISMATCH at the group's next barrier or launch
    # (docs/reliability.md, "What an abort does not repair")
    symm.shmem_allreduce(torch.ones(8, 8))
    F.all_to_all(torch.ones(6, 4, requires_grad=True)).sum().backward()
    for name, fn in (("bad argument", bad_arg), ("adapter exception", adapter_raises)):
        symm.barrier()  # everyone left the previous call (and an aborted WORLD is reset)
        if rank != VICTIM:
            time.sleep(0.0)
        else:
            time.sleep(0.3)  # the peers are waiting in their call when the victim fails
        t0 = time.monotonic()
        try:
            fn()
            fails.append(f"{name}: no error")
            continue
        except Exception as e:  # noqa: BLE001
            took = time.monotonic() - t0
            case = {"type": type(e).__name__, "error": str(e), "at": time.monotonic(), "took": took}
        if rank == VICTIM:
            _mark(f"fault-{name}")
            want = "SymschedArgumentError" if name == "bad argument" else "IndexError"
            if case["type"] != want:
                fails.append(f"{name}: the failing rank raised {case['type']}: {case['error']}")
        else:
            fault_at = _marked(f"fault-{name}")
            case["after_fault"] = case["at"] - fault_at
            if case["type"] != "PeerAbortedError":
                fails.append(f"{name}: a peer raised {case['type']}: {case['error']}")
            elif f"rank {VICTIM}" not in case["error"] or (
                    "injected adapter failure" not in case["error"] and "contiguous" not in case["error"]):
                fails.append(f"{name}: the peer's error does not name rank {VICTIM} and its error: {case['error']}")
        out["cases"][name] = case
        # the group works again after its next collective call (the reset) on every member
        y = torch.full((4,), float(rank + 1))
        try:
            symm.shmem_allreduce(y)
            if not torch.equal(y, torch.full((4,), float(sum(range(1, world + 1))))):
                fails.append(f"{name}: allreduce after the reset gave {y.tolist()}")
        except Exception as e:  # noqa: BLE001
            fails.append(f"{name}: the group did not recover: {type(e).__name__}: {e}")
    # a one-sided op on the aborted group raises at once, naming the collective call to make
    symm.barrier()
    buf = symm.empty(4, torch.float32)
    if rank == VICTIM:
        try:
            symm.shmem_allreduce(torch.ones(4, 4).t())
        except symm.SymschedArgumentError:
            pass
    else:
        try:
            symm.shmem_allreduce(torch.ones(16))
        except symm.PeerAbortedError:
            pass
    try:
        symm.shmem_put(buf, 0, torch.ones(4), 0, 4, (rank + 1) % world)
        fails.append("a put on an aborted group was accepted")
    except symm.PeerAbortedError as e:
        if "collective" not in str(e):
            fails.append(f"unclear one-sided refusal: {e}")
    symm.barrier()  # resets
    symm.shmem_put(buf, 0, torch.ones(4), 0, 4, (rank + 1) % world)
    symm.barrier()
    out["failures"] = fails
    return out


def heap_exhaustion(rank: int, world: int, args: Any) -> Dict[str, Any]:
    """Allocating past the heap raises a clear error on every rank and loses nothing."""
    symm.init()
    fails: List[str] = []
    keep = symm.empty(1024, torch.float32)
    keep.fill_(float(rank))
    before = symm.symm_memory_stats()
    for what, shape in (("one huge block", (1 << 30,)), ("past the rest", (before["free"] // 4 + 1024,))):
        t0 = time.monotonic()
        try:
            symm.empty(shape, torch.float32)
            fails.append(f"{what}: allocation past the heap succeeded")
        except symm.SymschedRuntimeError as e:
            if "out of symmetric memory" not in str(e) or "requested" not in str(e):
                fails.append(f"{what}: unclear error {e}")
        if time.monotonic() - t0 > 5:
            fails.append(f"{what}: took {time.monotonic() - t0:.1f} s")
    after = symm.symm_memory_stats()
    if after["allocated"] != before["allocated"]:
        fails.append(f"a failed allocation leaked: {before} -> {after}")
    # many small blocks until the heap is full, then all freed
    blocks = []
    try:
        while True:
            blocks.append(symm.empty(1 << 20, torch.uint8))
    except symm.SymschedRuntimeError as e:
        if "out of symmetric memory" not in str(e):
            fails.append(f"filling: unclear error {e}")
    for b in reversed(blocks):
        symm.free(b)
    if symm.symm_memory_stats()["allocated"] != before["allocated"]:
        fails.append("freeing every block did not return the heap")
    x = keep.clone()
    symm.shmem_allreduce(keep)
    if not torch.equal(keep, torch.full((1024,), float(sum(range(world))))):
        fails.append(f"allreduce after exhaustion: {keep[:4].tolist()} (was {x[:4].tolist()})")
    symm.free(keep)
    return {"failures": fails, "blocks": len(blocks)}


def use_after_free(rank: int, world: int, args: Any) -> Dict[str, Any]:
    """A freed tensor and views of it raise StaleTensorError on every rank, at once."""
    symm.init()
    fails: List[str] = []
    t = symm.empty(64, torch.float32)
    view = t[8:16]
    t.fill_(1.0)
    symm.shmem_allreduce(t)
    symm.free(t)
    for what, fn in (("the tensor", lambda: symm.shmem_allreduce(t)), ("a view", lambda: symm.shmem_allreduce(view)),
                     ("functional", lambda: F.all_gather(t)), ("put", lambda: symm.shmem_put(view, 0, view, 0, 1, 0))):
        symm.barrier()
        t0 = time.monotonic()
        try:
            fn()
            fails.append(f"{what}: accepted after free")
        except symm.StaleTensorError:
            pass
        except Exception as e:  # noqa: BLE001
            fails.append(f"{what}: {type(e).__name__}: {e}")
        if time.monotonic() - t0 > 5:
            fails.append(f"{what}: took {time.monotonic() - t0:.1f} s")
    symm.barrier()
    return {"failures": fails}


def mismatch(rank: int, world: int, args: Any) -> Dict[str, Any]:
    """Ranks that disagree on a collective's element count, dtype, op or group raise
    AgreementError on every rank, naming each rank's value, and nothing is written."""
    symm.init()
    agreement = symm.AgreementError  # AttributeError until the agreement lands
    fails: List[str] = []
    kind = args
    x = torch.full((100 if rank == 0 else 120,) if kind == "size" else (100,), float(rank + 1),
                   dtype=torch.float64 if (kind == "dtype" and rank == 0) else torch.float32)
    before = x.clone()
    t0 = time.monotonic()
    try:
        if kind == "op":
            symm.shmem_allreduce(x, "max" if rank == 0 else "sum")
        elif kind == "group":
            symm.shmem_allreduce(x, group=[0, 1] if rank < 2 else list(range(world)))
        else:
            symm.shmem_allreduce(x)
        fails.append(f"{kind}: disagreeing ranks were not refused")
    except agreement as e:
        if time.monotonic() - t0 > 5:
            fails.append(f"{kind}: took {time.monotonic() - t0:.1f} s")
        if not torch.equal(x, before):
            fails.append(f"{kind}: data was written before the refusal")
        if "rank" not in str(e):
            fails.append(f"{kind}: the error names no rank: {e}")
    return {"failures": fails}
