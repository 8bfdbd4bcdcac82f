"""Scenarios: primitives, argument validation, memory lifecycle, profiler + trace, low precision,
MC2 precision, forbidden mix."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist

import symsched as symm
import symsched.functional as F
from _common import data


def primitives(rank: int, world: int, args) -> dict:
    symm.init()
    fails = []
    peer = (rank + 1) % world
    left = (rank - 1) % world
    buf = symm.empty(16, torch.float32)
    buf.zero_()
    sig = symm.empty(4, torch.int32)
    sig.zero_()
    sig64 = symm.empty(2, torch.int64)
    sig64.zero_()
    symm.barrier()
    src = torch.arange(16, dtype=torch.float32) + 100 * rank
    # put_with_signal (CANN numbering: ADD=1), wait with 'ge'
    symm.shmem_put_with_signal(buf, 4, src, 0, 8, sig, 0, 1, 1, peer)
    symm.shmem_wait_for_signal(sig, 0, 1, "ge")
    if not torch.equal(buf[4:12], torch.arange(8, dtype=torch.float32) + 100 * left):
        fails.append(f"put_with_signal data {buf.tolist()}")
    # hyper-parallel's 5-argument form with a depend tensor, CANN EQ=0 on a SET signal
    symm.shmem_signal_op(sig64, 1, 7, "set", peer)
    symm.shmem_wait_for_signal(buf, sig64, 1, 7, 0)
    # get from the peer's symmetric buffer
    got = torch.empty(8)
    symm.barrier()
    symm.shmem_get(got, 0, buf, 4, 8, peer)
    if not torch.equal(got, torch.arange(8, dtype=torch.float32) + 100 * rank):
        fails.append(f"get {got.tolist()}")
    # plain put + barrier, in a sub-group with group-local ranks
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])] if world == 4 else [dist.new_group([0, 1])]
    g = pairs[rank // 2]
    symm.barrier(g)
    symm.shmem_put(buf, 0, src, 0, 2, 1 - (rank % 2), group=g)
    symm.barrier(g)
    partner = rank ^ 1
    if not torch.equal(buf[:2], torch.tensor([100.0 * partner, 100.0 * partner + 1])):
        fails.append(f"sub-group put {buf[:2].tolist()}")
    # a wait that cannot be satisfied times out with a clear message
    try:
        symm.shmem_wait_for_signal(sig, 3, 99, "eq", timeout_ms=50)
        fails.append("wait did not time out")
    except symm.SymschedRuntimeError as e:
        if "timed out" not in str(e):
            fails.append(f"unclear timeout: {e}")
    symm.barrier()
    return {"failures": fails}


def _raises(fails, exc, fn, *words):
    # every rank finished its previous call first: a failure aborts the group, which fails
    # every call still in flight on it, a slower rank's previous one too (docs/reliability.md)
    symm.barrier()
    try:
        fn()
    except exc as e:
        msg = str(e)
        for w in words:
            if w not in msg:
                fails.append(f"message lacks {w!r}: {msg}")
        return
    except Exception as e:  # wrong type
        fails.append(f"expected {exc.__name__}, got {type(e).__name__}: {e}")
        return
    fails.append(f"no error for {words}")


def bad_args(rank: int, world: int, args) -> dict:
    symm.init()
    fails = []
    A, T = ValueError, TypeError
    t = symm.empty(8, torch.float32)
    plain = torch.zeros(8)
    sig = symm.empty(2, torch.int32)
    _raises(fails, symm.NotSymmetricError, lambda: symm.shmem_put(plain, 0, plain, 0, 4, 0), "target", "symm.empty")
    _raises(fails, A, lambda: symm.shmem_put(t, 6, plain, 0, 4, 0), "target_offset")
    _raises(fails, A, lambda: symm.shmem_put(t, 0, plain, 0, 4, world), "target_rank", f"0..{world - 1}")
    _raises(fails, T, lambda: symm.shmem_put(t, 0, plain, 0, 4.0, 0), "size")
    _raises(fails, A, lambda: symm.shmem_put(t, 0, plain.double(), 0, 4, 0), "dtype")
    _raises(fails, A, lambda: symm.shmem_signal_op(sig, 0, 1, 5, 0), "signal_op")
    _raises(fails, A, lambda: symm.shmem_signal_op(sig, 0, 1, "mul", 0), "signal_op")
    _raises(fails, A, lambda: symm.shmem_wait_for_signal(sig, 0, 1, 9), "compare_op")
    _raises(fails, A, lambda: symm.shmem_signal_op(t, 0, 1, "add", 0), "signal", "int32")
    _raises(fails, A, lambda: symm.shmem_allreduce(plain, "prod"), "op", "'sum'")
    _raises(fails, A, lambda: symm.shmem_allreduce(plain.int(), "avg"), "avg")
    _raises(fails, A, lambda: symm.shmem_allreduce(torch.zeros(4, dtype=torch.complex64)), "tensor", "dtype")
    _raises(fails, A, lambda: symm.shmem_allreduce(plain, low_precision_dtype="int4"), "low_precision_dtype")
    _raises(fails, A, lambda: symm.shmem_allreduce(plain.int(), low_precision_dtype=torch.bfloat16),
            "low_precision_dtype")
    _raises(fails, A, lambda: symm.shmem_allreduce(torch.zeros(4, 4).t()), "contiguous")
    _raises(fails, A, lambda: symm.shmem_allgather(torch.zeros(3), torch.zeros(2)), "output_tensor", "2")
    _raises(fails, A, lambda: symm.shmem_reduce_scatter(torch.zeros(2), torch.zeros(3)), "input_tensor")
    _raises(fails, A, lambda: symm.shmem_reduce_scatter(torch.zeros(2), torch.zeros(2 * world), "min",
                                                        low_precision_dtype="bf16"), "low_precision_dtype")
    _raises(fails, A, lambda: symm.shmem_reduce_scatter(torch.zeros(2).int(), torch.zeros(2 * world).int(),
                                                        low_precision_dtype=torch.float16), "low_precision_dtype")
    _raises(fails, A, lambda: symm.shmem_alltoall([plain] * (world + 1), plain, [1] * world), "send_tensor_list")
    _raises(fails, A, lambda: symm.shmem_alltoall([plain] * world, plain, [1] * world), "receive_tensor")
    _raises(fails, A, lambda: symm.shmem_send(plain, rank), "dst_rank")
    _raises(fails, T, lambda: symm.shmem_allreduce(plain, group="dp"), "group", "ProcessGroup")
    _raises(fails, A, lambda: symm.empty(-1), "shape")
    _raises(fails, A, lambda: symm.empty(4, torch.complex64), "dtype")
    _raises(fails, T, lambda: F.all_reduce(plain), "backward")
    _raises(fails, A, lambda: F.all_reduce(plain, backward="both"), "backward")
    _raises(fails, A, lambda: symm.fused_matmul_reduce_scatter(torch.zeros(3, 2), torch.zeros(2, 2)), "x1")
    # free invalidates, stale views are refused, double free refused
    view = t[2:4]
    symm.free(t)
    if t.numel() != 0:
        fails.append("free did not invalidate the tensor")
    _raises(fails, symm.StaleTensorError, lambda: symm.shmem_allreduce(view), "symm.free")
    _raises(fails, symm.StaleTensorError, lambda: symm.free(view), "already")
    # CANN numbering and strings agree
    if symm.CmpOp.GE != 3 or symm.SignalOp.ADD != 1:
        fails.append("enum numbering")
    return {"failures": fails}


def profiler_and_trace(rank: int, world: int, args) -> dict:
    symm.init()
    fails = []
    from torch.profiler import ProfilerActivity, profile

    x = torch.ones(1024)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        symm.shmem_allreduce(x)
        y = torch.empty(world * 1024)
        symm.shmem_allgather(y, x)
    names = {e.name for e in prof.events()}
    for need in ("symsched::allreduce", "symsched::allgather"):
        if need not in names:
            fails.append(f"profiler lacks {need}: {sorted(n for n in names if 'symsched' in n)}")
    detail = [n for n in names if n.startswith("symsched::allreduce bytes=4096 group=")]
    if not detail:
        fails.append(f"no size/group range: {sorted(n for n in names if 'symsched' in n)}")
    symm.flush_trace()
    dist.barrier()
    path = os.environ["SYMSCHED_TRACE"]
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    pids = {e["pid"] for e in events if e.get("ph") == "X"}
    if pids != set(range(world)):
        fails.append(f"trace has pids {pids}")
    # the executor's step events: puts, a wait and a reduce of the all-reduce on every rank
    for r in range(world):
        steps = [e for e in events if e.get("pid") == r and e.get("cat") == "step"]
        kinds = {e["name"] for e in steps}
        if not ({"wait", "reduce"} <= kinds and kinds & {"put", "put_signal"}):
            fails.append(f"rank {r} step kinds {sorted(kinds)}")
        if any(e.get("ph") != "X" or e.get("dur", -1) <= 0 or "schedule" not in e.get("args", {})
               for e in steps):
            fails.append(f"rank {r}: malformed step event")
        if not any(e.get("pid") == r and e.get("cat") == "launch" for e in events):
            fails.append(f"rank {r}: no launch event")
        # op events and the executor's step events of one group share one track (tid)
        lane = f"group {list(range(world))}"
        ops = [e for e in events if e.get("pid") == r and e.get("cat") == "symsched"]
        if not ops or any(e.get("tid") != lane for e in ops + steps):
            fails.append(f"rank {r}: tids {sorted({e.get('tid') for e in ops + steps})}, expected only {lane!r}")
        named = [e for e in events if e.get("ph") == "M" and e.get("pid") == r]
        if len(named) != 1 or named[0]["args"]["name"] != f"rank {r}":
            fails.append(f"rank {r}: process_name metadata {named}")
    return {"failures": fails, "n_events": len(events)}


def low_precision(rank: int, world: int, args) -> dict:
    """Wire formats vs the full-precision result; returns the measured relative errors."""
    symm.init()
    fails = []
    n = 4096
    parts = [data(4242 + r, n, torch.float32) for r in range(world)]
    full = parts[rank].clone()
    symm.shmem_allreduce(full)
    errs = {}
    for wire in (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        t = parts[rank].clone()
        symm.shmem_allreduce(t, low_precision_dtype=wire)
        # every operand is rounded once to the wire (relative error ≤ u = 2^-(mantissa+1)),
        # the result once more: |err| ≤ u·Σ|x_r| + u·|result| (accumulation is f32)
        u = torch.finfo(wire).eps / 2
        bound = u * torch.stack([p.abs() for p in parts]).sum(0) + u * full.abs() + 1e-6
        err = (t - full).abs()
        errs[str(wire)] = float((err / full.abs().clamp_min(1e-3)).median())
        if not bool((err <= bound).all()):
            fails.append(f"{wire}: max err {float(err.max())} exceeds the wire bound")
        # identical on every rank
        g = [torch.empty(n) for _ in range(world)]
        dist.all_gather(g, t)
        if not all(torch.equal(g[0], q) for q in g):
            fails.append(f"{wire}: ranks disagree")
    # env default applies, per-call None keeps it, explicit override wins
    os.environ["SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE"] = "bf16"
    t = parts[rank].clone()
    symm.shmem_allreduce(t)
    if torch.equal(t, full):
        fails.append("env default bf16 wire had no effect")
    del os.environ["SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE"]
    # fp16 data: fp8 wire + f32 accumulation vs fp16 full precision, RFC tolerance derived per format
    h = [p.half() for p in parts]
    full16 = h[rank].clone()
    symm.shmem_allreduce(full16)
    t16 = h[rank].clone()
    symm.shmem_allreduce(t16, low_precision_dtype=torch.float8_e4m3fn)
    errs["fp16 data, e4m3 wire, rel"] = float(((t16.float() - full16.float()).abs() /
                                               full16.float().abs().clamp_min(1e-3)).median())
    _reduce_scatter_wire(rank, world, fails, errs)
    return {"failures": fails, "errors": errs}


def _wire_floor(wire: torch.dtype, world: int) -> float:
    """Absolute rounding error of P-1 subnormal operands: half the wire's subnormal spacing each."""
    fi = torch.finfo(wire)
    return (world - 1) * fi.smallest_normal * fi.eps / 2


