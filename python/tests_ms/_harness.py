"""Multi-process harness of the MindSpore suite: run a scenario on N ranks started by
``symsched launch`` or by ``msrun`` (mccl on CPU, 127.0.0.1).

Each run gets a private temp dir (the working directory of every rank, so MindSpore's
``rank_*/`` diagnostics and msrun's logs land there and go with it), a wall-clock bound that
kills the launcher's whole session (msrun's scheduler and workers, or symsched launch's ranks),
and per-rank pickled results. Nothing forks after MindSpore ran an op: ranks are fresh
interpreters started by the launcher. The host runtime's segments are memfds (no names to
leak); its rendezvous directory is removed by the runtime or at ``finalize``.
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
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "_ms_worker.py")

SYMSCHED, MSRUN = "symsched", "msrun"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def symsched_bin() -> str:
    """The ``symsched`` CLI: ``SYMSCHED_BIN``, else this checkout's release or debug build (it
    only starts processes: either will do)."""
    explicit = os.environ.get("SYMSCHED_BIN")
    if explicit:
        return explicit
    for target in (os.environ.get("CARGO_TARGET_DIR"), os.path.join(ROOT, "target")):
        for profile in ("release", "debug"):
            path = os.path.join(target or "", profile, "symsched")
            if target and os.access(path, os.X_OK):
                return path
    raise AssertionError("the symsched CLI is not built: run `cargo build --release -p symsched-cli` "
                         "(or set SYMSCHED_BIN)")


def _base_env(extra: Optional[Dict[str, str]]) -> Dict[str, str]:
    e = dict(os.environ)
    venv_bin = os.path.dirname(sys.executable)
    # msrun starts `python` from PATH: it must be this venv's
    e["PATH"] = venv_bin + os.pathsep + e.get("PATH", "")
    e["PYTHONPATH"] = HERE + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("SYMMETRIC_MEMORY_HEAP_SIZE", str(64 << 20))
    e.setdefault("SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS", "30000")
    e["OMP_NUM_THREADS"] = "1"
    e["GLOG_v"] = e.get("GLOG_v", "3")  # MindSpore: errors only on stderr
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT", "RANK_ID", "RANK_SIZE",
              "MS_ROLE", "MS_WORKER_NUM", "MS_SCHED_PORT", "MS_SCHED_HOST", "MS_NODE_ID", "SYMSCHED_JOB_ID",
              "SYMSCHED_RENDEZVOUS_DIR"):
        e.pop(k, None)
    e.update(extra or {})
    return e


def _logs(tmp: str, launcher: str, world: int, launcher_out: str) -> List[str]:
    if launcher == SYMSCHED:
        # symsched launch prefixes every line with [rank k]
        per = [[] for _ in range(world)]
        for line in launcher_out.splitlines():
            for r in range(world):
                tag = f"[rank {r}] "
                if line.startswith(tag):
                    per[r].append(line[len(tag):])
        return ["\n".join(p) for p in per]
    out = []
    for r in range(world):
        path = os.path.join(tmp, "logs", f"worker_{r}.log")
        try:
            with open(path, errors="replace") as f:
                out.append("\n".join(ln for ln in f.read().splitlines() if "[INFO]" not in ln))
        except OSError:
            out.append("(no log)")
    return out


def run(module: str, func: str, world: int, launcher: str = SYMSCHED, timeout: float = 150.0,
        env: Optional[Dict[str, str]] = None, args: Any = None, mccl: bool = False) -> List[Any]:
    """Run ``module.func(rank, world, args)`` on ``world`` ranks; return each rank's result.

    ``mccl=True`` initialises MindSpore's communication under ``symsched launch`` too (through
    its TCP store); under ``msrun`` it is always initialised."""
    with tempfile.TemporaryDirectory(prefix="symsched-ms-test-") as tmp:
        with open(os.path.join(tmp, "args.pkl"), "wb") as f:
            pickle.dump(args, f)
        e = _base_env(env)
        worker = [WORKER, module, func, tmp, "mccl" if (mccl or launcher == MSRUN) else "-"]
        if launcher == SYMSCHED:
            cmd = [symsched_bin(), "launch", "-n", str(world), "--timeout", str(int(timeout)), "--",
                   sys.executable] + worker
        elif launcher == MSRUN:
            cmd = [os.path.join(os.path.dirname(sys.executable), "msrun"), "--worker_num", str(world),
                   "--local_worker_num", str(world), "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                   "--log_dir", os.path.join(tmp, "logs"), "--join", "True", "--cluster_time_out",
                   str(int(timeout))] + worker
        else:
            raise ValueError(f"unknown launcher {launcher!r}")
        log_path = os.path.join(tmp, "launcher.log")
        with open(log_path, "w+") as log:
            p = subprocess.Popen(cmd, cwd=tmp, env=e, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + timeout + 15
            timed_out = False
            try:
                while p.poll() is None:
                    if time.monotonic() > deadline:
                        timed_out = True
                        break
                    time.sleep(0.1)
            finally:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait()
            log.seek(0)
            launcher_out = log.read()
        missing = [r for r in range(world) if not os.path.exists(os.path.join(tmp, f"result{r}.pkl"))]
        if timed_out or p.returncode != 0 or missing:
            per = _logs(tmp, launcher, world, launcher_out)
            detail = "\n".join(f"--- rank {r} ---\n{per[r][-5000:]}" for r in range(world))
            raise AssertionError(
                f"{module}.{func} on {world} ranks ({launcher}) "
                f"{'TIMED OUT' if timed_out else f'failed (exit {p.returncode}, no result from {missing})'}:\n"
                f"{detail}\n--- launcher ---\n{launcher_out[-3000:]}")
        results = []
        for r in range(world):
            with open(os.path.join(tmp, f"result{r}.pkl"), "rb") as f:
                results.append(pickle.load(f))
        return results


def ok(results: List[Any], show: Optional[int] = 20) -> List[Any]:
    """Assert that no rank reported failures; return the results."""
    for r, x in enumerate(results):
        assert not x["failures"], f"rank {r}: {x['failures'][:show]}"
    return results
