#!/usr/bin/env bash
# Shared set-up for the scripts: make sure a Rust toolchain and a C linker are present, installing
# them only when missing (apt-get update runs at most once, and only if a package is needed).

APT_UPDATED=0

# Where the scripts keep their Python venvs unless told otherwise: the PyTorch one (VENV) and the
# MindSpore one (SYMSCHED_MS_VENV).
SYMSCHED_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/symsched"
DEFAULT_VENV="$SYMSCHED_CACHE/venv"
DEFAULT_MS_VENV="$SYMSCHED_CACHE/msvenv"

# Install Debian packages that are not installed yet.
ensure_apt() {
    local missing=()
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    if [ "$APT_UPDATED" -eq 0 ]; then
        $sudo apt-get update
        APT_UPDATED=1
    fi
    $sudo apt-get install -y --no-install-recommends "${missing[@]}"
}

# A Rust toolchain (rustup if cargo is missing) and a C toolchain for linking.
ensure_rust() {
    if ! command -v cc >/dev/null 2>&1; then
        ensure_apt build-essential
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        if [ -x "$HOME/.cargo/bin/cargo" ]; then
            export PATH="$HOME/.cargo/bin:$PATH"
        else
            command -v curl >/dev/null 2>&1 || ensure_apt curl ca-certificates
            curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
            export PATH="$HOME/.cargo/bin:$PATH"
        fi
    fi
}

# LLVM 19 for the host kernels' back end (jit/, inkwell): Debian 12's llvm-19-dev brings
# llvm-config-19 (which llvm-sys finds on PATH) and libLLVM-19.so (linked dynamically).
ensure_llvm() {
    ensure_apt llvm-19-dev
}
