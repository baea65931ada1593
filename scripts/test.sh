#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, then format, lints, tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the tests run besides cargo: redis-server (tests start their own on free loopback
# ports; none needs to be running), python3 (the interop test drives the wire protocol
# from Python's standard library), openssl (the TLS test makes its certificates) and
# Chromium with its WebDriver (the dashboard's browser test drives a headless Chromium).
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server redis-tools)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium chromium-driver)
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

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --all-targets
cargo test --workspace --doc
# TLS is opt-in because rustls nearly doubles the build: the `tls` feature gets its own
# lint and test run (a private CA and a TLS redis-server; needs the openssl CLI).
cargo clippy -p bus-redis --features tls --all-targets -- -D warnings
cargo test -p bus-redis --features tls --test tls

# OpenTelemetry trace propagation is opt-in too (feature `opentelemetry` of bus-core).
cargo clippy -p bus-core --features opentelemetry --all-targets -- -D warnings
cargo test -p bus-core --features opentelemetry --lib --test opentelemetry

# A message-contract crate never pulls in a Redis client.
if cargo tree -p sample-contracts -e normal | grep -q fred; then
  echo "sample-contracts depends on fred: message contracts must not need a transport" >&2
  exit 1
fi
if cargo tree -p bus-core -e normal | grep -q fred; then
  echo "bus-core depends on fred" >&2
  exit 1
fi
