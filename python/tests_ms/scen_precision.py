"""Scenario: the RFC precision table on MindSpore — low-precision wire formats (given as MindSpore
dtypes) vs the full-precision result, with the bound each format implies."""

from __future__ import annotations

import os
from typing import Any, Dict, List

import mindspore as ms
import numpy as np

import symsched.mindspore as symm
from symsched.mindspore import mccl

#: unit roundoff u = eps/2 and the smallest normal of each wire format
WIRES = {ms.float16: (2.0 ** -11, 2.0 ** -14), ms.bfloat16: (2.0 ** -8, 2.0 ** -126),
         ms.float8_e4m3fn: (2.0 ** -4, 2.0 ** -6), ms.float8_e5m2: (2.0 ** -3, 2.0 ** -14)}


def _parts(seed: int, n: int, world: int) -> List[np.ndarray]:
    return [(np.random.default_rng(seed + r).standard_normal(n) * 3).astype(np.float32) for r in range(world)]


def wire_formats(rank: int, world: int, args: Any) -> dict:
    symm.init()
    failures: List[str] = []
    errs: Dict[str, float] = {}
    n = 4096
    parts = _parts(4242, n, world)
    full = ms.Tensor(parts[rank].copy())
    symm.shmem_allreduce(full)
    f = full.asnumpy().astype(np.float64)
    total = np.sum([np.abs(p) for p in parts], axis=0).astype(np.float64)
    for wire, (u, _) in WIRES.items():
        t = ms.Tensor(parts[rank].copy())
        symm.shmem_allreduce(t, low_precision_dtype=wire)
        err = np.abs(t.asnumpy().astype(np.float64) - f)
        bound = u * total + u * np.abs(f) + 1e-6  # each operand and the result rounded once, f32 sums
        errs[str(wire)] = float(np.median(err / np.maximum(np.abs(f), 1e-3)))
        if not np.all(err <= bound):
            failures.append(f"allreduce {wire}: max err {err.max()} exceeds the wire bound")
        # identical on every rank (mccl's all_gather of the results)
        g = ms.ops.zeros((world * n,), ms.float32)
        mccl.all_gather_into_tensor(g, t)
        rows = g.asnumpy().reshape(world, n)
        if not all(np.array_equal(rows[0], r) for r in rows):
            failures.append(f"allreduce {wire}: ranks disagree")
    # the env default applies; a per-call wire overrides it; names work as on the torch side
    os.environ["SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE"] = "bf16"
    t = ms.Tensor(parts[rank].copy())
    symm.shmem_allreduce(t)
    if np.array_equal(t.asnumpy(), full.asnumpy()):
        failures.append("env default bf16 wire had no effect")
    del os.environ["SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE"]
    t = ms.Tensor(parts[rank].copy())
    symm.shmem_allreduce(t, low_precision_dtype="fp16")
    # reduce_scatter: peers' blocks rounded once, own block full precision, result not narrowed
    m = 1024
    big = _parts(777, world * m, world)
    out_full = ms.ops.zeros((m,), ms.float32)
    symm.shmem_reduce_scatter(out_full, ms.Tensor(big[rank].copy()))
    mine = slice(rank * m, (rank + 1) * m)
    others = np.sum([np.abs(big[r][mine]) for r in range(world) if r != rank], axis=0).astype(np.float64)
    tot = np.sum([np.abs(b[mine]) for b in big], axis=0).astype(np.float64)
    for wire, (u, tiny) in WIRES.items():
        o = ms.ops.zeros((m,), ms.float32)
        symm.shmem_reduce_scatter(o, ms.Tensor(big[rank].copy()), low_precision_dtype=wire)
        err = np.abs(o.asnumpy().astype(np.float64) - out_full.asnumpy().astype(np.float64))
        bound = u * others + (world - 1) * tiny * (2 * u) / 2 + 2 * world * 2.0 ** -23 * tot
        errs[f"reduce_scatter {wire}"] = float(np.median(err / np.maximum(np.abs(out_full.asnumpy()), 1e-3)))
        if not np.all(err <= bound + 1e-7):
            failures.append(f"reduce_scatter {wire}: max err {err.max()} exceeds the wire bound")
    return {"failures": failures, "errors": errs}
