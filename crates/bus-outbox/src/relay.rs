//! The relay: moves committed outbox rows to the transport.
//!
//! One cycle ([`Relay::relay_once`]) is one PostgreSQL transaction: claim up to a batch
//! of rows in id order (`FOR UPDATE SKIP LOCKED`, so relays on other hosts take other
//! rows), send them, then delete the sent rows, move the unsendable ones to
//! `bus_outbox_dead` and commit. A crash anywhere before the commit leaves every claimed
//! row in the table, unlocked, for the next cycle of any relay, which sends it again:
//! each command is sent with the transport's deduplication keyed by its message id (or
//! its own deduplication key), so that the second send stores nothing.
//!
//! Order per key: a keyed row is claimed only by the relay that holds its key's
//! advisory lock (`pg_try_advisory_xact_lock`, taken before any row is read and held
//! until the commit), so no two relays ever hold rows of one key, and the holder takes
//! them in id order; a keyed row that fails holds back the rows of its key behind it
//! until a later cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bus_core::transport::{validate_name, Deduplication, Destination, Outgoing};
use bus_core::{Envelope, ErrorChain, IntoShared, MessageId, Transport};
use bytes::Bytes;
use futures::FutureExt;
use sqlx::postgres::{PgListener, PgRow};
use sqlx::{PgPool, Postgres, Row, Transaction};
use tokio_util::sync::CancellationToken;

use crate::outbox::{Lag, LOCK_CLASS};
use crate::Result;

/// The channel the outbox's trigger notifies on commit.
pub const CHANNEL: &str = "bus_outbox";

/// The relay's settings; `RelayConfig::default()` suits most.
///
/// ```
/// # use std::time::Duration;
/// let config = bus_outbox::RelayConfig::default()
///     .batch_size(200)
///     .poll_interval(Duration::from_millis(500));
/// ```
#[derive(Clone)]
pub struct RelayConfig {
    batch_size: usize,
    poll_interval: Duration,
    dedup_window: Duration,
    claim_timeout: Duration,
    max_message_size: usize,
    max_attempts: u32,
    max_backoff: Duration,
    lag_interval: Duration,
    cycles: usize,
    after_send: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            batch_size: 500,
            poll_interval: Duration::from_secs(1),
            dedup_window: Duration::from_secs(10 * 60),
            claim_timeout: Duration::from_secs(30),
            max_message_size: bus_core::defaults::MAX_MESSAGE_SIZE,
            max_attempts: 5,
            max_backoff: Duration::from_secs(5),
            lag_interval: Duration::from_secs(5),
            cycles: 2,
            after_send: None,
        }
    }
}

impl fmt::Debug for RelayConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelayConfig")
            .field("batch_size", &self.batch_size)
            .field("poll_interval", &self.poll_interval)
            .field("dedup_window", &self.dedup_window)
            .field("claim_timeout", &self.claim_timeout)
            .field("max_message_size", &self.max_message_size)
            .field("max_attempts", &self.max_attempts)
            .field("max_backoff", &self.max_backoff)
            .field("lag_interval", &self.lag_interval)
            .field("cycles", &self.cycles)
            .finish_non_exhaustive()
    }
}

