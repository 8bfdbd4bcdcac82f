"""python -m symsched.perftest --framework mindspore runs and prints the table with an mccl column
(a smoke test: speed goals live in the perftest's own output, never in timed tests)."""

import os
import subprocess
import sys

import pytest


@pytest.mark.timeout(300)
def test_perftest_mindspore_table(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-m", "symsched.perftest", "--framework", "mindspore", "--nproc", "2",
                          "--ops", "allreduce,allgather,reduce_scatter,alltoall", "--min", "8", "--max", "4K",
                          "--factor", "512", "--batches", "1", "--warmup", "1"],
                         capture_output=True, text=True, timeout=280, cwd=tmp_path,
                         env=dict(os.environ, GLOG_v="3", PYTHONPATH=os.path.dirname(here)))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert any("mccl us" in ln for ln in lines), out.stdout
    rows = [ln.split() for ln in lines if ln.strip().split(" ")[0] in ("allreduce", "allgather", "reduce_scatter",
                                                                       "alltoall")]
    assert {r[0] for r in rows} == {"allreduce", "allgather", "reduce_scatter", "alltoall"}, out.stdout
    for r in rows:
        assert float(r[4]) > 0  # symsched µs
        if r[0] in ("allreduce", "allgather"):
            assert r[9].endswith("x"), r  # mccl has these ops on CPU: a ratio
        else:
            assert r[8] == "-", r  # no mccl kernel on CPU
