"""Per-call µs of every collective at 8·P B and 64 KiB on 2 ranks (symmetric buffers) vs gloo.

    python tests/bench_ops_overhead.py

Prints the load average with the numbers: the host is shared, so compare columns of one run.
"""

import os

import _harness


def main() -> None:
    load = os.getloadavg()
    world = int(os.environ.get("BENCH_RANKS", "2"))
    res = _harness.run("scen_overhead", "ops_overhead", world, timeout=900, args={})
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'bytes':>8} {'op':>26} {'symsched us':>12} {'gloo us':>9} {'gloo/sym':>9}")
    for nbytes, r in res[0].items():
        for op, (s, g) in r.items():
            gs = f"{g:9.1f} {g / s:9.1f}" if g is not None else f"{'-':>9} {'-':>9}"
            print(f"{nbytes:>8} {op:>26} {s:12.1f} {gs}")


if __name__ == "__main__":
    main()
