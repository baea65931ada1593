#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, then format, lints, tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# A fresh run's build and the tests' own files take ~10 GB (8.4 GB of target directory
# measured on 2026-12-07, with .ci/run's settings; ~1 GB of temporary files). A disk that
# fills mid-run fails tests with "No space left on device" far from the cause, so say it
# first. (A warning, not a refusal: a target directory kept from an earlier run needs
# less.)
TARGET=${CARGO_TARGET_DIR:-target}
mkdir -p "$TARGET"
free_gb=$(df -Pk "$TARGET" | awk 'NR == 2 { print int($4 / 1048576) }')
if [ "${free_gb:-0}" -lt 12 ]; then
  echo "warning: ${free_gb} GB free where $TARGET is; a fresh run needs about 10 GB (the build and the tests' files)" >&2
fi

# What the tests run besides cargo: redis-server (tests start their own on free loopback
# ports; none needs to be running), python3 (the interop test drives the wire protocol
# from Python's standard library), openssl (the TLS test makes its certificates) and
# Chromium with its WebDriver (the dashboard's browser test drives a headless Chromium)
# and PostgreSQL (the outbox and inbox tests start their own cluster with initdb on a
# free loopback port; Debian puts the server's programs in /usr/lib/postgresql/*/bin).
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server redis-tools)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium chromium-driver)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The BabelQueue interop tests (crates/bus-babelqueue) drive the real BabelQueue SDK from
# PyPI, pinned, in a venv of its own (kept between runs; BQ_PYTHON overrides it).
BQ_VENV=target/bq-venv
if [ -z "${BQ_PYTHON:-}" ] && ! "$BQ_VENV/bin/python" -c 'import babelqueue, redis; assert babelqueue.__version__ == "1.24.0"' >/dev/null 2>&1; then
  python3 -c 'import ensurepip' >/dev/null 2>&1 || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; apt-get install -y -qq python3-venv >/dev/null; }
  rm -rf "$BQ_VENV"
  python3 -m venv "$BQ_VENV"
  "$BQ_VENV/bin/pip" install -q "babelqueue[redis]==1.24.0"
fi

# The attachment tests (crates/bus-attachments, tests/object_store.rs and
# object_large.rs) run the object_store provider against real servers, started by the
# harness (bus-test-redis, object_servers.rs) on free loopback ports: moto's S3 in server
# mode, pinned, in the same venv; Azurite's Blob emulator from npm, pinned, in a
# project-local prefix (kept between runs). BUS_TEST_MOTO_SERVER and
# BUS_TEST_AZURITE_BLOB name other programs. A missing one fails those tests by name.
if [ -z "${BUS_TEST_MOTO_SERVER:-}" ] && ! "$BQ_VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("moto") == "5.1.22"; import flask' >/dev/null 2>&1; then
  "$BQ_VENV/bin/python" -m pip install -q "moto[server]==5.1.22"
fi
AZURITE_PREFIX=target/object-servers
if [ -z "${BUS_TEST_AZURITE_BLOB:-}" ] && ! grep -qs '"version": "3.35.0"' "$AZURITE_PREFIX/node_modules/azurite/package.json"; then
  command -v npm >/dev/null 2>&1 || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; apt-get install -y -qq nodejs npm >/dev/null; }
  npm install --prefix "$AZURITE_PREFIX" --no-audit --no-fund --silent azurite@3.35.0
fi

# One build of everything: the opt-in features are additive, so the tests run once on
# their union (a crate is compiled again for every distinct feature set), and clippy runs
# on the default build too, where a feature could hide an unused import.
FEATURES=bus-core/opentelemetry,bus-core/prometheus,bus-redis/tls,bus-attachments/object-store,bus-outbox/metrics

cargo fmt --all -- --check
# What an application that adds no feature builds (bus-management and bus-cli turn on
# bus-redis/tls by default, so the workspace's default build has TLS already).
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --features "$FEATURES" -- -D warnings
# The metrics facade without the Prometheus endpoint that FEATURES brings with it.
cargo clippy -p bus-core --features metrics --lib -- -D warnings
# cargo-nextest runs each test in a process of its own, many at once: most wait on Redis,
# child processes and lock expiry rather than compute (.config/nextest.toml).
if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi
cargo nextest run --workspace --lib --bins --tests --examples --features "$FEATURES"
# The benchmarks' own harness runs each once, briefly, against a real Redis (a smoke
# run; nextest runs only libtest harnesses).
cargo test --workspace --benches --features "$FEATURES"
cargo test --workspace --doc --features "$FEATURES"

# A message-contract crate never pulls in a Redis client.
if cargo tree -p sample-contracts -e normal | grep -q fred; then
  echo "sample-contracts depends on fred: message contracts must not need a transport" >&2
  exit 1
fi
if cargo tree -p bus-core -e normal | grep -q fred; then
  echo "bus-core depends on fred" >&2
  exit 1
fi

# Every crate that is published (no `publish = false`) documents cleanly and packages, in
# dependency order (`cargo package` resolves the workspace's own crates among those it
# packages). The sources packaged are the ones built above, so packaging is not verified
# by building them again.
PUBLISHED=$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json, sys; print(" ".join("-p " + p["name"] for p in json.load(sys.stdin)["packages"] if p.get("publish") != []))')
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps $PUBLISHED
cargo package --no-verify --allow-dirty $PUBLISHED
