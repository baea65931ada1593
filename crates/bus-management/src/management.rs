//! [`Management`]: the handle every operation hangs off, and how queues are named. Each
//! operation on the bus's layout is [`bus_redis::admin`]'s; sagas are the saga store's.

use std::collections::BTreeMap;

use bus_core::records::{DeadLetter, QueueStats};
use bus_core::{Envelope, Format, Headers, MessageId};

use bus_core::transport::Source;
use bus_redis::admin::{
    Admin, Purged, ReadyMessage, RemovedSubscription, Requeued, ScheduledMessage, Selection, Topic,
    Unsubscribe,
};
use bus_redis::{RedisConfig, RedisTransport};
use bytes::Bytes;
use serde_json::value::RawValue;

use crate::{Error, Result};

/// Management of the bus's queues, topics, dead letters and sagas in one Redis (SPEC §6).
///
/// A cheap-to-clone handle over one connection. Queues and subscriptions are both
/// addressed as a [`Source`]; [`parse_source`] reads the `queue` / `topic/subscription`
/// form. Every operation on the layout is [`bus_redis::admin::Admin`]'s (the layout's
/// one owner, beside the transport that writes it); this adds the checks and errors an
/// operator needs, and the sagas (through [`bus_redis_saga::RedisSagaStore`]).
///
/// ```no_run
/// use bus_management::{parse_source, Management};
/// use bus_redis::RedisConfig;
///
/// # async fn demo() -> bus_management::Result<()> {
/// let config = RedisConfig::from_url("redis://127.0.0.1:6379")?.prefix("shop");
/// let management = Management::connect(&config).await?;
/// let stats = management.stats(&parse_source("orders")?).await?;
/// println!("{} ready, {} dead", stats.ready, stats.dead_letters);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Management {
    admin: Admin,
    saga_prefix: Option<String>,
}

impl Management {
    /// Connects (failing at once on an invalid prefix, a wrong password or an unreachable
    /// server).
    pub async fn connect(config: &RedisConfig) -> Result<Self> {
        Ok(Self::from_transport(RedisTransport::connect(config).await?))
    }

    /// Management over an existing transport's connection and prefix.
    pub fn from_transport(transport: RedisTransport) -> Self {
        Management {
            admin: Admin::new(transport),
            saga_prefix: None,
        }
    }

