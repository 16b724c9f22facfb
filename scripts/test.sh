#!/usr/bin/env bash
# Runs every check and test of the workspace on a fresh machine: formatting, clippy with
# warnings denied, then all tests (unit, property, crash, power-loss, corruption, bus,
# services, and end-to-end tests that start the real binaries).
# Installs what it needs that a fresh machine lacks: rustfmt/clippy components, and the
# nats-server that the bus tests start (Debian's package; the tests fail without it).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo fmt --version >/dev/null 2>&1; then rustup component add rustfmt; fi
if ! cargo clippy --version >/dev/null 2>&1; then rustup component add clippy; fi
if ! command -v nats-server >/dev/null 2>&1; then
    # sudo only when needed: containers usually run as root and have no sudo.
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    $SUDO apt-get install -y nats-server
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The model-based property test runs PROPTEST_CASES seeds (each a long random sequence).
export PROPTEST_CASES="${PROPTEST_CASES:-128}"
# The end-to-end tests (tests/) start the binaries as processes: build them first.
cargo build --workspace --bins
cargo test --workspace --all-targets
