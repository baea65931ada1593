//! The bus's programming model: message contracts, processors, settings, middleware,
//! the host and its client, serializers, and an in-memory transport.
//!
//! Transports live in other crates (`bus-redis`); this crate knows nothing of Redis.
//!
//! | Module | What it holds |
//! |---|---|
//! | [`Message`], [`Command`], [`Event`], [`Subscription`] | message contracts (derive them with `#[derive(RedisCommand)]`, ...) |
//! | [`CommandProcessor`], [`EventProcessor`], [`ProcessError`], [`Context`] | handlers |
//! | [`ProcessingSettings`], [`Backoff`] | per-processor consumption settings |
//! | [`Middleware`], [`Next`] | the pipeline around handlers |
//! | [`Host`], [`HostBuilder`], [`RunningHost`], [`Bus`] | registration, running, sending |
//! | [`Envelope`], [`Format`] | the wire format and serializers |
//! | [`transport`] | what a transport implements: [`Transport`], [`transport::Consumer`], [`transport::Delivery`], ... |
//! | [`Source`], [`DeadLetter`], [`ErrorRecord`], [`QueueStats`], [`MessageSummary`] | where messages wait; the records every transport and tool shows (`records`) |
//! | [`operator`] | the operator's capabilities over a kind of queue ([`operator::Operator`]), one for every tool |
//! | [`MemoryTransport`] | the embedded transport |
//! | [`Saga`], [`StartSaga`], [`ContinueSaga`], [`SagaData`], [`SagaStore`], [`MemorySagaStore`] | sagas (`docs/sagas.md`) |
//!
//! Features: `derive` (default) re-exports the derives; `opentelemetry` carries W3C trace
//! context between OpenTelemetry spans and message headers; `metrics` records host and
//! client metrics through the `metrics` facade, and `prometheus` adds
//! [`metrics::serve_prometheus`](crate::metrics) (docs/operations.md, "Host metrics").

mod bus;
#[cfg(feature = "conformance")]
pub mod conformance;
mod context;
mod depth;
mod envelope;
mod error;
mod format;
mod host;
mod memory;
mod message;
mod middleware;
pub mod operator;
#[cfg(feature = "opentelemetry")]
mod otel;
mod processor;
mod records;
mod saga;
mod settings;
pub mod transport;

pub use bus::{Bus, BusConfig, DEFAULT_MAX_MESSAGE_SIZE};
pub use context::Context;
pub use depth::MAX_NESTING;
pub use envelope::{Envelope, Headers, MessageId, ENVELOPE_VERSION};
pub use error::{BoxError, Error, ErrorChain, Result};
pub use format::Format;
/// Host and client metrics: their names, and a Prometheus endpoint (features `metrics`,
/// `prometheus`).
#[cfg(feature = "metrics")]
pub use host::metrics;
pub use host::{shutdown_signal, FailedMessage, Host, HostBuilder, RunningHost, UnknownMessage};
pub use memory::MemoryTransport;
pub use message::{
    validate_name, Command, Event, Message, MessageDescriptor, MessageKind, Subscription,
    MAX_NAME_LEN,
};
pub use middleware::{Middleware, Next};
pub use processor::{CommandProcessor, Disposition, EventProcessor, ProcessError};
/// The saga store conformance suite (feature `conformance`), for store implementations'
/// tests.
#[cfg(feature = "conformance")]
pub use saga::conformance as saga_conformance;
pub use saga::{ContinueSaga, MemorySagaStore, Saga, SagaData, SagaStore, Stamp, StartSaga};
pub use settings::{Backoff, ProcessingSettings};
// What a user of the bus meets: where messages wait, the transport a host is given, and
// the records of failed messages. The rest of the contract is in [`transport`].
pub use records::{source_name, DeadLetter, ErrorRecord, MessageSummary, QueueStats};
pub use transport::{DeadLetterReason, Source, Transport};

#[cfg(feature = "derive")]
pub use bus_derive::{EventSubscription, RedisCommand, RedisEvent};
