//! The write layer under the transport and its features: where a send's keys are (one
//! [`Writer::keys_for_send`] for every send, plain, keyed, delayed, deduplicated or a
//! tick), and how a write runs on a handle's connection: a script plainly or followed by
//! `WAIT` on a durable handle (`conn.rs`, `durable.rs`), concurrent plain sends to one
//! list in one `RPUSH` (`coalesce.rs`), concurrent deduplicated sends of one group in one
//! `send_once_batch` call (`once.rs`). The features above it (`transport.rs`,
//! `dedup.rs`, `schedule.rs`, `recurring.rs`) say what to write; nothing here knows them.

mod coalesce;
mod conn;
pub(crate) mod durable;
pub(crate) mod once;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bus_core::transport::{Outgoing, Source};
use bus_core::MessageId;
use fred::prelude::Client;
use fred::types::Value;

use self::coalesce::{Coalescer, List};
pub(crate) use self::conn::Connection;
use self::durable::Durability;
use self::once::{Group, OnceLanes};
use crate::keys::QueueKeys;
use crate::partition::{self, Spread};
use crate::scripts::LuaScript;

/// What a script that writes did.
pub(crate) enum Written<T = i64> {
    /// Its reply (replicated as asked, on a durable handle).
    Done(T),
    /// Its reply, on a durable handle that fewer replicas than asked confirmed in time,
    /// and the error to return when it wrote something.
    NotReplicated(T, bus_core::Error),
}

impl Written {
    /// A send's outcome: stored, or stored but not replicated as asked (the error).
    pub(crate) fn stored(self) -> bus_core::Result<()> {
        match self {
            Written::Done(_) => Ok(()),
            Written::NotReplicated(_, error) => Err(error),
        }
    }

    /// Whether a script that answers 1 or 0 changed something; only a change that fewer
    /// replicas than asked confirmed is the durable handle's error.
    pub(crate) fn changed(self) -> bus_core::Result<bool> {
        match self {
            Written::Done(n) => Ok(n == 1),
            Written::NotReplicated(0, _) => Ok(false),
            Written::NotReplicated(_, error) => Err(error),
        }
    }
}

/// Ms since the Unix epoch, as the scripts take times.
pub(crate) fn epoch_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One handle's writes: a plain handle's over the shared connection, a durable handle's
/// over its own.
#[derive(Debug)]
pub(crate) struct Writer {
    conn: Arc<Connection>,
    /// The shared connection, where a partitioned queue's shard count is recorded.
    shared: Client,
    prefix: String,
    /// Which shard each send goes to (one for the transport and its durable handles).
    spread: Arc<Spread>,
    /// Concurrent sends to one ready list share one `RPUSH`.
    sends: Coalescer,
    /// Concurrent deduplicated sends of one group share one script call.
    once_sends: OnceLanes,
}

impl Writer {
    /// The writer of the plain handle, over the shared connection.
    pub(crate) fn plain(client: Client, prefix: &str, spread: Spread) -> Self {
        Writer {
            conn: Arc::new(Connection::new(client.clone(), None)),
            shared: client.clone(),
            prefix: prefix.to_owned(),
            spread: Arc::new(spread),
            sends: Coalescer::new(client),
            once_sends: OnceLanes::new(),
        }
    }

    /// A writer over `client`, a connection of its own, whose writes wait for replicas.
    pub(crate) fn durable(&self, client: Client, durability: Durability) -> Self {
        Writer {
            conn: Arc::new(Connection::new(client.clone(), Some(durability))),
            shared: self.shared.clone(),
            prefix: self.prefix.clone(),
            spread: Arc::clone(&self.spread),
            sends: Coalescer::durable(client, durability),
            once_sends: OnceLanes::new(),
        }
    }

    pub(crate) fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The keys a send to `queue` writes: the queue's, or those of the partition `key`
    /// picks (the next in turn without one). The first send to a partitioned queue
    /// records its shard count.
    pub(crate) async fn keys_for_send(
        &self,
        queue: &str,
        key: Option<&str>,
    ) -> bus_core::Result<QueueKeys> {
        let source = Source::queue(queue)?;
        self.record_shards(queue).await;
        Ok(match self.spread.shard(queue, key) {
            Some(shard) => QueueKeys::shard(&self.prefix, queue, shard),
            None => QueueKeys::new(&self.prefix, &source),
        })
    }

    /// Appends plain envelopes to `queue`'s ready list (its next shard's when it is
    /// partitioned): one command, all or none.
    pub(crate) async fn push(&self, queue: &str, messages: Vec<Outgoing>) -> bus_core::Result<()> {
        bus_core::transport::validate_name("queue", queue)?;
        self.record_shards(queue).await;
        let list = List {
            prefix: &self.prefix,
            queue,
            shard: self.spread.shard(queue, None),
        };
        // The plain envelopes go straight onto the ready list; reserve gives them their
        // storage ids (docs/redis-layout.md).
        let envelopes = messages.into_iter().map(|m| m.payload).collect();
        self.sends
            .push(list, envelopes)
            .await
            .map_err(|e| self.conn.error(e))
    }

    /// A producer records a partitioned queue's shard count once, so that management
    /// knows the shards before any consumer started.
    async fn record_shards(&self, queue: &str) {
        if let Some(shards) = self.spread.first_send(queue) {
            // Boxed: it runs once per queue, and inline its Redis call would make every
            // send's future carry its size.
            Box::pin(partition::record(&self.shared, &self.prefix, queue, shards)).await;
        }
    }

    /// Runs a script that writes and answers an integer.
    pub(crate) async fn write(
        &self,
        script: &LuaScript,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> bus_core::Result<Written> {
        Ok(match self.write_reply(script, keys, args).await? {
            Written::Done(reply) => Written::Done(script.int(&reply)?),
            Written::NotReplicated(reply, e) => Written::NotReplicated(script.int(&reply)?, e),
        })
    }

    /// Runs a script that writes, with its reply as Redis gave it.
    pub(crate) async fn write_reply(
        &self,
        script: &LuaScript,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> bus_core::Result<Written<Value>> {
        match self.conn.run(script, keys, args).await {
            Ok(reply) => Ok(Written::Done(reply)),
            Err(durable::WriteError::NotReplicated { written, confirmed }) => Ok(
                Written::NotReplicated(written, self.conn.not_replicated(confirmed)),
            ),
            Err(other) => Err(self.conn.error(other)),
        }
    }

    /// Stores `message` with deduplication key `key` in the next `send_once_batch` call
    /// of `group` (shared with the concurrent sends of that group).
    pub(crate) async fn send_once(
        &self,
        group: Group,
        keys: QueueKeys,
        message: Outgoing,
        key: String,
    ) -> bus_core::Result<Option<MessageId>> {
        self.once_sends
            .send(&self.conn, group, keys, message, key)
            .await
    }
}
