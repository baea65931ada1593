//! Test harness: a REAL `redis-server` for integration tests, like async-nats's
//! `nats-server` crate. Unpublished; used as a dev-dependency.
//!
//! | item | what it is | module |
//! | --- | --- | --- |
//! | [`TestRedis`] | a Redis URL plus a unique key namespace for one test; honours `BUS_TEST_REDIS_URL` | `test_redis` |
//! | [`RedisServer`], [`ServerBuilder`] | a `redis-server` child on a free 127.0.0.1 port with its own temp dir; restart, kill | `server` |
//! | [`RedisCluster`] | three cluster masters joined by `redis-cli --cluster create` | `cluster` |
//! | [`SyncClient`], [`Resp`] | a tiny blocking RESP2 client for assertions and cleanup | `client` |
//! | [`Logs`] | what the code under test logged (`tracing`), captured for assertions | `logs` |
//! | [`TlsRedis`] | a redis-server speaking TLS with a private CA (made with `openssl`) and an ACL user | `tls` |
//! | [`RedisSentinel`] | a master, a replica and three sentinels (quorum 2, down-after 1 s), for failover tests | `sentinel` |
//! | [`PostgresServer`] | a private PostgreSQL cluster (`initdb`, then `postgres`) on a free 127.0.0.1 port, a fresh database per test | `postgres` |
//! | [`Proxy`] | a TCP proxy whose connections can be black-holed (half-open) or stalled for a while | `proxy` |
//! | [`HarnessError`] | why no Redis could be had (e.g. `NotInstalled`) | `error` |
//! | [`eventually`], [`eventually_async`] | bounded waiting for a condition | `wait` |
//! | [`python::Python`], [`python::Worker`], [`python::bq_python`] | a Python script (the BabelQueue SDK's venv, or `python3`) run to its end or as a worker read line by line | `python` |
//! | [`Azurite`], [`MotoS3`] | Azure Blob's emulator and moto's S3 server on free loopback ports, one bucket each (attachment tests) | `object_servers` |
//! | [`per_layout!`], [`LAYOUTS`] | one BabelQueue scenario run as one test per layout | `layouts` |
//! | [`bus::transport`], [`bus::Counts`] (feature `bus`) | the bus's transport over a test's namespace; what a queue holds | `bus` |
//! | [`scripts::check_scripts`] (feature `bus`) | every script of a crate's `lua/` declared with its shape, its file's header up to date, malformed calls refused before any write | `scripts` |
//!
//! Every wait is bounded (readiness: PING polled every 5 ms for up to 10 s; socket
//! I/O: 10 s), and everything listens on loopback only. Needs Debian's
//! `redis-server` package (which brings `redis-cli`).
//!
//! # One support crate, and its one cycle
//!
//! This is the one crate of test fixtures (STYLE.md, "Test support is a crate"): every
//! crate's `tests/common` keeps only what that crate alone uses. Most of it needs nothing
//! of the bus, so bus-core's own tests can use it without a Redis client. What needs the
//! bus's types sits behind the feature `bus`, which depends on bus-core and bus-redis:
//! bus-redis (and the crates above it) take this crate as a dev-dependency with that
//! feature, a cycle Cargo allows through dev-dependencies. An integration test
//! (`tests/*.rs`) links the one ordinary build of bus-redis, so the transport a fixture
//! returns is the test's type. A unit test (`#[cfg(test)]` in `src/`) is compiled
//! with a second copy of its crate, whose types differ from the ones these fixtures
//! name: unit tests use only the bus-free half. A separate crate for the `bus` half
//! would make the same cycle, and a second place to look.
//!
//! # Why the RESP client and the URL parser stay
//!
//! [`SyncClient`] (with [`Resp`]) and its `redis://` parser are kept, not replaced by the
//! `redis` crate, after reading how the tests use them (~290 call sites in ten crates):
//! they send raw argument lists (`cmd(&["LLEN", key])`, binary values, wrong arities on
//! purpose in the protocol tests) and assert on replies as values, Redis's error replies
//! included (`Resp::Error`). The `redis` crate returns an error reply as `Err`, so either
//! every call site changes, or `Resp` stays as an adapter over `redis::Value` and only
//! the ~110-line RESP2 reader and the ~60-line parser go. The parser also takes the
//! `redis-cluster://` URLs the tests give fred (it connects to the first node), a
//! scheme the `redis` crate refuses. A second Redis client beside fred would be compiled
//! into every test build, against the test command's budget (scripts/test.sh). It stays
//! blocking on purpose: it runs in `Drop`, in the readiness probe (a 500 ms timeout,
//! `-LOADING` read as a value, the answering process checked by its pid) and in
//! synchronous tests.
//!
//! ```no_run
//! let redis = bus_test_redis::TestRedis::start()?;
//! let mut c = redis.client();
//! c.set(&redis.key("greeting"), "hello")?;
//! assert_eq!(redis.keys(), vec![redis.key("greeting")]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#[cfg(feature = "bus")]
pub mod bus;
mod client;
mod cluster;
mod error;
mod layouts;
mod logs;
mod object_servers;
mod postgres;
mod proxy;
pub mod python;
#[cfg(feature = "bus")]
pub mod scripts;
mod sentinel;
mod server;
mod test_redis;
mod tls;
mod url;
mod wait;

pub use client::{info_field, Endpoint, Resp, SyncClient};
pub use cluster::RedisCluster;
pub use error::HarnessError;
pub use layouts::LAYOUTS;
pub use logs::Logs;
pub use object_servers::{azurite_blob, moto_server, Azurite, MotoS3};
pub use postgres::{PostgresServer, PG_BIN_ENV};
pub use proxy::Proxy;
pub use sentinel::{RedisSentinel, SentinelBuilder, DOWN_AFTER};
pub use server::{RedisServer, ServerBuilder};
pub use test_redis::{TestRedis, URL_ENV};
pub use tls::{TlsRedis, TLS_PASSWORD, TLS_USER};
pub use wait::{eventually, eventually_async};
