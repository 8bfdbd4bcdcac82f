"""Primitives, bad arguments, memory lifecycle, profiling/trace, low-precision wire, MC2
precision and the forbidden-mix rule."""

import json
import os

import _harness
import pytest


@pytest.mark.timeout(120)
def test_primitives_4_ranks():
    _harness.ok(_harness.run("scen_misc", "primitives", 4, timeout=100))


@pytest.mark.timeout(120)
def test_bad_arguments_raise_clear_errors():
    _harness.ok(_harness.run("scen_misc", "bad_args", 2, timeout=100))


@pytest.mark.timeout(120)
def test_profiler_ranges_and_chrome_trace(tmp_path):
    path = str(tmp_path / "trace.json")
    _harness.ok(_harness.run("scen_misc", "profiler_and_trace", 2, timeout=100, env={"SYMSCHED_TRACE": path}))
    with open(path) as f:
        data = json.load(f)
    names = {e["name"] for e in data["traceEvents"] if e.get("ph") == "X"}
    assert {"symsched::allreduce", "symsched::allgather"} <= names
    # per-step events of the native executor, on both ranks
    for r in range(2):
        kinds = {e["name"] for e in data["traceEvents"] if e.get("pid") == r and e.get("cat") == "step"}
        assert {"wait", "reduce"} <= kinds and kinds & {"put", "put_signal"}, (r, kinds)


@pytest.mark.timeout(120)
def test_low_precision_wire_within_format_bound():
    """Tolerance derived from the wire format: each operand and the result are rounded once to
    the wire type (unit roundoff u = eps/2) and accumulation is f32, so
    |err| ≤ u·Σ|x_r| + u·|result|. fp16: u = 2^-11, bf16: 2^-8, e4m3: 2^-4, e5m2: 2^-3 — the RFC's
    allclose(1e-3, 1e-5) therefore holds for an fp16 wire only, not for bf16 or fp8.
    reduce_scatter with a wire: peers' blocks are rounded once and the own block not at all, and
    the result is not narrowed, so |err| ≤ u·Σ_{r≠me}|x_r| (plus the f32 folding error)."""
    res = _harness.ok(_harness.run("scen_misc", "low_precision", 2, timeout=100))
    print(res[0]["errors"])


@pytest.mark.timeout(120)
def test_mc2_matches_separate_comm_and_compute():
    _harness.ok(_harness.run("scen_misc", "mc2_precision", 2, timeout=100))


@pytest.mark.timeout(120)
def test_forbidden_mix_is_detected():
    _harness.ok(_harness.run("scen_misc", "forbidden_mix", 2, timeout=100))


@pytest.mark.timeout(120)
def test_binding_rule_is_checked_on_every_rank():
    """Symmetric on one rank, ordinary on another (or different heap offsets) raises everywhere."""
    _harness.ok(_harness.run("scen_misc", "binding_rule", 2, timeout=100))


@pytest.mark.timeout(120)
def test_binding_switch_is_checked_with_check_always():
    _harness.ok(_harness.run("scen_misc", "binding_rule_always", 2, timeout=100,
                             env={"SYMSCHED_CHECK_BINDINGS": "always"}))


@pytest.mark.timeout(120)
def test_split_group_process_groups():
    """``dist.split_group`` (torch 2.13) on a gloo job: halves and strided sub-groups, symsched and
    gloo on the same object. torch documents the API for NCCL and plugins only; should it refuse
    gloo, the refusal is asserted to be torch's, not symsched's, and the test is skipped."""
    res = _harness.run("scen_misc", "split_group", 4, timeout=100)
    refused = {x["refused"] for x in res}
    if refused != {None}:
        assert len(refused) == 1 and "symsched" not in next(iter(refused)).lower(), refused
        pytest.skip(f"torch's split_group refuses the gloo backend: {refused.pop()}")
    _harness.ok(res)
    assert all(x["groups"] == ["halves", "strided"] for x in res)
