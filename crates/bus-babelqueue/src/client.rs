//! The client: publish (with headers, delayed) and open consumers of one layout.

use std::sync::Arc;
use std::time::Duration;

use bus_redis::RedisConfig;
use bytes::Bytes;
use fred::prelude::{Client, ClientLike, ListInterface, SortedSetsInterface};
use fred::types::Value;
use serde::Serialize;

use crate::consumer::QueueConsumer;
use crate::frame::{frame, Headers};
use crate::keys::{validate_queue, Layout, QueueKeys};
use crate::{scripts, Envelope, Error, Result};

/// BabelQueue's default reservation window, in seconds.
pub const DEFAULT_RETRY_AFTER: u64 = 90;

/// What the bus adapter does with a message whose URN no processor of its queue handles
/// (the host hands it over as `unknown_type` when it has no `on_unknown_type` hook).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum UnknownUrn {
    /// Dead-letter it at once, `reason: "unknown_urn"`, attempts unchanged (the default;
    /// what BabelQueue.Redis for .NET does, and the Python SDK's `dead_letter` strategy).
    #[default]
    DeadLetter,
    /// Count the delivery as a failed attempt and retry it until `max_attempts` (the
    /// processor's delivery limit), then dead-letter it `unknown_urn` with attempts = the
    /// limit: the Python SDK's default (`fail`), for fleets where a newer worker that knows
    /// the URN may pick it up meanwhile.
    Retry,
    /// Acknowledge it (drop it, with a warning in the log): what the host does after its
    /// `on_unknown_type` hook, without one (the Python SDK's `delete`).
    Acknowledge,
}

/// What the bus adapter does with a message whose stored `attempts` already reach the
/// processor's delivery limit when it is reserved (another fleet with a higher
/// `max_attempts` retried it, or it was edited): the limit counts failures, and this one
/// failed elsewhere. Crash recoveries counted by this adapter are not covered: a message
/// recovered after its consumer stopped mid-message is refused once past the limit either
/// way (docs/babelqueue.md, "Over the limit on arrival").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OverLimit {
    /// Run it once more (the default; what BabelQueue's SDK workers do: they check
    /// `attempts` only after a failure). The handler sees a delivery count equal to the
    /// limit, so a failure dead-letters it (`failed`, attempts + 1) instead of retrying.
    #[default]
    RunOnce,
    /// Dead-letter it when it is reserved, without running it (`failed`, exception
    /// `DeliveryLimit`): what the bus does on its own queues, and what Laravel's PHP worker
    /// does with a job past its `tries`.
    DeadLetter,
}

/// How a BabelQueue queue is worked: the layout, the reservation window, the sweep bound,
/// the unknown-URN policy, the policy for messages that arrive past the limit. Built with the by-value setters; the layout and the policy are
/// read from their fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// See [`Options::layout()`].
    pub layout: Layout,
    retry_after: Option<u64>,
    sweep_batch: u32,
    /// See [`Options::on_unknown_urn`].
    pub unknown_urn: UnknownUrn,
    /// See [`Options::on_over_limit`].
    pub over_limit: OverLimit,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            layout: Layout::Legacy,
            retry_after: Some(DEFAULT_RETRY_AFTER),
            sweep_batch: 100,
            unknown_urn: UnknownUrn::DeadLetter,
            over_limit: OverLimit::RunOnce,
        }
    }
}

impl Options {
    /// The legacy layout (BabelQueue's default).
    pub fn legacy() -> Self {
        Options::default()
    }

    /// The Laravel layout with the `queues:` prefix.
    pub fn laravel() -> Self {
        Options::default().layout(Layout::laravel())
    }

    /// The layout.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// How long a reservation lasts before another consumer recovers it, counted in whole
    /// seconds as BabelQueue does (rounded up, at least 1); `None` never recovers. 90 s by
    /// default. The bus adapter sets it from the processor's `message_lock_timeout` (plus
    /// a second, for the rounding) and renews it while the handler runs.
    pub fn retry_after(mut self, retry_after: Option<Duration>) -> Self {
        self.retry_after = retry_after.map(whole_seconds);
        self
    }

