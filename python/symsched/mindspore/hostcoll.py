"""The host-collective engine of groups across nodes on MindSpore: mccl (hccl on Ascend) through
``mindspore.mint.distributed`` (:class:`symsched.core.nodes.HostEngine`).

mccl on CPU reduces with ``sum`` only and carries no float64 (see :mod:`.mccl`), so every host
step here is one ``all_gather`` of raw bytes (as int32 words, which mccl carries on CPU) over
the inter-node sub-group, and the reduction is folded locally in member order with numpy:
exact for all-gathers and broadcasts, every reduce op and dtype, the same result on every
member, and the fold the runtime's host-collective semantics name. Reductions accumulate in
the launch's accumulator type (f32 for 16-bit floats) and round once into the data type; with a
narrower wire format (f16 or bf16 for f32 data) each rank's contribution crosses the nodes in
the wire type. An fp8 wire is refused across nodes (numpy has no fp8).

Sub-groups are ``mint.distributed.new_group(ranks)`` of the members only, made when the
cross-node group is first used; a rank's node id travels the same way (a fixed-width
all-gather). mccl's own timeouts bound its calls (MindSpore has no per-group timeout on CPU).
Nothing here forks or starts processes.
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Sequence, Tuple

import mindspore as ms
import numpy as np

from ..core.nodes import blocks as _blocks
from . import mccl
from .errors import SymschedRuntimeError

_NODE_WIDTH = 256  # bytes of a node id (the runtime's maximum is 255)
_PLAIN = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32, "i64": np.int64,
          "u8": np.uint8}
_FOLD = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def _bytes_at(address: int, nbytes: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))


def _decode(raw: np.ndarray, dtype: str, acc: str) -> np.ndarray:
    """Elements of ``dtype`` stored in ``raw`` as ``acc`` values."""
    if dtype == "bf16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(_PLAIN[acc])
    if dtype not in _PLAIN:
        raise SymschedRuntimeError(f"dtype {dtype} cannot cross nodes on mccl")
    return raw.view(_PLAIN[dtype]).astype(_PLAIN[acc])


def _encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` rounded (to nearest even) into ``dtype``, as bytes."""
    if dtype == "bf16":
        u = values.astype(np.float32).view(np.uint32)
        nan = np.isnan(values)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        r[nan] = 0x7FC0
        return r.view(np.uint8)
    if dtype not in _PLAIN:
        raise SymschedRuntimeError(f"dtype {dtype} cannot cross nodes on mccl")
    return values.astype(_PLAIN[dtype]).view(np.uint8)



class MindSporeHostEngine:
    """:class:`symsched.core.nodes.HostEngine` on mccl (see the module docs)."""

    library = "mccl"

    def __init__(self) -> None:
        self._groups: Dict[Tuple[int, ...], str] = {}

    def _group(self, ranks: Sequence[int]) -> str:
        key = tuple(ranks)
        name = self._groups.get(key)
        if name is None:
            name = mccl.group_name(list(key))
            self._groups[key] = name
        return name

    def _all_gather(self, payload: np.ndarray, ranks: Sequence[int]) -> List[np.ndarray]:
        """Every member's ``payload`` (bytes, the same length everywhere), in member order."""
        n = payload.size
        words = np.zeros(-(-n // 4), dtype=np.int32)
        words.view(np.uint8)[:n] = payload
        dist = mccl._dist()  # noqa: SLF001 - the same mint.distributed module
        parts = [ms.Tensor(np.zeros_like(words)) for _ in ranks]
        mccl._run("all_gather", dist.all_gather, parts, ms.Tensor(words), self._group(ranks))  # noqa: SLF001
        return [p.asnumpy().view(np.uint8)[:n] for p in parts]

    def node_ids(self, ranks: Sequence[int], mine: str, timeout_ms: int) -> List[str]:
        raw = mine.encode()[:_NODE_WIDTH].ljust(_NODE_WIDTH, b"\0")
        parts = self._all_gather(np.frombuffer(raw, dtype=np.uint8).copy(), ranks)
        return [bytes(p).rstrip(b"\0").decode(errors="replace") for p in parts]

    def prepare(self, ranks: Sequence[int], timeout_ms: int) -> None:
        self._group(ranks)

    def barrier(self, ranks: Sequence[int]) -> None:
        mccl.barrier(self._group(ranks))

    def __call__(self, op: str, address: int, nbytes: int, dtype: str, wire: str, acc: str, reduce: str,
                 members: List[int], key: str, ordinal: int) -> None:
        if nbytes == 0:
            return
        from mindspore.communication import get_rank

        region = _bytes_at(address, nbytes)
        me = members.index(int(get_rank()))
        m = len(members)
        if op == "broadcast":
            region[:] = self._all_gather(region.copy(), members)[0]
            return
        if op == "allgather":
            es = nbytes // max(1, self._count(nbytes, dtype))
            parts = self._all_gather(region.copy(), members)
            for j, (s, c) in enumerate(_blocks(nbytes // es, m)):
                region[s * es:(s + c) * es] = parts[j][s * es:(s + c) * es]
            return
        if op not in ("allreduce", "reduce_scatter"):
            raise SymschedRuntimeError(f"unknown host collective `{op}`")
        if wire in ("e4m3", "e5m2"):
            raise SymschedRuntimeError(f"a {wire} wire cannot cross nodes on mccl (numpy has no fp8): use f16 or bf16")
        send = region.copy()
        if wire != dtype:
            send = _encode(_decode(send, dtype, acc), wire)
        parts = self._all_gather(send, members)
        fold = _FOLD[reduce]
        total = _decode(parts[0], wire, acc)
        for p in parts[1:]:
            total = fold(total, _decode(p, wire, acc))
        out = _encode(total, dtype)
        if op == "allreduce":
            region[:] = out
        else:
            es = nbytes // self._count(nbytes, dtype)
            s, c = _blocks(nbytes // es, m)[me]
            region[s * es:(s + c) * es] = out[s * es:(s + c) * es]

    @staticmethod
    def _count(nbytes: int, dtype: str) -> int:
        size = 2 if dtype in ("bf16", "f16") else np.dtype(_PLAIN[dtype]).itemsize
        return nbytes // size
