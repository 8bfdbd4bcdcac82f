"""Fault injection (bounded; part of the default suite): kill -9 and SIGSTOP of one rank, an
exception inside a collective on one rank, ranks that disagree, heap exhaustion, use after
free. Each must end on every rank with a clear error within a bound, and leave nothing behind:
no process, no rendezvous directory, no heap memfd held by this process, nothing new in
/dev/shm.

The bounds are far below the timeouts the faults would otherwise run into (the signal timeout
is 30 s in these runs unless a scenario sets it), so a pass shows the fault was *detected*; the
measured latencies are printed (``-s``) rather than asserted tightly, as the machine is noisy.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Set

import _harness
import pytest


VICTIM = 1


def _shm() -> Set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:  # pragma: no cover
        return set()


def _memfds() -> List[str]:
    """The symsched memfds this (pytest) process holds: none may leak into it."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/memfd:") and "symsched" in target:
            out.append(target)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _run(func: str, world: int, timeout: float, env: Optional[Dict[str, str]] = None, args: Any = None,
         settle: float = 0.0) -> Dict[str, Any]:
    shm_before = _shm()
    out = _harness.run_faulty("scen_faults", func, world, timeout=timeout, env=env, args=args, settle=settle)
    # nothing left behind, whatever happened
    assert not any(_alive(p) for p in out["pids"]), f"rank processes left: {out['pids']}"
    for r in out["results"]:
        if r is not None and r.get("rendezvous_dir"):
            assert not os.path.exists(r["rendezvous_dir"]), f"rendezvous dir left: {r['rendezvous_dir']}"
    new = {n for n in _shm() - shm_before if "symsched" in n}
    assert not new, f"/dev/shm entries left: {sorted(new)}"
    assert not _memfds(), _memfds()
    return out


def _detail(out: Dict[str, Any]) -> str:
    return "\n".join(f"--- rank {r} (exit {c}) ---\n{log[-3000:]}"
                     for r, (c, log) in enumerate(zip(out["codes"], out["logs"])))


def _survivors(out: Dict[str, Any], world: int) -> List[Dict[str, Any]]:
    res = [out["results"][r] for r in range(world) if r != VICTIM]
    assert all(r is not None for r in res), _detail(out)
    return res


@pytest.mark.timeout(90)
def test_kill9_of_one_rank_fails_every_peer_within_seconds():
    world = 3
    out = _run("kill9", world, timeout=60)
    assert out["codes"][VICTIM] == -9, _detail(out)
    for r in _survivors(out, world):
        assert r["error"], _detail(out)
        assert f"rank {VICTIM}" in r["error"] and ("died" in r["error"] or "exited" in r["error"]), r["error"]
        took = r["at"] - r["fault_at"]
        print(f"kill -9: a peer raised {took * 1000:.0f} ms after the kill ({r['type']})")
        assert took < 10, f"{took:.1f} s after the kill: {r['error']}"


@pytest.mark.timeout(90)
def test_sigstop_of_one_rank_times_out_naming_it():
    world = 3
    timeout_ms = 3000
    out = _run("sigstop", world, timeout=60, env={"SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS": str(timeout_ms)})
    assert out["codes"][VICTIM] is None  # stopped until the runner ended it
    for r in _survivors(out, world):
        assert r["error"] and r["runtime"], _detail(out)
        # the first survivor to time out names the silent rank; the others learn it from its abort
        assert f"{VICTIM}" in r["error"].split("never signalled")[-1] or f"rank {VICTIM}" in r["error"] \
            or "timed out" in r["error"], r["error"]
        took = r["at"] - r["fault_at"]
        print(f"SIGSTOP: a peer raised {took * 1000:.0f} ms after the stall ({r['type']})")
        assert took < timeout_ms / 1000 + 10, f"{took:.1f} s after the stall"
    assert any("timed out" in r["error"] for r in _survivors(out, world)), _detail(out)


@pytest.mark.timeout(120)
def test_exception_inside_a_collective_fails_every_peer_at_once():
    world = 3
    out = _run("exception", world, timeout=100)
    assert all(c == 0 for c in out["codes"]), _detail(out)
    for r, res in enumerate(out["results"]):
        assert not res["failures"], f"rank {r}: {res['failures']}"
    for r, res in enumerate(out["results"]):
        if r == VICTIM:
            continue
        for name, case in res["cases"].items():
            print(f"{name}: rank {r} raised {case['after_fault'] * 1000:.0f} ms after rank {VICTIM} failed")
            # the contract is 100 ms; the bound here leaves room for a loaded 2-core machine
            # while staying far below the 30 s signal timeout the peers would otherwise wait
            assert case["after_fault"] < 2.0, (name, case)


@pytest.mark.timeout(90)
def test_heap_exhaustion_is_a_clear_error_on_every_rank():
    out = _run("heap_exhaustion", 2, timeout=60, env={"SYMMETRIC_MEMORY_HEAP_SIZE": str(64 << 20)})
    assert all(c == 0 for c in out["codes"]), _detail(out)
    for r, res in enumerate(out["results"]):
        assert not res["failures"], f"rank {r}: {res['failures']}"


@pytest.mark.timeout(90)
def test_use_after_free_is_refused_on_every_rank():
    out = _run("use_after_free", 2, timeout=60)
    assert all(c == 0 for c in out["codes"]), _detail(out)
    for r, res in enumerate(out["results"]):
        assert not res["failures"], f"rank {r}: {res['failures']}"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", ["size", "dtype", "op", "group"])
def test_disagreeing_ranks_raise_agreement_error(kind):
    out = _run("mismatch", 3, timeout=60, env={"SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS": "3000"}, args=kind)
    assert all(c == 0 for c in out["codes"]), _detail(out)
    for r, res in enumerate(out["results"]):
        assert not res["failures"], f"rank {r}: {res['failures']}"
