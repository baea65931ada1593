//! The producer side: send, schedule, publish; and the factory of consumers.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bus_core::transport::{
    Consumer, ConsumerOptions, Leases, Outgoing, Placement, Replies, Source, StepMarks,
    TransportExtras,
};
use bus_core::{MessageId, Transport};
use fred::prelude::{Client, ClientLike, SetsInterface};
use fred::types::Value;
use tokio_util::bytes::Bytes;

use crate::consume::consumer::RedisConsumer;
use crate::keys::{self, QueueKeys};
use crate::partition::{PartitionedConsumer, Spread};
use crate::scripts;
use crate::write::durable::Durability;
use crate::write::{epoch_ms, Writer, Written};
use crate::{Error, RedisConfig, Result};

/// How often a publish re-reads a topic's subscriptions when they change under it.
const PUBLISH_ATTEMPTS: usize = 5;

/// The Redis transport: a cheap-to-clone handle over one auto-pipelining connection.
///
/// ```no_run
/// use bus_core::Host;
/// use bus_redis::{RedisConfig, RedisTransport};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let transport = RedisTransport::connect(&RedisConfig::from_url("redis://127.0.0.1:6379/0")?).await?;
/// let host = Host::builder().transport(transport) /* .command::<C, _>(processor) */ .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisTransport {
    inner: Arc<Inner>,
    /// This handle's writes: over the shared connection, or a durable handle's own
    /// ([`RedisTransport::durable`]), whose writes wait for replicas.
    writer: Arc<Writer>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    config: RedisConfig,
    /// Last known subscriptions per topic; publish checks them inside its script.
    subscriptions: Mutex<HashMap<String, Vec<String>>>,
    /// Invalid subscription names already warned about.
    invalid_subscriptions: Mutex<HashSet<(String, String)>>,
}

impl RedisTransport {
    /// Connects (failing at once on a wrong password or an unreachable server) and
    /// keeps reconnecting with backoff after that. Checks the script protocol recorded
    /// under the prefix, recording this build's if none is ([`Error::ProtocolMismatch`]
    /// for another one: docs/wire-format.md, "Versioning").
    pub async fn connect(config: &RedisConfig) -> Result<Self> {
        config.validate()?;
        let client = config.connect_client().await?;
        if let Err(e) = crate::protocol::check(&client, config.key_prefix()).await {
            let _ = client.quit().await; // Best effort: refused anyway.
            return Err(e);
        }
        let spread = Spread::new(config.partitioned());
        Ok(RedisTransport {
            writer: Arc::new(Writer::plain(client.clone(), config.key_prefix(), spread)),
            inner: Arc::new(Inner {
                client,
                config: config.clone(),
                subscriptions: Mutex::default(),
                invalid_subscriptions: Mutex::default(),
            }),
        })
    }

    /// A handle of this transport whose sends, scheduled sends and publishes return `Ok`
    /// only once at least `replicas` replicas have them (Redis's `WAIT`), waiting up to
    /// `timeout` for them. Fewer in time is [`bus_core::Error::NotReplicated`]: the
    /// messages are stored on the primary, not replicated, and a failover before they
    /// replicate may lose them. Consumers made from it are plain ones.
    ///
    /// It opens one connection of its own (a `WAIT` blocks the connection it runs on),
    /// shared by its clones; the plain handle's sends are unchanged. Make one per
    /// producer and clone it; docs/operations.md, "Durable sends", has the costs.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use bus_core::{Bus, BusConfig};
    /// use bus_redis::{RedisConfig, RedisTransport};
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let url = "redis-sentinel://127.0.0.1:26379?sentinelServiceName=bus";
    /// let transport = RedisTransport::connect(&RedisConfig::from_url(url)?).await?;
    /// // One bus for sends that must survive a failover, one for the rest.
    /// let durable = Bus::new(transport.durable(1, Duration::from_secs(1)).await?, BusConfig::default());
    /// let plain = Bus::new(transport, BusConfig::default());
    /// # Ok(()) }
    /// ```
    pub async fn durable(&self, replicas: u32, timeout: Duration) -> Result<Self> {
        if replicas == 0 || timeout.is_zero() {
            return Err(Error::Config(format!(
                "durable sends need at least one replica and a timeout above zero \
                 (got {replicas} replicas, {timeout:?})"
            )));
        }
        let client = self.inner.config.connect_client().await?;
        let durability = Durability { replicas, timeout };
        Ok(RedisTransport {
            inner: Arc::clone(&self.inner),
            writer: Arc::new(self.writer.durable(client, durability)),
        })
    }

