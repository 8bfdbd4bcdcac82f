"""Scenario: diagnostics on MindSpore — the SYMSCHED_TRACE Chrome trace of ops and executor
steps, memory stats, availability inside a job."""

from __future__ import annotations

from typing import Any, List

import mindspore as ms
import numpy as np

import symsched.mindspore as symm


def trace(rank: int, world: int, args: Any) -> dict:
    failures: List[str] = []
    if symm.availability() is not None:
        failures.append(f"availability inside a job: {symm.availability()}")
    symm.init()
    x = ms.Tensor(np.ones(16, np.float32))
    symm.shmem_allreduce(x, "sum")
    out = ms.ops.zeros((16 * world,), ms.float32)
    symm.shmem_allgather(out, x, group=list(range(world)))
    y = symm.functional.reduce_scatter(ms.Tensor(np.ones(4 * world, np.float32)))
    if y.asnumpy().tolist() != [float(world)] * 4:
        failures.append(f"reduce_scatter under the trace: {y.asnumpy()}")
    symm.flush_trace()
    return {"failures": failures}
