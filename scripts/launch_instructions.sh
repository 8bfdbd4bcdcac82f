#!/usr/bin/env bash
# Host overhead per launch at 8 B in instructions, the interpreter against the JIT (issue 12,
# goal "host overhead per launch at 8 B ≥ 1.2× lower"). Wall time at 8 B is a few hundred
# nanoseconds of two rank threads handing cache lines to each other and moves with the load of
# this shared 2-core host; an instruction count does not. For every standard schedule, and the
# no-step launch (`noop`: the executor's part, which every backend runs), the `jit_backend`
# bench's profile mode runs the 8-byte case on 2 rank threads under callgrind, once with FEW and
# once with LAUNCHES launches. Per rank-launch: the whole program's instructions minus its
# blocking waits, the difference of the two runs over the launches between them (so the
# set-up, the kernel's compile and the warm-up cancel out). Printed: both counts, and interp ÷
# JIT for the whole launch and for the backend's own part (the launch minus the no-step launch
# of the same backend).
#   LAUNCHES (default 5000), FEW (default 1000), ONLY (an extended regex over schedule names;
#   default all), BYTES (default 8). Needs valgrind (`apt-get install valgrind`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LAUNCHES="${LAUNCHES:-5000}"
FEW="${FEW:-1000}"
ONLY="${ONLY:-}"
BYTES="${BYTES:-8}"
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null || {
    echo "needs valgrind and callgrind_annotate (apt-get install valgrind)" >&2
    exit 2
}
BENCH="$(cargo bench -p symsched-runtime --bench jit_backend --no-run 2>&1 |
    sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -n 1)"
[[ -x "$BENCH" ]] || { echo "jit_backend bench binary not found" >&2; exit 2; }

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

# Instructions of one run of case $1 on backend $2 with $3 launches: the program's total minus
# the blocking waits — the own instructions of `LocalFabric::wait_until` (in every source file
# its inlined code comes from) and of what it calls while it polls (yield, clock reads, which
# the standard library's `Instant` leaves in `Timespec::now` and `Timespec::sub_timespec`):
# spinning while the peer has not signalled, which depends on how the rank threads are
# scheduled. "-" when the case does not run. Totals and own counts, not the inclusive count of
# the launch function: the JIT's kernels are code without symbols, and inclusive counts through
# them and through inlined code are not reliable.
launch_count() {
    local file="$OUT/cg.$1.$2.$3"
    if ! SYMSCHED_BENCH_PROFILE="$1/$BYTES/$2/$3" valgrind --tool=callgrind \
        --callgrind-out-file="$file" "$BENCH" --bench >"$OUT/log" 2>&1; then
        echo "-"
        return
    fi
    callgrind_annotate "$file" 2>/dev/null | awk '
        function count(s) { gsub(",", "", s); return s + 0 }
        /PROGRAM TOTALS/ && !t { t = count($1); next }
        /^Ir +file:function/ { on = 1; next }
        on && /^$/ { on = 0 }
        on && /LocalFabric::wait_until|yield_now|sched_yield|Instant>::(elapsed|now)|Timespec>::(now|sub_timespec)|clock_gettime|vdso/ {
            w += count($1)
        }
        END { if (t) printf "%.0f\n", t - w; else print "-" }'
}

# Instructions per rank-launch of one case: the difference of a run of FEW and one of LAUNCHES
# launches (2 rank threads each), so the one-time work — the first resolution, the kernel's
# compile and load, the warm-up launches — cancels out.
per_launch() {
    local a b
    a="$(launch_count "$1" "$2" "$FEW")"
    b="$(launch_count "$1" "$2" "$LAUNCHES")"
    if [[ "$a" == - || "$b" == - ]]; then
        echo "-"
    else
        echo $(((b - a) / (2 * (LAUNCHES - FEW))))
    fi
}

schedules=(noop)
for f in examples/*.sched; do
    s="$(basename "$f" .sched)"
    if [[ -z "$ONLY" || "$s" =~ $ONLY ]]; then
        schedules+=("$s")
    fi
done
echo "instructions per rank-launch at $BYTES B, 2 ranks, f32 sum ($LAUNCHES − $FEW launches per case)"
printf '%-32s %8s %8s %12s %12s\n' schedule interp jit "whole i÷j" "own part i÷j"
for s in "${schedules[@]}"; do
    i="$(per_launch "$s" interp)"
    j="$(per_launch "$s" jit)"
    if [[ "$s" == noop ]]; then
        noop_i="$i" noop_j="$j"
    fi
    if [[ "$i" == - || "$j" == - ]]; then
        printf '%-32s %8s %8s %12s %12s\n' "$s" "$i" "$j" - -
        continue
    fi
    awk -v s="$s" -v i="$i" -v j="$j" -v ni="$noop_i" -v nj="$noop_j" 'BEGIN {
        own = (s == "noop" || j - nj <= 0) ? "-" : sprintf("%.2f", (i - ni) / (j - nj))
        printf "%-32s %8d %8d %12.2f %12s\n", s, i, j, i / j, own }'
done
