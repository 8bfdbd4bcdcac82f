"""The host-collective engine of groups across nodes on PyTorch: ``torch.distributed`` on the
job's own backend (gloo on CPU), over sub-groups of one rank per node
(:class:`symsched.core.nodes.HostEngine`).

* Nodes: every rank writes its node id into the job's store (``symsched/node/<rank>``) and
  reads its group's members' ids, waiting at most the signal timeout.
* Sub-groups: ``dist.new_group(ranks, use_local_synchronization=True)`` — only the sub-group's
  members take part, so each rank makes just its own inter-node sub-group, when its cross-node
  group is first used; the group's timeout is the signal timeout, which bounds every host step.
* Reductions accumulate in the launch's accumulator type (f32 for 16-bit floats): the region is
  widened, reduced by gloo, rounded once back. With a narrower wire format (e.g. bf16 wire for
  f32 data) each rank's contribution is rounded to the wire type first, so what crosses nodes
  carries the wire's precision, and is accumulated in the accumulator type.
* All-gathers and broadcasts move raw bytes (exact for every dtype); a reduce-scatter is an
  all-reduce of the region (gloo has no reduce-scatter) of which each member keeps its block.
"""

from __future__ import annotations

import ctypes
import datetime
from typing import Any, Dict, List, Sequence, Tuple

import torch
import torch.distributed as dist

from ..core.errors import SymschedRuntimeError
from ..core.nodes import blocks as _blocks

_DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
           "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8, "e4m3": torch.float8_e4m3fn,
           "e5m2": torch.float8_e5m2}
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def _timeout(timeout_ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=max(int(timeout_ms), 1))


def _raw(name: str) -> Any:
    """``torch.distributed.<name>`` itself, not the interop rule's watcher: the host step is part
    of a symsched collective (recorded as such), not framework traffic on the caller's data."""
    fn = getattr(dist, name)
    return getattr(fn, "__symsched_wrapped__", fn)


def _bytes_at(address: int, nbytes: int) -> torch.Tensor:
    """A uint8 tensor over ``nbytes`` at ``address`` (no copy)."""
    return torch.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=torch.uint8)



class TorchHostEngine:
    """:class:`symsched.core.nodes.HostEngine` on ``torch.distributed`` (see the module docs)."""

    library = "gloo"

    def __init__(self) -> None:
        self._groups: Dict[Tuple[int, ...], Any] = {}
        self.library = dist.get_backend() if dist.is_initialized() else "gloo"

    def node_ids(self, ranks: Sequence[int], mine: str, timeout_ms: int) -> List[str]:
        if not dist.is_initialized():
            raise SymschedRuntimeError("groups across nodes need torch.distributed initialised (its store tells "
                                       "every rank's node, its gloo groups run the inter-node step)")
        store = dist.distributed_c10d._get_default_store()  # noqa: SLF001 - the job's own store
        store.set(f"symsched/node/{dist.get_rank()}", mine)
        keys = [f"symsched/node/{r}" for r in ranks]
        store.wait(keys, _timeout(timeout_ms))
        return [store.get(k).decode() for k in keys]

    def prepare(self, ranks: Sequence[int], timeout_ms: int) -> None:
        key = tuple(ranks)
        if key not in self._groups:
            self._groups[key] = dist.new_group(list(ranks), timeout=_timeout(timeout_ms),
                                               use_local_synchronization=True)

    def _group(self, members: List[int]) -> Any:
        pg = self._groups.get(tuple(members))
        if pg is None:
            raise SymschedRuntimeError(f"no {self.library} sub-group of ranks {members} was made for this group")
        return pg

    def barrier(self, ranks: Sequence[int]) -> None:
        _raw("barrier")(group=self._group(list(ranks)))

    def __call__(self, op: str, address: int, nbytes: int, dtype: str, wire: str, acc: str, reduce: str,
                 members: List[int], key: str, ordinal: int) -> None:
        if nbytes == 0:
            return
        pg = self._group(members)
        raw = _bytes_at(address, nbytes)
        m = len(members)
        me = members.index(dist.get_rank())
        if op == "broadcast":
            _raw("broadcast")(raw, src=members[0], group=pg)
            return
        data = raw.view(_DTYPES[dtype])
        n = data.numel()
        blocks = _blocks(n, m)
        if op == "allgather":
            es = data.element_size()
            cap = blocks[0][1] * es
            mine = torch.zeros(cap, dtype=torch.uint8)
            s, c = blocks[me]
            mine[:c * es] = raw[s * es:(s + c) * es]
            parts = [torch.empty(cap, dtype=torch.uint8) for _ in range(m)]
            _raw("all_gather")(parts, mine, group=pg)
            for (s, c), part in zip(blocks, parts):
                raw[s * es:(s + c) * es] = part[:c * es]
            return
        if op not in ("allreduce", "reduce_scatter"):
            raise SymschedRuntimeError(f"unknown host collective `{op}`")
        if op == "allreduce" and wire == dtype == acc:
            _raw("all_reduce")(data, op=_OPS[reduce], group=pg)
            return
        work = data
        if wire != dtype:
            work = work.to(_DTYPES[wire])
        work = work.to(_DTYPES[acc]) if _DTYPES[acc] != work.dtype else work.clone()
        _raw("all_reduce")(work, op=_OPS[reduce], group=pg)
        if op == "allreduce":
            data.copy_(work)
        else:
            s, c = blocks[me]
            data[s:s + c].copy_(work[s:s + c])