    /// `(replicas, timeout)` of a handle made by [`RedisTransport::durable`]; `None` for
    /// a plain one.
    pub fn durability(&self) -> Option<(u32, Duration)> {
        self.writer
            .connection()
            .durability()
            .map(|d| (d.replicas, d.timeout))
    }

    /// Closes the shared connection, and a durable handle's own (consumers close their
    /// own when their host stops).
    pub async fn close(&self) -> Result<()> {
        if self.durability().is_some() {
            self.writer.connection().client().quit().await?;
        }
        Ok(self.inner.client.quit().await?)
    }

    /// The shared connection, for tools that read the layout (management, tests).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The configuration this transport connected with.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// The keys of a queue or subscription under this transport's prefix.
    pub fn keys(&self, source: &Source) -> QueueKeys {
        QueueKeys::new(self.inner.config.key_prefix(), source)
    }

    /// The keys of every shard of `source`: one set for a queue that is not partitioned
    /// (the same as [`RedisTransport::keys`]), else shard 0 first.
    pub fn shard_keys(&self, source: &Source) -> Vec<QueueKeys> {
        match source {
            Source::Queue(queue) if self.inner.config.partitions_of(queue) > 1 => {
                (0..self.inner.config.partitions_of(queue))
                    .map(|shard| QueueKeys::shard(self.prefix(), queue, shard))
                    .collect()
            }
            _ => vec![self.keys(source)],
        }
    }

    /// This handle's writes.
    pub(crate) fn writer(&self) -> &Writer {
        &self.writer
    }

    pub(crate) fn prefix(&self) -> &str {
        self.inner.config.key_prefix()
    }

    async fn read_subscriptions(&self, topic: &str) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .inner
            .client
            .smembers(keys::subscriptions(self.prefix(), topic))
            .await?;
        names.sort();
        self.inner
            .subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic.to_owned(), names.clone());
        Ok(names)
    }

    /// One publish attempt with the subscriptions as read: -1 when they changed since.
    /// Every name is checked against the set, but only valid names receive copies: a
    /// foreign client may register a name that would break the key layout.
    /// One publish attempt to the subscriptions `names`: `publish.lua` (ready now) or
    /// `publish_at.lua` (stored and scheduled at `due`); -1 when the subscriptions
    /// changed since they were read (nothing written).
    async fn try_publish(
        &self,
        topic: &str,
        names: &[String],
        messages: &[Outgoing],
        due: Option<SystemTime>,
    ) -> bus_core::Result<i64> {
        let mut keys = Vec::with_capacity(1 + 3 * names.len());
        keys.push(keys::subscriptions(self.prefix(), topic));
        let mut args = Vec::with_capacity(2 + names.len() + 2 * messages.len());
        args.push(Value::from(names.len() as i64));
        args.extend(names.iter().map(|name| Value::from(name.as_str())));
        for name in names {
            match Source::subscription(topic, name.as_str()) {
                Ok(source) if due.is_some() => {
                    let k = self.keys(&source);
                    keys.extend([k.delayed, k.msgs, k.ready]);
                }
                Ok(source) => keys.push(QueueKeys::ready_of(self.prefix(), &source)),
                Err(e) => self.warn_invalid_subscription(topic, name, &e),
            }
        }
        let script = match due {
            Some(due) => {
                args.push(Value::from(epoch_ms(due)));
                args.extend(message_args(messages));
                &scripts::PUBLISH_AT
            }
            None => {
                args.extend(messages.iter().map(|m| Value::Bytes(m.payload.clone())));
                &scripts::PUBLISH
            }
        };
        match self.writer.write(script, keys, args).await? {
            Written::Done(reached) => Ok(reached),
            // Nothing was written: the subscriptions changed (no replica needed for that).
            Written::NotReplicated(-1, _) => Ok(-1),
            Written::NotReplicated(_, error) => Err(error),
        }
    }

    fn warn_invalid_subscription(&self, topic: &str, name: &str, error: &bus_core::Error) {
        let mut warned = self
            .inner
            .invalid_subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if warned.insert((topic.to_owned(), name.to_owned())) {
            tracing::warn!(topic, subscription = name, error = %error,
                "a subscription registered in Redis has an invalid name: it receives no events");
        }
    }

    /// Adds `member` to a registry set. Best effort: a full Redis refuses the write, and
    /// that is when an operator starts consumers to drain it.
    async fn register(&self, set: String, member: &str) {
        let added: Result<i64, _> = self.inner.client.sadd(set.as_str(), member).await;
        if let Err(e) = added {
            tracing::warn!(key = set, member, error = %bus_core::Error::from(Error::from(e)),
                "could not register in Redis; consuming goes on");
        }
    }
}

