"""The perftest harness runs end to end on tiny sizes and prints its table."""

import os
import subprocess
import sys

import pytest


@pytest.mark.timeout(150)
def test_perftest_smoke():
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "symsched.perftest", "--nproc", "2", "--ops", "allreduce,alltoall",
                          "--min", "8", "--max", "1K", "--factor", "16", "--iters", "3", "--no-mpi", "--no-extras"],
                         capture_output=True, text=True, timeout=140, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "symsched us" in out.stdout and out.stdout.count("allreduce") >= 2, out.stdout
