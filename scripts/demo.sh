#!/usr/bin/env bash
# The main job on a fresh machine: build symsched, verify the whole standard library for a range
# of group sizes, and compile one plan. Idempotent; installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
source scripts/lib.sh
ensure_rust
ensure_llvm

echo "== build"
cargo build --release -p symsched-cli
SYMSCHED="${CARGO_TARGET_DIR:-target}/release/symsched"

echo "== verify the standard library for P in 1,2,3,4,5,8,16"
"$SYMSCHED" check examples/*.sched --ranks 1,2,3,4,5,8,16

echo "== compile one plan: allreduce_two_shot for 8 ranks"
OUT=target/demo
mkdir -p "$OUT"
"$SYMSCHED" compile examples/allreduce_two_shot.sched --ranks 8 --emit plan -o "$OUT/allreduce_two_shot.P8.json"
echo "wrote $OUT/allreduce_two_shot.P8.json ($(wc -c < "$OUT/allreduce_two_shot.P8.json") bytes)"

# --- symsched run (runtime executor): every standard schedule on 4 local ranks, checked. ---
echo "== run every standard schedule on 4 local ranks with --check"
for f in examples/*.sched; do
    name=$(basename "$f" .sched)
    extra=(--count 4099,1M)
    case "$name" in
        allgather_matmul | matmul_reduce_scatter) extra=(--count 64,1024 --size m=32 --size k=32) ;;
        broadcast_push | reduce_push) extra+=(--param root=1) ;;
        sendrecv_pair) extra+=(--param src=0 --param dst=3) ;;
        allreduce_hier) extra+=(--param L=2) ;;
    esac
    "$SYMSCHED" run "$f" --ranks 4 --iters 5 --warmup 1 --check "${extra[@]}"
done

# --- MindSpore: its own venv, then the RFC's DP x TP mix on a 2x2 mesh (docs/mindspore.md). ---
echo "== MindSpore: venv (scripts/ms_env.sh), then examples/python/train_dp_tp_mindspore.py on 4 ranks"
bash scripts/ms_env.sh
MS_VENV="${SYMSCHED_MS_VENV:-/root/.cache/symsched/msvenv}"
GLOG_v=3 PATH="$MS_VENV/bin:$PATH" "$SYMSCHED" launch -n 4 --timeout 300 -- \
    "$MS_VENV/bin/python" examples/python/train_dp_tp_mindspore.py
