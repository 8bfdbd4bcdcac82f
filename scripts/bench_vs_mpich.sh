#!/usr/bin/env bash
# Performance report (not a timed test): symsched collectives vs MPICH on 2 local ranks, in one
# run on the same machine, plus the memcpy bandwidth measured in the same run.
#
#   scripts/bench_vs_mpich.sh [MIN_BYTES [MAX_BYTES]]      (default 8 B .. 64 MiB, fp32)
#   env: ITERS (20), WARMUP (5), RANKS (2), SYMSCHED_VENV (python venv with mpich + mpi4py)
#
# Both sides use the same protocol: new buffer contents every iteration, a barrier before every
# timed op, the slowest rank's median time per op (and that rank's min) over ITERS. symsched's
# role buffers live in the symmetric heap (the RFC's symmetric tensors); `STAGED=1` binds them as
# private memory instead. Sizes are nccl-tests sizes (the collective's largest buffer). Output:
# one table per op with the median times and the ratio symsched / MPICH (< 1 means symsched is
# faster).
set -euo pipefail
cd "$(dirname "$0")/.."

LO=${1:-8}
HI=${2:-$((64 << 20))}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
RANKS=${RANKS:-2}
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
VENV=${SYMSCHED_VENV:-$DEFAULT_VENV}
STAGED_FLAG=""
if [[ "${STAGED:-0}" == 1 ]]; then STAGED_FLAG="--staged"; fi

if [[ ! -x "$VENV/bin/mpiexec" ]] || ! "$VENV/bin/python" -c 'import mpi4py' 2>/dev/null; then
    echo "needs a venv with mpich and mpi4py at $VENV (pip install mpich mpi4py numpy)" >&2
    exit 2
fi

cargo build --release -q -p symsched-cli
SYMSCHED="${CARGO_TARGET_DIR:-target}/release/symsched"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "== memcpy bandwidth (numpy copy, 1 process, then $RANKS concurrent)"
"$VENV/bin/python" - "$RANKS" > "$OUT/memcpy.txt" <<'PY'
import sys, time, multiprocessing as mp
import numpy as np

def bw(nbytes, reps):
    a = np.ones(nbytes, np.uint8); b = np.empty_like(a)
    np.copyto(b, a)
    best = 1e9
    for _ in range(reps):
        t0 = time.perf_counter(); np.copyto(b, a); best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9

def worker(q):
    q.put(bw(64 << 20, 10))

if __name__ == "__main__":
    n = int(sys.argv[1])
    print(f"memcpy 1 MiB (in cache), 1 process: {bw(1 << 20, 200):.1f} GB/s")
    print(f"memcpy 64 MiB (DRAM), 1 process: {bw(64 << 20, 10):.1f} GB/s")
    q = mp.Queue(); ps = [mp.Process(target=worker, args=(q,)) for _ in range(n)]
    [p.start() for p in ps]; r = [q.get() for _ in ps]; [p.join() for p in ps]
    print(f"memcpy 64 MiB (DRAM), {n} concurrent processes: " + ", ".join(f"{x:.1f}" for x in r) + " GB/s each")
PY
cat "$OUT/memcpy.txt"

declare -A SCHED=(
    [allreduce]="allreduce_one_shot allreduce_two_shot"
    [allgather]="allgather_push"
    [reduce_scatter]="reduce_scatter_push"
    [alltoall]="alltoall_push"
)
for op in allreduce allgather reduce_scatter alltoall; do
    for s in ${SCHED[$op]}; do
        echo "== symsched $s ($RANKS ranks)" >&2
        "$SYMSCHED" run "examples/$s.sched" --ranks "$RANKS" --count "$((LO / 4 > 0 ? LO / 4 : 1)):$((HI / 4))" \
            --iters "$ITERS" --warmup "$WARMUP" $STAGED_FLAG > "$OUT/ss_${op}_$s.txt"
    done
    echo "== mpich $op ($RANKS ranks)" >&2
    PATH="$VENV/bin:$PATH" mpiexec -n "$RANKS" "$VENV/bin/python" benches/osu_mpi4py.py "$op" "$LO" "$HI" "$ITERS" "$WARMUP" \
        > "$OUT/mpi_$op.txt"
done

python3 - "$OUT" "$RANKS" <<'PY'
import glob, os, sys
out, ranks = sys.argv[1], sys.argv[2]
def ss(op):
    best = {}
    for f in sorted(glob.glob(os.path.join(out, f"ss_{op}_*.txt"))):
        name = os.path.basename(f)[len(f"ss_{op}_"):-4]
        for line in open(f):
            if line.startswith("#") or not line.strip():
                continue
            c = line.split()
            size, med, mn = int(c[0]), float(c[4]), float(c[5])
            if size not in best or med < best[size][0]:
                best[size] = (med, mn, name)
    return best
print(f"\n== symsched vs MPICH, {ranks} ranks, fp32, median (min) microseconds; ratio = symsched / MPICH")
for op in ["allreduce", "allgather", "reduce_scatter", "alltoall"]:
    mine = ss(op)
    mpi = {}
    for line in open(os.path.join(out, f"mpi_{op}.txt")):
        c = line.split()
        mpi[int(c[1])] = (float(c[3]), float(c[2]))
    print(f"\n{op}")
    print(f"{'bytes':>10} {'symsched':>20} {'schedule':>20} {'mpich':>20} {'ratio':>7}")
    for size in sorted(set(mine) & set(mpi)):
        m, n = mine[size], mpi[size]
        print(f"{size:>10} {m[0]:>11.2f} ({m[1]:>6.2f}) {m[2]:>20} {n[0]:>11.2f} ({n[1]:>6.2f}) {m[0] / n[0]:>7.2f}")
PY