/// `id, envelope, id, envelope, ...` as script arguments.
fn message_args(messages: &[Outgoing]) -> impl Iterator<Item = Value> + '_ {
    messages
        .iter()
        .flat_map(|m| [Value::from(m.id.as_str()), Value::Bytes(m.payload.clone())])
}

#[async_trait]
impl Transport for RedisTransport {
    async fn send(
        &self,
        queue: &str,
        placement: Placement<'_>,
        messages: Vec<Outgoing>,
    ) -> bus_core::Result<()> {
        // The script sends boxed: the transport's future is allocated per send, and
        // inline they would make the plain send's (a share of one `RPUSH`) carry their
        // size.
        match (placement.key, placement.due) {
            (Some(key), due) => Box::pin(self.send_keyed(queue, key, messages, due)).await,
            (None, Some(due)) => Box::pin(self.send_at(queue, messages, due)).await,
            (None, None) => self.writer.push(queue, messages).await,
        }
    }

    async fn publish(
        &self,
        topic: &str,
        due: Option<SystemTime>,
        messages: Vec<Outgoing>,
    ) -> bus_core::Result<usize> {
        bus_core::transport::validate_name("topic", topic)?;
        let cached = self
            .inner
            .subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
            .cloned();
        let mut names = match cached {
            Some(names) => names,
            None => self.read_subscriptions(topic).await?,
        };
        for _ in 0..PUBLISH_ATTEMPTS {
            let reached = self.try_publish(topic, &names, &messages, due).await?;
            if reached >= 0 {
                return Ok(usize::try_from(reached).unwrap_or(0));
            }
            // The subscriptions changed since they were read: read them again.
            names = self.read_subscriptions(topic).await?;
        }
        Err(Error::SubscriptionsKeptChanging {
            topic: topic.to_owned(),
            attempts: PUBLISH_ATTEMPTS,
        }
        .into())
    }

    async fn consumer(
        &self,
        source: &Source,
        options: ConsumerOptions,
    ) -> bus_core::Result<Box<dyn Consumer>> {
        match source {
            Source::Queue(queue) => {
                self.register(keys::queue_registry(self.prefix()), queue)
                    .await;
                let shards = self.inner.config.partitions_of(queue);
                if shards > 1 {
                    let consumer = PartitionedConsumer::connect(
                        &self.inner.client,
                        &self.inner.config,
                        queue,
                        shards,
                        options,
                    );
                    return Ok(Box::new(consumer.await?));
                }
            }
            Source::Subscription { topic, name } => {
                // Without this the subscription receives nothing: it is not best effort.
                let _: i64 = self
                    .inner
                    .client
                    .sadd(keys::subscriptions(self.prefix(), topic), name.as_str())
                    .await
                    .map_err(Error::from)?;
                self.register(keys::topic_registry(self.prefix()), topic)
                    .await;
            }
        }
        // Blocking waits stall a connection, so each consumer waits on its own.
        let waiter = self.inner.config.connect_client().await?;
        Ok(Box::new(RedisConsumer::new(
            self.inner.client.clone(),
            waiter,
            self.keys(source),
            options,
        )))
    }

