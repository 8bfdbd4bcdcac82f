"""Where MC2 fused time goes on 2 ranks, µs per call (``docs/performance.md``, "MC2 on the host").

    python tests/bench_mc2.py [breakdown|front|pull_vs_push]

- ``breakdown`` (default): fused vs separate and their parts, per perftest shape and tensor
  kind, with the fused call in its variants (pull/push schedules × direct GEMM on/off);
  ``*_noop_engine`` is the fused launch with a matmul engine that returns at once
  (communication, staging, Python front, no GEMM).
- ``front``: the all-gather part alone, separate vs fused, through the API and natively.
- ``pull_vs_push``: each fused op with its pull and push schedule, both on the direct GEMM.

Each variant is timed in turns with the others (medians over rounds, ``BENCH_ROUNDS``), so
drifting load hits all alike; compare columns of one run. Times are the slowest rank's wall
time and the larger of the ranks' calling-thread CPU time, which time spent descheduled by other
jobs (and sleeping waits) does not inflate.
"""

import os
import sys

import _harness


def main() -> None:
    scenario = sys.argv[1] if len(sys.argv) > 1 else "breakdown"
    load = os.getloadavg()
    res = _harness.run("scen_mc2_bench", scenario, int(os.environ.get("BENCH_RANKS", "2")), timeout=900,
                       args={"rounds": int(os.environ.get("BENCH_ROUNDS", "7"))})
    print(f"load average before: {load[0]:.2f}; after: {os.getloadavg()[0]:.2f}")
    for shape, r in res[0].items():
        if not isinstance(r, dict):
            print(f"{shape}: {r}")
            continue
        print(shape)
        for name, (us, cpu) in r.items():
            print(f"  {name:24s} {us:9.1f} us wall {cpu:9.1f} us cpu")


if __name__ == "__main__":
    main()
