"""Logs (DFX): at DEBUG every collective launch of the Python path leaves exactly one record
(schedule, group, bytes, duration, outcome), cached calls included; files and redirected stdout
never carry colour codes."""

from __future__ import annotations

import glob
import os
import re
from typing import Any, Dict, List

import _harness
import pytest

ANSI = "\x1b["
CALLS = {"allreduce": 5, "allgather": 3, "broadcast": 2, "reduce_scatter": 2}


def launches(rank: int, world: int, args: Any) -> Dict[str, Any]:
    import torch

    import symsched as symm

    symm.init()
    symm.barrier()
    x = torch.ones(16)
    for _ in range(CALLS["allreduce"]):
        symm.shmem_allreduce(x)  # the first on the full path, then cached
    for _ in range(CALLS["allgather"]):
        symm.shmem_allgather(torch.empty(16 * world), x)
    for _ in range(CALLS["broadcast"]):
        symm.shmem_broadcast(x, 0)
    for _ in range(CALLS["reduce_scatter"]):
        symm.shmem_reduce_scatter(torch.empty(4), torch.ones(4 * world))
    symm.barrier()
    return {"failures": []}


def _records(text: str) -> List[str]:
    return [line for line in text.splitlines() if re.search(r"\blaunch\b", line) and "schedule" in line
            and "duration_us" in line]


@pytest.mark.timeout(120)
def test_debug_logs_one_record_per_launch(tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir(mode=0o700)
    os.chmod(logdir, 0o700)
    _harness.ok(_harness.run("test_logs", "launches", 2, timeout=100,
                             env={"HYPER_PARALLEL_SHMEM_LOG_LEVEL": "DEBUG", "SYMSCHED_LOG_DIR": str(logdir)}))
    files = sorted(glob.glob(str(logdir / "symsched-rank*-pid*.log")))
    assert len(files) == 2, files
    for path in files:
        text = open(path, encoding="utf-8", errors="replace").read()
        assert ANSI not in text, f"colour codes in {path}"
        recs = _records(text)
        by_schedule: Dict[str, int] = {}
        for line in recs:
            m = re.search(r"schedule[=:]\s*\"?([A-Za-z0-9_<> ]+?)\"?[ ,}]", line)
            assert m, line
            by_schedule[m.group(1)] = by_schedule.get(m.group(1), 0) + 1
            for field in ("group", "bytes", "duration_us", "outcome"):
                assert field in line, (field, line)
        allreduce = sum(n for s, n in by_schedule.items() if s.startswith("allreduce"))
        allgather = sum(n for s, n in by_schedule.items() if s.startswith("allgather"))
        assert allreduce == CALLS["allreduce"], (path, by_schedule)
        assert allgather == CALLS["allgather"], (path, by_schedule)
        assert by_schedule.get("broadcast_push", 0) == CALLS["broadcast"], (path, by_schedule)
        rs = sum(n for s, n in by_schedule.items() if s.startswith("reduce_scatter"))
        assert rs == CALLS["reduce_scatter"], (path, by_schedule)


def launches_to_stdout(rank: int, world: int, args: Any) -> Dict[str, Any]:
    """The launches with records on stdout, which the harness redirects to ``rank<R>.log``."""
    import sys

    launches(rank, world, args)
    sys.stdout.flush()
    with open(os.path.join(sys.argv[3], f"rank{rank}.log"), encoding="utf-8", errors="replace") as f:
        text = f.read()
    fails = []
    if ANSI in text:
        fails.append("colour codes in redirected stdout")
    n = len([r for r in _records(text) if "allreduce" in r])
    if n != CALLS["allreduce"]:
        fails.append(f"{n} allreduce launch records on stdout, want {CALLS['allreduce']}")
    return {"failures": fails}


@pytest.mark.timeout(120)
def test_stdout_logs_redirected_to_a_file_have_no_colour():
    # the harness redirects each rank's stdout to a file: not a terminal
    _harness.ok(_harness.run("test_logs", "launches_to_stdout", 2, timeout=100,
                             env={"HYPER_PARALLEL_SHMEM_LOG_LEVEL": "DEBUG", "SHMEM_LOG_TO_STDOUT": "1"}))
