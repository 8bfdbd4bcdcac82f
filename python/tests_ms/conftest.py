"""pytest set-up of the MindSpore suite."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path, monkeypatch):
    """MindSpore writes compile diagnostics (rank_0/om/analyze_fail.ir) into the working directory."""
    monkeypatch.chdir(tmp_path)
