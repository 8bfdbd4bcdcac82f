#!/usr/bin/env bash
# The main job on a fresh machine, as a story: build symsched, verify the whole standard library,
# follow one schedule from its source to its verified plan, its Ascend C kernel and a checked run
# on 4 ranks (interpreter, LLVM-compiled kernels, the Ascend C on the host simulation), run every
# standard schedule on 4 ranks with --check, train the RFC's DP x TP mix on MindSpore, and print a
# summary table. Idempotent; installs only what is missing. Full outputs go to target/demo/*.log.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
source scripts/lib.sh
ensure_rust
ensure_llvm
command -v g++ >/dev/null 2>&1 || ensure_apt g++

OUT=target/demo
mkdir -p "$OUT"
ROWS=()
T0=$SECONDS

# step TITLE LOG CMD...: run CMD with its output in $OUT/LOG, one summary row per step.
step() {
    local title=$1 log=$OUT/$2 t=$SECONDS
    shift 2
    if "$@" >"$log" 2>&1; then
        ROWS+=("$(printf '%-58s %-6s %5ss' "$title" ok $((SECONDS - t)))")
    else
        ROWS+=("$(printf '%-58s %-6s %5ss' "$title" FAILED $((SECONDS - t)))")
        echo "FAILED: $title (output: $log)"
        tail -n 20 "$log"
        FAILED=1
    fi
}
FAILED=0

echo "== 1. build the symsched command (release)"
cargo build --release -p symsched-cli
SYMSCHED="${CARGO_TARGET_DIR:-target}/release/symsched"
ROWS+=("$(printf '%-58s %-6s %5ss' "build" ok $((SECONDS - T0)))")

echo
echo "== 2. verify the standard library for every P in 1..16 (every schedule, every parameter value)"
step "verify $(ls examples/*.sched | wc -l) schedules, P = 1..16" check.log \
    "$SYMSCHED" check examples/*.sched --ranks 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16
grep -E '^(ok|FAIL|error)' "$OUT/check.log" || true
echo "(warnings, e.g. W0404 for ring and hierarchical fold orders, are in $OUT/check.log)"

S=examples/allreduce_two_shot.sched
echo
echo "== 3. one schedule from source to a checked run: $S"
echo "-- the source"
cat "$S"
echo "-- the verified plan of rank 0 at P = 4 (symsched compile --emit ir)"
"$SYMSCHED" compile "$S" --ranks 4 --emit ir | sed -n '/^rank 0:/,/^rank 1:/p' | sed '$d'
"$SYMSCHED" compile "$S" --ranks 4 --emit plan -o "$OUT/allreduce_two_shot.P4.json"
echo "(the plan the runtime executes: $OUT/allreduce_two_shot.P4.json, docs/plan-schema.md)"
echo "-- its Ascend C (symsched compile --emit ascendc): kernel, step table, launch stub, CANN project"
rm -rf "$OUT/ascendc"
"$SYMSCHED" compile "$S" --ranks 4 --emit ascendc -o "$OUT/ascendc" >/dev/null
ls "$OUT/ascendc"
sed -n '1,8p' "$OUT"/ascendc/*_kernel.cpp
echo "   ... and rank 0's rows of the step table:"
grep -E '/\* r0 ' "$OUT"/ascendc/*_table.h
echo "-- run on 4 ranks with --check: interpreter, LLVM-compiled kernels, Ascend C on the host simulation"
for backend in interp jit sim; do
    step "allreduce_two_shot, 4 ranks, --backend $backend" "run-two-shot-$backend.log" \
        "$SYMSCHED" run "$S" --ranks 4 --backend "$backend" --iters 5 --warmup 1 --check --count 4099,64K
    grep -E '^ +[0-9]|check' "$OUT/run-two-shot-$backend.log" || true
done

echo
echo "== 4. every standard schedule on 4 local ranks with --check (4099 and 64K elements)"
for f in examples/*.sched; do
    name=$(basename "$f" .sched)
    extra=(--count 4099,64K)
    case "$name" in
        allgather_matmul* | matmul_reduce_scatter*) extra=(--count 64,1024 --size m=32 --size k=32) ;;
        broadcast_push | reduce_push) extra+=(--param root=1) ;;
        sendrecv_pair) extra+=(--param src=0 --param dst=3) ;;
        allreduce_hier | allgather_hier | reduce_scatter_hier) extra+=(--param L=2) ;;
    esac
    step "run $name, 4 ranks, --check" "run-$name.log" \
        "$SYMSCHED" run "$f" --ranks 4 --iters 5 --warmup 1 --check "${extra[@]}"
done
printf '%s\n' "${ROWS[@]}" | grep '^run ' | grep -c ' ok ' | xargs -I{} echo "{} schedules ran and matched the sequential reference"

echo
echo "== 5. MindSpore: the RFC's DP x TP mix on a 2x2 mesh (docs/mindspore.md), 4 ranks"
bash scripts/ms_env.sh >"$OUT/ms_env.log" 2>&1 || { echo "ms_env failed: $OUT/ms_env.log"; tail -n 20 "$OUT/ms_env.log"; exit 1; }
MS_VENV="${SYMSCHED_MS_VENV:-$DEFAULT_MS_VENV}"
step "MindSpore DP x TP training, 4 ranks" mindspore.log env GLOG_v=3 PATH="$MS_VENV/bin:$PATH" \
    "$SYMSCHED" launch -n 4 --timeout 300 -- "$MS_VENV/bin/python" examples/python/train_dp_tp_mindspore.py
grep -E "^\[rank 0\] (losses|max|DP|forbidden)" "$OUT/mindspore.log" || true

echo
echo "== summary ($((SECONDS - T0)) s in all; logs in $OUT)"
printf '%-58s %-6s %6s\n' step result time
printf '%s\n' "${ROWS[@]}"
exit "$FAILED"
