"""Helpers shared by the MindSpore scenarios (run inside rank processes)."""

from __future__ import annotations

from typing import Dict, List, Tuple

import mindspore as ms
import numpy as np

DTYPES = [ms.float32, ms.float64, ms.float16, ms.bfloat16, ms.int32, ms.int64]
FLOATS = (ms.float32, ms.float64, ms.float16, ms.bfloat16)
HALF = (ms.float16, ms.bfloat16)
_NP = {ms.float32: np.float32, ms.float64: np.float64, ms.float16: np.float16, ms.int32: np.int32,
       ms.int64: np.int64}


def groups_of(rank: int, world: int, names: bool) -> Dict[str, Tuple[object, List[int]]]:
    """Every group shape of the test matrix this rank belongs to: kind -> (group argument, ranks).
    ``names``: MindSpore group names (``create_group``, needs mccl); else rank lists."""
    shapes: Dict[str, List[int]] = {"world": list(range(world))}
    if world >= 2 and world % 2 == 0:
        h = world // 2
        shapes["halves"] = list(range(h)) if rank < h else list(range(h, world))
        shapes["strided"] = list(range(rank % 2, world, 2))
    shapes["singleton"] = [rank]
    out: Dict[str, Tuple[object, List[int]]] = {"world_none": (None, list(range(world)))}
    for kind, ranks in shapes.items():
        if kind == "world":
            arg: object = _world_name() if names else list(ranks)
        elif names:
            from mindspore.communication import create_group

            arg = f"t_{kind}_{'_'.join(map(str, ranks))}"
            create_group(arg, ranks)
        else:
            arg = list(ranks)
        out[kind] = (arg, ranks)
    return out


def _world_name() -> str:
    from mindspore.communication import GlobalComm

    return str(GlobalComm.WORLD_COMM_GROUP)


def data(seed: int, n: int, dtype) -> Tuple[ms.Tensor, np.ndarray]:
    """A tensor of ``n`` deterministic values and the exact values as float64 (ints as int64)."""
    g = np.random.default_rng(seed)
    if dtype in FLOATS:
        base = (g.standard_normal(n) * 3).astype(np.float32 if dtype != ms.float64 else np.float64)
        t = ms.Tensor(base).astype(dtype) if dtype in HALF else ms.Tensor(base)
        return t, values(t)
    v = g.integers(-1000, 1000, n).astype(_NP[dtype])
    return ms.Tensor(v), v.astype(np.int64)


def values(t: ms.Tensor) -> np.ndarray:
    """A tensor's values as float64 (floats) or int64 (ints), flat."""
    if t.dtype in HALF:
        return t.astype(ms.float32).asnumpy().astype(np.float64).reshape(-1)
    a = t.asnumpy().reshape(-1)
    return a.astype(np.float64) if t.dtype in FLOATS else a.astype(np.int64)


def rounded(x: np.ndarray, dtype) -> np.ndarray:
    """``x`` (float64) rounded once to ``dtype``, back as float64."""
    if dtype == ms.float64:
        return x
    if dtype in (ms.float32,):
        return x.astype(np.float32).astype(np.float64)
    if dtype == ms.float16:
        return x.astype(np.float32).astype(np.float16).astype(np.float64)
    if dtype == ms.bfloat16:
        return values(ms.Tensor(x.astype(np.float32)).astype(ms.bfloat16))
    return x


def reference(parts: List[np.ndarray], op: str, dtype) -> np.ndarray:
    """Sequential fold in rank order: f32 accumulation for 16-bit floats (one rounding at the
    end), the dtype's own arithmetic otherwise."""
    acc_np = np.float32 if dtype in HALF or dtype == ms.float32 else (np.float64 if dtype == ms.float64 else np.int64)
    acc = parts[0].astype(acc_np)
    for p in parts[1:]:
        q = p.astype(acc_np)
        acc = acc + q if op in ("sum", "avg") else (np.maximum(acc, q) if op == "max" else np.minimum(acc, q))
    if op == "avg":
        acc = acc / acc_np(len(parts)) if acc_np != np.int64 else acc
    if dtype in HALF:
        return rounded(acc.astype(np.float64), dtype)
    if dtype in (ms.int32,):
        return acc.astype(np.int32).astype(np.int64)
    return acc.astype(np.float64) if dtype in FLOATS else acc


def close(got: np.ndarray, ref: np.ndarray, dtype, op: str) -> bool:
    """Bit-exact where the fold order fixes the result; 16-bit floats and averages within one
    rounding of the dtype."""
    if got.shape != ref.shape:
        return False
    if dtype in HALF:
        eps = 2.0 ** -10 if dtype == ms.float16 else 2.0 ** -7
        return bool(np.all(np.abs(got - ref) <= eps * np.abs(ref) + 1e-5))
    if op == "avg":
        rtol = 1e-12 if dtype == ms.float64 else 1e-6
        return bool(np.allclose(got, ref, rtol=rtol, atol=1e-7))
    return bool(np.array_equal(got, ref))


def label(dtype) -> str:
    return str(dtype).lower()
