//! The bus's programming model: message contracts, processors, settings, middleware,
//! the host and its client, serializers, and an in-memory transport.
//!
//! A command, its handler and a host, on the in-memory transport (the same code runs on
//! Redis with `bus_redis::RedisTransport`):
//!
//! ```
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use bus_core::{CommandProcessor, Context, Host, MemoryTransport, ProcessError, RedisCommand};
//! use serde::{Deserialize, Serialize};
//! use tokio::sync::Notify;
//!
//! #[derive(Serialize, Deserialize, RedisCommand)]
//! #[bus(queue = "thumbnail-requested")]
//! struct ThumbnailRequested {
//!     image_id: String,
//! }
//!
//! struct Thumbnails(Arc<Notify>);
//!
//! #[async_trait]
//! impl CommandProcessor<ThumbnailRequested> for Thumbnails {
//!     async fn process(&self, cmd: ThumbnailRequested, _: &Context) -> Result<(), ProcessError> {
//!         assert_eq!(cmd.image_id, "42");
//!         self.0.notify_one();
//!         Ok(()) // acknowledged; an error retries
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let done = Arc::new(Notify::new());
//! let host = Host::builder()
//!     .transport(MemoryTransport::new())
//!     .command::<ThumbnailRequested, _>(Thumbnails(Arc::clone(&done)))
//!     .build()?;
//! host.bus().send(&ThumbnailRequested { image_id: "42".into() }).await?;
//! host.run(async move { done.notified().await }).await?; // then shuts down gracefully
//! # Ok(())
//! # }
//! ```
//!
//! Transports live in other crates (`bus-redis`); this crate knows nothing of Redis.
//!
//! | Module | What it holds |
//! |---|---|
//! | [`Message`], [`Command`], [`Event`], [`Subscription`] | message contracts (derive them with `#[derive(RedisCommand)]`, ...) |
//! | [`CommandProcessor`], [`EventProcessor`], [`ProcessError`], [`Context`] | handlers |
//! | [`DeadLettering`], [`OnExpiry`], [`headers::EXPIRES_AT`] | a message's end: the hook before a dead letter, expiry |
//! | [`Scheduled`] | a delayed command read back ([`Bus::scheduled`], [`Bus::cancel`], [`Bus::reschedule`]) |
//! | [`ProcessingSettings`], [`Backoff`], [`defaults::SINGLETON_TTL`] | per-processor consumption settings |
//! | [`Middleware`], [`Next`] | the pipeline around handlers |
//! | [`SendOptions`], [`Sent`], [`SendMiddleware`], [`Prepared`], [`headers::TRACE_ID`], [`new_trace_id`] | one send with options, what it stored, the layers on every send, a message encoded for a later send ([`Bus::prepare`]), the trace id carried across fleets |
//! | [`Host`], [`HostBuilder`], [`RunningHost`], [`Bus`] | registration, running, sending |
//! | [`Envelope`], [`Format`] | the wire format and serializers |
//! | [`Transport`] | what a host and a bus are given (`bus-redis`, [`MemoryTransport`], ...) |
//! | [`transport`] | what a transport implements: [`transport::Consumer`], [`transport::Source`], [`transport::Receipt`], [`transport::SingletonLease`], limits and names |
//! | [`records`] | what every transport and tool shows of stored messages: [`records::DeadLetter`], [`records::ErrorRecord`], [`records::QueueStats`], ... |
//! | [`flow`] | flow control of a queue across hosts: pause, global concurrency and rate limits ([`flow::FlowControl`]) |
//! | [`heartbeat`] | a host's heartbeat ([`heartbeat::HostInfo`]) and where it goes ([`heartbeat::HostReporter`], from the transport) |
//! | [`timing`] | per-type timing of a host's handlers ([`timing::TypeTiming`]) and where it goes ([`timing::TimingReporter`], from the transport) |
//! | [`operator`] | the operator's capabilities over a kind of queue ([`operator::Operator`]), one for every tool |
//! | [`MemoryTransport`] | the embedded transport |
//! | [`Saga`], [`StartSaga`], [`ContinueSaga`], [`SagaData`], [`SagaStore`], [`MemorySagaStore`] | sagas (`docs/sagas.md`) |
//!
//! Features: `derive` (default) re-exports the derives; `opentelemetry` carries W3C trace
//! context between OpenTelemetry spans and message headers; `metrics` records host and
//! client metrics through the `metrics` facade, and `prometheus` adds
//! `metrics::serve_prometheus` (docs/operations.md, "Host metrics").

#![warn(missing_docs)]
mod address;
mod bus;
mod cancel;
mod context;
mod deadline;
mod dedup;
pub mod defaults;
mod depth;
mod envelope;
mod error;
mod fast_hash;
pub mod flow;
mod format;
pub mod headers;
pub mod heartbeat;
mod host;
mod json_writer;
mod memory;
mod message;
mod middleware;
mod names;
mod once;
pub mod operator;
#[cfg(feature = "opentelemetry")]
mod otel;
mod processor;
pub mod records;
mod recurring;
mod request;
mod saga;
mod schedule;
mod send;
mod settings;
mod shared;
mod singleton;
pub mod timing;
pub mod transport;

pub use bus::{Bus, BusConfig};
pub use context::Context;
pub use envelope::{Envelope, Headers, MessageId};
pub use error::{BoxError, Error, ErrorChain, Result};
pub use format::Format;
/// Host and client metrics: their names, and a Prometheus endpoint (features `metrics`,
/// `prometheus`).
#[cfg(feature = "metrics")]
pub use host::metrics;
pub use host::{
    shutdown_signal, BreakerScope, BreakerState, CircuitBreaker, DeadLettering, FailedMessage,
    Host, HostBuilder, OnExpiry, ProcessorEntry, RunningHost, UnknownMessage,
};
pub use memory::MemoryTransport;
pub use message::{Command, Event, Message, MessageDescriptor, MessageKind, Subscription};
pub use middleware::{Middleware, Next};
pub use names::QueueNames;
pub use operator::Capability;
pub use processor::{CommandProcessor, Disposition, EventProcessor, ProcessError};
pub use recurring::{Missed, Recurring};
pub use request::ReplyInbox;
pub use saga::{ContinueSaga, MemorySagaStore, Saga, SagaData, SagaStore, Stamp, StartSaga};
pub use schedule::Scheduled;
pub use send::{new_trace_id, OutgoingMessage, Prepared, SendMiddleware, SendOptions, Sent};
pub use settings::{Backoff, ProcessingSettings};
pub use shared::IntoShared;
// The transport an application hands its host and its bus; the rest of the contract
// (consumers, sources, limits) is in [`transport`], for those who implement one.
pub use transport::Transport;

#[cfg(feature = "derive")]
pub use bus_derive::{processor, EventSubscription, RedisCommand, RedisEvent};

/// What macro expansions reach; not an API.
#[doc(hidden)]
pub mod __private {
    pub use inventory;
}
