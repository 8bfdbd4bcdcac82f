"""DP × TP training of a small MLP on a 2×2 mesh (4 ranks): the RFC §5.4 recommended pattern.

* TP (tensor parallel, groups {0,1} and {2,3}): the first layer is column-parallel; its
  activations are gathered across the TP group with **gloo** ``all_gather``;
* DP (data parallel, groups {0,2} and {1,3}): each DP rank sees its own batch; the gradient
  bucket is averaged across the DP group with **symsched** ``shmem_allreduce``.

The same DeviceMesh ProcessGroups serve both libraries. Each step runs inside
``symm.interop.step()``, which checks the mixing rule: the gradient bucket is reduced by one
library only. The script trains twice from the same initial weights — once as above, once with
gloo for everything — and prints the largest loss and parameter differences.

Run: ``python examples/python/train_dp_tp.py`` (spawns 4 ranks) or under ``torchrun --nproc-per-node 4``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import symsched as symm

D_IN, HIDDEN, D_OUT, BATCH, STEPS, LR = 16, 32, 8, 12, 5, 0.05


class GlooGatherReplicated(torch.autograd.Function):
    """TP activation gather through gloo. The computation after it is replicated on every TP
    rank (each computes the same loss), so the gradient of this rank's shard is just its slice
    of the (identical) incoming gradient."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, group: Any) -> torch.Tensor:
        p = dist.get_world_size(group)
        parts = [torch.empty_like(h) for _ in range(p)]
        dist.all_gather(parts, h.contiguous(), group=group)
        ctx.rank, ctx.width = dist.get_rank(group), h.shape[1]
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor):
        return g[:, ctx.rank * ctx.width:(ctx.rank + 1) * ctx.width].contiguous(), None


def init_params(tp_rank: int, tp: int) -> List[torch.Tensor]:
    gen = torch.Generator().manual_seed(1234)
    w1 = torch.randn(HIDDEN, D_IN, generator=gen) / D_IN ** 0.5
    w2 = torch.randn(D_OUT, HIDDEN, generator=gen) / HIDDEN ** 0.5
    shard = HIDDEN // tp
    return [w1[tp_rank * shard:(tp_rank + 1) * shard].clone().requires_grad_(), w2.clone().requires_grad_()]


def batch(dp_rank: int, step: int):
    gen = torch.Generator().manual_seed(100 + dp_rank)  # one fixed batch per DP rank: loss must fall
    x = torch.randn(BATCH, D_IN, generator=gen)
    y = torch.randn(BATCH, D_OUT, generator=gen)
    return x, y


def train(mode: str, dp_group: Any, tp_group: Any, dp_rank: int, tp_rank: int, tp: int) -> Dict[str, Any]:
    params = init_params(tp_rank, tp)
    losses = []
    for step in range(STEPS):
        x, y = batch(dp_rank, step)
        with symm.interop.step():
            h = torch.relu(x @ params[0].t())
            full = GlooGatherReplicated.apply(h, tp_group)
            loss = torch.nn.functional.mse_loss(full @ params[1].t(), y)
            loss.backward()
            bucket = torch.cat([p.grad.reshape(-1) for p in params])
            if mode == "symsched":
                symm.shmem_allreduce(bucket, "avg", group=dp_group)
            else:
                dist.all_reduce(bucket, group=dp_group)
                bucket /= dist.get_world_size(dp_group)
        with torch.no_grad():
            off = 0
            for p in params:
                p -= LR * bucket[off:off + p.numel()].view_as(p)
                off += p.numel()
                p.grad = None
        losses.append(float(loss.detach()))
    return {"losses": losses, "params": [p.detach().clone() for p in params]}


def forbidden_mix(dp_group: Any) -> str:
    """Reduce half a bucket with gloo and half with symsched in one step: must be refused."""
    bucket = torch.ones(64)
    try:
        with symm.interop.step():
            dist.all_reduce(bucket[:32], group=dp_group)
            symm.shmem_allreduce(bucket[32:], group=dp_group)
    except symm.ForbiddenMixError as e:
        return str(e)
    return ""


def worker(rank: int, world: int, args: Any = None) -> Dict[str, Any]:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_group, tp_group = mesh.get_group("dp"), mesh.get_group("tp")
    dp_rank, tp_rank = mesh.get_local_rank("dp"), mesh.get_local_rank("tp")
    symm.init()
    a = train("symsched", dp_group, tp_group, dp_rank, tp_rank, 2)
    b = train("gloo", dp_group, tp_group, dp_rank, tp_rank, 2)
    loss_diff = max(abs(u - v) for u, v in zip(a["losses"], b["losses"]))
    param_diff = max(float((p - q).abs().max()) for p, q in zip(a["params"], b["params"]))
    mix = forbidden_mix(dp_group)
    if rank == 0:
        print(f"losses (symsched DP): {[round(v, 6) for v in a['losses']]}")
        print(f"losses (all gloo):    {[round(v, 6) for v in b['losses']]}")
        print(f"max |loss diff| = {loss_diff:.3g}, max |param diff| = {param_diff:.3g}")
        print(f"forbidden mix detected: {bool(mix)}")
    return {"loss_diff": loss_diff, "param_diff": param_diff, "mix_error": mix, "losses": a["losses"]}


def _spawned(rank: int, world: int, port: str) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": port, "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world)})
    dist.init_process_group("gloo", rank=rank, world_size=world)
    worker(rank, world)
    symm.finalize()
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:  # torchrun
        dist.init_process_group("gloo")
        worker(dist.get_rank(), dist.get_world_size())
        symm.finalize()
        dist.destroy_process_group()
        sys.exit(0)
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = str(s.getsockname()[1])
    mp.spawn(_spawned, args=(4, free), nprocs=4, join=True)
