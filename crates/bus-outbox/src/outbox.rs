//! Writing messages into the outbox, inside the application's transaction.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bus_core::transport::{refuse_empty_key, Destination};
use bus_core::{Bus, Command, Event, Message, MessageId, SendOptions};
use sqlx::{PgConnection, PgPool, Postgres};

use crate::{Error, Result};

/// The schema: tables, the wake-up trigger and the lag function (`sql/schema.sql`).
pub const SCHEMA: &str = include_str!("../sql/schema.sql");

/// The advisory lock class of the bus's outbox (`pg_advisory_xact_lock(CLASS, n)`):
/// `n` = 0 serializes migrations, else it is a partition key's hash (the relay).
pub(crate) const LOCK_CLASS: i32 = 0x6275_736f; // "buso"

const INSERT: &str = "INSERT INTO bus_outbox \
    (kind, destination, message_id, partition_key, due_ms, dedup_key, dedup_window_ms, payload) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// Writes messages into the outbox table in the caller's transaction: they reach the
/// transport only when that transaction commits, by a [`Relay`](crate::Relay), and never
/// when it rolls back.
///
/// A cheap `Clone` handle over a [`Bus`], whose configuration encodes each message
/// exactly as [`Bus::send_with`] would (run-time queue names, send middleware, headers,
/// format, size limit); the bus's transport is not called. Its methods take any
/// `&mut PgConnection`: a `&mut sqlx::Transaction<'_, Postgres>` (the usual case), an
/// [`InboxTransaction`](crate::InboxTransaction) (a handler's), or a plain connection
/// (the row then commits on its own).
///
/// ```no_run
/// # use bus_core::RedisCommand;
/// # #[derive(serde::Serialize, serde::Deserialize, RedisCommand)]
/// # #[bus(queue = "invoices")]
/// # struct IssueInvoice { order: u64 }
/// # async fn demo(pool: sqlx::PgPool, bus: bus_core::Bus) -> Result<(), bus_outbox::Error> {
/// let outbox = bus_outbox::Outbox::new(bus);
/// let mut tx = pool.begin().await?;
/// sqlx::query("INSERT INTO orders (id) VALUES ($1)").bind(42_i64).execute(&mut *tx).await?;
/// outbox.send(&mut tx, &IssueInvoice { order: 42 }).await?;
/// tx.commit().await?; // the order and its message, or neither
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Outbox {
    bus: Bus,
}

impl Outbox {
    /// An outbox encoding with `bus`'s configuration (a bus over the memory transport
    /// works as well: only its configuration and the transport's wire format are used).
    pub fn new(bus: Bus) -> Self {
        Outbox { bus }
    }

    /// Creates the outbox, dead-row and inbox tables, the trigger that wakes relays and
    /// the lag function ([`SCHEMA`]), unless they exist. Safe to run at every start, from
    /// several processes at once.
    pub async fn migrate(pool: &PgPool) -> Result<()> {
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, 0)")
            .bind(LOCK_CLASS)
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(SCHEMA).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Writes `command` for its queue. Returns its message id.
    pub async fn send<C: Command>(
        &self,
        conn: &mut PgConnection,
        command: &C,
    ) -> Result<MessageId> {
        self.send_with(conn, command, &SendOptions::new()).await
    }

    /// Writes `command` with options: headers, trace id, deadline, due time, partition
    /// key (its rows are relayed in the order written, and on a queue ordered per key
    /// keep that order there), deduplication key and window. Returns its message id.
    ///
    /// With a deduplication key, that key (not the message id) guards the relay's
    /// resend after a crash, for its window: keep the window longer than a relay crash
    /// may last ([`RelayConfig::dedup_window`](crate::RelayConfig::dedup_window)).
    pub async fn send_with<C: Command>(
        &self,
        conn: &mut PgConnection,
        command: &C,
        options: &SendOptions,
    ) -> Result<MessageId> {
        if let Some(key) = options.key.as_deref() {
            refuse_empty_key(C::NAME, key)?;
        }
        self.write(conn, command, options).await
    }

    /// Writes `event` for its topic: every subscription gets a copy when it is relayed.
    /// Returns its message id.
    pub async fn publish<E: Event>(&self, conn: &mut PgConnection, event: &E) -> Result<MessageId> {
        self.publish_with(conn, event, &SendOptions::new()).await
    }

    /// Writes `event` with options (headers, trace id, deadline, due time). A partition
    /// key or a deduplication key is refused, as [`Bus::publish_with`] refuses them.
    pub async fn publish_with<E: Event>(
        &self,
        conn: &mut PgConnection,
        event: &E,
        options: &SendOptions,
    ) -> Result<MessageId> {
        if options.key.is_some() || options.dedup_key.is_some() {
            return Err(Error::Bus(bus_core::Error::Config(format!(
                "publishing {}: events take headers, a trace id, a deadline and a due time, not a partition key or a deduplication key",
                E::NAME
            ))));
        }
        self.write(conn, event, options).await
    }

    /// What waits in the outbox: rows, the oldest one's age, rows moved aside.
    pub async fn lag<'c>(executor: impl sqlx::PgExecutor<'c>) -> Result<Lag> {
        Lag::read(executor).await
    }

    async fn write<M: Message>(
        &self,
        conn: &mut PgConnection,
        message: &M,
        options: &SendOptions,
    ) -> Result<MessageId> {
        let prepared = self.bus.prepare(message, options).await?;
        let (kind, destination) = match prepared.destination {
            Destination::Topic(topic) => ("topic", topic),
            Destination::Queue(queue) => ("queue", queue),
            // A destination of a kind this version does not know: refused, not guessed.
            other => {
                return Err(Error::Bus(bus_core::Error::Config(format!(
                    "{other:?}: the outbox writes to queues and topics only"
                ))))
            }
        };
        let id = prepared.message.id;
        sqlx::query::<Postgres>(INSERT)
            .bind(kind)
            .bind(destination)
            .bind(id.as_str())
            .bind(options.key.as_deref())
            .bind(options.due.map(epoch_ms))
            .bind(options.dedup_key.as_deref())
            .bind(options.dedup_window.map(window_ms))
            .bind(prepared.message.payload.as_ref())
            .execute(conn)
            .await?;
        Ok(id)
    }
}

/// What waits in the outbox (also `SELECT * FROM bus_outbox_lag()`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Lag {
    /// Committed rows not yet relayed.
    pub waiting: u64,
    /// How long ago the oldest of them was written (zero when none waits).
    pub oldest: Duration,
    /// Rows moved aside as unsendable (`bus_outbox_dead`).
    pub dead: u64,
}

impl Lag {
    pub(crate) async fn read<'c>(executor: impl sqlx::PgExecutor<'c>) -> Result<Lag> {
        let (waiting, oldest, dead): (i64, f64, i64) =
            sqlx::query_as("SELECT waiting, oldest_seconds, dead FROM bus_outbox_lag()")
                .fetch_one(executor)
                .await?;
        Ok(Lag {
            waiting: u64::try_from(waiting).unwrap_or(0),
            oldest: Duration::try_from_secs_f64(oldest).unwrap_or(Duration::ZERO),
            dead: u64::try_from(dead).unwrap_or(0),
        })
    }
}

pub(crate) fn epoch_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn window_ms(window: Duration) -> i64 {
    i64::try_from(window.as_millis()).unwrap_or(i64::MAX)
}