def _reduce_scatter_wire(rank: int, world: int, fails: list, errs: dict) -> None:
    """Wire-format reduce_scatter: every peer's block is rounded once to the wire (u = eps/2),
    this rank's own block never crosses it, accumulation is f32 and the result is written at full
    precision, so |err| ≤ u·Σ_{r≠me}|x_r| + (P-1)·s/2 + 2·P·eps_f32·Σ|x_r|, where s is the wire's
    subnormal spacing (below the smallest normal the rounding error is absolute, not relative;
    it matters for fp8: e4m3 s/2 = 2^-10) and the last term the f32 folds of both results."""
    n = 1024
    parts = [data(777 + r, world * n, torch.float32) for r in range(world)]
    full = torch.empty(n)
    symm.shmem_reduce_scatter(full, parts[rank].clone())
    mine = slice(rank * n, (rank + 1) * n)
    others = sum(parts[r][mine].abs() for r in range(world) if r != rank)
    total = sum(p[mine].abs() for p in parts)
    for wire in (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        out = torch.empty(n)
        symm.shmem_reduce_scatter(out, parts[rank].clone(), low_precision_dtype=wire)
        u = torch.finfo(wire).eps / 2
        bound = u * others + _wire_floor(wire, world) + 2 * world * torch.finfo(torch.float32).eps * total
        err = (out - full).abs()
        errs[f"reduce_scatter {wire}"] = float((err / full.abs().clamp_min(1e-3)).median())
        if not bool((err <= bound).all()):
            fails.append(f"reduce_scatter {wire}: max err {float(err.max())} exceeds the wire bound")
        if wire in (torch.bfloat16, torch.float8_e5m2) and torch.equal(out, full):
            fails.append(f"reduce_scatter {wire}: wire had no effect")
    # symmetric tensors in place, env default applies and the per-call None keeps it
    sin = symm.empty(world * n, torch.float32)
    sout = symm.empty(n, torch.float32)
    sin.copy_(parts[rank])
    os.environ["SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE"] = "float8_e4m3fn"
    try:
        symm.shmem_reduce_scatter(sout, sin)
    finally:
        del os.environ["SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE"]
    u = torch.finfo(torch.float8_e4m3fn).eps / 2
    if torch.equal(sout, full):
        fails.append("reduce_scatter: env default e4m3 wire had no effect")
    floor = _wire_floor(torch.float8_e4m3fn, world)
    if not bool(((sout - full).abs() <= u * others + floor + 2 * world * torch.finfo(torch.float32).eps * total).all()):
        fails.append("reduce_scatter: env default e4m3 wire exceeds the wire bound")
    # max/min never narrow: the env default is skipped, an explicit wire is an error
    os.environ["SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE"] = "bf16"
    try:
        mx = torch.empty(n)
        symm.shmem_reduce_scatter(mx, parts[rank].clone(), op="max")
    finally:
        del os.environ["SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE"]
    if not torch.equal(mx, torch.stack([p[mine] for p in parts]).max(0).values):
        fails.append("reduce_scatter max under an env wire default is not exact")
    _raises(fails, ValueError, lambda: symm.shmem_reduce_scatter(
        torch.empty(n), parts[rank].clone(), op="max", low_precision_dtype=torch.bfloat16), "low_precision_dtype")
    # differentiable form with a wire: forward narrowed, backward is the allgather dual
    x = parts[rank].clone().requires_grad_(True)
    y = F.reduce_scatter(x, "sum", None, torch.bfloat16)
    y.backward(torch.full((n,), float(rank + 1)))
    expect = torch.cat([torch.full((n,), float(r + 1)) for r in range(world)])
    if not torch.equal(x.grad, expect):
        fails.append("reduce_scatter wire backward is not the allgather of the gradients")
    symm.free(sout)
    symm.free(sin)


def binding_rule(rank: int, world: int, args) -> dict:
    """A tensor bound symmetric on one rank and ordinary on another (or at different heap
    offsets) is refused on every rank with an error naming the buffer; the group stays usable."""
    symm.init()
    fails = []
    a = symm.empty(64, torch.float32)
    b = symm.empty(64, torch.float32)
    plain = torch.ones(64)
    a.fill_(1.0)
    b.fill_(1.0)
    mixed = a if rank == 0 else plain
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_allreduce(mixed), "bound differently",
            "all symmetric", "ordinary (staged)")
    other = a if rank == 0 else b
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_allreduce(other), "bound differently",
            "heap offset")
    out = torch.empty(64 * world)
    src = a if rank == 0 else plain
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_allgather(out, src[: 64]), "bound differently",
            "`in`")
    # alltoall: small chunks go eagerly through the runtime's landing slots, where no peer
    # addresses the caller's tensors, so mixed bindings are fine; chunks past the eager capacity
    # run the plan, and its binding check follows the header round
    recv_sym = a[: 8 * world]
    recv = recv_sym if rank == 0 else torch.empty(8 * world)
    symm.shmem_alltoall([torch.full((8,), float(rank))] * world, recv, [8] * world)
    if not torch.equal(recv, torch.arange(world, dtype=torch.float32).repeat_interleave(8)):
        fails.append(f"eager alltoall with mixed bindings: {recv.tolist()}")
    big = 16 * 1024 + 1  # float32 elements per chunk: past the 64 KiB eager capacity
    c = symm.empty(big * world, torch.float32)
    recv = c if rank == 0 else torch.empty(big * world)
    _raises(fails, symm.SymschedArgumentError,
            lambda: symm.shmem_alltoall([torch.ones(big)] * world, recv, [big] * world), "bound differently")
    symm.free(c)
    # consistent calls still work afterwards, with both bindings
    a.fill_(float(rank + 1))
    symm.shmem_allreduce(a)
    plain.fill_(float(rank + 1))
    symm.shmem_allreduce(plain)
    want = float(sum(range(1, world + 1)))
    if not (torch.all(a == want) and torch.all(plain == want)):
        fails.append(f"after a refused call: {a[:2].tolist()} {plain[:2].tolist()}")
    # repeated calls take the cached fast path: still correct, still validated
    for i in range(5):
        for t in (a, plain, a[:32]):
            t.fill_(float(rank + 1 + i))
            symm.shmem_allreduce(t)
            if not torch.all(t == want + world * i):
                fails.append(f"cached call {i}: {t[:2].tolist()}")
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_allreduce(a.view(8, 8).t()), "contiguous")
    symm.free(b)
    symm.free(a)
    return {"failures": fails}


