"""``python -m symsched.perftest --plot out.png`` writes a real plot: a PNG of one bandwidth
panel per op with a symsched line and a gloo line in it."""

import os
import subprocess
import sys

import pytest

#: matplotlib's first two cycle colours: the symsched and gloo lines (perftest._plot's order)
LINE_COLOURS = {"symsched": (0x1F, 0x77, 0xB4), "gloo": (0xFF, 0x7F, 0x0E)}


@pytest.mark.timeout(200)
def test_perftest_plot_png(tmp_path):
    image = pytest.importorskip("matplotlib.image", reason="the venv scripts/python_env.sh builds has matplotlib")
    import numpy as np

    out = tmp_path / "bw.png"
    run = subprocess.run([sys.executable, "-m", "symsched.perftest", "--nproc", "2", "--ops", "allreduce,allgather",
                          "--min", "8", "--max", "4K", "--factor", "8", "--iters", "3", "--batches", "2", "--no-mpi",
                          "--no-extras", "--plot", str(out)], capture_output=True, text=True, timeout=190,
                         env=dict(os.environ))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"plot written to {out}" in run.stdout, run.stdout + run.stderr
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    px = image.imread(str(out))
    h, w = px.shape[:2]
    # two panels of 5×4 inches at matplotlib's 100 dpi
    assert (h, w) == (400, 1000), px.shape
    rgb = (px[..., :3] * 255).round().astype(int)
    assert (rgb < 250).any(axis=-1).mean() > 0.02, "the image is (nearly) blank"
    for lib, colour in LINE_COLOURS.items():
        near = (np.abs(rgb - np.array(colour)).max(axis=-1) <= 12)
        # each line crosses both panels: its colour shows up in each half of the image, well
        # beyond what a legend entry alone draws (about 100 pixels; a 4-point line about 800)
        for half in (near[:, : w // 2], near[:, w // 2:]):
            assert half.sum() > 300, f"no {lib} line in a panel ({half.sum()} pixels of its colour)"
