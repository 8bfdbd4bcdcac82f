"""Per-call µs of a small alltoall on 2 ranks split into its parts: end to end, the native
call alone, this rank's Python front alone (launch swapped for a no-op), and gloo.

    python tests/bench_alltoall_front.py [--sweeps] [--collect] [--rounds N] [--sizes 8,1024,...]

``--sweeps`` repeats the measurement after the perftest's allreduce/allgather/reduce_scatter
sweeps (8 B to 64 MiB), to compare an alltoall run alone with one after other ops;
``--collect`` adds a third measurement after ``gc.collect()``. Prints the load average with the
numbers: the host is shared, so compare columns of one run.
"""

import argparse
import os

import _harness


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweeps", action="store_true")
    ap.add_argument("--collect", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="8,1024,32768,65536")
    a = ap.parse_args()
    load = os.getloadavg()
    args = {"sweeps": a.sweeps, "collect": a.collect, "rounds": a.rounds,
            "sizes": [int(s) for s in a.sizes.split(",")]}
    # the perftest's heap (the default 1 GiB): the 64 MiB sweeps need more than the harness's
    res = _harness.run("scen_a2a_front", "front", 2, timeout=1200, args=args,
                       env={"SYMMETRIC_MEMORY_HEAP_SIZE": str(1 << 30)})
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for r, rep in enumerate(res):
        print(f"rank {r} state: " + "; ".join(f"{k}={rep[k]}" for k in rep if "state" in k or k in ("before", "end")))
    for phase in ("alone", "after", "after_collect"):
        if phase not in res[0]:
            continue
        print(f"--- {phase}: µs per call (median of rounds); front per rank")
        print(f"{'bytes':>8} {'call':>7} {'old':>7} {'native':>7} {'front0':>7} {'front1':>7} {'gc/call':>8} "
              f"{'gloo':>7} {'gloo/call':>9} {'dead':>5}")
        for nbytes, r0 in res[0][phase].items():
            r1 = res[1][phase][nbytes]
            print(f"{nbytes:>8} {r0['call']:>7.2f} {r0['old']:>7.2f} {r0['native']:>7.2f} {r0['front']:>7.2f} {r1['front']:>7.2f} "
                  f"{max(r0['gc_us_per_call'], r1['gc_us_per_call']):>8.3f} {r0['gloo']:>7.1f} "
                  f"{r0['gloo'] / r0['call']:>9.1f} {r0['dead']:>5}")


if __name__ == "__main__":
    main()