    /// The most lapsed or due entries one reserve or recover call moves (100).
    pub fn sweep_batch(mut self, batch: u32) -> Self {
        self.sweep_batch = batch.max(1);
        self
    }

    /// What the bus adapter does with an unknown URN ([`UnknownUrn::DeadLetter`]). A
    /// host's `on_unknown_type` hook comes first: with one, the host runs it and
    /// acknowledges the message, and this setting is not asked.
    pub fn on_unknown_urn(mut self, policy: UnknownUrn) -> Self {
        self.unknown_urn = policy;
        self
    }

    /// What the bus adapter does with a message whose stored `attempts` already reach the
    /// processor's delivery limit ([`OverLimit::RunOnce`], as BabelQueue's SDK workers do).
    pub fn on_over_limit(mut self, policy: OverLimit) -> Self {
        self.over_limit = policy;
        self
    }

    /// The reservation window in whole seconds, if any.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
    }

    pub(crate) fn batch(&self) -> u32 {
        self.sweep_batch
    }
}

/// Whole seconds, rounded up, at least 1.
pub(crate) fn whole_seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

/// Whole seconds since the Unix epoch (`floor(now)`), the unit of every score.
pub(crate) fn now_secs() -> i64 {
    crate::envelope::now_ms() / 1000
}

/// A BabelQueue client: a cheap `Clone` handle over one connection.
#[derive(Clone)]
pub struct BabelQueue {
    client: Client,
    options: Arc<Options>,
}

