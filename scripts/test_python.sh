#!/usr/bin/env bash
# Run the symsched pytest suite in the project venv under a global timeout.
#   VENV (the venv scripts/python_env.sh builds: default ${XDG_CACHE_HOME:-$HOME/.cache}/symsched/venv),
#   TIMEOUT (seconds, default 900); extra arguments go to pytest (e.g. -k allreduce).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
VENV="${VENV:-$DEFAULT_VENV}"
TIMEOUT="${TIMEOUT:-900}"
if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import symsched._native' 2>/dev/null; then
    echo "test_python: the venv lacks symsched; run scripts/python_env.sh first" >&2
    exit 2
fi
cd "$ROOT/python"
# --kill-after: a wedged rank tree still goes away
exec timeout --kill-after=30 "$TIMEOUT" "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
