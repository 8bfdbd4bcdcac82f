#!/usr/bin/env bash
# Every test the project has: formatting, lints, unit/integration/snapshot/negative/property
# tests. Idempotent; installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
source scripts/lib.sh
ensure_rust
ensure_llvm
# g++ compiles the generated Ascend C kernels against the host simulation (kernels/ tests).
command -v g++ >/dev/null 2>&1 || ensure_apt g++
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --workspace

echo "== python package (PyO3, outside the workspace): fmt, clippy, build into the venv"
cargo fmt --manifest-path python/Cargo.toml --check
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-py}" \
    cargo clippy --manifest-path python/Cargo.toml -- -D warnings
bash scripts/python_env.sh
echo "== pytest"
bash scripts/test_python.sh
echo "== MindSpore: its own venv (MindSpore 2.10.0 CPU, numpy<2), then the MindSpore suite"
bash scripts/ms_env.sh
bash scripts/test_ms.sh
echo "all tests passed"
