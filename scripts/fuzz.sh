#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo fuzz, libFuzzer) of the log's segments and records and of
# the protobuf-to-domain conversion: builds every target of tests/fuzz and runs each for
# SECONDS (first argument, default 15; the test command's short run). A longer run, and how
# to replay a crash, are in docs/operations.md. Installs cargo-fuzz when it is missing.
# Runs on the stable toolchain: no sanitizer (`-s none`); the code under test is safe Rust,
# and a panic, a failed assertion or an overflow (debug assertions are on) is a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-15}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --version 0.13.2
fi
# The workspace's one target directory: fuzz builds land under its x86_64 triple folder.
export CARGO_TARGET_DIR="$PWD/target"
FUZZ=(--fuzz-dir tests/fuzz)
cargo fmt --manifest-path tests/fuzz/Cargo.toml -- --check
cargo fuzz build "${FUZZ[@]}" -s none
for target in $(cargo fuzz list "${FUZZ[@]}"); do
    echo "fuzzing $target for ${SECONDS_EACH}s"
    cargo fuzz run "${FUZZ[@]}" -s none "$target" -- -max_total_time="$SECONDS_EACH"
done
