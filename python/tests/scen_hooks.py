"""Scenario: DDP and FSDP2 trained with symsched's communication hooks (``symsched.hooks``) next
to the same model trained with torch's own gloo communication, step by step."""

from __future__ import annotations

import copy
from typing import Any, Dict, List

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import symsched as symm
import symsched.hooks as hooks

WIRES = {None: None, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: unit roundoff of each wire format
UNIT = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
#: parameters after training with a wire vs without: RFC §5.6's tolerance for a float16-class
#: wire with float32 accumulation; bfloat16 carries 8 mantissa bits (u = 2^-8 > 1e-3), so its
#: relative tolerance is four of its rounding steps
WIRE_TOL = {torch.float16: dict(rtol=1e-3, atol=1e-5), torch.bfloat16: dict(rtol=4 * 2.0 ** -8, atol=1e-4)}


def _net() -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial parameters on every rank
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 3))


def _batch(rank: int, step: int) -> tuple:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 12, generator=g), torch.randn(8, 3, generator=g)


def _groups(rank: int, world: int, which: str) -> Any:
    """The data-parallel group of this rank: WORLD (None) or its half of the world."""
    if which == "world":
        return None, list(range(world))
    halves = [list(range(world // 2)), list(range(world // 2, world))]
    pgs = [dist.new_group(h) for h in halves]  # collective: every rank makes both
    mine = 0 if rank in halves[0] else 1
    return pgs[mine], halves[mine]


def _count_calls(*names: str) -> Dict[str, int]:
    """Count the calls of these in-place collectives (the hooks call them through the core
    module): proof that the hooks, not FSDP's or DDP's own reduction, moved the data."""
    from symsched.core import collectives as core

    counts = dict.fromkeys(names, 0)
    for name in names:
        fn = getattr(core, name)

        def spy(*a: Any, _fn: Any = fn, _name: str = name, **kw: Any) -> Any:
            counts[_name] += 1
            return _fn(*a, **kw)

        setattr(core, name, spy)
    return counts


def _gloo_sum_hook(group, bucket):  # type: ignore[no-untyped-def]  # DDP refuses other annotations
    """The gloo reference for op='sum' (DDP's built-in reduction averages)."""
    return dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future().then(lambda f: f.value()[0])


def ddp(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    """``args``: ``group`` ('world' or 'halves'), ``op`` ('avg' or 'sum'), ``wire`` (a key of WIRES),
    ``steps``. Two DDP copies of one model train on the same batches: the reference with torch's
    gloo reduction, the other with ``symsched.hooks.register_ddp_hook``; parameters must stay
    bit-equal (full precision) or within the RFC's wire tolerance, and the first step's reduced
    gradients within the wire's rounding bound."""
    symm.init()
    failures: List[str] = []
    pg, ranks = _groups(rank, world, args.get("group", "world"))
    op, wire = args.get("op", "avg"), WIRES[args.get("wire")]
    net = _net()
    ref = DDP(copy.deepcopy(net), process_group=pg, bucket_cap_mb=0.001)  # several buckets per step
    mine = DDP(copy.deepcopy(net), process_group=pg, bucket_cap_mb=0.001)
    if op == "sum":
        ref.register_comm_hook(pg, _gloo_sum_hook)
    state = hooks.register_ddp_hook(mine, op=op, low_precision_dtype=wire)
    assert state.group is mine.process_group
    local = copy.deepcopy(net)  # no DDP: this rank's own gradients, for the rounding bound
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (ref, mine, local)]
    p = len(ranks)
    calls = _count_calls("shmem_allreduce")
    rounded = False  # with a wire: whether it changed any parameter (else it was not used)
    for step in range(args.get("steps", 4)):
        x, y = _batch(rank, step)
        for m, opt in zip((ref, mine, local), opts):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
        if step == 0:
            for (name, a), b, c in zip(ref.named_parameters(), mine.parameters(), local.parameters()):
                if wire is None:
                    if not torch.equal(a.grad, b.grad):
                        failures.append(f"step 0 grad {name}: not bit-equal, max diff {(a.grad - b.grad).abs().max()}")
                else:
                    # allreduce_two_shot_wire rounds every operand to the wire once and the
                    # result once more: |err| <= u * (sum_r |g_r| (/P for avg) + |result|),
                    # plus slack for the float32 sums and float16 subnormal steps
                    mag = c.grad.abs().clone()
                    dist.all_reduce(mag, group=pg)
                    bound = UNIT[wire] * (mag / (p if op == "avg" else 1) + a.grad.abs()) + 1e-6
                    excess = ((a.grad - b.grad).abs() - bound).max()
                    if excess > 0:
                        failures.append(f"step 0 grad {name}: wire error above u·Σ|g| by {excess}")
        for opt in opts[:2]:
            opt.step()
        opts[2].step()
        for (name, a), b in zip(ref.named_parameters(), mine.parameters()):
            if wire is None:
                if not torch.equal(a, b):
                    failures.append(f"step {step} param {name}: not bit-equal, max diff {(a - b).abs().max()}")
            else:
                rounded = rounded or not torch.equal(a, b)
                if not torch.allclose(a, b, **WIRE_TOL[wire]):
                    failures.append(f"step {step} param {name}: beyond the wire tolerance, max diff {(a - b).abs().max()}")
    moved = float(sum((a - b).abs().sum() for a, b in zip(ref.parameters(), net.parameters())))
    if wire is not None and not rounded:
        failures.append("the wire format changed no parameter: it was not used")
    return {"failures": failures, "moved": moved, "calls": calls}


def _sharded(net: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    m = copy.deepcopy(net)
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    return m


def fsdp(rank: int, world: int, args: Dict[str, Any]) -> Dict[str, Any]:
    """``args``: ``mesh`` ('1d': FSDP over WORLD; 'hsdp': 2 replicas × 2 shards, FSDP's hooks on the
    shard group, its replica all-reduce on gloo), ``wire``. FSDP2 with torch's gloo collectives
    vs FSDP2 with ``symsched.hooks.register_fsdp_hooks``: the local shards of every parameter
    stay bit-equal (full precision) or within the RFC's wire tolerance."""
    from torch.distributed.device_mesh import init_device_mesh

    symm.init()
    failures: List[str] = []
    wire = WIRES[args.get("wire")]
    if args.get("mesh", "1d") == "hsdp":
        mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))
    net = _net()
    ref, mine = _sharded(net, mesh), _sharded(net, mesh)
    calls = _count_calls("shmem_allgather", "shmem_reduce_scatter")
    count = hooks.register_fsdp_hooks(mine, low_precision_dtype=wire)
    rounded = False
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (ref, mine)]
    for step in range(args.get("steps", 3)):
        x, y = _batch(rank, step)
        for m, opt in zip((ref, mine), opts):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()
        for (name, a), b in zip(ref.named_parameters(), mine.parameters()):
            la, lb = a.to_local(), b.to_local()
            if wire is None:
                if not torch.equal(la, lb):
                    failures.append(f"step {step} shard {name}: not bit-equal, max diff {(la - lb).abs().max()}")
            else:
                rounded = rounded or not torch.equal(la, lb)
                if not torch.allclose(la, lb, **WIRE_TOL[wire]):
                    failures.append(f"step {step} shard {name}: beyond the wire tolerance, max diff {(la - lb).abs().max()}")
    if not calls["shmem_allgather"] or not calls["shmem_reduce_scatter"]:
        failures.append(f"the symsched hooks did not carry FSDP's traffic: {calls}")
    if wire is not None and not rounded:
        failures.append("the wire format changed no shard: it was not used")
    return {"failures": failures, "modules": count, "calls": calls}
