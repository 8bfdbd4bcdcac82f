"""Per-call µs of one collective on 2 ranks under each schedule its size rule can pick, with
symmetric and with ordinary tensors: the measurement behind the thresholds
(``docs/performance.md``, "Allreduce thresholds").

    python tests/bench_schedule_choice.py      # BENCH_OP=allreduce|reduce_scatter
                                                # BENCH_SIZES=8,4096 BENCH_ROUNDS=5

- allreduce: one-shot, push two-shot, pull two-shot (``SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES``,
  ``SYMSCHED_ALLREDUCE_PULL_MIN_BYTES``);
- reduce_scatter: push, pull (``SYMSCHED_REDUCE_SCATTER_PULL_MIN_BYTES``); sizes are input bytes.

All cases of a size run in the same job, alternating within every round; each cell is the
minimum over rounds of the slowest rank's mean. Prints the load average with the numbers.
"""

import os

import _harness
from scen_overhead import CHOICES


def main() -> None:
    op = os.environ.get("BENCH_OP", "allreduce")
    if op not in CHOICES:
        raise SystemExit(f"BENCH_OP must be one of {sorted(CHOICES)}, not {op!r}")
    sizes = [int(s) for s in os.environ.get(
        "BENCH_SIZES", "8,512,2048,8192,32768,131072,262144,1048576,4194304").split(",")]
    rounds = int(os.environ.get("BENCH_ROUNDS", "5"))
    load = os.getloadavg()
    res = _harness.run("scen_overhead", "schedule_choice", 2, timeout=1200,
                       args={"op": op, "sizes": sizes, "rounds": rounds})[0]
    print(f"{op}, 2 ranks; load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cols = [f"{c}/{k}" for k in ("symmetric", "ordinary") for c in CHOICES[op]]
    print(f"{'bytes':>9} " + " ".join(f"{c:>24}" for c in cols) + "   (µs per call)")
    for nbytes in sizes:
        row = res[nbytes]
        print(f"{nbytes:>9} " + " ".join(f"{row[c]:>24.2f}" for c in cols))


if __name__ == "__main__":
    main()
