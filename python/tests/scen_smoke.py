"""Scenario: a quick end-to-end pass (init, empty, primitives, one allreduce)."""

from __future__ import annotations

import torch

import symsched as symm


def smoke(rank: int, world: int, args) -> dict:
    symm.init()
    t = symm.empty(8, torch.float32)
    t.fill_(rank + 1)
    symm.barrier()
    x = torch.full((8,), float(rank + 1))
    symm.shmem_allreduce(x)
    return {"allreduce": x.tolist(), "sym": symm.is_symmetric(t)}
