#!/usr/bin/env bash
# The main job on a fresh machine: build symsched, verify the whole standard library for a range
# of group sizes, and compile one plan. Idempotent; installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
source scripts/lib.sh
ensure_rust

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
