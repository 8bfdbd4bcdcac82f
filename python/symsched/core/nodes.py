"""Groups whose members span nodes: shared memory inside each node, the framework's own
collective library across nodes.

Each node has its own symmetric heaps (the runtime bootstraps the ranks of a node together and
never maps another node's memory; ``SYMSCHED_NODE_ID`` emulates nodes on one host). A group
whose members live on several nodes therefore cannot run the single-node schedules; it gets a
:class:`CrossNodeHandle` instead of a runtime group, which runs the hierarchical schedules of
the standard library — ``allreduce_hier``, ``reduce_scatter_hier``, ``allgather_hier`` (shmem
steps inside each node, one ``hostcoll`` step across) — for the all-reduce, reduce-scatter and
all-gather, their functional and differentiable forms and their backwards, chosen automatically:
the core picks its single-node schedule as usual and the handle swaps in the hierarchical one
of the same collective (:data:`HIERARCHICAL`). Every other launch (alltoall, broadcast, send,
MC2 …) and every one-sided primitive on such a group is refused before anything is sent, with
an error naming the nodes (the RFC keeps one-sided traffic within a node).

**Layout.** The group's ranks must come node by node, the same number on every node (``L``):
group-local ranks ``b·L … b·L + L - 1`` on node ``b``, which is what the hierarchical schedules'
``over nodes(L)`` means. The inter-node step of the rank with node-local index ``l`` runs over
the group-local ranks ``l, l + L, l + 2L …`` (one rank per node): the framework engine makes
that sub-group once, when the group is first used.

**The framework's part** is a :class:`HostEngine`, which the adapter returns from
:meth:`~symsched.core.adapter.FrameworkAdapter.host_engine`: it tells every member's node, makes
the sub-groups, and performs the host collectives the native bridge (``python/src/hostcoll.rs``)
calls back with the GIL held. A failure in it is a typed runtime error of the launch.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

from .errors import SymschedArgumentError, SymschedRuntimeError

#: Single-node schedule → the hierarchical schedule of the same collective.
HIERARCHICAL: Dict[str, str] = {
    "allreduce_one_shot": "allreduce_hier",
    "allreduce_two_shot": "allreduce_hier",
    "allreduce_two_shot_pull": "allreduce_hier",
    "allreduce_two_shot_wire": "allreduce_hier",
    "allreduce_ring": "allreduce_hier",
    "allreduce_ring_gloo": "allreduce_hier",
    "reduce_scatter_push": "reduce_scatter_hier",
    "reduce_scatter_pull": "reduce_scatter_hier",
    "reduce_scatter_push_wire": "reduce_scatter_hier",
    "allgather_push": "allgather_hier",
    "allgather_pull": "allgather_hier",
    "allgather_one_shot": "allgather_hier",
    # derived duals (`F.dual`): the all-gathers' backwards are reduce-scatters
    "allgather_push.dual": "reduce_scatter_hier",
    "allgather_pull.dual": "reduce_scatter_hier",
    "allgather_one_shot.dual": "reduce_scatter_hier",
}


class HostEngine(Protocol):
    """The framework's collective library as the cross-node groups use it."""

    #: its name in messages (``"gloo"``, ``"mccl"``)
    library: str

    def node_ids(self, ranks: Sequence[int], mine: str, timeout_ms: int) -> List[str]:
        """The node id of every rank of ``ranks`` (global ranks), ``mine`` being this rank's.
        Collective over ``ranks``; waits at most ``timeout_ms``."""

    def prepare(self, ranks: Sequence[int], timeout_ms: int) -> None:
        """Make the framework's sub-group of ``ranks`` (global, this rank included), collective
        over them, so :meth:`__call__` can use it; its collectives time out after
        ``timeout_ms`` (the runtime's signal timeout)."""

    def barrier(self, ranks: Sequence[int]) -> None:
        """A barrier over ``ranks`` on the framework's library."""

    def __call__(self, op: str, address: int, nbytes: int, dtype: str, wire: str, acc: str, reduce: str,
                 members: List[int], key: str, ordinal: int) -> None:
        """One host collective, in place on ``nbytes`` at ``address`` (``dtype`` elements): ``op``
        is allreduce / allgather / reduce_scatter / broadcast over ``members`` (global ranks, in
        member order) with the semantics of ``symsched_runtime::exec::hostcoll``; reductions
        accumulate in ``acc`` and may send ``wire`` (narrower) between nodes."""


