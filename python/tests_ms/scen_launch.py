"""Scenarios (run inside rank processes): launch env, group names vs MindSpore's own mapping,
mccl wrappers, and the host runtime bootstrapped after MindSpore ran ops."""

from __future__ import annotations

import os
import zlib
from typing import Any, Dict, List

import mindspore as ms
import numpy as np

from symsched.mindspore.errors import SymschedArgumentError
from symsched.mindspore import groups, launch, mccl, tensors


def _check(cond: bool, what: str, failures: List[str]) -> None:
    if not cond:
        failures.append(what)


def make_group_names(rank: int, world: int) -> Dict[str, List[int]]:
    """Every group shape of the test matrix this rank belongs to, as MindSpore group names:
    name -> world ranks. Each rank creates only the groups it is a member of (MindSpore's rule)."""
    from mindspore.communication import create_group

    shapes: Dict[str, List[int]] = {}
    if world >= 2 and world % 2 == 0:
        h = world // 2
        shapes["halves"] = list(range(h)) if rank < h else list(range(h, world))
        shapes["strided"] = list(range(rank % 2, world, 2))
    shapes["singleton"] = [rank]
    out: Dict[str, List[int]] = {}
    for kind, ranks in shapes.items():
        name = f"{kind}_{'_'.join(map(str, ranks))}"
        if len(ranks) < world:  # a group equal to WORLD cannot be created again under another name
            create_group(name, ranks)
        out[name] = ranks
    return out


def env_and_groups(rank: int, world: int, args: Any) -> dict:
    failures: List[str] = []
    info = launch.discover(os.environ)
    _check(info.rank == rank and info.world == world, f"discover {info}", failures)
    expected = launch.MSRUN if "RANK_ID" in os.environ else launch.SYMSCHED
    _check(info.launcher == expected, f"launcher {info.launcher} != {expected}", failures)
    out: Dict[str, Any] = {"failures": failures, "launcher": info.launcher}
    job = launch.agree_job_id(info)
    out["job_id"] = job
    if not groups.mccl_initialized():
        return out
    from mindspore.communication import (get_group_rank_from_world_rank, get_group_size, get_rank,
                                         get_world_rank_from_group_rank)

    _check(get_rank() == rank and get_group_size() == world, "MindSpore's rank/size", failures)
    # every rank agreed on the same job id (gathered over mccl)
    ids = mccl.all_gather_ints([zlib.crc32(job.encode())], size=world)
    _check(len({i[0] for i in ids}) == 1, f"job ids differ across ranks: {ids}", failures)
    _check(groups.member_ranks(None, world) == tuple(range(world)), "None = WORLD", failures)
    _check(groups.member_ranks(groups.world_group_name(), world) == tuple(range(world)), "world name", failures)
    names = make_group_names(rank, world)
    for name, ranks in names.items():
        got = groups.member_ranks(name, world)
        _check(got == tuple(ranks), f"{name}: {got} != {ranks}", failures)
        me = groups.check_members(got, rank, world, "group")
        _check(me == get_group_rank_from_world_rank(rank, name), f"{name}: my group rank", failures)
        for gr, wr in enumerate(ranks):
            _check(groups.world_rank_of(got, gr) == get_world_rank_from_group_rank(name, gr) == wr,
                   f"{name}: world rank of group rank {gr}", failures)
            _check(groups.group_rank_of(got, wr) == get_group_rank_from_world_rank(wr, name) == gr,
                   f"{name}: group rank of world rank {wr}", failures)
    try:
        groups.member_ranks("no_such_group", world)
        failures.append("unknown group name accepted")
    except SymschedArgumentError as exc:
        _check("no_such_group" in str(exc), f"unknown-name message: {exc}", failures)
    out["groups"] = {k: v for k, v in names.items()}
    return out


