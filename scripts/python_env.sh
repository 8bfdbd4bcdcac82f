#!/usr/bin/env bash
# Create (or reuse) the Python venv for symsched and build the package into it.
# Idempotent: installs only what is missing, then `maturin develop --release`.
#   VENV (default /root/.cache/symsched/venv), CARGO_TARGET_DIR (default <repo>/target-py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-/root/.cache/symsched/venv}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target-py}"
PY="${PYTHON:-python3}"

if [[ ! -x "$VENV/bin/python" ]]; then
    mkdir -p "$(dirname "$VENV")"
    "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

need=()
"$VPY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null \
    || need+=("torch==2.13.0")
for mod in numpy pytest maturin; do
    "$VPY" -c "import $mod" 2>/dev/null || need+=("$mod")
done
"$VPY" -c 'import pytest_timeout' 2>/dev/null || need+=("pytest-timeout")
"$VPY" -c 'import mpi4py' 2>/dev/null || need+=("mpich" "mpi4py")
if ((${#need[@]})); then
    echo "python_env: installing ${need[*]}"
    if [[ " ${need[*]} " == *" torch==2.13.0 "* ]]; then
        "$VPY" -m pip install --quiet "torch==2.13.0"
        need=("${need[@]/torch==2.13.0}")
    fi
    rest=()
    for p in "${need[@]}"; do [[ -n "$p" ]] && rest+=("$p"); done
    ((${#rest[@]})) && "$VPY" -m pip install --quiet "${rest[@]}"
fi

cd "$ROOT/python"
# maturin finds the venv through VIRTUAL_ENV
VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" "$VENV/bin/maturin" develop --release --quiet
"$VPY" -c 'import symsched, symsched._native as n; print("symsched", n.__version__, "installed in", "'"$VENV"'")'
