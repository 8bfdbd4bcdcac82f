"""Single-process tests of the MindSpore pieces: tensors, groups, launch env, mode guard,
custom backward, profiler gating. Multi-process behaviour is in the scenario tests."""

from __future__ import annotations

import ctypes
import sys

import mindspore as ms
import numpy as np
import pytest

from symsched.mindspore.errors import SymschedArgumentError, SymschedTypeError, UnavailableError
from symsched.mindspore import autograd, groups, launch, mode, profiler, tensors
from symsched.mindspore.errors import GraphModeError, WrongFrameworkError

pytestmark = pytest.mark.timeout(120)


def test_no_torch_imported():
    assert "torch" not in sys.modules


# ------------------------------------------------------------------------------------- tensors

@pytest.mark.parametrize("dtype,np_dtype", [(ms.float32, np.float32), (ms.float64, np.float64),
                                            (ms.float16, np.float16), (ms.int32, np.int32),
                                            (ms.int64, np.int64), (ms.uint8, np.uint8)])
def test_from_buffer_is_zero_copy_both_ways(dtype, np_dtype):
    buf = bytearray(256)
    t = tensors.from_buffer(buf, dtype, (2, 3), offset=64)
    assert t.dtype == dtype and tuple(t.shape) == (2, 3)
    arr = np.frombuffer(buf, dtype=np_dtype, count=6, offset=64)
    assert t.data_ptr() == arr.ctypes.data
    arr[4] = 7
    assert t.asnumpy().reshape(-1)[4] == 7
    t[0, 1] = 5  # a MindSpore write lands in the buffer
    assert t.asnumpy()[0, 1] == 5 and arr[1] == 5


def test_bfloat16_span_is_a_uint16_view():
    buf = bytearray(32)
    t = tensors.from_buffer(buf, ms.bfloat16, (4,))
    assert t.dtype == ms.bfloat16
    bits = np.frombuffer(buf, dtype=np.uint16, count=4)
    bits[:] = [0x3F80, 0x4000, 0xC040, 0]  # 1, 2, -3, 0
    assert t.astype(ms.float32).asnumpy().tolist() == [1.0, 2.0, -3.0, 0.0]
    assert t.data_ptr() == bits.ctypes.data


@pytest.mark.parametrize("fp8", [ms.float8_e4m3fn, ms.float8_e5m2])
def test_fp8_span_is_raw_bytes(fp8):
    buf = bytearray(16)
    t = tensors.from_buffer(buf, fp8, (2, 2))
    assert t.dtype == ms.uint8 and tuple(t.shape) == (2, 2)
    buf[0] = 0x38
    assert int(t.asnumpy()[0, 0]) == 0x38


def test_release_drops_the_buffer():
    buf = bytearray(64)
    t = tensors.from_buffer(buf, ms.float32, (4,))
    arr_refs = sys.getrefcount(buf)
    tensors.release(t)
    assert tuple(t.shape) == (0,) and t.dtype == ms.float32
    assert sys.getrefcount(buf) < arr_refs
    bytearray_view = memoryview(buf)
    bytearray_view.release()  # nothing else exports it any more: resizing is allowed again
    buf.extend(b"\0")


def test_span_of_reads_pointer_shape_dtype():
    x = ms.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    s = tensors.span_of(x, "x")
    assert (s.name, s.shape, s.nbytes, s.numel) == ("f32", (2, 3), 24, 6)
    assert (ctypes.c_float * 6).from_address(s.ptr)[5] == 5.0


def test_span_of_sees_a_pending_op():
    # data_ptr() waits for MindSpore's queue: the product is there when the pointer is read
    a = ms.Tensor(np.ones((256, 256), np.float32))
    y = ms.ops.matmul(a, a)
    s = tensors.span_of(y, "y")
    assert (ctypes.c_float * 1).from_address(s.ptr + 4 * (256 * 256 - 1))[0] == 256.0


def test_span_of_rejects_torch_like_tensor():
    fake = type("Tensor", (), {"__module__": "torch"})()
    with pytest.raises(WrongFrameworkError, match="`tensor` is a torch.Tensor"):
        tensors.span_of(fake, "tensor")
    with pytest.raises(SymschedTypeError):  # WrongFrameworkError is a TypeError too
        tensors.span_of(fake, "tensor")


def test_span_of_rejects_numpy_and_other_types():
    with pytest.raises(WrongFrameworkError, match="numpy"):
        tensors.span_of(np.zeros(2), "input_tensor")
    with pytest.raises(SymschedTypeError, match="`input_tensor` must be a mindspore.Tensor, got list"):
        tensors.span_of([1.0], "input_tensor")


def test_span_of_rejects_non_contiguous_view():
    x = ms.Tensor(np.arange(8, dtype=np.float32))
    with pytest.raises(SymschedArgumentError, match="`t` must be contiguous"):
        tensors.span_of(x[::2], "t")
    m = ms.Tensor(np.arange(8, dtype=np.float32).reshape(2, 4))
    with pytest.raises(SymschedArgumentError, match="contiguous"):
        tensors.span_of(m.T, "t")