    /// The key prefix of the saga store. By default the transport's key prefix, as
    /// `RedisSagaStore::for_transport` writes them: sagas live at
    /// `<prefix>:sagas:<partition>:<id>` (`sagas:<partition>:<id>` with an empty one).
    pub fn saga_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.saga_prefix = Some(prefix.into());
        self
    }

    /// Closes the connection.
    pub async fn close(&self) -> Result<()> {
        Ok(self.admin.transport().close().await?)
    }

    /// The layout's administration this works through.
    pub fn admin(&self) -> &Admin {
        &self.admin
    }

    /// The key prefix (namespace) of the bus's keys in use.
    pub fn key_prefix(&self) -> &str {
        self.admin.key_prefix()
    }

    /// The key prefix of the saga store in use.
    pub fn saga_key_prefix(&self) -> &str {
        self.saga_prefix.as_deref().unwrap_or(self.key_prefix())
    }

    /// The command queues, sorted: those consumers registered and those whose keys exist
    /// (found with `SCAN`, never `KEYS`), so a queue is listed from its first send.
    pub async fn queues(&self) -> Result<Vec<String>> {
        Ok(self.admin.queues().await?)
    }

    /// The topics, each with its subscriptions, sorted.
    pub async fn topics(&self) -> Result<Vec<Topic>> {
        Ok(self.admin.topics().await?)
    }

    /// Every queue and subscription, in the order `queues` then `topics` list them.
    pub async fn sources(&self) -> Result<Vec<Source>> {
        Ok(self.admin.sources().await?)
    }

    /// Fails with [`Error::UnknownSource`] unless a consumer registered the queue (or the
    /// subscription) or one of its keys exists: a typo in a name or in the prefix is an
    /// error that says what exists, not a row of zeros.
    ///
    /// Costs one command for a queue that exists; the error costs a `SCAN` of the keyspace.
    pub async fn ensure_exists(&self, source: &Source) -> Result<()> {
        if self.admin.exists(source).await? {
            return Ok(());
        }
        let known: Vec<String> = self
            .admin
            .sources()
            .await?
            .iter()
            .map(source_name)
            .collect();
        let other_prefixes = if known.is_empty() {
            self.admin.other_prefixes().await?
        } else {
            Vec::new()
        };
        Err(Error::UnknownSource {
            name: source_name(source),
            prefix: self.key_prefix().to_owned(),
            known,
            other_prefixes,
        })
    }

    /// The other key prefixes under which this Redis holds queues or topics of the bus,
    /// sorted: what a wrong `--prefix` probably meant. One `SCAN` of the keyspace.
    pub async fn other_prefixes(&self) -> Result<Vec<String>> {
        Ok(self.admin.other_prefixes().await?)
    }

    /// The counts of a queue or subscription, and the age of its next ready message, in
    /// one consistent snapshot.
    pub async fn stats(&self, source: &Source) -> Result<QueueStats> {
        Ok(self.admin.stats(source).await?)
    }

    /// The counts of each shard of a partitioned queue, shard 0 first, named after their
    /// hash tags (`orders:0`); empty for a queue that is not partitioned (see
    /// [`Admin::shard_stats`]). [`Management::stats`] is their sum.
    pub async fn shard_stats(&self, source: &Source) -> Result<Vec<QueueStats>> {
        Ok(self.admin.shard_stats(source).await?)
    }

    /// [`Management::stats`] of every queue and subscription [`Management::sources`] lists.
    pub async fn stats_all(&self) -> Result<Vec<QueueStats>> {
        Ok(self.admin.stats_all().await?)
    }

    /// The next `n` ready messages of a queue, in processing order, without taking them.
    pub async fn peek(&self, source: &Source, n: u64) -> Result<Vec<ReadyMessage>> {
        Ok(self.admin.peek(source, n).await?)
    }

    /// The first `n` delayed messages of a queue, earliest due first.
    pub async fn scheduled(&self, source: &Source, n: u64) -> Result<Vec<ScheduledMessage>> {
        Ok(self.admin.scheduled(source, n).await?)
    }

    /// The first `n` dead letters of a queue, oldest first, with their reason, errors,
    /// delivery count and envelope.
    pub async fn dead_letters(&self, source: &Source, n: u64) -> Result<Vec<DeadLetter>> {
        Ok(self.admin.dead_letters(source, n).await?)
    }

    /// Requeues dead letters: to the back of their own queue's ready list (`to` `None` or
    /// the source itself), or to another queue or subscription; see
    /// [`Admin::requeue`] for how each case stays atomic.
    pub async fn requeue(
        &self,
        source: &Source,
        selection: &Selection,
        to: Option<&Source>,
    ) -> Result<Requeued> {
        Ok(self.admin.requeue(source, selection, to).await?)
    }

    /// Deletes one dead letter, in one atomic script. Returns whether it was a dead
    /// letter of the queue.
    pub async fn delete_dead_letter(&self, source: &Source, id: &str) -> Result<bool> {
        Ok(self.admin.delete_dead_letter(source, id).await?)
    }

    /// Deletes the messages waiting on a queue: the ready ones and the delayed ones.
    /// Messages in flight and dead letters are kept; see [`Admin::purge`].
    pub async fn purge(&self, source: &Source) -> Result<Purged> {
        Ok(self.admin.purge(source).await?)
    }

    /// Cancels a delayed message (a delayed send, or a retry waiting) before it becomes
    /// ready, in one script; whether it waited under `id`.
    pub async fn cancel(&self, source: &Source, id: &str) -> Result<bool> {
        Ok(self.admin.cancel(source, id).await?)
    }

    /// Sends one message with a JSON body, as a foreign producer would: a plain envelope
    /// (type `message_type`, or the queue's wire name when `None`) appended to the ready
    /// list in one `RPUSH`. Returns its message id.
    pub async fn send(
        &self,
        source: &Source,
        message_type: Option<&str>,
        json_body: &str,
        headers: BTreeMap<String, String>,
    ) -> Result<MessageId> {
        let message_type = message_type.unwrap_or_else(|| wire_name(source));
        bus_core::transport::validate_name("message type", message_type)?;
        let body: &RawValue = serde_json::from_str(json_body).map_err(Error::InvalidBody)?;
        let mut envelope = Envelope::new(
            message_type,
            Format::Json,
            Bytes::copy_from_slice(body.get().as_bytes()),
        );
        envelope.headers = Headers::from_iter(headers);
        self.admin.send(source, &envelope).await?;
        Ok(envelope.id)
    }

    /// Removes a subscription of a topic: its name leaves the topic's subscriptions (so
    /// publishes stop writing to it) and its queue's keys are deleted, in one atomic
    /// script. A subscription whose queue still holds messages (ready, in flight, delayed
    /// or dead) is refused with [`Error::NotEmpty`] and left untouched, unless `force`.
    ///
    /// Stop the subscription's consumers first: a consumer registers its subscription
    /// again when it starts.
    pub async fn remove_subscription(
        &self,
        topic: &str,
        name: &str,
        force: bool,
    ) -> Result<RemovedSubscription> {
        match self.admin.remove_subscription(topic, name, force).await? {
            Unsubscribe::Removed(removed) => Ok(removed),
            Unsubscribe::Refused(held) => Err(Error::NotEmpty {
                topic: topic.to_owned(),
                name: name.to_owned(),
                ready: held.ready,
                in_flight: held.in_flight,
                delayed: held.delayed,
                dead: held.dead,
            }),
        }
    }
}

/// Reads a queue name, or `topic/subscription` for a subscription of a topic; both names
/// are checked as the bus checks them.
///
/// ```
/// use bus_core::transport::Source;
///
/// let source = bus_management::parse_source("payments/mail")?;
/// assert_eq!(source, Source::subscription("payments", "mail")?);
/// assert_eq!(bus_management::source_name(&source), "payments/mail");
/// assert!(bus_management::parse_source("a/b/c").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_source(text: &str) -> Result<Source> {
    let invalid = |reason| Error::InvalidSource {
        name: text.to_owned(),
        reason,
    };
    match text.split_once('/') {
        None => Ok(Source::queue(text)?),
        Some((_, name)) if name.contains('/') => Err(invalid(
            "use `queue` or `topic/subscription`, with one '/' at most",
        )),
        Some((topic, name)) => Ok(Source::subscription(topic, name)?),
    }
}

/// The name [`parse_source`] reads: `queue` or `topic/subscription`.
pub fn source_name(source: &Source) -> String {
    bus_core::records::source_name(source)
}

/// The wire name of the messages a source normally holds: the queue, or the topic.
fn wire_name(source: &Source) -> &str {
    match source {
        Source::Queue(queue) => queue,
        Source::Subscription { topic, .. } => topic,
    }
}
