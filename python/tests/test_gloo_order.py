"""SYMSCHED_ALLREDUCE_ORDER=gloo: f32 allreduce bit-exact against torch's gloo backend."""

from __future__ import annotations

import pytest

from _harness import run

# gloo's ring cuts the buffer into 2·P segments of ceil(n / 2P) elements, two per rank (measured
# with torch 2.13; gloo's allreduce.cc), and so does allreduce_ring_gloo. Sizes whose ceil(n / P)
# is even and sizes whose ceil(n / P) is odd at every P tested (where a one-chunk-per-rank split
# would put the chunk boundaries elsewhere), from a few elements per rank to past the
# one-shot/two-shot threshold.
SIZES = [24, 25, 601, 4800, 4801, 96001, 1 << 20, (1 << 20) + 1]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_allreduce_in_gloo_order_equals_gloo_bit_for_bit(world):
    res = run("scen_gloo_order", "compare", world, timeout=300,
              env={"SYMSCHED_ALLREDUCE_ORDER": "gloo"}, args={"sizes": SIZES})
    for rank, per_size in enumerate(res):
        for n, (private, symmetric) in per_size.items():
            assert (private, symmetric) == (0, 0), f"rank {rank} n={n}: {private}/{symmetric} elements differ"


def test_the_default_order_differs_from_gloo_at_four_ranks():
    """The contrast that shows the comparison can fail: the default (size-based) schedules fold
    in rank order, gloo along its ring."""
    res = run("scen_gloo_order", "compare", 4, timeout=300, args={"sizes": [96000]})
    assert all(per_size[96000][0] > 0 for per_size in res), res
