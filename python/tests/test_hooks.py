"""symsched.hooks: DDP and FSDP2 trained on symsched's collectives vs torch's gloo collectives,
step by step (scen_hooks)."""

import _harness
import pytest


@pytest.mark.timeout(200)
@pytest.mark.parametrize("op", ["avg", "sum"])
def test_ddp_hook_bit_equal_to_gloo(op):
    _harness.ok(_harness.run("scen_hooks", "ddp", 2, timeout=180, args={"op": op}))


@pytest.mark.timeout(200)
def test_ddp_hook_on_subgroups_4_ranks():
    """DDP on each half of 4 ranks (process_group=half): the hook reduces over that half."""
    res = _harness.ok(_harness.run("scen_hooks", "ddp", 4, timeout=180, args={"group": "halves"}))
    assert all(x["calls"]["shmem_allreduce"] > 0 for x in res)
    # the halves train on different data: their parameters part ways
    assert res[0]["moved"] == res[1]["moved"] != res[2]["moved"] == res[3]["moved"]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("wire,op", [("float16", "avg"), ("bfloat16", "sum")])
def test_ddp_hook_low_precision_wire(wire, op):
    """A low-precision wire with float32 accumulation: each reduced gradient within the wire's
    rounding bound of gloo's full-precision one, parameters within the wire tolerance."""
    _harness.ok(_harness.run("scen_hooks", "ddp", 2, timeout=180, args={"wire": wire, "op": op}))


@pytest.mark.timeout(200)
@pytest.mark.parametrize("wire", [None, "float16"])
def test_fsdp2_hooks_match_gloo(wire):
    res = _harness.ok(_harness.run("scen_hooks", "fsdp", 2, timeout=180, args={"wire": wire}))
    assert res[0]["modules"] == 4


@pytest.mark.timeout(250)
def test_fsdp2_hooks_hsdp_4_ranks():
    """HSDP on a 2×2 mesh: symsched all-gathers and reduce-scatters on each shard group, FSDP's
    replica all-reduce stays on gloo; shards bit-equal to all-gloo HSDP."""
    _harness.ok(_harness.run("scen_hooks", "fsdp", 4, timeout=230, args={"mesh": "hsdp"}))


@pytest.mark.timeout(120)
def test_hooks_refuse_what_they_cannot_reduce():
    """Only sum and avg are data-parallel reductions; FSDP's PREMUL_SUM (a custom gradient divide
    factor) is refused by name, before anything is sent."""
    import torch.distributed as dist

    import symsched
    import symsched.hooks as hooks

    for op in ("max", "min", dist.ReduceOp.MAX, "mean"):
        with pytest.raises(symsched.SymschedArgumentError, match="'sum' or 'avg'"):
            hooks.DDPHookState(op=op)
    assert hooks.DDPHookState(op=dist.ReduceOp.SUM).op == "sum"
    rs = hooks.FSDPReduceScatter()
    with pytest.raises(symsched.SymschedArgumentError, match="'sum' or 'avg'"):
        rs(None, None, None, dist.ReduceOp.PREMUL_SUM)
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

    assert issubclass(hooks.FSDPAllGather, AllGather) and issubclass(hooks.FSDPReduceScatter, ReduceScatter)
