"""MC2 matmul engines: the torch-backed engine (default) and the built-in deterministic one."""

import _harness
import pytest


@pytest.mark.timeout(180)
@pytest.mark.parametrize("world", [2, 3])
def test_engines_match_separate_comm_and_compute(world):
    _harness.ok(_harness.run("scen_mc2", "engine_forward", world, timeout=160))


@pytest.mark.timeout(120)
def test_torch_engine_autograd():
    _harness.ok(_harness.run("scen_mc2", "engine_autograd", 2, timeout=100))


@pytest.mark.timeout(120)
def test_engine_env_and_errors():
    _harness.ok(_harness.run("scen_mc2", "engine_env_and_errors", 2, timeout=100,
                             env={"SYMSCHED_MATMUL_ENGINE": "builtin"}))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("world", [2, 3])
def test_schedule_choice_cache_and_blas(world):
    _harness.ok(_harness.run("scen_mc2", "schedule_choice_and_cache", world, timeout=160))
