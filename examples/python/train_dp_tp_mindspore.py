"""DP × TP training of a small MLP on a 2×2 mesh (4 ranks) with MindSpore: the RFC §5.4 pattern.

* TP (tensor parallel, groups {0,1} and {2,3}): the first layer is column-parallel; its
  activations are gathered across the TP group with **mccl** ``all_gather``;
* DP (data parallel, groups {0,2} and {1,3}): each DP rank sees its own batch; the gradient
  bucket is averaged across the DP group with **symsched** ``shmem_allreduce``.

Both libraries use the same MindSpore group names. Each step runs inside
``symm.interop.step()``, which checks the mixing rule (each gradient bucket reduced by one
library only). The script trains twice from the same initial weights — once as above, once with
mccl for everything — and prints the largest loss and parameter differences (0: a 2-rank fp32
sum is the same two additions in either library).

mccl on CPU has no MAX and no float64, so the two checks that need them compare symsched with an
*analytic* reference instead of with mccl: the DP max of the gradient's largest magnitude
(gradient clipping's statistic) against numpy's max of every rank's value, and a float64 DP
average against numpy's float64 mean of every rank's bucket; the ranks' values reach numpy through
mccl's all_gather of their raw bytes (as int32, which mccl on CPU does carry).

Run (PyNative, 4 ranks)::

    msrun --worker_num 4 --local_worker_num 4 --master_addr 127.0.0.1 --master_port 8129 \\
          --join True examples/python/train_dp_tp_mindspore.py
    symsched launch -n 4 -- python examples/python/train_dp_tp_mindspore.py
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

import mindspore as ms
import numpy as np
from mindspore import ops

import symsched.mindspore as symm
from symsched.mindspore import mccl

D_IN, HIDDEN, D_OUT, BATCH, STEPS, LR = 16, 32, 8, 12, 5, 0.05


class McclGatherReplicated(ms._Function):
    """TP activation gather through mccl (columns). The computation after it is replicated on
    every TP rank (each computes the same loss), so the gradient of this rank's shard is its slice
    of the (identical) incoming gradient."""

    @staticmethod
    def forward(ctx: Any, h: ms.Tensor, group: str, tp_rank: int, tp: int) -> ms.Tensor:
        out = ops.zeros((tp * h.shape[0] * h.shape[1],), h.dtype)
        mccl.all_gather_into_tensor(out, h.reshape(-1), group)
        ctx.rank, ctx.width = tp_rank, h.shape[1]
        # rows of every rank's block, side by side: (tp, B, w) -> (B, tp * w)
        return out.reshape(tp, h.shape[0], h.shape[1]).transpose(1, 0, 2).reshape(h.shape[0], tp * h.shape[1])

    @staticmethod
    def backward(ctx: Any, g: ms.Tensor) -> Tuple[ms.Tensor, None, None, None]:
        return g[:, ctx.rank * ctx.width:(ctx.rank + 1) * ctx.width].contiguous(), None, None, None


def init_params(tp_rank: int, tp: int) -> List[ms.Tensor]:
    gen = np.random.default_rng(1234)
    w1 = (gen.standard_normal((HIDDEN, D_IN)) / D_IN ** 0.5).astype(np.float32)
    w2 = (gen.standard_normal((D_OUT, HIDDEN)) / HIDDEN ** 0.5).astype(np.float32)
    shard = HIDDEN // tp
    return [ms.Tensor(w1[tp_rank * shard:(tp_rank + 1) * shard].copy()), ms.Tensor(w2)]


def batch(dp_rank: int) -> Tuple[ms.Tensor, ms.Tensor]:
    gen = np.random.default_rng(100 + dp_rank)  # one fixed batch per DP rank: the loss must fall
    return (ms.Tensor(gen.standard_normal((BATCH, D_IN)).astype(np.float32)),
            ms.Tensor(gen.standard_normal((BATCH, D_OUT)).astype(np.float32)))


def train(mode: str, mesh: Dict[str, Any]) -> Dict[str, Any]:
    params = init_params(mesh["tp_rank"], mesh["tp"])
    x, y = batch(mesh["dp_rank"])

    def loss_fn(w1: ms.Tensor, w2: ms.Tensor) -> ms.Tensor:
        h = ops.relu(ops.matmul(x, w1.T))
        full = McclGatherReplicated.apply(h, mesh["tp_group"], mesh["tp_rank"], mesh["tp"])
        return ((ops.matmul(full, w2.T) - y) ** 2).mean()

    step_grad = ms.value_and_grad(loss_fn, grad_position=(0, 1))
    losses: List[float] = []
    for _ in range(STEPS):
        with symm.interop.step():
            loss, grads = step_grad(*params)
            bucket = ops.cat([g.reshape(-1) for g in grads])
            if mode == "symsched":
                symm.shmem_allreduce(bucket, "avg", group=mesh["dp_group"])
            else:
                mccl.all_reduce(bucket, "sum", mesh["dp_group"])
                bucket = bucket / mesh["dp"]
        off = 0
        new = []
        for p in params:
            n = p.size
            new.append(p - LR * bucket[off:off + n].reshape(p.shape))
            off += n
        params = new
        losses.append(float(loss.asnumpy()))
    return {"losses": losses, "params": [p.asnumpy() for p in params], "bucket": bucket.asnumpy()}


def _gather_bits(x: np.ndarray, group: str, p: int) -> List[np.ndarray]:
    """Every DP rank's array (same shape and dtype), through mccl's int32 all_gather of its bytes."""
    words = np.ascontiguousarray(x).view(np.int32).reshape(-1)
    out = ms.Tensor(np.zeros(p * words.size, np.int32))
    mccl.all_gather_into_tensor(out, ms.Tensor(words), group)
    return [row.view(x.dtype).reshape(x.shape) for row in out.asnumpy().reshape(p, -1)]


def analytic_checks(mesh: Dict[str, Any], bucket: np.ndarray) -> Dict[str, float]:
    """The two DP reductions mccl on CPU cannot do (MAX, float64), against numpy on every rank's data."""
    g, p = mesh["dp_group"], mesh["dp"]
    peak = ms.Tensor(np.array([np.abs(bucket).max()], np.float32))
    symm.shmem_allreduce(peak, "max", group=g)
    want_max = max(float(v[0]) for v in _gather_bits(np.array([np.abs(bucket).max()], np.float32), g, p))
    b64 = bucket.astype(np.float64) * (1.0 + 1e-9 * mesh["dp_rank"])  # values fp32 cannot hold
    t64 = ms.Tensor(b64.copy())
    symm.shmem_allreduce(t64, "avg", group=g)
    parts = _gather_bits(b64, g, p)
    want64 = parts[0].copy()
    for q in parts[1:]:
        want64 = want64 + q  # rank order, as the symsched fold
    want64 = want64 / p
    return {"max_diff": abs(float(peak.asnumpy()[0]) - want_max),
            "f64_diff": float(np.abs(t64.asnumpy() - want64).max())}


