//! BabelQueue.Redis compatibility (SPEC §10): BabelQueue's canonical envelope over both
//! of its Redis layouts, interoperable with the BabelQueue SDKs (tested against the
//! Python package `babelqueue` 1.24.0), and a [`bus_core::Transport`] over it so a bus
//! host can join a BabelQueue or Laravel fleet. The guide: `docs/babelqueue.md`.
//!
//! A Rust worker in a BabelQueue fleet, taking the SDKs' canonical envelope from the
//! legacy layout:
//!
//! ```no_run
//! use async_trait::async_trait;
//! use bus_babelqueue::{BabelTransport, Options};
//! use bus_core::{CommandProcessor, Context, Host, ProcessError, RedisCommand};
//! use bus_redis::RedisConfig;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, RedisCommand)]
//! #[bus(queue = "orders", urn = "urn:babel:orders:created")]
//! struct OrderCreated {
//!     order_id: u64,
//! }
//!
//! struct Orders;
//!
//! #[async_trait]
//! impl CommandProcessor<OrderCreated> for Orders {
//!     async fn process(&self, order: OrderCreated, _: &Context) -> Result<(), ProcessError> {
//!         println!("order {}", order.order_id);
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = RedisConfig::from_url("redis://127.0.0.1:6379")?;
//! let host = Host::builder()
//!     .transport(BabelTransport::connect(&config, Options::legacy()).await?)
//!     .command::<OrderCreated, _>(Orders)
//!     .build()?;
//! host.run_until_signal().await?;
//! # Ok(())
//! # }
//! ```
//!
//! | Item | What it is |
//! |---|---|
//! | [`Envelope`], [`Meta`], [`Poison`] | the canonical envelope and why a body is poison |
//! | [`frame`], [`unframe`] | the legacy layout's `__bq_frame` header frame |
//! | [`DeadLetterBlock`], [`Reason`], [`poison_record`] | dead-letter records |
//! | [`Layout`], [`QueueKeys`] | the two layouts and every key name |
//! | [`BabelQueue`], [`Options`], [`UnknownUrn`], [`OverLimit`] | a client: publish, delayed publish, consumers |
//! | [`QueueConsumer`], [`Reserved`] | reserve, ack, retry, release, dead-letter, recover |
//! | [`Admin`], [`Counts`], [`Area`], [`DeadLetter`] | management: find, count, peek, dead letters |
//! | [`RedriveOptions`], [`RedriveReport`] | redrive a `.dlq`, atomically per record, with a real dry run |
//! | [`LayoutAdmin`], [`record_id`] | one layout's queues behind bus-core's operator surface (`bus`, dashboard, metrics) |
//! | [`BabelTransport`], [`BabelFormat`], [`TRACE_ID_HEADER`] | the bus adapter ([`bus_core::Transport`]) and its wire format ([`bus_core::transport::WireFormat`]) |
//! | [`ContextExt`], [`ATTEMPTS_HEADER`] | what a handler reads of the element: its stored `attempts` |
//! | [`Error`] | what can go wrong here |

#![warn(missing_docs)]
mod adapter;
mod admin;
mod client;
mod consumer;
mod context;
mod dead_letter;
mod discover;
mod envelope;
mod error;
mod format;
mod frame;
mod json;
mod keys;
mod operator;
mod redrive;
mod scripts;

pub use adapter::BabelTransport;
pub use admin::{record_id, Admin, Area, Counts, DeadLetter, DeadLetterInfo, Peeked, MAX_PEEK};
pub use client::{BabelQueue, Options, OverLimit, UnknownUrn};
pub use consumer::{Content, Handle, QueueConsumer, Reserved};
pub use context::ContextExt;
pub use dead_letter::{poison_record, DeadLetterBlock, Reason};
pub use discover::FoundQueue;
pub use envelope::{Envelope, Meta, Poison, LANG, SCHEMA_VERSION};
pub use error::{Error, Result};
pub use format::{BabelFormat, ATTEMPTS_HEADER, TRACE_ID_HEADER};
pub use frame::{frame, sanitize, unframe, Headers, FRAME_KEY};
pub use keys::{validate_queue, Layout, QueueKeys};
pub use operator::{LayoutAdmin, FORMAT, LARAVEL_KIND, LEGACY_KIND};
pub use redrive::{Outcome, RedriveItem, RedriveOptions, RedriveReport};

// The guide's examples compile as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/babelqueue.md")]
struct GuideDoctests;

/// Every script of this crate, checked by its tests (`tests/scripts.rs`). Not an API.
#[doc(hidden)]
pub mod raw {
    pub use crate::scripts::{catalog, PRELUDES};
}
