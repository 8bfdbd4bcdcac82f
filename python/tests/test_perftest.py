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


@pytest.mark.timeout(150)
def test_perftest_reports_the_copy_bound_at_the_largest_size():
    """From 1 MiB on, the largest size of each collective gets a line against the copy bound
    measured in the same run, with the ratio of the two times."""
    out = subprocess.run([sys.executable, "-m", "symsched.perftest", "--nproc", "2", "--ops",
                          "allreduce,reduce_scatter", "--min", "1M", "--max", "1M", "--iters", "3", "--batches", "2",
                          "--no-mpi", "--no-extras"], capture_output=True, text=True, timeout=140, env=dict(os.environ))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [ln for ln in out.stdout.splitlines() if "copy bound" in ln]
    assert [ln.split()[0] for ln in lines] == ["allreduce", "reduce_scatter"], out.stdout
    for ln in lines:
        symsched_us, bound_us, ratio = float(ln.split()[4]), float(ln.split()[8]), float(ln.split()[-3][:-1])
        # the three numbers are printed rounded: compare the ratio relative to its size
        assert symsched_us > 0 and bound_us > 0 and abs(ratio * bound_us / symsched_us - 1) < 0.02, ln
