#!/usr/bin/env bash
# Run symsched's MindSpore suite (python/tests_ms) in the MindSpore venv under a global timeout.
#   SYMSCHED_MS_VENV (default ${XDG_CACHE_HOME:-$HOME/.cache}/symsched/msvenv), TIMEOUT (seconds, default 1200);
#   extra arguments go to pytest (e.g. -k allreduce).
# Ranks are started by `symsched launch` (the CLI of this checkout: target/release or
# target/debug, or SYMSCHED_BIN) and by msrun.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
MS_VENV="${SYMSCHED_MS_VENV:-$DEFAULT_MS_VENV}"
TIMEOUT="${TIMEOUT:-1200}"
if [[ ! -x "$MS_VENV/bin/python" ]] || ! "$MS_VENV/bin/python" -c 'import mindspore' 2>/dev/null; then
    echo "test_ms: no MindSpore venv at $MS_VENV; run scripts/ms_env.sh first" >&2
    exit 2
fi
cd "$ROOT/python"
# --kill-after: a wedged rank tree still goes away
exec timeout --kill-after=30 "$TIMEOUT" "$MS_VENV/bin/python" -m pytest -q -p no:cacheprovider tests_ms "$@"