def test_span_of_rejects_unsupported_dtype():
    with pytest.raises(SymschedArgumentError, match="`t` has dtype bool; expected one of: float32"):
        tensors.span_of(ms.Tensor(np.zeros(2, np.bool_)), "t")
    with pytest.raises(SymschedArgumentError, match="int8"):
        tensors.span_of(ms.Tensor(np.zeros(2, np.int8)), "t", dtypes=(ms.float32,))


# -------------------------------------------------------------------------------------- groups

def test_group_none_and_rank_lists():
    assert groups.member_ranks(None, 4) == (0, 1, 2, 3)
    assert groups.member_ranks([0, 2], 4) == (0, 2)
    assert groups.member_ranks((3,), 4) == (3,)
    assert groups.check_members((0, 2), 2, 4) == 1
    assert groups.group_rank_of((1, 3), 3) == 1 and groups.world_rank_of((1, 3), 1) == 3


@pytest.mark.parametrize("ranks,me,match", [((), 0, "empty"), ((0, 0), 0, "twice"), ((0, 5), 0, "outside"),
                                            ((1, 2), 0, "not a member")])
def test_group_member_checks(ranks, me, match):
    with pytest.raises(SymschedArgumentError, match=match):
        groups.check_members(ranks, me, 4)


def test_group_bad_types_and_names():
    with pytest.raises(SymschedTypeError, match="group name"):
        groups.member_ranks(3.5, 4)
    with pytest.raises(SymschedTypeError, match="ints"):
        groups.member_ranks([0, True], 4)
    # no communication in this process: a name cannot be resolved, and the error says how to fix it
    with pytest.raises(SymschedArgumentError, match="not initialised"):
        groups.member_ranks("dp_group", 4)
    with pytest.raises(SymschedArgumentError):
        groups.world_rank_of((0, 1), 2)
    with pytest.raises(SymschedArgumentError):
        groups.group_rank_of((0, 1), 3)


# -------------------------------------------------------------------------------------- launch

MSRUN_ENV = {"DEVICE_ID": "1", "MS_NODE_ID": "1", "MS_ROLE": "MS_WORKER", "MS_SCHED_HOST": "127.0.0.1",
             "MS_SCHED_PORT": "18124", "MS_TOPO_TIMEOUT": "60", "MS_WORKER_NUM": "2", "RANK_ID": "1",
             "RANK_SIZE": "2"}
LAUNCH_ENV = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": "40001", "SYMSCHED_RENDEZVOUS_DIR": "/tmp/x", "SYMSCHED_JOB_ID": "launch-1-a"}


def test_discover_msrun():
    info = launch.discover(MSRUN_ENV)
    assert (info.launcher, info.rank, info.world, info.port, info.job_id) == (launch.MSRUN, 1, 2, "18124", None)
    env = launch.runtime_env(info, "ms-abc", local_rank=1, local_world=2)
    assert env == {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                   "MASTER_PORT": "18124", "SYMSCHED_JOB_ID": "ms-abc"}
    only_workers = dict(MSRUN_ENV)
    del only_workers["RANK_SIZE"]
    assert launch.discover(only_workers).world == 2  # MS_WORKER_NUM


def test_discover_symsched_launch():
    info = launch.discover(LAUNCH_ENV)
    assert (info.launcher, info.rank, info.world, info.local_rank, info.local_world, info.job_id) == \
        (launch.SYMSCHED, 2, 4, 2, 4, "launch-1-a")
    assert launch.agree_job_id(info) == "launch-1-a"


def test_discover_nothing():
    info = launch.discover({})
    assert info.launcher == launch.NONE
    assert "msrun" in launch.unavailable_reason({}) and launch.unavailable_reason(MSRUN_ENV) is None


@pytest.mark.parametrize("patch,match", [
    ({"RANK_ID": "x"}, "RANK_ID='x' is not an integer"),
    ({"RANK_ID": "-1"}, "RANK_ID='-1' must be ≥ 0"),
    ({"RANK_ID": "2"}, "outside the job"),
    ({"RANK_SIZE": "0"}, "RANK_SIZE='0' must be ≥ 1"),
    ({"RANK_SIZE": "", "MS_WORKER_NUM": ""}, "neither RANK_SIZE nor MS_WORKER_NUM"),
    ({"RANK": "0"}, "contradicts"),
    ({"MS_SCHED_PORT": "80a"}, "MS_SCHED_PORT='80a' is not a port"),
])
def test_discover_garbage_msrun(patch, match):
    env = dict(MSRUN_ENV)
    env.update(patch)
    with pytest.raises(SymschedArgumentError, match=match):
        launch.discover(env)


def test_discover_garbage_launch_and_role():
    with pytest.raises(SymschedArgumentError, match="WORLD_SIZE is not"):
        launch.discover({"RANK": "0"})
    with pytest.raises(SymschedArgumentError, match="LOCAL_RANK='z'"):
        launch.discover(dict(LAUNCH_ENV, LOCAL_RANK="z"))
    with pytest.raises(UnavailableError, match="MS_SCHED"):
        launch.discover(dict(MSRUN_ENV, MS_ROLE="MS_SCHED"))


