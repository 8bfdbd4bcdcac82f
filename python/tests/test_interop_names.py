"""The interop rule watches every collective a user can reach in torch: the functions of
torch.distributed and of the functional collectives, the methods of ProcessGroup and of the
backend objects, and the c10d dispatcher ops (torch.ops._c10d_functional …). The names are
enumerated from torch itself, so a collective a new torch adds cannot be missed."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List

import _harness
import pytest

#: parameter names through which a function receives tensors (or objects) to communicate
_DATA_PARAMS = {"tensor", "tensors", "tensor_list", "input", "output", "input_tensor", "output_tensor",
                "input_list", "output_tensor_lists", "input_tensor_list", "output_tensor_list", "object_list",
                "obj", "p2p_op_list", "gather_list", "scatter_list", "object_gather_list", "self"}


def _called_by(rank: int):
    """The torch call a case named NAME makes on ``rank``: in a point-to-point case the sender
    (rank 0) sends and the receiver receives."""
    p2p = {"send": "send", "recv": "send", "recv_anysource": "send"} if rank == 0 else \
        {"send": "recv", "recv": "recv", "recv_anysource": "recv_anysource"}
    p2p.update({"isend": "isend", "irecv": "isend"} if rank == 0 else {"isend": "irecv", "irecv": "irecv"})

    def called(name: str) -> str:
        last = name.split(".")[-1]
        return p2p.get(last, last)
    return called

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


def _docstring_params(fn: Any) -> List[str]:
    """The parameter lists of a pybind11 method's overloads, from its docstring signatures
    (``name(self: ProcessGroup, tensors: list[Tensor], …) -> Work``)."""
    name = getattr(fn, "__name__", "")
    out = []
    for line in (fn.__doc__ or "").splitlines():
        line = line.strip().split(". ", 1)[-1] if line[:1].isdigit() else line.strip()
        if line.startswith(name + "(") and ") ->" in line:
            out.append(line[len(name) + 1:line.rindex(") ->")])
    return out


def test_every_process_group_method_is_classified():
    from torch._C import _distributed_c10d as C

    from symsched.torch import interop

    classes = interop.process_group_classes()
    assert C.ProcessGroup in classes and C.Backend in classes and C.ProcessGroupGloo in classes
    # the collectives of the ProcessGroup object (``dist.new_group``, ``_get_default_group()``)
    # and of a backend (``pg._get_backend(device)``) are watched
    pg, be = set(interop.process_group_collectives(C.ProcessGroup)), set(interop.process_group_collectives(C.Backend))
    for n in ("allreduce", "allgather", "broadcast", "reduce_scatter", "alltoall_base", "alltoall", "barrier",
              "send", "recv", "_allgather_base", "_reduce_scatter_base", "allreduce_coalesced", "gather", "scatter"):
        assert n in pg and n in be, n
    for n in ("all_gather_single", "reduce_scatter_single", "all_to_all_single", "allgather_into_tensor_coalesced"):
        assert n in pg, n
    # an exemption cannot hide a collective: no overload of an exempt method takes a tensor
    for cls in classes:
        for n, v in vars(cls).items():
            if n in interop.PG_NOT_COLLECTIVES:
                sigs = _docstring_params(getattr(cls, n))
                assert all("Tensor" not in p for p in sigs), f"{cls.__name__}.{n} takes a tensor yet is exempt: {sigs}"
    # and every method that takes a tensor is watched
    for cls in classes:
        watched = set(interop.process_group_collectives(cls))
        for n, v in vars(cls).items():
            if type(v).__name__ == "instancemethod" and any("Tensor" in p for p in _docstring_params(getattr(cls, n))):
                assert n in watched, f"{cls.__name__}.{n} takes a tensor but is not watched"


def test_every_c10d_dispatcher_op_is_classified():
    import torch

    from symsched.torch import interop

    ops = set(interop.op_collectives())
    registered = {tuple(q.split(".")[0].split("::")) for q in torch._C._dispatch_get_all_op_names()
                  if q.split("::")[0] in interop.OP_NAMESPACES}
    # the functional collectives and torch.compile's graphs go through these: all watched,
    # with their in-place, out= and coalesced forms
    for n in ("all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_", "all_gather_into_tensor",
              "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced", "reduce_scatter_tensor",
              "reduce_scatter_tensor_out", "reduce_scatter_tensor_coalesced", "all_to_all_single", "broadcast",
              "broadcast_"):
        assert ("_c10d_functional", n) in ops, n
    assert ("_c10d_functional", "wait_tensor") not in ops  # waits for a collective, sends nothing
    # what is left out takes no group: it cannot be a collective
    for ns, n in registered - ops:
        packet = getattr(getattr(torch.ops, ns), n)
        for o in packet.overloads():
            schema = getattr(packet, o)._schema
            assert not any(a.name == "group_name" or "ProcessGroup" in str(a.type) for a in schema.arguments), schema
    assert ("c10d", "allreduce_") in ops and ("_c10d_functional_autograd", "all_to_all_single") in ops


def seen(rank: int, world: int, args: Any) -> Dict[str, Any]:
    """Every collective method of a ProcessGroup and of its backend object, and every
    collective dispatcher op, called for real on gloo inside a step: its tensor is recorded and
    a symsched collective on the same storage is then refused."""
    import torch
    import torch.distributed as dist
    from torch._C import _distributed_c10d as C

    import symsched as symm
    from symsched.core import adapter
    from symsched.core import interop as core_interop
    from symsched.torch import interop

    symm.init()
    fails: List[str] = []
    peer = 1 - rank
    pg = dist.new_group([0, 1])  # a group made by the user, beside the default one
    default = dist.distributed_c10d._get_default_group()
    backend = default._get_backend(torch.device("cpu"))
    E = torch.zeros

    def methods(o: Any) -> Dict[str, Callable[[torch.Tensor], Any]]:
        """name -> a call of ``o.<name>`` communicating the 8-element tensor it is given"""
        return {
            "broadcast": lambda t: o.broadcast([t]).wait(),
            "allreduce": lambda t: o.allreduce([t]).wait(),
            "allreduce_coalesced": lambda t: o.allreduce_coalesced([t]).wait(),
            "reduce": lambda t: o.reduce([t], dist.ReduceOptions()).wait(),
            "allgather": lambda t: o.allgather([[E(8), E(8)]], [t]).wait(),
            "all_gather_single": lambda t: o.all_gather_single(E(16), t).wait(),
            "_allgather_base": lambda t: o._allgather_base(E(16), t).wait(),
            "allgather_coalesced": lambda t: o.allgather_coalesced([[E(8)], [E(8)]], [t]).wait(),
            "all_gather_single_coalesced": lambda t: o.all_gather_single_coalesced([E(16)], [t]).wait(),
            "allgather_into_tensor_coalesced": lambda t: o.allgather_into_tensor_coalesced([E(16)], [t]).wait(),
            "gather": lambda t: o.gather([[E(8), E(8)]] if rank == 0 else [], [t], dist.GatherOptions()).wait(),
            "scatter": lambda t: o.scatter([t], [[E(8), E(8)]] if rank == 0 else [], dist.ScatterOptions()).wait(),
            "reduce_scatter": lambda t: o.reduce_scatter([E(4)], [[t[:4], t[4:]]]).wait(),
            "reduce_scatter_single": lambda t: o.reduce_scatter_single(E(4), t).wait(),
            "_reduce_scatter_base": lambda t: o._reduce_scatter_base(E(4), t).wait(),
            "reduce_scatter_single_coalesced": lambda t: o.reduce_scatter_single_coalesced([E(4)], [t]).wait(),
            "reduce_scatter_tensor_coalesced": lambda t: o.reduce_scatter_tensor_coalesced([E(4)], [t]).wait(),
            "all_to_all_single": lambda t: o.all_to_all_single(E(8), t, [], []).wait(),
            "alltoall_base": lambda t: o.alltoall_base(E(8), t, [], []).wait(),
            "alltoall": lambda t: o.alltoall([E(4), E(4)], [t[:4], t[4:]]).wait(),
            # point to point: rank 0 sends, rank 1 receives the same storage (see ``called``)
            "send": lambda t: (o.send([t], peer, 0) if rank == 0 else o.recv([t], peer, 0)).wait(),
            "recv": lambda t: (o.send([t], peer, 1) if rank == 0 else o.recv([t], peer, 1)).wait(),
            "recv_anysource": lambda t: (o.send([t], peer, 2) if rank == 0 else o.recv_anysource([t], 2)).wait(),
        }

    gn = pg.group_name
    F, A = torch.ops._c10d_functional, torch.ops._c10d_functional_autograd
    W = F.wait_tensor

    def waits(xs: Any) -> None:
        for x in xs:
            W(x)

    ops: Dict[str, Callable[[torch.Tensor], Any]] = {
        "_c10d_functional.all_reduce": lambda t: W(F.all_reduce(t, "sum", gn)),
        "_c10d_functional.all_reduce_": lambda t: W(F.all_reduce_.default(t, "sum", gn)),
        "_c10d_functional.all_reduce_coalesced": lambda t: waits(F.all_reduce_coalesced([t], "sum", gn)),
        "_c10d_functional.all_reduce_coalesced_": lambda t: waits(F.all_reduce_coalesced_([t], "sum", gn)),
        "_c10d_functional.all_gather_into_tensor": lambda t: W(F.all_gather_into_tensor.default(t, 2, gn)),
        "_c10d_functional.all_gather_into_tensor_out": lambda t: W(F.all_gather_into_tensor_out(t, 2, gn, out=E(16))),
        "_c10d_functional.all_gather_into_tensor_coalesced": lambda t: waits(F.all_gather_into_tensor_coalesced([t], 2, gn)),
        "_c10d_functional.reduce_scatter_tensor": lambda t: W(F.reduce_scatter_tensor(t, "sum", 2, gn)),
        "_c10d_functional.reduce_scatter_tensor_out": lambda t: W(F.reduce_scatter_tensor_out(t, "sum", 2, gn,
                                                                                             out=E(4))),
        "_c10d_functional.reduce_scatter_tensor_coalesced": lambda t: waits(
            F.reduce_scatter_tensor_coalesced([t], "sum", 2, gn)),
        "_c10d_functional.all_to_all_single": lambda t: W(F.all_to_all_single(t, [4, 4], [4, 4], gn)),
        "_c10d_functional.broadcast": lambda t: W(F.broadcast(t, 0, gn)),
        "_c10d_functional.broadcast_": lambda t: W(F.broadcast_(t, 0, gn)),
        "_c10d_functional.isend": lambda t: W(F.isend(t, peer, 0, gn) if rank == 0 else F.irecv(t, peer, 0, gn)),
        "_c10d_functional.irecv": lambda t: W(F.isend(t, peer, 1, gn) if rank == 0 else F.irecv(t, peer, 1, gn)),
        "_c10d_functional.batch_p2p_ops": lambda t: waits(
            F.batch_p2p_ops(["isend" if rank == 0 else "irecv"], [peer], [3], [t], gn)),
        "_c10d_functional_autograd.all_gather_into_tensor": lambda t: W(A.all_gather_into_tensor(t, 2, gn)),
        "_c10d_functional_autograd.all_to_all_single": lambda t: W(A.all_to_all_single(t, [4, 4], [4, 4], gn)),
        "_c10d_functional_autograd.reduce_scatter_tensor": lambda t: W(A.reduce_scatter_tensor(t, "sum", 2, gn)),
        # the ops ProcessGroup methods dispatch to, reachable directly with a boxed group
        "c10d.allreduce_": lambda t: torch.ops.c10d.allreduce_(
            [t], pg.boxed(), torch.classes.c10d.ReduceOp(), None, False, -1)[1].wait(),
        "c10d.broadcast_": lambda t: torch.ops.c10d.broadcast_([t], pg.boxed(), 0, 0, False, -1)[1].wait(),
    }
    cases: Dict[str, Callable[[torch.Tensor], Any]] = {}
    for label, o in (("ProcessGroup", pg), ("Backend", backend)):
        for n, f in methods(o).items():
            if n in vars(type(o)) or n in vars(C.ProcessGroup if label == "ProcessGroup" else C.Backend):
                cases[f"{label}.{n}"] = f
    cases.update(ops)
    # every watched method of the two classes and every functional op has a case here: a
    # collective a new torch adds fails this test until it has one
    expected = {f"ProcessGroup.{n}" for n in interop.process_group_collectives(C.ProcessGroup)}
    expected |= {f"Backend.{n}" for n in interop.process_group_collectives(C.Backend)}
    expected |= {f"{ns}.{n}" for ns, n in interop.op_collectives() if ns != "c10d"}
    expected -= {f"{c}.{n}" for c in ("ProcessGroup", "Backend") for n in ("barrier", "monitored_barrier")}
    missing = expected - set(cases)
    if missing:
        fails.append(f"watched but without a case here: {sorted(missing)}")
    called = _called_by(rank)

    for name, fn in cases.items():
        t = torch.ones(8)
        symm.barrier()  # a refusal aborts the group: nobody may still be in the previous call
        try:
            with symm.interop.step():
                fn(t)
                rec = core_interop._records().get(adapter.active().interop_key(t)[0])
                if rec is None or rec[0] != "gloo" or rec[1].split(".")[-1] != called(name):
                    fails.append(f"{name}: recorded as {rec and rec[:2]}")
                symm.shmem_allreduce(t)
            fails.append(f"{name}: the mix was not detected")
        except symm.ForbiddenMixError as e:
            if called(name) not in str(e):
                fails.append(f"{name}: the message does not name the call: {e}")
        except Exception as e:  # noqa: BLE001
            fails.append(f"{name}: {type(e).__name__}: {e}")
    # the barriers carry no data: watched (wrapped during the step) and still working
    symm.barrier()
    with symm.interop.step():
        for cls, o in ((C.ProcessGroup, pg), (C.Backend, backend)):
            for n in ("barrier", "monitored_barrier"):
                if not hasattr(vars(cls)[n], "__symsched_wrapped__"):
                    fails.append(f"{cls.__name__}.{n} not wrapped in a step")
            o.barrier().wait()
            o.monitored_barrier()
    # a symsched collective first, then a ProcessGroup method / a dispatcher op: refused too,
    # before gloo sends anything (every rank refuses, so nobody waits)
    for name, fn in (("ProcessGroup.allreduce", cases["ProcessGroup.allreduce"]),
                     ("_c10d_functional.all_reduce", ops["_c10d_functional.all_reduce"])):
        t = torch.ones(8)
        symm.barrier()
        try:
            with symm.interop.step():
                symm.shmem_allreduce(t)
                fn(t)
            fails.append(f"symsched then {name}: the mix was not detected")
        except symm.ForbiddenMixError:
            pass
    # outside a step every method and op is the original again
    for owner, n in interop.watched():
        if isinstance(owner, torch._ops._OpNamespace):
            packet = getattr(owner, n)
            if not isinstance(packet, torch._ops.OpOverloadPacket):
                fails.append(f"torch.ops.{owner.name}.{n} is not torch's op: {packet!r}")
            for entry in [packet] + [getattr(packet, o) for o in packet.overloads()]:
                if isinstance(entry._op, interop.WatchedKernel):
                    fails.append(f"{entry} still wrapped after the step")
            continue
        f = vars(owner).get(n) if isinstance(owner, type) else getattr(owner, n)
        if hasattr(f, "__symsched_wrapped__"):
            fails.append(f"{owner}.{n} still wrapped after the step")
    symm.barrier()
    t = torch.full((8,), float(rank + 1))
    pg.allreduce([t]).wait()
    if not torch.equal(t, torch.full((8,), 3.0)):
        fails.append(f"gloo allreduce after the steps: {t}")
    return {"failures": fails, "cases": len(cases)}


@pytest.mark.timeout(200)
def test_process_group_methods_and_dispatcher_ops_are_seen():
    res = _harness.ok(_harness.run("test_interop_names", "seen", 2, timeout=180))
    assert res[0]["cases"] >= 60


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
    called = _called_by(rank)

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


def compiled(rank: int, world: int, args: Any) -> Dict[str, Any]:
    """torch.compile regions in a step: a graph's gloo collectives are recorded when the graph
    runs (its ``_c10d_functional`` ops), whether it was compiled before the step or inside it."""
    import torch
    import torch.distributed as dist

    import symsched as symm

    symm.init()
    fails: List[str] = []

    def gloo(t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t)
        return t * 1

    def both(t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t)  # a fresh buffer in the graph: symsched reduces gloo's output ...
        symm.shmem_allreduce(t)  # ... ordered after it by the data dependency
        return t * 1

    cgloo = torch.compile(gloo, backend="aot_eager", fullgraph=True)
    cboth = torch.compile(both, backend="aot_eager", fullgraph=True)
    cgloo(torch.ones(8))  # compiled outside the step; the step recompiles it (the guarded names change)

    def refused(what: str, fn: Callable[[torch.Tensor], Any]) -> None:
        t = torch.ones(8)
        symm.barrier()  # a refusal aborts the group: the barrier resets it
        try:
            with symm.interop.step():
                fn(t)
            fails.append(f"{what}: the mix was not detected")
        except symm.ForbiddenMixError as e:
            if "all_reduce" not in str(e):
                fails.append(f"{what}: the message does not name the op: {e}")
        except Exception as e:  # noqa: BLE001
            fails.append(f"{what}: {type(e).__name__}: {e}")

    refused("compiled gloo then eager symsched", lambda t: (cgloo(t), symm.shmem_allreduce(t)))
    refused("eager symsched then compiled gloo", lambda t: (symm.shmem_allreduce(t), cgloo(t)))
    # compiled inside the step (no crash, no graph break with fullgraph), and a graph mixing both
    # libraries on one tensor computes what eager code does: gloo's sum, then symsched's
    symm.barrier()
    torch._dynamo.reset()
    t = torch.ones(8)
    with symm.interop.step():
        out = cboth(t)
    want = torch.full((8,), float(world * world))
    if not (torch.equal(out, want) and torch.equal(t, want)):
        fails.append(f"the compiled mix computed {out}, {t} (want {want})")
    # outside a step the graph runs with nothing wrapped
    u = torch.ones(8)
    if not torch.equal(cgloo(u), torch.full((8,), float(world))):
        fails.append(f"compiled gloo after the steps: {u}")
    symm.barrier()
    return {"failures": fails}


@pytest.mark.timeout(300)
def test_compiled_regions_follow_the_interop_rule():
    _harness.ok(_harness.run("test_interop_names", "compiled", 2, timeout=280))
