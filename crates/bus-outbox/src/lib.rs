//! The transactional outbox and inbox of the bus, on PostgreSQL with `sqlx`.
//!
//! **Outbox.** An application writes a message into the outbox table inside its own
//! database transaction ([`Outbox::send`], [`Outbox::publish`], with options:
//! [`Outbox::send_with`]); the message exists only if that transaction commits. A
//! [`Relay`], woken by `LISTEN/NOTIFY` with a polling fallback, moves committed rows to
//! the bus's transport. Several relays, on several hosts, share the table (`FOR UPDATE
//! SKIP LOCKED`); the rows of one partition key are relayed in the order written, by one
//! relay at a time; a relay that crashes between the transport's write and the row's
//! delete does not deliver a command twice (the send is deduplicated by message id). A
//! row that can never be sent is moved to `bus_outbox_dead` with its reason.
//!
//! **Inbox.** [`InboxLayer`] runs each handler in a transaction that also records the
//! message in `bus_inbox`, commits it when the handler succeeds, and only then lets the
//! host acknowledge; a redelivered message already recorded is acknowledged without
//! running its handler. The handler writes through [`InboxExt::transaction`].
//!
//! docs/concepts.md, "Outbox and inbox", states the guarantees and their limits.
//!
//! A crate of its own because PostgreSQL is not something every bus application links:
//! bus-core knows no database, and this crate adds `sqlx` (PostgreSQL over tokio, no TLS
//! stack of its own: add `sqlx`'s `tls-rustls` feature in the application to connect
//! over TLS) only for those who use it.
//!
//! | Item | What it is |
//! |---|---|
//! | [`Outbox`], [`SCHEMA`] | writing messages in the application's transaction; the tables (`Outbox::migrate`) |
//! | [`Relay`], [`RelayConfig`], [`Relayed`], [`CHANNEL`] | moving committed rows to the transport, standalone ([`Relay::run`]) |
//! | [`HostExt`] | a relay beside a host ([`HostExt::run_with_relay`]) |
//! | [`Lag`] | what waits: [`Outbox::lag`], [`Relay::lag`], `SELECT * FROM bus_outbox_lag()` |
//! | [`InboxLayer`], [`InboxExt`], [`InboxTransaction`], [`prune_inbox`] | the inbox |
//! | [`metrics`] | the relay's metric names (recorded with the feature `metrics`) |
//! | [`Error`], [`Result`] | the crate's one error |
//!
//! ```no_run
//! use bus_core::{CommandProcessor, Context, ProcessError, RedisCommand};
//! use bus_outbox::{InboxExt, InboxLayer, Outbox};
//!
//! #[derive(serde::Serialize, serde::Deserialize, RedisCommand)]
//! #[bus(queue = "ship-order")]
//! struct ShipOrder {
//!     order: i64,
//! }
//!
//! struct Shipping;
//!
//! #[async_trait::async_trait]
//! impl CommandProcessor<ShipOrder> for Shipping {
//!     async fn process(&self, ship: ShipOrder, ctx: &Context) -> Result<(), ProcessError> {
//!         let mut tx = ctx.transaction().await?;
//!         sqlx::query("UPDATE orders SET shipped = true WHERE id = $1")
//!             .bind(ship.order)
//!             .execute(&mut **tx)
//!             .await?;
//!         Ok(()) // committed with the inbox mark, then acknowledged
//!     }
//! }
//!
//! # async fn demo(pool: sqlx::PgPool, transport: bus_core::MemoryTransport) -> Result<(), Box<dyn std::error::Error>> {
//! Outbox::migrate(&pool).await?;
//! let host = bus_core::Host::builder()
//!     .transport(transport)
//!     .middleware(InboxLayer::new(pool.clone()))
//!     .command::<ShipOrder, _>(Shipping)
//!     .build()?;
//! let outbox = Outbox::new(host.bus());
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES ($1)").bind(7_i64).execute(&mut *tx).await?;
//! outbox.send(&mut tx, &ShipOrder { order: 7 }).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
mod error;
mod host;
mod inbox;
pub mod metrics;
mod outbox;
mod relay;

pub use error::{Error, Result};
pub use host::HostExt;
pub use inbox::{prune_inbox, InboxExt, InboxLayer, InboxTransaction};
pub use outbox::{Lag, Outbox, SCHEMA};
pub use relay::{Relay, RelayConfig, Relayed, CHANNEL};
/// The `sqlx` this crate is built on, for applications that name its types through it.
pub use sqlx;