def blocks(n: int, m: int) -> List[Tuple[int, int]]:
    """``(start, length)`` of the ``m`` blocks of a host collective's ``n`` elements: the ceil
    split the runtime's host-collective semantics use (block ``i`` belongs to member ``i``)."""
    c = -(-n // m) if m else 0
    return [(min(i * c, n), min((i + 1) * c, n) - min(i * c, n)) for i in range(m)]


class NodeLayout:
    """Which node each member of a group is on, checked to be node by node, ``L`` per node."""

    def __init__(self, ranks: Tuple[int, ...], nodes: Sequence[str]) -> None:
        self.ranks = ranks
        self.nodes = list(nodes)
        order: List[str] = []
        for n in self.nodes:
            if not order or order[-1] != n:
                order.append(n)
        self.order = order
        counts = [self.nodes.count(n) for n in order]
        if len(set(order)) != len(order) or len(set(counts)) != 1:
            raise SymschedArgumentError(
                f"group {list(ranks)} spans nodes {self.describe()}: a group across nodes must list its ranks "
                f"node by node with the same number of ranks on every node (the hierarchical schedules run "
                f"shmem inside each node of L ranks and the framework's library across)")
        self.per_node = counts[0]

    def describe(self) -> str:
        """``node-a (ranks 0, 1), node-b (ranks 2, 3)``."""
        seen: Dict[str, List[int]] = {}
        for r, n in zip(self.ranks, self.nodes):
            seen.setdefault(n, []).append(r)
        return ", ".join(f"{n} (ranks {', '.join(map(str, rs))})" for n, rs in seen.items())

    def cross(self, local: int) -> List[int]:
        """Global ranks of the inter-node sub-group of group-local rank ``local``."""
        return list(self.ranks[local % self.per_node::self.per_node])


class _Refused:
    """A primitive a cross-node group cannot run: raises naming the nodes."""

    def __init__(self, handle: "CrossNodeHandle", what: str) -> None:
        self.handle, self.what = handle, what

    def __call__(self, *args: Any, **kw: Any) -> Any:
        raise SymschedArgumentError(
            f"{self.what} on group {list(self.handle.layout.ranks)}: its members span nodes "
            f"{self.handle.layout.describe()}; one-sided primitives reach only ranks of this rank's node "
            f"({self.handle.layout.nodes[self.handle.rank]}) and each node has its own symmetric heaps. Use a "
            f"group of one node's ranks, or the collectives (allreduce, reduce_scatter, allgather), which run "
            f"hierarchically on such a group")


class CrossNodeHandle:
    """What :class:`~symsched.core.state.GroupInfo` holds for a group spanning nodes, in place of
    a runtime group (the same members the core uses: ``prepare``, ``duals``, the primitives)."""

    def __init__(self, native_group: Any, layout: NodeLayout, engine: HostEngine) -> None:
        self._g = native_group
        self.layout = layout
        self.engine = engine
        self.rank = int(native_group.rank)
        self.size = int(native_group.size)
        self.name = str(native_group.name)
        self.members = list(native_group.members)
        self.put = _Refused(self, "shmem_put")
        self.get = _Refused(self, "shmem_get")
        self.signal = _Refused(self, "shmem_signal_op")
        self.wait = _Refused(self, "shmem_wait_for_signal")
        self.put_with_signal = _Refused(self, "shmem_put_with_signal")

    # The failure protocol (core.failure): the abort record lives in this node's heap, so a
    # failing rank's abort reaches the members of its node; the other nodes learn of a failure
    # from the framework's library (its errors and timeouts in the host step).
    def abort(self, message: str) -> None:
        self._g.abort(message)

    def aborted(self) -> Any:
        return self._g.aborted()

    def reset_after_abort(self, timeout_ms: Optional[int] = None) -> int:
        return int(self._g.reset_after_abort(timeout_ms))

    def generation(self) -> int:
        return int(self._g.generation())

    def renewed(self) -> "CrossNodeHandle":
        return CrossNodeHandle(self._g.renewed(), self.layout, self.engine)

    def barrier(self) -> None:
        """Every member, on every node: the node's ranks meet in the heap, the nodes on the
        framework's library, then the node again (so no rank leaves before every node arrived)."""
        self._g.node_barrier()
        if self.rank % self.layout.per_node == 0:
            self.engine.barrier(self.layout.cross(self.rank))
        self._g.node_barrier()

    def prepare(self, schedule: str, params: Dict[str, int], dtype: str, op: Optional[str], wire: Optional[str],
                sizes: Dict[str, int], check_always: bool = False) -> Any:
        hier = HIERARCHICAL.get(schedule)
        if hier is None:
            raise SymschedArgumentError(
                f"`{schedule}` cannot run on group {list(self.layout.ranks)}: its members span nodes "
                f"{self.layout.describe()}, and across nodes symsched runs only the all-reduce, reduce-scatter "
                f"and all-gather (hierarchically: shmem inside each node, {self.engine.library} across)")
        return self._g.prepare(hier, {"L": self.layout.per_node}, dtype, op, wire, sizes)

    def duals(self, schedule: str, params: Dict[str, int]) -> List[Dict[str, Any]]:
        """The duals of the single-node ``schedule`` (the core's backward rules name those)."""
        from .native import native

        out: List[Dict[str, Any]] = []
        for kind, name, ps, collective in native().schedule_duals(schedule, self.size, dict(params)):
            d: Dict[str, Any] = {"kind": kind}
            if kind == "schedule":
                d.update(name=name, params=dict(ps), collective=collective)
            out.append(d)
        return out


#: this process's ``(node id, local world size, signal timeout in ms)``, read once from the runtime
_mine: Optional[Tuple[str, int, int]] = None


def handle_for(rt: Any, ranks: Tuple[int, ...], me: int, engine_of: Any) -> Optional[CrossNodeHandle]:
    """A :class:`CrossNodeHandle` when ``ranks`` span nodes, else None (a runtime group serves).

    Collective over ``ranks`` when the job may span nodes (the runtime bootstrapped fewer ranks
    than the job has, or ``SYMSCHED_NODE_ID`` names the node): the members tell each other their
    node through the framework (``engine_of()`` gives the :class:`HostEngine`)."""
    global _mine
    from .native import native

    nat = native()
    if _mine is None:
        node, local_world, timeout_ms = nat.node_info(rt)
        _mine = (str(node), int(local_world), int(timeout_ms))
    node, local_world, timeout_ms = _mine
    from . import knobs

    if local_world >= int(rt.world_size) and not knobs.NODE_ID.is_set():
        return None
    engine = engine_of()
    try:
        nodes = engine.node_ids(ranks, node, timeout_ms)
    except SymschedArgumentError:
        raise
    except Exception as exc:
        raise SymschedRuntimeError(f"cannot learn the nodes of group {list(ranks)} through "
                                   f"{engine.library}: {exc}") from exc
    if all(n == node for n in nodes):
        return None
    layout = NodeLayout(ranks, nodes)
    local = ranks.index(me)
    try:
        engine.prepare(layout.cross(local), timeout_ms)
        g = nat.cross_node_group(rt, list(ranks), engine, engine.library)
    except SymschedArgumentError:
        raise
    except Exception as exc:
        raise SymschedRuntimeError(f"cannot create group {list(ranks)} across nodes {layout.describe()}: "
                                   f"{exc}") from exc
    return CrossNodeHandle(g, layout, engine)
