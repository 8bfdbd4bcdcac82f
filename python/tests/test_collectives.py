"""Collectives × group shapes (WORLD, halves, strided, singleton) × dtypes × ops, on 4 ranks.

Precision (RFC §5.6): fp32/f64/int results are bit-exact vs the sequential rank-order fold;
fp16/bf16 allclose(1e-3, 1e-5) (they are bit-exact too: f32 accumulation, one rounding);
vs gloo: max/min/int and 2-rank sums are bit-exact; 4-rank fp32 sums differ from gloo's ring
order by a few ulps, so allclose(rtol=1e-7, atol=1e-7) does NOT hold element-wise — the test
bounds the difference by 2·(P-1)·eps·Σ|x| instead (the rounding of two summation orders).
"""

import _harness
import pytest


@pytest.mark.timeout(200)
def test_collectives_matrix_4_ranks():
    res = _harness.run("scen_collectives", "matrix", 4, timeout=180, args={"sizes": [1, 1003]})
    for x in _harness.ok(res, show=20):
        assert x["checked"] > 500


@pytest.mark.timeout(120)
def test_collectives_matrix_3_ranks_uneven():
    _harness.ok(_harness.run("scen_collectives", "matrix", 3, timeout=100, args={"sizes": [0, 7]}), show=20)


@pytest.mark.timeout(120)
def test_symmetric_tensors_in_place_and_stats():
    res = _harness.run("scen_collectives", "symmetric_inplace", 2, timeout=100)
    for x in _harness.ok(res):
        assert set(x["stats"]) == {"allocated", "peak", "free"}