impl RelayConfig {
    /// Rows claimed per cycle (default 500).
    pub fn batch_size(mut self, rows: usize) -> Self {
        self.batch_size = rows.max(1);
        self
    }
    /// How often the relay looks for rows when no notification came (default 1 s): the
    /// bound on the delay when a notification is lost (the listening connection broke).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }
    /// How long the deduplication key of a relayed command holds (default 10 minutes):
    /// it must outlast the time from a send to a second relay's resend after a crash,
    /// which [`RelayConfig::claim_timeout`] bounds; each key costs the transport about
    /// a hundred bytes for that long.
    pub fn dedup_window(mut self, window: Duration) -> Self {
        self.dedup_window = window;
        self
    }
    /// How long PostgreSQL lets a cycle's transaction sit idle before ending its
    /// session (default 30 s): a relay frozen or cut off mid-cycle then loses its
    /// claim, and another relay takes the rows.
    pub fn claim_timeout(mut self, timeout: Duration) -> Self {
        self.claim_timeout = timeout;
        self
    }
    /// Rows whose payload is larger are moved aside as too large (default 1 MiB, the
    /// bus's default).
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }
    /// A row the transport refuses this many times, while it takes other rows, is moved
    /// aside (default 5).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }
    /// The longest wait between cycles while the transport or the database fails
    /// (default 5 s; the wait doubles from 50 ms).
    pub fn max_backoff(mut self, backoff: Duration) -> Self {
        self.max_backoff = backoff;
        self
    }
    /// How often the relay reads its lag for its metrics (feature `metrics`; default 5 s).
    pub fn lag_interval(mut self, interval: Duration) -> Self {
        self.lag_interval = interval;
        self
    }
    /// How many cycles one relay runs at once (default 2), each on a connection of its
    /// own and with its own listening connection: while one sends, another claims the
    /// rows committed meanwhile, so a row waits for no cycle to finish. They share the
    /// rows as separate relays do (keys included).
    pub fn cycles(mut self, cycles: usize) -> Self {
        self.cycles = cycles.max(1);
        self
    }
    /// Runs `hook` after a cycle's sends and before its rows are deleted: the crash
    /// tests abort the process there. Not for production use.
    #[doc(hidden)]
    pub fn after_send(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.after_send = Some(Arc::new(hook));
        self
    }
}

/// What one cycle did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Relayed {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows sent and deleted (a resend the transport found already stored included).
    pub sent: usize,
    /// Rows moved to `bus_outbox_dead`.
    pub dead: usize,
    /// Rows left for a later cycle (the transport failed).
    pub kept: usize,
}

/// Moves committed outbox rows to the transport: [`Relay::run`] alone, or beside a host
/// ([`HostExt::run_with_relay`](crate::HostExt::run_with_relay)). Run as many as you
/// like, on as many hosts: they share the rows.
///
/// It uses the pool's connections: per cycle running at once ([`RelayConfig::cycles`]),
/// one to listen for notifications and one for the cycle.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, transport: bus_core::MemoryTransport) -> Result<(), bus_outbox::Error> {
/// use bus_outbox::{Relay, RelayConfig};
/// let relay = Relay::new(pool, transport, RelayConfig::default());
/// relay.run(bus_core::shutdown_signal()).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Relay {
    pool: PgPool,
    transport: Arc<dyn Transport>,
    config: RelayConfig,
    begin: Arc<str>,
}

/// A claimed row.
pub(crate) struct Claimed {
    id: i64,
    kind: String,
    destination: String,
    message_id: String,
    key: Option<String>,
    due_ms: Option<i64>,
    dedup_key: Option<String>,
    window_ms: Option<i64>,
    payload: Bytes,
    attempts: i32,
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) age: Duration,
}

impl Claimed {
    fn from_row(row: &PgRow) -> std::result::Result<Self, sqlx::Error> {
        let payload: Vec<u8> = row.try_get("payload")?;
        let age_ms: f64 = row.try_get("age_ms")?;
        Ok(Claimed {
            id: row.try_get("id")?,
            kind: row.try_get("kind")?,
            destination: row.try_get("destination")?,
            message_id: row.try_get("message_id")?,
            key: row.try_get("partition_key")?,
            due_ms: row.try_get("due_ms")?,
            dedup_key: row.try_get("dedup_key")?,
            window_ms: row.try_get("dedup_window_ms")?,
            payload: Bytes::from(payload),
            attempts: row.try_get("attempts")?,
            age: Duration::try_from_secs_f64(age_ms.max(0.0) / 1000.0).unwrap_or_default(),
        })
    }

    fn due(&self) -> Option<SystemTime> {
        let ms = u64::try_from(self.due_ms?).unwrap_or(0);
        Some(UNIX_EPOCH + Duration::from_millis(ms))
    }

    fn outgoing(&self) -> Outgoing {
        Outgoing {
            id: MessageId::from(self.message_id.clone()),
            payload: self.payload.clone(),
        }
    }

