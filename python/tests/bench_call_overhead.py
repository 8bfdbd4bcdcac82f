"""Per-call µs of 8 B and 64 KiB allreduce on 2 ranks (symsched symmetric / ordinary vs gloo).

    python tests/bench_call_overhead.py [PACKAGE_DIR]      # BENCH_RANKS=1: the host-side cost alone

PACKAGE_DIR (optional) is put first on PYTHONPATH, to measure another build of the package
(e.g. an older checkout) in the same conditions. Prints the load average with the numbers:
the host is shared, so compare columns of one run rather than runs.
"""

import os
import sys

import _harness


def main() -> None:
    env = {}
    if len(sys.argv) > 1:
        env["PYTHONPATH"] = sys.argv[1] + os.pathsep + _harness.HERE
    load = os.getloadavg()
    world = int(os.environ.get("BENCH_RANKS", "2"))
    res = _harness.run("scen_overhead", "call_overhead", world, timeout=500, env=env, args={})
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'bytes':>8} {'symm (sym) us':>14} {'symm (ord) us':>14} {'gloo us':>9} {'gloo/sym':>9}")
    for nbytes, r in res[0].items():
        print(f"{nbytes:>8} {r['symsched_symmetric']:>14.1f} {r['symsched_ordinary']:>14.1f} {r['gloo']:>9.1f} "
              f"{r['gloo'] / r['symsched_symmetric']:>9.1f}")


if __name__ == "__main__":
    main()