def mccl_wrappers(rank: int, world: int, args: Any) -> dict:
    failures: List[str] = []
    names = make_group_names(rank, world)
    cases = [(None, list(range(world)))] + list(names.items())
    for name, ranks in cases:
        p, me = len(ranks), ranks.index(rank)
        parts = [np.arange(6, dtype=np.float32) * (r + 1) for r in ranks]
        t = ms.Tensor(parts[me].copy())
        mccl.all_reduce(t, "sum", name)
        _check(np.array_equal(t.asnumpy(), sum(parts)), f"all_reduce {name}", failures)
        out = ms.Tensor(np.zeros(6 * p, np.float32))
        mccl.all_gather_into_tensor(out, ms.Tensor(parts[me].copy()), name)
        _check(np.array_equal(out.asnumpy(), np.concatenate(parts)), f"all_gather {name}", failures)
        big = [np.arange(2 * p, dtype=np.float32) + 10 * r for r in ranks]
        o = ms.Tensor(np.zeros(2, np.float32))
        mccl.reduce_scatter_tensor(o, ms.Tensor(big[me].copy()), "sum", name)
        _check(np.array_equal(o.asnumpy(), sum(big)[2 * me:2 * me + 2]), f"reduce_scatter {name}", failures)
        b = ms.Tensor(parts[me].copy())
        mccl.broadcast(b, p - 1, name)  # group-local root
        _check(np.array_equal(b.asnumpy(), parts[p - 1]), f"broadcast {name}", failures)
    # refused before anything is sent, on every rank that makes the call
    for bad in (lambda: mccl.all_reduce(ms.Tensor(np.ones(2, np.float32)), "max"),
                lambda: mccl.all_reduce(ms.Tensor(np.ones(2, np.float64)), "sum")):
        try:
            bad()
            failures.append("mccl accepted an op/dtype it cannot run on CPU")
        except SymschedArgumentError:
            pass
    mccl.barrier()  # nothing was left half-sent: the job still makes progress
    t = ms.Tensor(np.ones(2, np.float32))
    mccl.all_reduce(t)
    _check(t.asnumpy().tolist() == [float(world)] * 2, "all_reduce after refusals", failures)
    return {"failures": failures}


def runtime_after_ops(rank: int, world: int, args: Any) -> dict:
    """The host runtime starts in a process that already ran MindSpore ops (no fork), and a heap
    block viewed as a mindspore.Tensor is written by a peer's put."""
    failures: List[str] = []
    warm = ms.ops.matmul(ms.Tensor(np.ones((64, 64), np.float32)), ms.Tensor(np.ones((64, 64), np.float32)))
    _check(float(warm.asnumpy()[0, 0]) == 64.0, "warm-up op", failures)
    info = launch.discover(os.environ)
    job = launch.agree_job_id(info)
    os.environ.update(launch.runtime_env(info, job, local_rank=rank, local_world=world))
    import symsched._native as native

    rt = native.Runtime.from_env()
    _check(rt.rank == rank and rt.world_size == world, f"runtime rank {rt.rank}/{rt.world_size}", failures)
    block = rt.alloc(4 * 8)
    t = tensors.from_buffer(block, ms.float32, (8,))
    t[:] = ms.Tensor(np.full(8, -1.0, np.float32))
    g = rt.group(list(range(world)))
    g.barrier()
    src = ms.Tensor(np.full(8, float(rank + 1), np.float32))
    s = tensors.span_of(src, "src")
    g.put(rt.offset_of(block), s.ptr, s.nbytes, (rank + 1) % world)
    g.barrier()
    _check(t.asnumpy().tolist() == [float((rank - 1) % world + 1)] * 8, f"received {t.asnumpy().tolist()}", failures)
    # the tensor keeps being an ordinary MindSpore tensor
    _check(float((t * 2).sum().asnumpy()) == 16.0 * ((rank - 1) % world + 1), "op on a heap tensor", failures)
    tensors.release(t)
    rt.free(block)
    g.barrier()
    rt.world_barrier()
    import shutil

    if rt.owns_rendezvous_dir:
        shutil.rmtree(rt.rendezvous_dir, ignore_errors=True)
    return {"failures": failures, "dir": rt.rendezvous_dir}
