"""The split between the framework-neutral core and the framework adapters.

- ``symsched.core`` imports no framework (every module imports with ``import torch`` made to fail),
  and neither does ``import symsched`` itself: the PyTorch flavour loads on the first use of one
  of its names, so another flavour can be imported in a venv without torch.
- Before any adapter is installed, the core says so instead of failing obscurely.
- One framework per process: a second, different adapter is refused.
- The PyTorch adapter implements the whole interface, and ``symsched``'s names are the core's.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = ["adapter", "coll", "collectives", "dtypes", "enums", "errors", "functional", "interop", "knobs", "launch",
        "mc2", "memory", "native", "primitives", "profiling", "rules", "schedules", "state", "validate"]


def _python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(90)
def test_core_and_package_import_without_torch() -> None:
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # any `import torch` now raises ImportError\n"
        "import symsched\n"
        f"for name in {CORE!r}:\n"
        "    __import__('symsched.core.' + name)\n"
        "from symsched.core import state\n"
        "reason = state.availability()\n"
        "assert reason and 'no framework' in reason, reason\n"
        "try:\n"
        "    state.init()\n"
        "except symsched.UnavailableError as e:\n"
        "    assert 'import symsched' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('init ran without an adapter')\n"
        "assert not any(m == 'torch' or m.startswith('torch.') for m in sys.modules if sys.modules[m] is not None)\n"
        "print('ok')\n")
    res = _python(code)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr + res.stdout


@pytest.mark.timeout(90)
def test_one_framework_per_process() -> None:
    code = (
        "import symsched as symm\n"
        "symm.ReduceOp  # neutral names need no flavour\n"
        "import sys; assert 'symsched.torch' not in sys.modules\n"
        "symm.empty  # the first flavour name loads PyTorch's\n"
        "from symsched.core import adapter\n"
        "from symsched.torch.adapter import TorchAdapter\n"
        "assert adapter.active().name == 'torch'\n"
        "adapter.install(TorchAdapter())  # the same framework again: a no-op\n"
        "class Other(TorchAdapter):\n"
        "    name = 'other'\n"
        "try:\n"
        "    adapter.install(Other())\n"
        "except symm.SymschedError as e:\n"
        "    assert 'one framework per process' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('a second framework was installed')\n"
        "print('ok')\n")
    res = _python(code)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr + res.stdout


@pytest.mark.timeout(90)
def test_torch_flavour_serves_the_core() -> None:
    import symsched as symm
    import symsched.collectives
    import symsched.functional
    import symsched.memory
    from symsched import core
    from symsched.core.adapter import FrameworkAdapter
    from symsched.torch import API, MODULES
    from symsched.torch.adapter import TorchAdapter

    assert not getattr(TorchAdapter, "__abstractmethods__", None)
    assert issubclass(TorchAdapter, FrameworkAdapter)
    assert set(symm.__all__) == set(API)
    assert symm.shmem_allreduce is core.collectives.shmem_allreduce
    assert symsched.functional is core.functional and symsched.memory is core.memory
    assert symsched.collectives is core.collectives
    for name, mod in MODULES.items():
        assert getattr(symm, name) is mod