    /// The deduplication key its sends carry: its own, else its message id (unique
    /// across databases, unlike the row id).
    fn dedup_key(&self) -> String {
        match &self.dedup_key {
            Some(key) => key.clone(),
            None => format!("outbox:{}", self.message_id),
        }
    }
}

/// What became of a claimed row in one cycle.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fate {
    Sent,
    /// Moved aside, with the reason.
    Dead(String),
    /// Left for a later cycle; `counted` when the transport refused it while taking
    /// other rows (an attempt against [`RelayConfig::max_attempts`]).
    Kept {
        error: String,
        counted: bool,
    },
}

/// Claims rows in id order; a keyed row only with its key's advisory lock. The locks are
/// tried first, once for each key among the first batch of keyed rows, and only then
/// are rows read: a key's lock, once taken, is held for the whole scan, so the rows of
/// a key this relay holds are all visible and unlocked (no other relay can lock them),
/// and the batch takes a prefix of them in id order. (Trying the lock row by row would
/// let a key freed mid-scan be taken for a later row after an earlier one was passed
/// over.)
const CLAIM: &str = "WITH keys AS MATERIALIZED ( \
        SELECT DISTINCT hashtext(kind || ':' || destination || ':' || partition_key) AS h \
        FROM (SELECT kind, destination, partition_key FROM bus_outbox \
              WHERE partition_key IS NOT NULL ORDER BY id LIMIT $2) AS first), \
    held AS MATERIALIZED (SELECT h FROM keys WHERE pg_try_advisory_xact_lock($1, h)) \
    SELECT id, kind, destination, message_id, partition_key, due_ms, dedup_key, \
        dedup_window_ms, payload, attempts, \
        extract(epoch FROM clock_timestamp() - written_at)::float8 * 1000 AS age_ms \
    FROM bus_outbox \
    WHERE partition_key IS NULL \
       OR hashtext(kind || ':' || destination || ':' || partition_key) IN (SELECT h FROM held) \
    ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED";

const DELETE_SENT: &str = "DELETE FROM bus_outbox WHERE id = ANY($1)";

const MOVE_DEAD: &str = "WITH gone AS ( \
        DELETE FROM bus_outbox o USING unnest($1::bigint[], $2::text[]) AS d(id, reason) \
        WHERE o.id = d.id RETURNING o.*, d.reason) \
    INSERT INTO bus_outbox_dead (id, kind, destination, message_id, partition_key, due_ms, \
        dedup_key, dedup_window_ms, payload, written_at, reason) \
    SELECT id, kind, destination, message_id, partition_key, due_ms, dedup_key, \
        dedup_window_ms, payload, written_at, reason FROM gone \
    ON CONFLICT (id) DO NOTHING";

const COUNT_ATTEMPT: &str = "UPDATE bus_outbox SET attempts = attempts + 1, last_error = d.error \
    FROM unnest($1::bigint[], $2::text[]) AS d(id, error) WHERE bus_outbox.id = d.id";

impl Relay {
    /// A relay of the outbox in `pool`'s database to `transport` (by value, or an
    /// `Arc<dyn Transport>` such as `bus.transport().clone()`).
    pub fn new(
        pool: PgPool,
        transport: impl IntoShared<dyn Transport>,
        config: RelayConfig,
    ) -> Self {
        let idle_ms = config.claim_timeout.as_millis().max(1);
        // The claim's own bound on sitting idle (see RelayConfig::claim_timeout), set in
        // the same round trip as BEGIN.
        let begin = format!("BEGIN; SET LOCAL idle_in_transaction_session_timeout = {idle_ms}");
        Relay {
            pool,
            transport: transport.into_shared(),
            config,
            begin: begin.into(),
        }
    }

    /// What waits in the outbox.
    pub async fn lag(&self) -> Result<Lag> {
        Lag::read(&self.pool).await
    }