def test_job_id_without_mccl_names_port_and_parent():
    info = launch.discover(MSRUN_ENV)
    import os

    assert launch.agree_job_id(info) == f"ms-18124-{os.getppid()}"


def test_init_mccl_needs_symsched_launch():
    with pytest.raises(UnavailableError, match="symsched launch"):
        launch.init_mccl(env=MSRUN_ENV)


# ---------------------------------------------------------------------------------------- mode

def test_pynative_passes():
    assert mode.why_not_pynative(deep=True) is None
    mode.check("allreduce")
    mode.check_differentiable("allreduce")


def test_graph_mode_raises_typed_error():
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(GraphModeError, match="silently zeroes the gradients"):
            mode.check("shmem_allreduce")
        with pytest.raises(RuntimeError):  # GraphModeError is a RuntimeError
            mode.check_differentiable("all_reduce")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    mode.check("shmem_allreduce")


def _guarded(t):
    mode.check("op")
    return t


def _guarded_deep(t):
    mode.check_differentiable("op")
    return t


_TRACE_SCRIPT = """
import os, sys
sys.path.insert(0, {here!r})
import mindspore as ms, numpy as np
from symsched.mindspore import mode
from symsched.mindspore.errors import GraphModeError

@ms.jit(capture_mode="trace")
def f(t):
    mode.check("op")
    return t * 2

try:
    f(ms.Tensor(np.ones(2, np.float32)))
    print("NOT RAISED")
except GraphModeError as e:
    print("RAISED", e)
sys.stdout.flush()
os._exit(0)  # MindSpore 2.10 keeps its trace context after an exception and aborts at teardown
"""


def test_trace_jit_raises(tmp_path):
    # in a fresh interpreter: an exception inside a traced ms.jit leaves MindSpore's trace context
    # set for the rest of the process (MindSpore 2.10), which would leak into the other tests
    import os
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    script = tmp_path / "trace_case.py"  # a file: MindSpore's tracer reads the caller's source lines
    script.write_text(_TRACE_SCRIPT.format(here=here))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert "RAISED symsched op: this call is inside @mindspore.jit(capture_mode='trace')" in out.stdout, out.stdout


def test_bytecode_jit_raises_where_gradients_are_recorded():
    @ms.jit(capture_mode="bytecode")
    def f(t):
        return _guarded_deep(t) * 2

    with pytest.raises(GraphModeError, match="bytecode"):
        f(ms.Tensor(np.ones(2, np.float32)))


def _forbidden_op(t):
    return t * 2


mode.forbid_in_graph(_forbidden_op)


def test_ast_jit_refuses_registered_functions_at_compile_time():
    @ms.jit
    def f(t):
        return _forbidden_op(t)

    with pytest.raises(RuntimeError, match="_forbidden_op"):
        f(ms.Tensor(np.ones(2, np.float32)))
    assert _forbidden_op(ms.Tensor(np.ones(2, np.float32))).asnumpy().tolist() == [2.0, 2.0]


# ------------------------------------------------------------------------------------ autograd

class _Scale(autograd.Function):
    """y = 2x in numpy; backward deliberately 3·g so the custom rule is visible."""

    @staticmethod
    def forward(ctx, x, label):
        ctx.label = label
        ctx.seen = autograd.recording()
        return ms.Tensor.from_numpy(x.asnumpy() * 2)

    @staticmethod
    def backward(ctx, g):
        return ms.Tensor.from_numpy(g.asnumpy() * 3), None


def test_custom_backward_runs_in_pynative():
    x = ms.Tensor(np.array([1.0, 2.0, 3.0], np.float32))
    assert _Scale.apply(x, "a").asnumpy().tolist() == [2.0, 4.0, 6.0]
    g = ms.grad(lambda t: (_Scale.apply(t, "a") * t).sum())(x)
    assert g.asnumpy().tolist() == [5.0, 10.0, 15.0]  # 3x (custom) + 2x (product rule)
    assert not autograd.recording()


def test_in_place_copy_carries_the_gradient():
    x = ms.Tensor(np.ones(3, np.float32))

    def loss(t):
        y = t * 1
        y.copy_(_Scale.apply(y, "b"))
        return y.sum()

    assert ms.grad(loss)(x).asnumpy().tolist() == [3.0, 3.0, 3.0]


# ------------------------------------------------------------------------------------ profiler

def test_profiler_ranges_only_when_mstx_records(monkeypatch):
    assert not profiler.ranges_recorded()  # CPU build: mstx is off
    calls = []
    fake = type("M", (), {"enable": True,
                          "range_start": staticmethod(lambda msg, stream, domain: calls.append(("start", msg, domain))
                                                      or 7),
                          "range_end": staticmethod(lambda rid: calls.append(("end", rid)))})
    monkeypatch.setattr(profiler, "_mstx", fake)
    with profiler.op_range("allreduce", 16, "WORLD"):
        pass
    assert calls == [("start", "symsched::allreduce bytes=16 group=WORLD", "symsched"), ("end", 7)]
    with pytest.raises(ValueError):
        with profiler.op_range("allgather", 8, "[0, 1]"):
            raise ValueError("op failed")
    assert calls[-1] == ("end", 7)
