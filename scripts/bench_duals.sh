#!/usr/bin/env bash
# Derived duals against hand-written ones (issue 14.9): for every schedule of the standard library
# whose backward is derived (`dual derived`), the derived backward against the hand-written
# schedule of the same collective; and for every schedule whose backward is named, the derived
# one (built from a copy of the library with that schedule's dual clause set to `derived`)
# against the named one. `symsched run` on RANKS processes, the two in turns (TURNS), each row
# the best median µs over the turns and the ratio derived ÷ hand-written; load average printed.
#   RANKS (default 2), TURNS (default 5: one invocation of an unchanged plan can land in a
#   slower state on a 2-core host), COUNTS (elements of the largest buffer; default
#   2,1K,64K,1M = 8 B to 4 MiB of f32), ITERS (default 50), ONLY (an extended regex: only the
#   pairs whose derived schedule matches it; default all)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RANKS="${RANKS:-2}"
TURNS="${TURNS:-5}"
COUNTS="${COUNTS:-2,1K,64K,1M}"
ITERS="${ITERS:-50}"
ONLY="${ONLY:-}"
cargo build --release -q -p symsched-cli
SYMSCHED="${CARGO_TARGET_DIR:-target}/release/symsched"

LIB="$(mktemp -d)"
trap 'rm -rf "$LIB"' EXIT
cp examples/*.sched "$LIB/"
# Named duals turned into derived ones (schedules the transposition accepts: no cast, compute,
# hostcoll or alltoallv).
derive() { sed -E -i "s/dual $2/dual $3/" "$LIB/$1.sched"; }
derive reduce_scatter_push 'allgather_push, allgather_pull' derived
derive reduce_scatter_push_k2 allgather_push_k2 derived
derive allgather_push_k2 reduce_scatter_push_k2 derived
derive reduce_scatter_push_channels allgather_push_k2 derived
for s in allreduce_one_shot allreduce_two_shot allreduce_two_shot_pull allreduce_ring; do
    derive "$s" "identity assuming replicated, $s" 'identity assuming replicated, derived'
done

# derived (file, schedule, params) | hand-written (file, schedule, params); a derived dual takes
# the params of the collective it implements (`sendrecv_pair.dual` with src=0, dst=1 sends from
# 0 to 1, the transposition of the forward from 1 to 0)
PAIRS=(
    "$LIB/allgather_push.sched allgather_push.dual - | examples/reduce_scatter_push.sched reduce_scatter_push -"
    "$LIB/allgather_one_shot.sched allgather_one_shot.dual - | examples/reduce_scatter_push.sched reduce_scatter_push -"
    "$LIB/allgather_pull.sched allgather_pull.dual - | examples/reduce_scatter_push.sched reduce_scatter_push -"
    "$LIB/broadcast_push.sched broadcast_push.dual root=0 | examples/reduce_push.sched reduce_push root=0"
    "$LIB/reduce_push.sched reduce_push.dual root=0 | examples/broadcast_push.sched broadcast_push root=0"
    "$LIB/alltoall_push.sched alltoall_push.dual - | examples/alltoall_push.sched alltoall_push -"
    "$LIB/sendrecv_pair.sched sendrecv_pair.dual src=0,dst=1 | examples/sendrecv_pair.sched sendrecv_pair src=0,dst=1"
    "$LIB/reduce_scatter_push.sched reduce_scatter_push.dual - | examples/allgather_push.sched allgather_push -"
    "$LIB/allreduce_one_shot.sched allreduce_one_shot.dual - | examples/allreduce_one_shot.sched allreduce_one_shot -"
    "$LIB/allreduce_two_shot.sched allreduce_two_shot.dual - | examples/allreduce_two_shot.sched allreduce_two_shot -"
    "$LIB/allreduce_two_shot_pull.sched allreduce_two_shot_pull.dual - | examples/allreduce_two_shot_pull.sched allreduce_two_shot_pull -"
    "$LIB/allreduce_ring.sched allreduce_ring.dual - | examples/allreduce_ring.sched allreduce_ring -"
    "$LIB/reduce_scatter_push_k2.sched reduce_scatter_push_k2.dual - | examples/allgather_push_k2.sched allgather_push_k2 -"
    "$LIB/allgather_push_k2.sched allgather_push_k2.dual - | examples/reduce_scatter_push_k2.sched reduce_scatter_push_k2 -"
    "$LIB/reduce_scatter_push_channels.sched reduce_scatter_push_channels.dual - | examples/allgather_push_k2.sched allgather_push_k2 -"
)

# run FILE SCHEDULE PARAMS: "bytes median_us" per size
run() {
    local params=()
    if [[ "$3" != - ]]; then
        IFS=, read -ra kv <<<"$3"
        for p in "${kv[@]}"; do params+=(--param "$p"); done
    fi
    "$SYMSCHED" run "$1" --schedule "$2" "${params[@]}" --ranks "$RANKS" --count "$COUNTS" \
        --iters "$ITERS" --warmup 10 | awk '!/^#/ && NF >= 6 { print $1, $5 }'
}

# keep_best NAME: fold "bytes us" lines from stdin into the associative array NAME (the least us
# per bytes)
keep_best() {
    local -n best=$1
    while read -r b us; do
        if [[ -z "${best[$b]:-}" ]] || (($(echo "$us < ${best[$b]}" | bc))); then
            best[$b]=$us
        fi
    done
}

echo "# derived duals vs hand-written, $RANKS ranks, f32 sum, best median µs of $TURNS turns"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %-26s %10s %10s %10s %7s\n' derived hand-written bytes derived hand ratio
for pair in "${PAIRS[@]}"; do
    read -r df ds dp _ hf hs hp <<<"$pair"
    [[ -z "$ONLY" || "$ds" =~ $ONLY ]] || continue
    declare -A best_d=() best_h=()
    for ((t = 1; t <= TURNS; t++)); do
        keep_best best_d < <(run "$df" "$ds" "$dp")
        keep_best best_h < <(run "$hf" "$hs" "$hp")
    done
    for b in $(printf '%s\n' "${!best_d[@]}" | sort -n); do
        printf '%-28s %-26s %10s %10s %10s %7.2f\n' "$ds" "$hs" "$b" "${best_d[$b]}" \
            "${best_h[$b]:-?}" "$(echo "${best_d[$b]} / ${best_h[$b]:-0}" | bc -l 2>/dev/null || echo 0)"
    done
    unset best_d best_h
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
