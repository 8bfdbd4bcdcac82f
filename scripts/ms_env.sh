#!/usr/bin/env bash
# Create (or reuse) the MindSpore venv for symsched and build the package into it.
# Idempotent: installs only what is missing, then builds the native module in place.
#   SYMSCHED_MS_VENV (default ${XDG_CACHE_HOME:-$HOME/.cache}/symsched/msvenv), CARGO_TARGET_DIR (default <repo>/target-py).
#
# MindSpore 2.10.0's CPU wheel (~800 MB download, 2.5 GB installed) declares numpy>=1.25 but is
# built against numpy 1.x: with numpy 2 its bfloat16 breaks, so numpy<2 is pinned in the same
# pip call. torch is never installed here: the MindSpore side must import without it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
MS_VENV="${SYMSCHED_MS_VENV:-$DEFAULT_MS_VENV}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target-py}"
PY="${PYTHON:-python3}"

if [[ ! -x "$MS_VENV/bin/python" ]]; then
    mkdir -p "$(dirname "$MS_VENV")"
    "$PY" -m venv "$MS_VENV"
fi
VPY="$MS_VENV/bin/python"

need=()
"$VPY" -c 'import mindspore, numpy, sys; sys.exit(0 if mindspore.__version__ == "2.10.0" and numpy.__version__.startswith("1.") else 1)' \
    >/dev/null 2>&1 || need+=("mindspore==2.10.0" "numpy<2")
for mod in pytest maturin; do
    "$VPY" -c "import $mod" 2>/dev/null || need+=("$mod")
done
"$VPY" -c 'import pytest_timeout' 2>/dev/null || need+=("pytest-timeout")
if ((${#need[@]})); then
    echo "ms_env: installing ${need[*]} into $MS_VENV"
    start=$(date +%s)
    "$VPY" -m pip install --quiet "${need[@]}"
    echo "ms_env: installed in $(($(date +%s) - start)) s"
fi

cd "$ROOT/python"
# Built in place (python/symsched/_native*.so, the same file scripts/python_env.sh builds) and
# made importable through a .pth: `maturin develop` would also pip-install the package's
# declared dependencies, torch among them.
VIRTUAL_ENV="$MS_VENV" PATH="$MS_VENV/bin:$PATH" "$MS_VENV/bin/maturin" develop --release --quiet --skip-install
SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$ROOT/python" > "$SITE/symsched_dev.pth"
"$VPY" - <<PY
import sys
import symsched.mindspore.tensors, symsched._native as n
assert "torch" not in sys.modules, "the MindSpore venv imported torch"
print("symsched", n.__version__, "(MindSpore side) importable in", "$MS_VENV")
PY