def forbidden_mix(mesh: Dict[str, Any]) -> str:
    """Reduce one bucket with mccl and part of it with symsched in one step: must be refused."""
    bucket = ms.Tensor(np.ones(64, np.float32))
    try:
        with symm.interop.step():
            symm.interop.all_reduce(bucket, "sum", mesh["dp_group"])
            symm.shmem_allreduce(bucket[32:], group=mesh["dp_group"])
    except symm.ForbiddenMixError as e:
        return str(e)
    return ""


def make_mesh(rank: int, world: int) -> Dict[str, Any]:
    """The 2×2 mesh as MindSpore group names (each rank creates the groups it belongs to)."""
    from mindspore.communication import create_group

    assert world == 4, "the example runs on 4 ranks (a 2×2 mesh)"
    tp, dp = 2, 2
    tp_ranks = [rank - rank % tp + i for i in range(tp)]
    dp_ranks = [rank % tp + tp * i for i in range(dp)]
    tp_group, dp_group = "tp_" + "_".join(map(str, tp_ranks)), "dp_" + "_".join(map(str, dp_ranks))
    create_group(tp_group, tp_ranks)
    create_group(dp_group, dp_ranks)
    return {"tp_group": tp_group, "dp_group": dp_group, "tp": tp, "dp": dp, "tp_rank": tp_ranks.index(rank),
            "dp_rank": dp_ranks.index(rank)}


def worker(rank: int, world: int, args: Any = None) -> Dict[str, Any]:
    mesh = make_mesh(rank, world)
    symm.init()
    a = train("symsched", mesh)
    b = train("mccl", mesh)
    loss_diff = max(abs(u - v) for u, v in zip(a["losses"], b["losses"]))
    param_diff = max(float(np.abs(p - q).max()) for p, q in zip(a["params"], b["params"]))
    checks = analytic_checks(mesh, a["bucket"])
    mix = forbidden_mix(mesh)
    if rank == 0:
        print(f"losses (symsched DP): {[round(v, 6) for v in a['losses']]}")
        print(f"losses (all mccl):    {[round(v, 6) for v in b['losses']]}")
        print(f"max |loss diff| = {loss_diff:.3g}, max |param diff| = {param_diff:.3g}")
        print(f"DP max vs numpy: {checks['max_diff']:.3g}; f64 DP avg vs numpy: {checks['f64_diff']:.3g}")
        print(f"forbidden mix detected: {bool(mix)}")
    return {"loss_diff": loss_diff, "param_diff": param_diff, "mix_error": mix, "losses": a["losses"], **checks,
            "failures": []}


def main() -> None:
    from symsched.mindspore import launch

    info = launch.discover(os.environ)
    if os.environ.get("MS_ROLE") == "MS_SCHED" or info.launcher == launch.MSRUN:
        from mindspore.communication import init

        init()  # under msrun's scheduler role this serves the cluster and returns when it ends
        if os.environ.get("MS_ROLE") == "MS_SCHED":
            return
    else:
        symm.init_mccl()
    worker(info.rank, info.world)
    symm.finalize()


if __name__ == "__main__":
    main()