def binding_rule_always(rank: int, world: int, args) -> dict:
    """With SYMSCHED_CHECK_BINDINGS=always a rank switching binding after an agreed call is caught."""
    symm.init()
    fails = []
    a = symm.empty(64, torch.float32)
    plain = torch.ones(64)
    a.fill_(1.0)
    symm.shmem_allreduce(a)  # agreed: symmetric everywhere
    switched = a if rank == 0 else plain
    _raises(fails, symm.SymschedArgumentError, lambda: symm.shmem_allreduce(switched), "bound differently")
    symm.free(a)
    return {"failures": fails}


def mc2_precision(rank: int, world: int, args) -> dict:
    symm.init()
    fails = []
    for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 1e-3), (torch.bfloat16, 1e-3 * 8)):
        m, k, n = 8, 16, 12
        a = data(10 + rank, m * k, dtype).view(m, k) / 4
        b = data(20 + rank, k * n, dtype).view(k, n) / 4
        g = torch.empty(world * m, k, dtype=dtype)
        c = torch.empty(world * m, n, dtype=dtype)
        symm.fused_all_gather_matmul(a, b, c, g)
        g2 = torch.empty(world * m, k, dtype=dtype)
        symm.shmem_allgather(g2, a)
        c2 = g2 @ b
        if not torch.equal(g, g2):
            fails.append(f"{dtype} gather_out differs")
        if not torch.allclose(c.float(), c2.float(), rtol=tol, atol=tol):
            fails.append(f"{dtype} fused_all_gather_matmul off by {float((c.float() - c2.float()).abs().max())}")
        x1 = data(30 + rank, world * m * k, dtype).view(world * m, k) / 4
        out = symm.fused_matmul_reduce_scatter(x1, b)
        sep = torch.empty(m, n, dtype=dtype)
        symm.shmem_reduce_scatter(sep, (x1 @ b).contiguous())
        if not torch.allclose(out.float(), sep.float(), rtol=tol, atol=tol):
            fails.append(f"{dtype} fused_matmul_reduce_scatter off by {float((out.float() - sep.float()).abs().max())}")
    return {"failures": fails}