    /// Relays until `shutdown` completes, then finishes the cycle under way and returns.
    /// Woken by the outbox's notifications, and every poll interval without one. A
    /// failing transport or database is retried with a growing pause, never given up:
    /// the rows wait meanwhile, and [`Relay::lag`] shows them.
    pub async fn run(&self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let stop = CancellationToken::new();
        let work = self.run_until(stop.clone());
        tokio::pin!(work);
        tokio::select! {
            result = &mut work => return result,
            () = shutdown => stop.cancel(),
        }
        work.await
    }

    /// [`Relay::run`] until `stop` is cancelled.
    pub async fn run_until(&self, stop: CancellationToken) -> Result<()> {
        let loops = (0..self.config.cycles).map(|n| self.cycle_loop(&stop, n == 0));
        futures::future::join_all(loops).await;
        Ok(())
    }

    /// One loop of cycles, with a listener of its own; `reports` the lag.
    async fn cycle_loop(&self, stop: &CancellationToken, reports: bool) {
        let mut listener: Option<PgListener> = None;
        let mut failures: u32 = 0;
        let mut lag_due = tokio::time::Instant::now();
        while !stop.is_cancelled() {
            // Listening before claiming: a commit after the claim's snapshot notifies.
            if listener.is_none() {
                listener = self.listen().await;
            }
            let outcome = self.relay_once().await;
            let wait = match &outcome {
                Ok(relayed) if relayed.kept == 0 => {
                    failures = 0;
                    if relayed.claimed >= self.config.batch_size {
                        continue;
                    }
                    None
                }
                Ok(relayed) => {
                    failures += 1;
                    tracing::warn!(
                        kept = relayed.kept,
                        sent = relayed.sent,
                        "outbox relay: the transport failed; the rows wait for the next cycle"
                    );
                    Some(self.backoff(failures))
                }
                Err(error) => {
                    failures += 1;
                    tracing::warn!(error = %ErrorChain(error), "outbox relay: a cycle failed; the rows wait for the next one");
                    Some(self.backoff(failures))
                }
            };
            if reports && tokio::time::Instant::now() >= lag_due {
                lag_due = tokio::time::Instant::now() + self.config.lag_interval;
                self.report_lag().await;
            }
            match wait {
                Some(pause) => {
                    tokio::select! {
                        () = stop.cancelled() => {}
                        () = tokio::time::sleep(pause) => {}
                    }
                }
                None => self.wait_for_rows(&mut listener, stop).await,
            }
        }
    }

    /// Waits for a notification, the poll interval, or `stop`; drains the notifications
    /// that came meanwhile, since one cycle serves them all.
    async fn wait_for_rows(&self, listener: &mut Option<PgListener>, stop: &CancellationToken) {
        let poll = tokio::time::sleep(self.config.poll_interval);
        let Some(listening) = listener.as_mut() else {
            tokio::select! {
                () = stop.cancelled() => {}
                () = poll => {}
            }
            return;
        };
        let notified = tokio::select! {
            () = stop.cancelled() => return,
            () = poll => return,
            notified = listening.try_recv() => notified,
        };
        match notified {
            Ok(Some(_)) => while let Some(Ok(Some(_))) = listening.try_recv().now_or_never() {},
            // The connection was lost (notifications may be missed): claim at once.
            Ok(None) => {}
            Err(error) => {
                tracing::debug!(error = %error, "outbox relay: listening failed; polling until it listens again");
                *listener = None;
            }
        }
    }

