"""Packaging: ``pip wheel ./python`` builds one abi3 wheel that installs into any venv (of any
CPython >= 3.11), and every version number the package shows is the crate's."""

import glob
import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(PYTHON_DIR)


def _crate_version() -> str:
    with open(os.path.join(PYTHON_DIR, "Cargo.toml"), "rb") as f:
        return tomllib.load(f)["package"]["version"]


def _run(*cmd: str, timeout: float = 120, **kw) -> str:
    out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, cwd="/", **kw)
    assert out.returncode == 0, f"{cmd}: {out.stdout}\n{out.stderr}"
    return out.stdout


@pytest.mark.timeout(120)
def test_versions_agree_with_the_crate():
    version = _crate_version()
    with open(os.path.join(ROOT, "Cargo.toml"), "rb") as f:
        assert tomllib.load(f)["workspace"]["package"]["version"] == version, "python crate vs workspace"
    shown = _run(sys.executable, "-c", "import sys, symsched; print(symsched.__version__); "
                                       "print('torch' in sys.modules)").split()
    assert shown == [version, "False"], shown  # and reading it imports no framework
    assert _run(sys.executable, "-m", "symsched", "--version").strip() == f"symsched {version}"
    native = _run(sys.executable, "-c", "import symsched._native as n; print(n.__version__)").strip()
    assert native == version
    meta = _run(sys.executable, "-c", "import importlib.metadata as m; print(m.version('symsched'))").strip()
    assert meta == version, "the installed distribution's metadata"
    info = _run(sys.executable, "-m", "symsched")
    assert f"symsched {version} at" in info and "host: usable" in info, info


def _newer_cpython():
    """A CPython newer than this one on PATH (SYMSCHED_TEST_PYTHON names one), or None."""
    names = [os.environ["SYMSCHED_TEST_PYTHON"]] if os.environ.get("SYMSCHED_TEST_PYTHON") else []
    names += [f"python3.{m}" for m in range(sys.version_info.minor + 1, 16)]
    for name in names:
        path = shutil.which(name)
        if path is None:
            continue
        probe = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2] > (3, 11))"],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode == 0 and probe.stdout.strip() == "True":  # a pyenv shim may lack the version
            return path
    return None


def _fresh_venv(python: str, where: str) -> str:
    _run(python, "-m", "venv", where)
    return os.path.join(where, "bin", "python")


@pytest.mark.timeout(900)
def test_pip_wheel_is_abi3_and_installs_into_a_fresh_venv(tmp_path):
    pytest.importorskip("maturin", reason="builds with the venv's maturin (scripts/python_env.sh installs it)")
    version = _crate_version()
    env = dict(os.environ, CARGO_TARGET_DIR=os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target-py")))
    wheels = tmp_path / "wheels"
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels),
         PYTHON_DIR, timeout=840, env=env)
    (wheel,) = glob.glob(str(wheels / "*.whl"))
    name = os.path.basename(wheel)
    assert re.fullmatch(rf"symsched-{re.escape(version)}-cp311-abi3-linux_x86_64\.whl", name), name
    listing = _run(sys.executable, "-m", "zipfile", "-l", wheel)
    for member in ("symsched/_native.abi3.so", "symsched/torch/ops.py", "symsched/torch/hooks.py",
                   "symsched/__main__.py", "symsched/py.typed", "symsched/core/coll.py"):
        assert member in listing, member
    # a venv without torch: the package installs, reports its version and loads its module
    interpreters = [sys._base_executable]
    newer = _newer_cpython()
    if newer:
        interpreters.append(newer)  # abi3: the same wheel on a newer CPython
    for i, interp in enumerate(interpreters):
        py = _fresh_venv(interp, str(tmp_path / f"venv{i}"))
        _run(py, "-m", "pip", "install", "--quiet", "--no-deps", wheel, timeout=300)
        assert _run(py, "-m", "symsched", "--version").strip() == f"symsched {version}"
        loaded = _run(py, "-c", "import sys, symsched, symsched._native as n; "
                                "print(n.__file__, symsched.__version__, n.availability(), 'torch' in sys.modules)")
        path, shown, reason, torch_loaded = loaded.split()
        assert path.startswith(str(tmp_path)) and path.endswith("_native.abi3.so"), path
        assert (shown, reason, torch_loaded) == (version, "None", "False"), loaded
