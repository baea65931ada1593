//! The Redis transport of the bus.
//!
//! A host on Redis, sending one command and handling it (a `redis-server` on localhost):
//!
//! ```no_run
//! use async_trait::async_trait;
//! use bus_core::{CommandProcessor, Context, Host, ProcessError, RedisCommand};
//! use bus_redis::{RedisConfig, RedisTransport};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, RedisCommand)]
//! #[bus(queue = "thumbnail-requested")]
//! struct ThumbnailRequested {
//!     image_id: String,
//! }
//!
//! struct Thumbnails;
//!
//! #[async_trait]
//! impl CommandProcessor<ThumbnailRequested> for Thumbnails {
//!     async fn process(&self, cmd: ThumbnailRequested, _: &Context) -> Result<(), ProcessError> {
//!         println!("thumbnail for {}", cmd.image_id);
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = RedisConfig::from_url("redis://127.0.0.1:6379/0")?;
//! let host = Host::builder()
//!     .transport(RedisTransport::connect(&config).await?)
//!     .command::<ThumbnailRequested, _>(Thumbnails)
//!     .build()?;
//! host.bus().send(&ThumbnailRequested { image_id: "42".into() }).await?;
//! host.run_until_signal().await?; // graceful shutdown on Ctrl-C
//! # Ok(())
//! # }
//! ```
//!
//! Commands wait on circular lists: a consumer moves a message into flight atomically
//! instead of removing it, so a crash never loses it. Events are fanned out by the
//! publisher into one queue per subscription. Every transition is one Lua script
//! (`lua/`), every key comes from [`keys`], and all keys of a queue share a hash tag so
//! the transport works on Redis Cluster. The full layout: `docs/redis-layout.md`.
//!
//! | Item | What it is |
//! |---|---|
//! | [`RedisConfig`] | connection string, database, key prefix |
//! | [`RedisTransport`] | the [`bus_core::Transport`] implementation |
//! | [`keys`] | every key name |
//! | [`PROTOCOL`] | the version of the script protocol this build speaks, checked against Redis's record on connect |
//! | [`shard_of_key`] | the shard of a partition key on a partitioned queue |
//! | [`RedisReporter`], [`HOST_KEEP_INTERVALS`] | a host's heartbeat, written to Redis (docs/redis-layout.md, "Host heartbeats") |
//! | [`admin`] | every operation on the layout outside the hot path: stats, peek, dead letters, requeue, purge, discovery (under `bus-management`) |
//! | [`LuaScript`] | a named script run by SHA with a `NOSCRIPT` fallback, and its reply readers (every crate's scripts run through it) |
//! | [`shape`] | what a script takes: its KEYS by name and its ARGV, declared once beside it (the call's check, the KEYS' names and docs/wire-format.md's tables come from it) |
//! | [`Error`] | what can go wrong here |
//! | [`fred`] | the Redis client underneath, re-exported for the types the API shows |

#![warn(missing_docs)]
pub mod admin;
mod config;
mod consume;
mod error;
pub mod keys;
mod lifecycle;
mod liveness;
mod partition;
mod prelude;
mod protocol;
mod report;
mod scripts;
mod send;
pub mod shape;
#[cfg(feature = "tls")]
mod tls;
mod transport;
mod write;

pub use config::RedisConfig;
pub use error::{Error, RedisError, Result};
pub use partition::{shard_of_key, MAX_PARTITIONS};
pub use protocol::PROTOCOL;
pub use report::heartbeat::{RedisReporter, HOST_KEEP_INTERVALS};
pub use report::timing::{RedisTimingReporter, DEFAULT_TIMING_RETENTION};
pub use scripts::LuaScript;

/// The Redis client this crate is built on, whose types appear in its API
/// ([`RedisTransport::client`], [`RedisError::fred`]): use it through this path, so the
/// versions always agree.
pub use fred;
pub use transport::RedisTransport;

/// The hot path's scripts, for the raw-layout benchmark (`benches/`), which drives the
/// layout without the host to measure what the host costs. Not an API: hidden, and free
/// to change with the scripts.
#[doc(hidden)]
pub mod raw {
    use crate::{scripts, LuaScript};

    /// `lua/reserve.lua` as the consumer runs it; its KEYS: `keys::ScriptKeys::reserve`.
    pub fn reserve_script() -> &'static LuaScript {
        &scripts::RESERVE
    }

    /// `lua/ack.lua` as the consumer runs it; its KEYS: `keys::ScriptKeys::ack`.
    pub fn ack_script() -> &'static LuaScript {
        &scripts::ACK
    }

    /// A lease group's bits for `ack.lua`: bit `i` set for each index `i`.
    pub fn lease_bits(indices: impl IntoIterator<Item = usize>) -> Vec<u8> {
        let mut bits = Vec::new();
        for index in indices {
            crate::consume::receipts::set_bit(&mut bits, index);
        }
        bits
    }

    pub use crate::scripts::{catalog, PRELUDES};
}

// The README's and the guides' examples compile as doc-tests of this crate.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/getting-started.md")]
struct GettingStartedDoctests;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/concepts.md")]
struct ConceptsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/wire-format.md")]
struct WireFormatDoctests;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/operations.md")]
struct OperationsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/knightbus.md")]
struct KnightBusDoctests;
