#!/usr/bin/env bash
# Create (or reuse) the Python venv for symsched and install the package into it with pip (the
# maturin build backend of python/pyproject.toml; editable, so the sources of python/ are used
# in place and a rebuild is this script again). Idempotent: installs only what is missing.
#   VENV              the venv (default ${XDG_CACHE_HOME:-$HOME/.cache}/symsched/venv)
#   CARGO_TARGET_DIR  cargo's build directory (default <repo>/target-py)
#   PYTHON            the interpreter that makes a new venv (default python3; CPython >= 3.11)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
VENV="${VENV:-$DEFAULT_VENV}"
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
for mod in numpy pytest maturin matplotlib; do
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

# The wheel's module is abi3 (_native.abi3.so); an interpreter-specific build an older
# `maturin develop` left in the source tree would shadow it.
rm -f "$ROOT"/python/symsched/_native.cpython-*.so
# --no-build-isolation: build with the venv's maturin rather than fetching one per install
"$VPY" -m pip install --quiet --no-build-isolation --no-deps --editable "$ROOT/python"
"$VPY" -m symsched --version | sed "s|\$| installed in $VENV|"
