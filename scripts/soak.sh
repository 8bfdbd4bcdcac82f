#!/usr/bin/env bash
# Long soak of the Python package: random collectives over overlapping sub-groups with random
# dtypes, ops and sizes, bit-exact against a sequential reference (python/tests/scen_soak.py),
# run round after round with a new seed until the duration has passed.
#   DURATION  seconds to keep starting rounds (default 600)
#   OPS       operations per round (default 20000)
#   RANKS     ranks (default 4)
#   SYMMETRIC 1: half the buffers are symm.empty tensors (default 0)
#   SEED      first seed (default: the time); VENV as for scripts/test_python.sh
# Stops at the first failing round and prints its seed, so `SEED=<seed> DURATION=1` replays it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
VENV="${VENV:-$DEFAULT_VENV}"
DURATION="${DURATION:-600}"
OPS="${OPS:-20000}"
RANKS="${RANKS:-4}"
SYMMETRIC="${SYMMETRIC:-0}"
SEED="${SEED:-$(date +%s)}"
for v in DURATION OPS RANKS SEED; do
    if ! [[ "${!v}" =~ ^[0-9]+$ ]]; then echo "soak: $v=${!v} is not a non-negative integer" >&2; exit 2; fi
done
if [[ "$SYMMETRIC" != 0 && "$SYMMETRIC" != 1 ]]; then echo "soak: SYMMETRIC=$SYMMETRIC is not 0 or 1" >&2; exit 2; fi
if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import symsched._native' 2>/dev/null; then
    echo "soak: the venv lacks symsched; run scripts/python_env.sh first" >&2
    exit 2
fi
cd "$ROOT/python/tests"
end=$(( $(date +%s) + DURATION ))
round=0
total=0
while :; do
    seed=$(( SEED + round ))
    # a round gets 2 s per 1000 operations and a minute more before the harness ends it
    budget=$(( OPS / 500 + 60 ))
    out=$(timeout --kill-after=30 $(( budget + 30 )) "$VENV/bin/python" - "$seed" "$OPS" "$RANKS" "$SYMMETRIC" "$budget" <<'PY'
import sys
import _harness
seed, ops, ranks, symmetric, budget = (int(a) for a in sys.argv[1:6])
res = _harness.ok(_harness.run("scen_soak", "soak", ranks, timeout=budget,
                               args={"seed": seed, "ops": ops, "symmetric": bool(symmetric)}))
print(sum(r["done"] for r in res), f"{max(r['seconds'] for r in res):.1f}")
PY
    ) || { echo "soak: round $round failed (SEED=$seed OPS=$OPS RANKS=$RANKS SYMMETRIC=$SYMMETRIC)" >&2; echo "$out" >&2; exit 1; }
    read -r done secs <<<"$out"
    total=$(( total + done ))
    round=$(( round + 1 ))
    echo "soak: round $round seed $seed: $done rank-operations bit-exact in ${secs} s (total $total)"
    (( $(date +%s) < end )) || break
done
echo "soak: $round rounds, $total rank-operations, no mismatch"