    fn extras(&self) -> TransportExtras<'_> {
        TransportExtras::default()
            .dedup(self)
            .scheduling(self)
            .ticks(self)
            .replies(self)
            .marks(self)
            .leases(self)
            .flow(self)
            .host_reporter(Arc::new(crate::report::heartbeat::RedisReporter::new(
                self.clone(),
            )))
            .timing_reporter(Arc::new(crate::report::timing::RedisTimingReporter::new(
                self.clone(),
            )))
    }
}

impl RedisTransport {
    /// A keyed send, now or at `due`, in one script: on a queue ordered per key the
    /// envelopes wait in their key's list (a delayed one joins it when due); on any other
    /// they go onto `ready`, or are scheduled, as a plain send.
    async fn send_keyed(
        &self,
        queue: &str,
        key: &str,
        messages: Vec<Outgoing>,
        due: Option<SystemTime>,
    ) -> bus_core::Result<()> {
        bus_core::transport::refuse_empty_key(queue, key)?;
        if messages.is_empty() {
            return Ok(());
        }
        let k = self.writer.keys_for_send(queue, Some(key)).await?;
        let (script, keys, args) = match due {
            None => {
                let mut args = Vec::with_capacity(messages.len() + 1);
                args.push(Value::from(key));
                args.extend(messages.into_iter().map(|m| Value::Bytes(m.payload)));
                let keys = vec![
                    k.ready, k.flow, k.kheads, k.kbusy, k.kq, k.delayed, k.msgs, k.kdue,
                ];
                (&scripts::SEND_KEYED, keys, args)
            }
            Some(due) => {
                let mut args = vec![Value::from(epoch_ms(due)), Value::from(key)];
                args.extend(message_args(&messages));
                let keys = vec![k.delayed, k.msgs, k.ready, k.flow, k.kdue];
                (&scripts::SEND_KEYED_AT, keys, args)
            }
        };
        self.writer.write(script, keys, args).await?.stored()
    }

    /// A delayed send: stored and scheduled at `due`, in one script.
    async fn send_at(
        &self,
        queue: &str,
        messages: Vec<Outgoing>,
        due: SystemTime,
    ) -> bus_core::Result<()> {
        let keys = self.writer.keys_for_send(queue, None).await?;
        let mut args = vec![Value::from(epoch_ms(due))];
        args.extend(message_args(&messages));
        let keys = vec![keys.delayed, keys.msgs, keys.ready];
        self.writer
            .write(&scripts::SEND_AT, keys, args)
            .await?
            .stored()
    }
}

impl Leases for RedisTransport {
    fn singleton_lease(
        &self,
        queue: &str,
        holder: &str,
        ttl: Duration,
    ) -> bus_core::Result<Arc<dyn bus_core::transport::SingletonLease>> {
        crate::lifecycle::singleton::lease(self.client(), self.prefix(), queue, holder, ttl)
    }
}

#[async_trait]
impl Replies for RedisTransport {
    async fn reply_inbox(&self, name: &str) -> bus_core::Result<Box<dyn bus_core::ReplyInbox>> {
        crate::send::reply::open(self, name).await
    }

    async fn reply(&self, inbox: &str, element: Bytes, keep: Duration) -> bus_core::Result<()> {
        crate::send::reply::push(self, inbox, element, keep).await
    }
}

#[async_trait]
impl StepMarks for RedisTransport {
    async fn step_mark(
        &self,
        source: &Source,
        id: &MessageId,
        step: &str,
    ) -> bus_core::Result<Option<Bytes>> {
        crate::lifecycle::once::mark(self, source, id, step).await
    }

    async fn mark_step(
        &self,
        source: &Source,
        id: &MessageId,
        step: &str,
        result: Bytes,
        keep: Duration,
    ) -> bus_core::Result<Option<Bytes>> {
        crate::lifecycle::once::set(self, source, id, step, result, keep).await
    }
}
