"""Scenario: allreduce in gloo's fold order (SYMSCHED_ALLREDUCE_ORDER=gloo) against gloo."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

import symsched as symm


def _data(n: int, rank: int, seed: int) -> torch.Tensor:
    # Magnitudes spread over many binades, so a different fold order shows in the bits.
    g = np.random.default_rng([seed, rank])
    v = g.standard_normal(n) * np.exp(g.standard_normal(n) * 6)
    return torch.from_numpy(v.astype(np.float32))


def compare(rank: int, world: int, args) -> dict:
    """Per size: how many elements differ in their bits from gloo's all_reduce, for symsched's
    allreduce on an ordinary and on a symmetric tensor."""
    symm.init()
    out = {}
    for n in args["sizes"]:
        x = _data(n, rank, n)
        want = x.clone()
        dist.all_reduce(want)
        got = x.clone()
        symm.shmem_allreduce(got)
        s = symm.empty(n, torch.float32)
        s.copy_(x)
        symm.shmem_allreduce(s)
        out[n] = (int((got.view(torch.int32) != want.view(torch.int32)).sum()),
                  int((s.view(torch.int32) != want.view(torch.int32)).sum()))
        symm.free(s)
    return out
