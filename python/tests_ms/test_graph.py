"""Graph-mode ops (GRAPH_MODE and @ms.jit) vs PyNative: values, gradients, send/recv, cost."""

import os

import _harness
import pytest


@pytest.mark.timeout(600)
def test_graph_ops_match_pynative_2_ranks():
    res = _harness.run("scen_graph", "values_and_grads", 2, _harness.SYMSCHED, timeout=580)
    for x in _harness.ok(res):
        assert x["checked"] >= 60


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["jit", "graph"])
def test_graph_send_recv_gradients(kind):
    _harness.ok(_harness.run("scen_graph", "send_recv", 2, _harness.SYMSCHED, timeout=280, args=kind,
                             env={"SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS": "60000"}))


@pytest.mark.timeout(600)
@pytest.mark.skipif(not os.environ.get("SYMSCHED_MS_GRAPH_COST"), reason="measurement: set SYMSCHED_MS_GRAPH_COST=1")
def test_graph_cost_report():
    res = _harness.ok(_harness.run("scen_graph", "cost", 2, _harness.SYMSCHED, timeout=580, args=200))
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    for r, x in enumerate(res):
        print(f"rank {r} per-call µs {x['us']} load {load}")


def test_graph_ops_refuse_bad_static_arguments():
    import mindspore as ms

    import symsched.mindspore as symm
    from symsched.core.errors import SymschedArgumentError, SymschedTypeError

    G = symm.graph
    with pytest.raises(SymschedArgumentError, match="backward"):
        G.AllReduce("sum", [0, 1], backward="bogus")
    with pytest.raises(SymschedArgumentError, match="one entry per group rank"):
        G.AllToAll([1, 2, 3], None, group=[0, 1])
    with pytest.raises(SymschedTypeError, match="group"):
        G.AllGather(group=3.5)
    with pytest.raises(SymschedArgumentError, match="not supported by the graph-mode ops"):
        G.Recv((2,), ms.bfloat16, 0, group=[0, 1])


def test_python_api_still_refuses_graph_mode_and_names_the_graph_ops():
    import mindspore as ms
    import numpy as np

    import symsched.mindspore as symm

    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(symm.GraphModeError, match="symsched.mindspore.graph"):
            symm.shmem_allreduce(ms.Tensor(np.ones(2, np.float32)), "sum")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
