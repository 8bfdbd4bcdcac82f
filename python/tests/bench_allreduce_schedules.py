"""Per-call µs of ``shmem_allreduce`` on 2 ranks under each allreduce schedule the size rule can
pick (one-shot, push two-shot, pull two-shot), symmetric and ordinary tensors, 8 B – 4 MiB: the
measurement behind the thresholds ``SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES`` and
``SYMSCHED_ALLREDUCE_PULL_MIN_BYTES`` (``docs/performance.md``).

    python tests/bench_allreduce_schedules.py      # BENCH_SIZES=8,4096 BENCH_ROUNDS=5

All cases of a size run in the same job, alternating within every round; each cell is the
minimum over rounds of the slowest rank's mean. Prints the load average with the numbers.
"""

import os

import _harness
from scen_overhead import ALLREDUCE_CHOICES


def main() -> None:
    sizes = [int(s) for s in os.environ.get(
        "BENCH_SIZES", "8,512,2048,8192,32768,131072,262144,1048576,4194304").split(",")]
    rounds = int(os.environ.get("BENCH_ROUNDS", "5"))
    load = os.getloadavg()
    res = _harness.run("scen_overhead", "allreduce_schedules", 2, timeout=1200,
                       args={"sizes": sizes, "rounds": rounds})[0]
    print(f"2 ranks; load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cols = [f"{c}/{k}" for k in ("symmetric", "ordinary") for c in ALLREDUCE_CHOICES]
    print(f"{'bytes':>9} " + " ".join(f"{c:>24}" for c in cols) + "   (µs per call)")
    for nbytes in sizes:
        row = res[nbytes]
        print(f"{nbytes:>9} " + " ".join(f"{row[c]:>24.2f}" for c in cols))


if __name__ == "__main__":
    main()
