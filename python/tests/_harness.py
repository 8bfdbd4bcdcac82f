"""Multi-process test harness: run a scenario function on N ranks of a gloo job.

Each rank is a subprocess (``python -m _worker``) in its own process group, so a timeout kills
the whole tree; results come back as pickles in a private temp dir; a failing rank's traceback
is part of the assertion message.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(module: str, func: str, world: int, timeout: float = 120.0, env: Optional[Dict[str, str]] = None,
        args: Any = None) -> List[Any]:
    """Run ``module.func(rank, world, args)`` on ``world`` ranks; return each rank's result."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="symsched-test-") as tmp:
        with open(os.path.join(tmp, "args.pkl"), "wb") as f:
            pickle.dump(args, f)
        procs = []
        logs = []
        for r in range(world):
            e = dict(os.environ)
            e.update({"RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r),
                      "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                      "SYMMETRIC_MEMORY_HEAP_SIZE": e.get("SYMMETRIC_MEMORY_HEAP_SIZE", str(256 << 20)),
                      "SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS": e.get("SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS", "30000"),
                      "OMP_NUM_THREADS": "1", "PYTHONPATH": HERE + os.pathsep + e.get("PYTHONPATH", "")})
            e.update(env or {})
            log = open(os.path.join(tmp, f"rank{r}.log"), "w+")
            logs.append(log)
            procs.append(subprocess.Popen([sys.executable, "-m", "_worker", module, func, tmp], cwd=HERE, env=e,
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + timeout
        timed_out = False
        try:
            while any(p.poll() is None for p in procs):
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                if any(p.poll() not in (None, 0) for p in procs):
                    # one rank failed: give the others a moment to report, then stop them
                    time.sleep(2.0)
                    break
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait()
        out = []
        for log in logs:
            log.seek(0)
            out.append(log.read())
            log.close()
        codes = [p.returncode for p in procs]
        if timed_out or any(c != 0 for c in codes):
            detail = "\n".join(f"--- rank {r} (exit {codes[r]}) ---\n{out[r][-6000:]}" for r in range(world))
            raise AssertionError(f"{module}.{func} on {world} ranks {'TIMED OUT' if timed_out else 'failed'}:\n"
                                 f"{detail}")
        results = []
        for r in range(world):
            with open(os.path.join(tmp, f"result{r}.pkl"), "rb") as f:
                results.append(pickle.load(f))
        return results


def ok(results: List[Any], show: Optional[int] = None) -> List[Any]:
    """Assert that no rank of a ``run`` reported failures (showing at most ``show`` of them per
    rank); return the results for further checks."""
    for r, x in enumerate(results):
        assert not x["failures"], f"rank {r}: {x['failures'][:show]}"
    return results


def run_faulty(module: str, func: str, world: int, timeout: float = 120.0, env: Optional[Dict[str, str]] = None,
               args: Any = None, settle: float = 0.0) -> Dict[str, Any]:
    """Run ``module.func(rank, world, args)`` on ``world`` ranks where some rank is expected to
    die or stall: never asserts, always ends every rank it started (by process group).

    Waits until every rank has exited or written its result (``result<R>.pkl``; a stalled rank
    never does), then ``settle`` seconds more, then kills whatever is left. Returns ``codes``
    (exit codes; None for a rank that had to be killed), ``results`` (None where absent),
    ``logs``, ``pids`` and ``timed_out``."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="symsched-test-") as tmp:
        with open(os.path.join(tmp, "args.pkl"), "wb") as f:
            pickle.dump(args, f)
        procs, logs = [], []
        for r in range(world):
            e = dict(os.environ)
            e.update({"RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r),
                      "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                      "SYMMETRIC_MEMORY_HEAP_SIZE": e.get("SYMMETRIC_MEMORY_HEAP_SIZE", str(256 << 20)),
                      "SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS": e.get("SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS", "30000"),
                      "OMP_NUM_THREADS": "1", "PYTHONPATH": HERE + os.pathsep + e.get("PYTHONPATH", "")})
            e.update(env or {})
            log = open(os.path.join(tmp, f"rank{r}.log"), "w+")
            logs.append(log)
            procs.append(subprocess.Popen([sys.executable, "-m", "_faulty_worker", module, func, tmp], cwd=HERE,
                                          env=e, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + timeout
        timed_out = False
        done = lambda r: procs[r].poll() is not None or os.path.exists(os.path.join(tmp, f"result{r}.pkl"))  # noqa: E731
        try:
            while not all(done(r) for r in range(world)):
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                time.sleep(0.05)
            # a rank that wrote its result exits right after: give it that moment (bounded)
            end = time.monotonic() + settle
            exiting = time.monotonic() + 10.0
            while any(p.poll() is None for p in procs) and (
                    time.monotonic() < end or (time.monotonic() < exiting and any(
                        procs[r].poll() is None and os.path.exists(os.path.join(tmp, f"result{r}.pkl"))
                        for r in range(world)))):
                time.sleep(0.05)
        finally:
            codes: List[Optional[int]] = []
            for p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait()
                    codes.append(None)
                else:
                    codes.append(p.returncode)
        out = []
        for log in logs:
            log.seek(0)
            out.append(log.read())
            log.close()
        results: List[Any] = []
        for r in range(world):
            path = os.path.join(tmp, f"result{r}.pkl")
            if os.path.exists(path):
                with open(path, "rb") as f:
                    results.append(pickle.load(f))
            else:
                results.append(None)
        return {"codes": codes, "results": results, "logs": out, "pids": [p.pid for p in procs],
                "timed_out": timed_out}
