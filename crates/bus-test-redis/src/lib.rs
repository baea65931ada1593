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
//! | [`Proxy`] | a TCP proxy whose connections can be black-holed (half-open) or stalled for a while | `proxy` |
//! | [`HarnessError`] | why no Redis could be had (e.g. `NotInstalled`) | `error` |
//! | [`eventually`], [`eventually_async`] | bounded waiting for a condition | `wait` |
//!
//! Every wait is bounded (readiness: PING polled every 5 ms for up to 10 s; socket
//! I/O: 10 s), and everything listens on loopback only. Needs Debian's
//! `redis-server` package (which brings `redis-cli`).
//!
//! ```no_run
//! let redis = bus_test_redis::TestRedis::start()?;
//! let mut c = redis.client();
//! c.set(&redis.key("greeting"), "hello")?;
//! assert_eq!(redis.keys(), vec![redis.key("greeting")]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod client;
mod cluster;
mod error;
mod logs;
mod proxy;
mod sentinel;
mod server;
mod test_redis;
mod tls;
mod url;
mod wait;

pub use client::{info_field, Endpoint, Resp, SyncClient};
pub use cluster::RedisCluster;
pub use error::HarnessError;
pub use logs::Logs;
pub use proxy::Proxy;
pub use sentinel::{RedisSentinel, SentinelBuilder, DOWN_AFTER};
pub use server::{RedisServer, ServerBuilder};
pub use test_redis::{TestRedis, URL_ENV};
pub use tls::{TlsRedis, TLS_PASSWORD, TLS_USER};
pub use wait::{eventually, eventually_async};
