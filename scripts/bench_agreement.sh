#!/usr/bin/env bash
# The launch agreement's cost at 8 B (issue 16.1): this tree against the same tree built without
# the agreement (`--cfg symsched_bench_no_agreement`: no word, no check, every exit credit sent),
# measured in one run, the two builds in turns, at two levels:
#   1. the executor's launch (`launch_overhead` bench: allreduce_one_shot, ranks as threads);
#   2. one Python call (`python/tests/bench_call_overhead.py`: 2 rank processes, torch + gloo),
#      the cost a user sees.
# Each build gets its own target directory (OUT, default <repo>/target-bench-agreement), so the
# baseline never reaches a normal build. Needs the venv of scripts/python_env.sh.
#   ROUNDS, ITERS (launch bench; default 21, 20000), TURNS (alternations; default 3)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/target-bench-agreement}"
VENV="${VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/symsched/venv}"
ROUNDS="${ROUNDS:-21}"
ITERS="${ITERS:-20000}"
TURNS="${TURNS:-3}"
cd "$ROOT"
[[ -x "$VENV/bin/maturin" ]] || bash scripts/python_env.sh

declare -A FLAGS=([agreement]="" [baseline]="--cfg symsched_bench_no_agreement")
declare -A LAUNCH
for v in agreement baseline; do
    export RUSTFLAGS="${FLAGS[$v]}" CARGO_TARGET_DIR="$OUT/$v"
    LAUNCH[$v]="$(cargo bench -p symsched-runtime --bench launch_overhead --no-run 2>&1 |
        sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -n 1)"
    rm -rf "$OUT/$v/wheel" "$OUT/$v/pkg"
    "$VENV/bin/maturin" build --quiet --release --auditwheel skip -m python/Cargo.toml \
        -o "$OUT/$v/wheel"
    "$VENV/bin/pip" install --quiet --no-deps --target "$OUT/$v/pkg" "$OUT/$v/wheel"/*.whl
done
unset RUSTFLAGS CARGO_TARGET_DIR

echo "== executor launch, 8 B allreduce_one_shot (µs per launch)"
for ((t = 1; t <= TURNS; t++)); do
    for v in agreement baseline; do
        echo "-- $v (turn $t)"
        "${LAUNCH[$v]}" --bench --rounds "$ROUNDS" --iters "$ITERS" | grep -E "P=|load"
    done
done
echo "== one Python call, 8 B and 64 KiB allreduce (µs per call, best turn)"
cd python
BENCH_TURNS="$TURNS" "$VENV/bin/python" tests/bench_call_overhead.py "$OUT/agreement/pkg" "$OUT/baseline/pkg"
