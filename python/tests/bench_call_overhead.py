"""Per-call µs of 8 B and 64 KiB allreduce on 2 ranks (symsched symmetric / ordinary vs gloo).

    python tests/bench_call_overhead.py [PACKAGE_DIR ...]   # BENCH_RANKS=1: the host-side cost alone

Each PACKAGE_DIR (optional) is put first on PYTHONPATH, to measure another build of the package
(e.g. an older checkout, or ``python/`` of this one) in the same conditions; with several, they
are timed in turns (``BENCH_TURNS`` rounds, default 3, so load drifting on a shared host hits
each alike) and the table shows each one's best turn; with exactly two, also the median and
quartiles of the per-turn ratio first ÷ second (a best turn alone moves by several per cent
from run to run on this host). Prints the load average with the numbers: the host is shared,
so compare columns of one run rather than runs.
"""

import os
import sys

import _harness


def main() -> None:
    dirs = sys.argv[1:] or [""]
    turns = int(os.environ.get("BENCH_TURNS", "3")) if len(dirs) > 1 else 1
    world = int(os.environ.get("BENCH_RANKS", "2"))
    load = os.getloadavg()
    best: dict = {}
    ratios: dict = {}
    for _ in range(turns):
        this_turn = {}
        for d in dirs:
            env = {"PYTHONPATH": d + os.pathsep + _harness.HERE} if d else {}
            res = _harness.run("scen_overhead", "call_overhead", world, timeout=500, env=env, args={})
            this_turn[d] = res[0]
            for nbytes, r in res[0].items():
                mine = best.setdefault(d, {}).setdefault(nbytes, dict(r))
                for k, val in r.items():
                    mine[k] = min(mine[k], val)
        if len(dirs) == 2:
            first, second = (this_turn[d] for d in dirs)
            for nbytes, r in first.items():
                for k in ("symsched_symmetric", "symsched_ordinary"):
                    ratios.setdefault((nbytes, k), []).append(r[k] / second[nbytes][k])
    print(f"{world} ranks; load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'package':<28} {'bytes':>8} {'symm (sym) us':>14} {'symm (ord) us':>14} {'gloo us':>9} {'gloo/sym':>9}")
    for d in dirs:
        for nbytes, r in best[d].items():
            print(f"{(d or 'installed')[-28:]:<28} {nbytes:>8} {r['symsched_symmetric']:>14.2f} "
                  f"{r['symsched_ordinary']:>14.2f} {r['gloo']:>9.1f} {r['gloo'] / r['symsched_symmetric']:>9.1f}")
    for (nbytes, k), rs in ratios.items():
        rs.sort()
        n = len(rs)
        print(f"per-turn ratio first/second, {nbytes} B {k}: median {rs[(n - 1) // 2]:.3f}, "
              f"quartiles {rs[(n - 1) // 4]:.3f}-{rs[(3 * n - 1) // 4]:.3f} ({n} turns)")


if __name__ == "__main__":
    main()