    async fn listen(&self) -> Option<PgListener> {
        let listening = async {
            let mut listener = PgListener::connect_with(&self.pool).await?;
            listener.listen(CHANNEL).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        match listening.await {
            Ok(listener) => Some(listener),
            Err(error) => {
                tracing::debug!(error = %error, "outbox relay: cannot listen for notifications; polling");
                None
            }
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        let doubled = Duration::from_millis(50).saturating_mul(1 << failures.min(16));
        doubled.min(self.config.max_backoff)
    }

    /// One cycle: claims a batch, sends it, deletes what was sent and moves aside what
    /// cannot be, in one transaction. Relays that run at once take different rows.
    pub async fn relay_once(&self) -> Result<Relayed> {
        let mut tx = self.pool.begin_with(self.begin.to_string()).await?;
        let rows: Vec<Claimed> = sqlx::query::<Postgres>(CLAIM)
            .bind(LOCK_CLASS)
            .bind(i64::try_from(self.config.batch_size).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(Claimed::from_row)
            .collect::<std::result::Result<_, _>>()?;
        if rows.is_empty() {
            tx.rollback().await?;
            return Ok(Relayed::default());
        }
        let fates = self.send(&rows).await;
        if let Some(hook) = &self.config.after_send {
            hook();
        }
        let relayed = self.settle(&mut tx, &rows, &fates).await?;
        tx.commit().await?;
        crate::metrics::relayed(&rows, &fates);
        Ok(relayed)
    }

    /// Sends the claimed rows, each queue's and each topic's in id order, different
    /// ones concurrently; says what became of each row.
    async fn send(&self, rows: &[Claimed]) -> Vec<Fate> {
        let mut fates: Vec<Option<Fate>> = rows
            .iter()
            .map(|row| self.check(row).err().map(Fate::Dead))
            .collect();
        let mut groups: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
        for (i, row) in rows.iter().enumerate() {
            if fates[i].is_none() {
                groups
                    .entry((row.kind.as_str(), row.destination.as_str()))
                    .or_default()
                    .push(i);
            }
        }
        let sends = groups.iter().map(|(&(kind, destination), members)| {
            let batch: Vec<&Claimed> = members.iter().map(|&i| &rows[i]).collect();
            async move {
                let result = match kind {
                    "topic" => self.publish_group(destination, &batch).await,
                    _ => self.send_group(destination, &batch).await,
                };
                (members, result)
            }
        });
        let results = futures::future::join_all(sends).await;
        let anything_sent = results.iter().any(|(_, result)| result.is_ok());
        for (members, result) in results {
            let group_fates = match result {
                Ok(()) => vec![Fate::Sent; members.len()],
                Err(error) => {
                    let batch: Vec<&Claimed> = members.iter().map(|&i| &rows[i]).collect();
                    // A call without an answer in time: the transport is unreachable,
                    // and a call per row would only wait as long again, row after row.
                    let timed_out = matches!(error, bus_core::Error::OutcomeUnknown(_));
                    if refused(&error) || anything_sent || !timed_out {
                        self.one_by_one(&batch, anything_sent).await
                    } else {
                        let error = ErrorChain(&error).to_string();
                        let kept = Fate::Kept {
                            error,
                            counted: false,
                        };
                        vec![kept; members.len()]
                    }
                }
            };
            for (&i, fate) in members.iter().zip(group_fates) {
                fates[i] = Some(fate);
            }
        }
        fates
            .into_iter()
            .map(|fate| {
                fate.unwrap_or(Fate::Kept {
                    error: "not sent".into(),
                    counted: false,
                })
            })
            .collect()
    }

    /// Why a row can never be sent, if it cannot: checked before any send, so that one
    /// bad row does not fail its batch.
    fn check(&self, row: &Claimed) -> std::result::Result<(), String> {
        let destination = match row.kind.as_str() {
            "queue" => Destination::Queue(&row.destination),
            "topic" => Destination::Topic(&row.destination),
            other => return Err(format!("unknown kind {other:?}")),
        };
        validate_name(
            if row.kind == "queue" {
                "queue"
            } else {
                "topic"
            },
            &row.destination,
        )
        .map_err(|e| format!("invalid destination: {e}"))?;
        if row.payload.len() > self.config.max_message_size {
            return Err(format!(
                "too large: {} bytes, the relay sends at most {}",
                row.payload.len(),
                self.config.max_message_size
            ));
        }
        if row.kind == "topic" && (row.key.is_some() || row.dedup_key.is_some()) {
            return Err("an event with a partition key or a deduplication key".into());
        }
        if row.key.as_deref() == Some("") {
            return Err("an empty partition key".into());
        }
        if row.window_ms.is_some_and(|ms| ms < 1) {
            return Err("a deduplication window under 1 ms".into());
        }
        let decoded = match self.transport.outgoing_wire_format(destination) {
            Some(wire) => wire.decode(&row.payload).map(drop),
            None => Envelope::decode_shared(&row.payload).map(drop),
        };
        decoded.map_err(|e| format!("undecodable: {e}"))
    }

    /// The transport's deduplicated sends, which a relay needs (a resend after a crash
    /// stores nothing).
    fn deduplicated(&self) -> bus_core::Result<&dyn bus_core::transport::Deduplicated> {
        self.transport
            .extras()
            .dedup
            .ok_or_else(|| bus_core::transport::unsupported(bus_core::Capability::Deduplication))
    }

    /// One deduplicated call for a queue's rows (the transport splits it as it must).
    async fn send_group(&self, queue: &str, rows: &[&Claimed]) -> bus_core::Result<()> {
        let keys: Vec<String> = rows.iter().map(|row| row.dedup_key()).collect();
        let messages = rows
            .iter()
            .zip(&keys)
            .map(|(row, key)| (row.outgoing(), self.deduplication(row, key)))
            .collect();
        let answers = self
            .deduplicated()?
            .send_deduplicated_batch(queue, messages)
            .await?;
        if answers.len() != rows.len() {
            return Err(bus_core::Error::Config(format!(
                "sending to {queue}: the transport answered {} of {} deduplicated sends",
                answers.len(),
                rows.len()
            )));
        }
        Ok(())
    }

    fn deduplication<'a>(&self, row: &'a Claimed, key: &'a str) -> Deduplication<'a> {
        let window = row.window_ms.map_or(self.config.dedup_window, |ms| {
            Duration::from_millis(u64::try_from(ms).unwrap_or(1))
        });
        Deduplication::new(key, window)
            .due(row.due())
            .partition(row.key.as_deref())
    }

    /// A topic's rows, in order: one publish per run of rows with the same due time.
    async fn publish_group(&self, topic: &str, rows: &[&Claimed]) -> bus_core::Result<()> {
        let mut start = 0;
        while start < rows.len() {
            let due_ms = rows[start].due_ms;
            let end = rows[start..]
                .iter()
                .position(|row| row.due_ms != due_ms)
                .map_or(rows.len(), |n| start + n);
            let messages: Vec<Outgoing> = rows[start..end].iter().map(|r| r.outgoing()).collect();
            self.publish(topic, rows[start], messages).await?;
            start = end;
        }
        Ok(())
    }

    async fn publish(
        &self,
        topic: &str,
        first: &Claimed,
        messages: Vec<Outgoing>,
    ) -> bus_core::Result<()> {
        let copies = self.transport.publish(topic, first.due(), messages).await?;
        if copies == 0 {
            tracing::info!(topic, "outbox relay: published to a topic without subscriptions: no one receives these events");
        }
        Ok(())
    }

    /// After a group's call failed: its rows one at a time, in order, to find the ones
    /// the transport refuses. A row is moved aside at once when the refusal is about
    /// the row itself (its name, size or encoding), or after
    /// [`RelayConfig::max_attempts`] failures while the transport takes other rows (a
    /// failure counts only then: when nothing is taken, the transport is down). A failed
    /// keyed row holds back the rows of its key behind it; once two rows failed and none
    /// was taken, the rest are not tried (an outage).
    async fn one_by_one(&self, rows: &[&Claimed], transport_up: bool) -> Vec<Fate> {
        let mut fates: Vec<Option<Fate>> = vec![None; rows.len()];
        let mut failed: Vec<(usize, String)> = Vec::new();
        let mut held_back: BTreeSet<&str> = BTreeSet::new();
        let mut up = transport_up;
        for (n, row) in rows.iter().enumerate() {
            if row
                .key
                .as_deref()
                .is_some_and(|key| held_back.contains(key))
            {
                fates[n] = Some(Fate::Kept {
                    error: "behind a row of its key that failed".into(),
                    counted: false,
                });
                continue;
            }
            if !up && failed.len() >= 2 {
                fates[n] = Some(Fate::Kept {
                    error: "not tried: the transport fails".into(),
                    counted: false,
                });
                continue;
            }
            match self.send_one(row).await {
                Ok(()) => {
                    up = true;
                    fates[n] = Some(Fate::Sent);
                }
                Err(error) if refused(&error) => {
                    fates[n] = Some(Fate::Dead(format!("refused: {}", ErrorChain(&error))));
                }
                Err(error) => {
                    if let Some(key) = row.key.as_deref() {
                        held_back.insert(key);
                    }
                    failed.push((n, ErrorChain(&error).to_string()));
                }
            }
        }
        for (n, error) in failed {
            let attempts = u32::try_from(rows[n].attempts).unwrap_or(0) + 1;
            fates[n] = Some(if up && attempts >= self.config.max_attempts {
                Fate::Dead(format!("refused {attempts} times: {error}"))
            } else {
                Fate::Kept { error, counted: up }
            });
        }
        fates
            .into_iter()
            .map(|fate| {
                fate.unwrap_or(Fate::Kept {
                    error: "not sent".into(),
                    counted: false,
                })
            })
            .collect()
    }

    /// One row alone: a deduplicated send, or a publish.
    async fn send_one(&self, row: &Claimed) -> bus_core::Result<()> {
        if row.kind == "topic" {
            return self
                .publish(&row.destination, row, vec![row.outgoing()])
                .await;
        }
        let key = row.dedup_key();
        self.deduplicated()?
            .send_deduplicated(
                &row.destination,
                row.outgoing(),
                self.deduplication(row, &key),
            )
            .await
            .map(drop)
    }

    /// Deletes the sent rows, moves the dead ones aside and counts the refused ones, in
    /// the cycle's transaction.
    async fn settle(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        rows: &[Claimed],
        fates: &[Fate],
    ) -> Result<Relayed> {
        let mut relayed = Relayed {
            claimed: rows.len(),
            ..Relayed::default()
        };
        let (mut sent, mut dead, mut reasons, mut counted, mut errors) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (row, fate) in rows.iter().zip(fates) {
            match fate {
                Fate::Sent => sent.push(row.id),
                Fate::Dead(reason) => {
                    tracing::warn!(row = row.id, message_id = %row.message_id,
                        destination = %row.destination, reason = %reason,
                        "outbox relay: a row that cannot be sent was moved to bus_outbox_dead");
                    dead.push(row.id);
                    reasons.push(reason.clone());
                }
                Fate::Kept {
                    error,
                    counted: true,
                } => {
                    counted.push(row.id);
                    errors.push(error.clone());
                    relayed.kept += 1;
                }
                Fate::Kept { .. } => relayed.kept += 1,
            }
        }
        relayed.sent = sent.len();
        relayed.dead = dead.len();
        if !sent.is_empty() {
            sqlx::query(DELETE_SENT)
                .bind(&sent)
                .execute(&mut **tx)
                .await?;
        }
        if !dead.is_empty() {
            sqlx::query(MOVE_DEAD)
                .bind(&dead)
                .bind(&reasons)
                .execute(&mut **tx)
                .await?;
        }
        if !counted.is_empty() {
            sqlx::query(COUNT_ATTEMPT)
                .bind(&counted)
                .bind(&errors)
                .execute(&mut **tx)
                .await?;
        }
        Ok(relayed)
    }

    async fn report_lag(&self) {
        if !crate::metrics::ENABLED {
            return;
        }
        match self.lag().await {
            Ok(lag) => crate::metrics::lag(&lag),
            Err(error) => {
                tracing::debug!(error = %ErrorChain(&error), "outbox relay: cannot read the lag")
            }
        }
    }
}

/// Whether the transport refused the message itself (its name, size or encoding), as
/// opposed to failing (down, timed out) or refusing every message alike (a
/// configuration it lacks, such as deduplicated sends): only a refusal of the message is
/// final at once; the rest waits, and counts against `max_attempts` only while the
/// transport takes other rows.
fn refused(error: &bus_core::Error) -> bool {
    matches!(
        error,
        bus_core::Error::InvalidName { .. }
            | bus_core::Error::MessageTooLarge { .. }
            | bus_core::Error::Encode { .. }
            | bus_core::Error::Decode { .. }
    )
}
