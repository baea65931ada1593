#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, then format, lints, tests.
set -euo pipefail
cd "$(dirname "$0")/.."

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

# One build of everything, not one per feature set. Cargo compiles a crate again for
# every distinct set of features of it and of its dependencies, and `-p CRATE --features
# X` resolves features for that crate alone, so each opt-in feature tested on its own
# rebuilt bus-core, bus-redis, the harness and parts of tokio, fred and serde once more.
# The opt-in features are additive (they add spans, metrics and TLS; nothing is switched
# off), so the tests and doc-tests run once, on the union of them, and clippy runs twice:
# on the default build, because a feature can hide an unused import or a dead branch of
# the default one, and on the union. Every `#[cfg(feature = ...)]` test (tls,
# opentelemetry, metrics) runs in the one test build. Measured in issue 20 (cargo's unit
# graph, and a warm target after a change to bus-core): 1,370 compilation units on a
# fresh clone before (759 built, 107 test executables linked, tokio compiled 13 times),
# 1,282 after (659 built, 103 linked, tokio 5 times), counted by .ci/compile-units.py;
# after a change to bus-core the per-feature runs took 69-116 s (82-93 s of CPU), the
# union's clippy that replaces them 35-39 s (47-56 s of CPU), on a shared 2-core
# machine. An opt-in feature of a crate goes into FEATURES, not into a run of its own
# (docs/getting-started.md, "Running the tests").
# Build scripts and proc-macros get the same debug setting as the code they are shared
# with. Cargo builds a host-only dependency (syn for a derive, say) with the build-override
# profile (no debug info) but one that the tests also link with the dev profile; `cargo test
# --doc` links no test, so without this every proc-macro, and all that depends on one
# (serde, tokio, fred, the bus crates), was compiled a second time for the doc-tests:
# ~130 units, a whole build, found by comparing the two commands' `--unit-graph`.
export CARGO_PROFILE_DEV_BUILD_OVERRIDE_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-true}"
FEATURES=bus-core/opentelemetry,bus-core/prometheus,bus-redis/tls,bus-attachments/object-store,bus-outbox/metrics

cargo fmt --all -- --check
# What an application that adds no feature builds (bus-management and bus-cli turn on
# bus-redis/tls by default, so the workspace's default build has TLS already).
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --features "$FEATURES" -- -D warnings
# The metrics facade without the Prometheus endpoint that FEATURES brings with it.
cargo clippy -p bus-core --features metrics --lib -- -D warnings
# The tests run under cargo-nextest (installed with the Rust toolchain on this kind of
# machine; `cargo install --locked cargo-nextest` where it is not), many at once, each in a
# process of its own: most of them wait on Redis, child processes and lock expiry rather
# than compute, and one binary after another (`cargo test`) those waits added up to most of
# CI's time (.config/nextest.toml says how many run at once, and which start first).
# `--workspace` keeps one feature resolution, so the three commands share one build.
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