impl std::fmt::Debug for BabelQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BabelQueue")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl BabelQueue {
    /// Connects (the URL's forms and reconnect policy are bus-redis's; its key prefix is
    /// not used: BabelQueue keys are bare queue names).
    ///
    /// ```no_run
    /// use bus_babelqueue::{BabelQueue, Headers, Options};
    /// use bus_redis::RedisConfig;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = RedisConfig::from_url("redis://127.0.0.1:6379/0")?;
    /// let bq = BabelQueue::connect(&config, Options::legacy()).await?;
    /// let sent = bq
    ///     .publish("orders", "urn:babel:orders:created", &serde_json::json!({"order_id": 1042}), &Headers::new())
    ///     .await?;
    /// println!("published {:?}", sent.meta().id);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(config: &RedisConfig, options: Options) -> Result<Self> {
        let client = config.connect_client().await?;
        Ok(BabelQueue::with_client(client, options))
    }

    /// Over an existing, connected client.
    pub fn with_client(client: Client, options: Options) -> Self {
        BabelQueue {
            client,
            options: Arc::new(options),
        }
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The connection.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The key names of a queue.
    pub fn keys(&self, queue: &str) -> QueueKeys {
        QueueKeys::new(&self.options.layout, queue)
    }

    /// Publishes `data` (a JSON object) as a new `urn` message. On the legacy layout
    /// non-empty headers ride in a `__bq_frame`; the Laravel layout drops them, as
    /// BabelQueue does. Returns the envelope sent.
    pub async fn publish<T: Serialize + ?Sized>(
        &self,
        queue: &str,
        urn: &str,
        data: &T,
        headers: &Headers,
    ) -> Result<Envelope> {
        let data = serde_json::value::to_raw_value(data)
            .map_err(|e| Error::Envelope(format!("cannot encode the data: {e}")))?;
        let envelope = Envelope::new(urn, &data, queue)?;
        self.publish_encoded(queue, vec![(envelope.encode(), headers.clone())])
            .await?;
        Ok(envelope)
    }

    /// Appends encoded envelopes (each with its headers) to a queue, all or none.
    pub async fn publish_encoded(&self, queue: &str, items: Vec<(Vec<u8>, Headers)>) -> Result<()> {
        let legacy = matches!(self.options.layout, Layout::Legacy);
        let elements = items
            .into_iter()
            .map(|(body, headers)| {
                if legacy {
                    Bytes::from(frame(&body, &headers))
                } else {
                    Bytes::from(body)
                }
            })
            .collect();
        self.push(queue, elements).await
    }

    /// Appends elements exactly as given (framed already where they carry headers) to a
    /// queue, all or none: what the bus adapter sends, its wire format having written them.
    pub(crate) async fn push(&self, queue: &str, elements: Vec<Bytes>) -> Result<()> {
        validate_queue(queue)?;
        if elements.is_empty() {
            return Ok(());
        }
        let keys = self.keys(queue);
        let values: Vec<Value> = elements.into_iter().map(Value::Bytes).collect();
        match &self.options.layout {
            Layout::Legacy => {
                let _: i64 = self.client.rpush(&keys.ready, values).await?;
            }
            Layout::Laravel { .. } => {
                scripts::run_int(
                    &scripts::LARAVEL_PUSH,
                    &self.client,
                    vec![keys.ready, keys.notify],
                    values,
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Publishes a message that becomes ready after `delay` (Laravel layout only: the
    /// legacy layout has no delayed set). Due at `floor(now) + ceil(delay)` seconds, as
    /// BabelQueue counts.
    pub async fn publish_delayed<T: Serialize + ?Sized>(
        &self,
        queue: &str,
        urn: &str,
        data: &T,
        delay: Duration,
    ) -> Result<Envelope> {
        let data = serde_json::value::to_raw_value(data)
            .map_err(|e| Error::Envelope(format!("cannot encode the data: {e}")))?;
        let envelope = Envelope::new(urn, &data, queue)?;
        self.publish_encoded_at(queue, vec![envelope.encode()], available_at(delay))
            .await?;
        Ok(envelope)
    }

    /// Adds encoded envelopes to the delayed set, due at `due_secs` (epoch seconds).
    pub async fn publish_encoded_at(
        &self,
        queue: &str,
        bodies: Vec<Vec<u8>>,
        due_secs: i64,
    ) -> Result<()> {
        let elements = bodies.into_iter().map(Bytes::from).collect();
        self.push_at(queue, elements, due_secs).await
    }

    /// Adds elements exactly as given to the delayed set, due at `due_secs`.
    pub(crate) async fn push_at(
        &self,
        queue: &str,
        bodies: Vec<Bytes>,
        due_secs: i64,
    ) -> Result<()> {
        validate_queue(queue)?;
        if matches!(self.options.layout, Layout::Legacy) {
            return Err(Error::Unsupported {
                layout: "legacy",
                what: "delayed publish (it has no delayed set)",
            });
        }
        if bodies.is_empty() {
            return Ok(());
        }
        let members: Vec<(f64, Value)> = bodies
            .into_iter()
            .map(|b| (due_secs as f64, Value::Bytes(b)))
            .collect();
        let _: i64 = self
            .client
            .zadd(self.keys(queue).timers, None, None, false, false, members)
            .await?;
        Ok(())
    }

    /// A consumer of `queue`. On the Laravel layout it opens its own connection for
    /// blocking on `:notify`.
    pub async fn consumer(&self, queue: &str) -> Result<QueueConsumer> {
        validate_queue(queue)?;
        let waiter = match self.options.layout {
            Layout::Legacy => None,
            Layout::Laravel { .. } => {
                let waiter = self.client.clone_new();
                waiter.init().await?;
                Some(waiter)
            }
        };
        Ok(QueueConsumer::new(
            self.client.clone(),
            waiter,
            self.keys(queue),
            Arc::clone(&self.options),
        ))
    }
}

/// `floor(now) + ceil(delay)`.
pub(crate) fn available_at(delay: Duration) -> i64 {
    let secs = if delay.is_zero() {
        0
    } else {
        whole_seconds(delay)
    };
    now_secs().saturating_add(i64::try_from(secs).unwrap_or(i64::MAX))
}
