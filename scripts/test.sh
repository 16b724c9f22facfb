#!/usr/bin/env bash
# Runs every check and test of the workspace on a fresh machine: formatting, clippy with
# warnings denied, then all tests (unit, property, crash, power-loss, corruption).
# Installs what it needs that a fresh machine lacks (only rustfmt/clippy components today).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo fmt --version >/dev/null 2>&1; then rustup component add rustfmt; fi
if ! cargo clippy --version >/dev/null 2>&1; then rustup component add clippy; fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The model-based property test runs PROPTEST_CASES seeds (each a long random sequence).
export PROPTEST_CASES="${PROPTEST_CASES:-128}"
cargo test --workspace --all-targets
