"""Ranks started by symsched launch and by msrun: env discovery, group names, mccl, runtime."""

import os

import _harness
import pytest


@pytest.mark.timeout(200)
def test_symsched_launch_env_and_groups_with_mccl():
    res = _harness.ok(_harness.run("scen_launch", "env_and_groups", 4, _harness.SYMSCHED, timeout=150, mccl=True))
    assert {r["launcher"] for r in res} == {"symsched launch"}
    assert len({r["job_id"] for r in res}) == 1
    assert res[0]["groups"] == {"halves_0_1": [0, 1], "strided_0_2": [0, 2], "singleton_0": [0]}


@pytest.mark.timeout(200)
def test_msrun_env_and_groups():
    res = _harness.ok(_harness.run("scen_launch", "env_and_groups", 4, _harness.MSRUN, timeout=150))
    assert {r["launcher"] for r in res} == {"msrun"}
    assert len({r["job_id"] for r in res}) == 1 and res[0]["job_id"].startswith("ms-")
    assert res[3]["groups"] == {"halves_2_3": [2, 3], "strided_1_3": [1, 3], "singleton_3": [3]}


@pytest.mark.timeout(200)
def test_mccl_wrappers_msrun():
    _harness.ok(_harness.run("scen_launch", "mccl_wrappers", 4, _harness.MSRUN, timeout=150))


@pytest.mark.timeout(200)
@pytest.mark.parametrize("launcher", [_harness.SYMSCHED, _harness.MSRUN])
def test_runtime_bootstraps_after_mindspore_ops(launcher):
    res = _harness.ok(_harness.run("scen_launch", "runtime_after_ops", 2, launcher, timeout=150))
    assert not any(os.path.exists(r["dir"]) for r in res)
