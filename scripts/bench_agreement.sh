#!/usr/bin/env bash
# The launch agreement's cost at 8 B (issue 16.1): this tree against the same tree built without
# the agreement (`--cfg symsched_bench_no_agreement`: no word, no check, every exit credit sent),
# measured in one run, the two builds in turns, at three levels:
#   1. the executor's launch (`launch_overhead` bench: allreduce_one_shot, ranks as threads);
#   2. the launch across processes without Python (`symsched run --backend RUN_BACKEND`, 2 rank
#      processes on the heap, 8 B; each row's median and min µs per launch);
#   3. one Python call (`python/tests/bench_call_overhead.py`: 2 rank processes, torch + gloo),
#      the cost a user sees.
# Each build gets its own target directory (OUT, default <repo>/target-bench-agreement), so the
# baseline never reaches a normal build. Needs the venv of scripts/python_env.sh.
#   ROUNDS, ITERS (launch bench; default 5, 20000), LAUNCH_TURNS (its alternations; default
#   15), RUN_TURNS, RUN_ITERS (level 2's alternations and launches per run; default 8, 100000),
#   TURNS (the Python bench's alternations; default 3), SCHEDULES (levels 1 and 2; default
#   "allreduce_one_shot allgather_push": scratch puts behind exit credits, and role-buffer puts
#   behind entry credits)
# The launch bench runs P = 2 only, the two builds alternating in short turns, since this host's
# speed drifts by ±20 % over minutes; it prints each turn's min µs per launch (over ROUNDS
# rounds, slowest rank) and the median and quartiles of the per-turn ratio.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/target-bench-agreement}"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
VENV="${VENV:-$DEFAULT_VENV}"
ROUNDS="${ROUNDS:-5}"
LAUNCH_TURNS="${LAUNCH_TURNS:-15}"
ITERS="${ITERS:-20000}"
TURNS="${TURNS:-3}"
RUN_TURNS="${RUN_TURNS:-8}"
RUN_ITERS="${RUN_ITERS:-100000}"
RUN_BACKEND="${RUN_BACKEND:-interp}"
SCHEDULES="${SCHEDULES:-allreduce_one_shot allgather_push}"
cd "$ROOT"
[[ -x "$VENV/bin/maturin" ]] || bash scripts/python_env.sh

declare -A FLAGS=([agreement]="" [baseline]="--cfg symsched_bench_no_agreement")
declare -A LAUNCH
for v in agreement baseline; do
    export RUSTFLAGS="${FLAGS[$v]}" CARGO_TARGET_DIR="$OUT/$v"
    LAUNCH[$v]="$(cargo bench -p symsched-runtime --bench launch_overhead --no-run 2>&1 |
        sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -n 1)"
    cargo build --quiet --release -p symsched-cli
    rm -rf "$OUT/$v/wheel" "$OUT/$v/pkg"
    "$VENV/bin/maturin" build --quiet --release --auditwheel skip -m python/Cargo.toml \
        -o "$OUT/$v/wheel"
    "$VENV/bin/pip" install --quiet --no-deps --target "$OUT/$v/pkg" "$OUT/$v/wheel"/*.whl
done
unset RUSTFLAGS CARGO_TARGET_DIR

TMP="$(mktemp)"
trap 'rm -f "$TMP"' EXIT
# Median and quartiles of the per-turn ratios in column $1 of $TMP.
ratio_summary() {
    sort -n -k"$1" "$TMP" | awk -v c="$1" '{ r[NR] = $c } END {
        printf "ratio median %.3f, quartiles %.3f-%.3f (%d turns)\n",
            r[int((NR + 1) / 2)], r[int((NR + 3) / 4)], r[int((3 * NR + 3) / 4)], NR }'
}
min_us() {
    "${LAUNCH[$1]}" --bench --rounds "$ROUNDS" --iters "$ITERS" --ranks 2 --schedule "$2" |
        awk '/P=2/ { print $3 }'
}
for s in $SCHEDULES; do
    echo "== executor launch, P = 2, n = 2 f32 $s: min µs per launch (agreement, baseline, ratio)"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    for ((t = 1; t <= LAUNCH_TURNS; t++)); do
        a="$(min_us agreement "$s")"
        b="$(min_us baseline "$s")"
        echo "$a $b" | awk '{ printf "%s %s %.3f\n", $1, $2, $1 / $2 }'
    done | tee "$TMP"
    ratio_summary 3
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
for s in $SCHEDULES; do
    echo "== processes, symsched run --backend $RUN_BACKEND, P = 2, n = 2 f32 $s: median and min µs per launch"
    echo "   (agreement | baseline), and the per-turn ratio of the medians"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    for ((t = 1; t <= RUN_TURNS; t++)); do
        for v in agreement baseline; do
            "$OUT/$v/release/symsched" run --ranks 2 --count 2 --iters "$RUN_ITERS" \
                --warmup 1000 --backend "$RUN_BACKEND" "examples/$s.sched" 2>&1 |
                grep -v '^#' | tail -n 1 | awk '{ printf "%s %s ", $5, $6 }'
        done
        echo
    done | awk '{ printf "%s %s | %s %s  %.3f\n", $1, $2, $3, $4, $1 / $3 }' | tee "$TMP"
    ratio_summary 6
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "== one Python call, 8 B and 64 KiB allreduce (µs per call, best turn)"
cd python
BENCH_TURNS="$TURNS" "$VENV/bin/python" tests/bench_call_overhead.py "$OUT/agreement/pkg" "$OUT/baseline/pkg"