def forbidden_mix(rank: int, world: int, args) -> dict:
    symm.init()
    fails = []
    bucket = torch.ones(64)
    try:
        with symm.interop.step():
            dist.all_reduce(bucket[:32])
            symm.shmem_allreduce(bucket[32:])
        fails.append("gloo-then-symsched mix not detected")
    except symm.ForbiddenMixError:
        pass
    bucket2 = torch.ones(64)
    try:
        with symm.interop.step():
            symm.shmem_allreduce(bucket2[:32])
            symm.interop.all_reduce(bucket2[32:])
        fails.append("symsched-then-gloo mix not detected")
    except symm.ForbiddenMixError:
        pass
    # allowed: different buckets, and the same bucket in different steps
    a, b = torch.ones(8), torch.ones(8)
    with symm.interop.step():
        dist.all_reduce(a)
        symm.shmem_allreduce(b)
    with symm.interop.step():
        symm.shmem_allreduce(a)
    if dist.all_reduce.__name__ != "all_reduce" or hasattr(dist.all_reduce, "__symsched_wrapped__"):
        fails.append("dist.all_reduce not restored")
    return {"failures": fails}


def split_group(rank: int, world: int, args) -> dict:
    """Groups made by ``dist.split_group`` (halves and strided) work like any ProcessGroup, on
    symsched and on gloo with the same object; if torch refuses to split a gloo group, the
    refusal is reported (``refused``) instead."""
    symm.init()
    fails: list = []
    out: dict = {"failures": fails, "refused": None}
    made = {}
    for name, split in (("halves", [[0, 1], [2, 3]]), ("strided", [[0, 2], [1, 3]])):
        try:
            pg = dist.split_group(split_ranks=split, group_desc=f"symsched-test-{name}")
        except Exception as exc:  # noqa: BLE001 - the refusal itself is the result
            out["refused"] = f"{type(exc).__name__}: {exc}"
            return out
        mine = next(s for s in split if rank in s)
        if pg is None or list(dist.get_process_group_ranks(pg)) != mine:
            fails.append(f"{name}: split_group gave {pg} for ranks {mine}")
            continue
        made[name] = (pg, mine)
    import symsched.functional as F

    n = 6
    for name, (pg, ranks) in made.items():
        me, p = ranks.index(rank), len(ranks)
        parts = [torch.arange(n, dtype=torch.float32) + 10 * r for r in ranks]
        t = parts[me].clone()
        symm.shmem_allreduce(t, group=pg)
        g = parts[me].clone()
        dist.all_reduce(g, group=pg)  # gloo on the same ProcessGroup object
        if not (torch.equal(t, sum(parts)) and torch.equal(t, g)):
            fails.append(f"{name} allreduce {t} vs gloo {g}")
        ag = torch.empty(p * n)
        symm.shmem_allgather(ag, parts[me], group=pg)
        if not torch.equal(ag, torch.cat(parts)):
            fails.append(f"{name} allgather {ag}")
        rs = torch.empty(n // p)
        symm.shmem_reduce_scatter(rs, parts[me], group=pg)
        if not torch.equal(rs, sum(parts)[me * (n // p):(me + 1) * (n // p)]):
            fails.append(f"{name} reduce_scatter {rs}")
        b = parts[me].clone()
        symm.shmem_broadcast(b, 1, group=pg)
        if not torch.equal(b, parts[1]):
            fails.append(f"{name} broadcast {b}")
        x = parts[me].clone().requires_grad_(True)
        F.all_gather(x, group=pg).backward(torch.ones(p * n))
        if not torch.equal(x.grad, torch.full((n,), float(p))):
            fails.append(f"{name} all_gather backward {x.grad}")
    out["groups"] = sorted(made)
    return out
