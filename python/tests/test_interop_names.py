"""The interop rule watches every collective a user can reach in torch.distributed: the names
are enumerated from torch itself, so a collective a new torch adds cannot be missed."""

from __future__ import annotations

import inspect
from typing import Any, Dict, List

import _harness
import pytest

#: parameter names through which a function receives tensors (or objects) to communicate
_DATA_PARAMS = {"tensor", "tensors", "tensor_list", "input", "output", "input_tensor", "output_tensor",
                "input_list", "output_tensor_lists", "input_tensor_list", "output_tensor_list", "object_list",
                "obj", "p2p_op_list", "gather_list", "scatter_list", "object_gather_list", "self"}


def _public_functions(mod: Any) -> Dict[str, Any]:
    return {n: f for n, f in vars(mod).items() if not n.startswith("_") and inspect.isfunction(f)}


def test_every_torch_distributed_collective_is_watched():
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from symsched.torch import interop

    watched = set(interop.c10d_collectives())
    # every function torch.distributed exposes that comes from distributed_c10d is either
    # watched or a set-up/query function that carries no data
    reachable = {n for n, f in _public_functions(dist).items() if f.__module__ == c10d.__name__}
    reachable |= {n for n in c10d.__all__ if inspect.isfunction(getattr(c10d, n, None))}
    unclassified = reachable - watched - interop.NOT_COLLECTIVES
    assert not unclassified, f"torch.distributed functions neither watched nor exempt: {sorted(unclassified)}"
    # an exemption cannot hide a collective: none of them takes data to communicate
    for n in interop.NOT_COLLECTIVES:
        f = getattr(c10d, n, None)
        if f is None:
            continue
        params = set(inspect.signature(f).parameters)
        assert not params & _DATA_PARAMS, f"{n} takes {params & _DATA_PARAMS} yet is exempt"
    # a function with a data parameter and a group is a collective: it is watched
    for n in reachable:
        params = set(inspect.signature(getattr(c10d, n)).parameters)
        if params & _DATA_PARAMS and ("group" in params or "p2p_op_list" in params):
            assert n in watched, n
    # the names torch 2.x tells users to move to, and the batched point-to-point form
    for n in ("reduce_scatter_tensor", "all_gather_into_tensor", "all_reduce_coalesced", "all_to_all_single",
              "batch_isend_irecv", "isend", "irecv", "all_gather_object", "scatter", "gather"):
        assert n in watched, n
    for n in ("reduce_scatter_single", "all_gather_single", "all_gather_coalesced"):
        if hasattr(dist, n):
            assert n in watched, n
    # every (module, name) pair exists and both spellings are wrapped
    pairs = set((m.__name__, n) for m, n in interop.watched())
    for n in watched:
        assert ("torch.distributed", n) in pairs and (c10d.__name__, n) in pairs, n


def test_every_functional_collective_is_watched():
    import torch.distributed._functional_collectives as funcol

    from symsched.torch import interop

    watched = set(interop.functional_collectives())
    public = {n for n, f in _public_functions(funcol).items() if f.__module__ == funcol.__name__}
    plumbing = {n for n in public if n.endswith(("_backward", "_setup_context"))}
    unclassified = public - watched - plumbing - interop.FUNCTIONAL_NOT_COLLECTIVES
    assert not unclassified, sorted(unclassified)
    for n in ("all_reduce", "all_gather_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast",
              "all_reduce_coalesced", "reduce_scatter_tensor_coalesced", "permute_tensor"):
        if hasattr(funcol, n):
            assert n in watched, n


def mixes(rank: int, world: int, args: Any) -> Dict[str, Any]:
    """A storage a newly watched torch collective touched is refused by symsched in the same step."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    import torch.distributed.distributed_c10d as c10d

    import symsched as symm

    symm.init()
    fails: List[str] = []
    peer = 1 - rank
    group = dist.group.WORLD

    def p2p(t: torch.Tensor) -> None:
        ops = [dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, torch.empty_like(t), peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()

    cases = {
        "reduce_scatter_tensor": lambda t: dist.reduce_scatter_tensor(torch.empty(4), t),
        "all_gather_into_tensor": lambda t: dist.all_gather_into_tensor(torch.empty(8 * world), t),
        "all_reduce_coalesced": lambda t: dist.all_reduce_coalesced([t]),
        "distributed_c10d.all_reduce": lambda t: c10d.all_reduce(t),
        "batch_isend_irecv": p2p,
        "_functional_collectives.all_reduce": lambda t: funcol.wait_tensor(funcol.all_reduce(t, "sum", group)),
    }
    if hasattr(dist, "reduce_scatter_single"):
        cases["reduce_scatter_single"] = lambda t: dist.reduce_scatter_single(torch.empty(4), t)
    if hasattr(dist, "all_gather_single"):
        cases["all_gather_single"] = lambda t: dist.all_gather_single(torch.empty(8 * world), t)
    for name, fn in cases.items():
        t = torch.ones(8)
        symm.barrier()  # a refusal aborts the group: nobody may still be in the previous call
        try:
            with symm.interop.step():
                fn(t)
                symm.shmem_allreduce(t)
            fails.append(f"{name}: the mix was not detected")
        except symm.ForbiddenMixError as e:
            if "gloo" not in str(e) and "torch" not in str(e) and name.split(".")[-1] not in str(e):
                fails.append(f"{name}: unclear message {e}")
        except Exception as e:  # noqa: BLE001
            fails.append(f"{name}: {type(e).__name__}: {e}")
    # outside a step the functions are the originals again
    for mod, n in symm.interop.watched():
        if hasattr(getattr(mod, n), "__symsched_wrapped__"):
            fails.append(f"{mod.__name__}.{n} still wrapped after the step")
    symm.barrier()
    return {"failures": fails}


@pytest.mark.timeout(150)
def test_newly_watched_collectives_are_refused_when_mixed():
    _harness.ok(_harness.run("test_interop_names", "mixes", 2, timeout=130))
