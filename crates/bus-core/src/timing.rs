//! Per-type timing: how many messages of each type a host handled and failed
//! per minute, and how long its handlers took (a histogram of fixed buckets), reported
//! through the transport's [`TimingReporter`] so that operators see the slowest and
//! busiest types (the dashboard's Timing page, `bus metrics`).
//!
//! bus-core knows no storage: a transport offers a reporter
//! ([`TransportExtras::timing_reporter`](crate::transport::TransportExtras::timing_reporter), none by default)
//! and the host flushes what it aggregated every
//! [`HostBuilder::timing_interval`](crate::HostBuilder::timing_interval) (10 s). Per
//! message the host reads the clock twice (quanta's, from the CPU's time-stamp counter
//! where it is invariant: the OS clock's reads were most of timing's cost) and adds to
//! counters made at start-up, one set per type and a shard per thread: no lock, no
//! allocation, no I/O, no contended cache line. It times the run around the middleware
//! and the handler, not as a middleware, so it adds no boxed future to the pipeline.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quanta::Instant;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::fast_hash::FastHasher;
use crate::Result;

/// How often a host flushes its per-type timing by default.
pub const DEFAULT_TIMING_INTERVAL: Duration = Duration::from_secs(10);

/// Longest a stopping host waits to record the timing of its last seconds.
const FINAL_FLUSH_BOUND: Duration = Duration::from_millis(500);

/// Upper bounds (inclusive, µs) of the duration buckets; a last bucket holds the rest.
pub const BUCKET_BOUNDS_US: [u64; 17] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000,
];

/// Buckets of a histogram: one per bound, and one for longer runs.
pub const BUCKETS: usize = BUCKET_BOUNDS_US.len() + 1;

/// Minutes of unsent timing a host keeps while its reporter fails (Redis down); older
/// ones are dropped with a warning, so an outage costs bounded memory.
const MAX_PENDING_MINUTES: usize = 30;

/// One type's handler runs over a time (a minute, or a sum of minutes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TypeTiming {
    /// Runs whose handler (middleware included) succeeded.
    pub handled: u64,
    /// Runs whose handler failed: an error, a panic, or abandoned at shutdown.
    pub failed: u64,
    /// Time all those runs took, µs.
    pub total_us: u64,
    /// Runs by duration: `buckets[i]` counts runs of at most [`BUCKET_BOUNDS_US`]`[i]`
    /// (and over the previous bound); the last counts runs over 30 s.
    pub buckets: [u64; BUCKETS],
}

impl TypeTiming {
    /// The bucket of a run of `us` microseconds.
    pub fn bucket_of(us: u64) -> usize {
        BUCKET_BOUNDS_US.partition_point(|&bound| bound < us)
    }

    /// Every run, handled or failed.
    pub fn runs(&self) -> u64 {
        self.handled + self.failed
    }

    /// Adds another count (a host's, another minute's).
    pub fn add(&mut self, other: &TypeTiming) {
        self.handled = self.handled.saturating_add(other.handled);
        self.failed = self.failed.saturating_add(other.failed);
        self.total_us = self.total_us.saturating_add(other.total_us);
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine = mine.saturating_add(theirs);
        }
    }

    /// The mean duration of a run, µs (0 without runs).
    pub fn mean_us(&self) -> u64 {
        self.total_us.checked_div(self.runs()).unwrap_or(0)
    }

    /// The upper bound of the bucket holding quantile `q` (0.5, 0.95, 0.99) of the runs,
    /// µs: "95 % of runs took at most this". Runs over the last bound read as twice it.
    /// 0 without runs.
    pub fn quantile_us(&self, q: f64) -> u64 {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((total as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, count) in self.buckets.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return BUCKET_BOUNDS_US
                    .get(i)
                    .copied()
                    .unwrap_or(BUCKET_BOUNDS_US[BUCKETS - 2] * 2);
            }
        }
        BUCKET_BOUNDS_US[BUCKETS - 2] * 2
    }
}

/// What a host hands its reporter at each flush: one minute's timing of each type that
/// ran, since the previous flush.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TimingReport {
    /// The reporting host (its heartbeat id, `<host name>:<pid>:<start ms>`).
    pub host: String,
    /// Increases by one with each report of the host: a report delivered twice (a
    /// command retried after a reconnect) is recognised and counted once.
    pub seq: u64,
    /// The minute these runs ended in: minutes since the Unix epoch (the host's clock).
    pub minute: u64,
    /// Each type's runs in that minute since the last report; no type without runs.
    pub types: Vec<(String, TypeTiming)>,
}

impl TimingReport {
    /// A report of `host`'s runs in `minute`, its `seq`-th (for a transport's tests and
    /// tools; a host makes its own).
    pub fn new(
        host: impl Into<String>,
        seq: u64,
        minute: u64,
        types: Vec<(String, TypeTiming)>,
    ) -> Self {
        TimingReport {
            host: host.into(),
            seq,
            minute,
            types,
        }
    }
}

/// Where a host's per-type timing goes; implemented by a transport (bus-redis adds it
/// to one hash per minute, docs/redis-layout.md, "Per-type timing").
#[async_trait]
pub trait TimingReporter: Send + Sync + std::fmt::Debug + 'static {
    /// Adds `report` to what is recorded for its minute.
    async fn record(&self, report: &TimingReport) -> Result<()>;
}

/// One type's live counters, added to by every run and emptied by each flush. Each
/// thread adds to one shard of its own (by a number it draws once), each on cache lines
/// of its own, so that handlers on several threads never contend for a line.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    shards: [Shard; SHARDS],
}

/// Shards per type: more than a host has handler threads on most machines; two threads
/// that share one are still correct, only slower.
const SHARDS: usize = 8;

#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    handled: AtomicU64,
    failed: AtomicU64,
    total_us: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl Counters {
    #[inline]
    fn record(&self, elapsed: Duration, ok: bool) {
        thread_local! {
            static SHARD: usize = {
                static NEXT: AtomicUsize = AtomicUsize::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS
            };
        }
        let shard = &self.shards[SHARD.with(|s| *s)];
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let count = if ok { &shard.handled } else { &shard.failed };
        count.fetch_add(1, Ordering::Relaxed);
        shard.total_us.fetch_add(us, Ordering::Relaxed);
        shard.buckets[TypeTiming::bucket_of(us)].fetch_add(1, Ordering::Relaxed);
    }

    /// Times one run from now: recorded when the returned guard is dropped, as failed
    /// unless [`Run::succeeded`] was called first, so a run that panics through it or is
    /// abandoned at shutdown counts as failed.
    #[inline]
    pub(crate) fn start(&self) -> Run<'_> {
        Run {
            counters: self,
            started: Instant::now(),
            ok: false,
        }
    }

    /// What was counted since the last take; the counters start again at zero.
    fn take(&self) -> TypeTiming {
        let mut taken = TypeTiming::default();
        for shard in &self.shards {
            taken.add(&TypeTiming {
                handled: shard.handled.swap(0, Ordering::Relaxed),
                failed: shard.failed.swap(0, Ordering::Relaxed),
                total_us: shard.total_us.swap(0, Ordering::Relaxed),
                buckets: std::array::from_fn(|i| shard.buckets[i].swap(0, Ordering::Relaxed)),
            });
        }
        taken
    }
}

/// One run being timed ([`Counters::start`]).
#[derive(Debug)]
pub(crate) struct Run<'a> {
    counters: &'a Counters,
    started: Instant,
    ok: bool,
}

impl Run<'_> {
    /// The run succeeded: it counts as handled.
    pub(crate) fn succeeded(mut self) {
        self.ok = true;
    }
}

impl Drop for Run<'_> {
    fn drop(&mut self) {
        self.counters.record(self.started.elapsed(), self.ok);
    }
}

type ByType = HashMap<&'static str, Arc<Counters>, BuildHasherDefault<FastHasher>>;

/// A name for this host's reports, unique per host even when one process runs several:
/// `<host name>:<pid>:<start ms>:<n>`.
pub(crate) fn reporter_id() -> String {
    static HOSTS: AtomicU64 = AtomicU64::new(0);
    let n = HOSTS.fetch_add(1, Ordering::Relaxed);
    format!(
        "{}:{}:{}:{n}",
        crate::heartbeat::hostname(),
        std::process::id(),
        crate::envelope::now_ms()
    )
}

/// The minute (since the Unix epoch) of a time in ms.
fn minute_of(ms: u64) -> u64 {
    ms / 60_000
}

/// The per-type timing of one running host: its counters, and what failed to go out.
#[derive(Debug)]
pub(crate) struct Timing {
    reporter: Arc<dyn TimingReporter>,
    host: String,
    types: Arc<ByType>,
    interval: Duration,
    seq: u64,
    /// Minute → type → runs not yet recorded (a failed report is retried next time).
    pending: BTreeMap<u64, BTreeMap<String, TypeTiming>>,
}

impl Timing {
    pub(crate) fn new(
        reporter: Arc<dyn TimingReporter>,
        types: impl IntoIterator<Item = &'static str>,
        interval: Duration,
    ) -> Self {
        let types = types
            .into_iter()
            .map(|name| (name, Arc::default()))
            .collect();
        // The clock calibrates on its first read (~1 ms): here, not in a handler's time.
        let _ = Instant::now();
        Timing {
            reporter,
            host: reporter_id(),
            types: Arc::new(types),
            interval,
            seq: 0,
            pending: BTreeMap::new(),
        }
    }

    /// The counters that each of these processors' runs add to ([`Counters::start`]), in
    /// their order (the host made one set per type it registered).
    pub(crate) fn counters_of(
        &self,
        processors: &[crate::host::Registration],
    ) -> Vec<Arc<Counters>> {
        let types = processors.iter().map(|r| r.message.message_type());
        types
            .map(|name| self.types.get(name).cloned().unwrap_or_default())
            .collect()
    }

    /// Takes every type's counts into the pending minute `minute`.
    fn collect(&mut self, minute: u64) {
        for (name, counters) in self.types.iter() {
            let taken = counters.take();
            if taken.runs() == 0 {
                continue;
            }
            self.pending
                .entry(minute)
                .or_default()
                .entry((*name).to_owned())
                .or_default()
                .add(&taken);
        }
        while self.pending.len() > MAX_PENDING_MINUTES {
            if let Some((minute, _)) = self.pending.pop_first() {
                tracing::warn!(
                    minute,
                    "per-type timing of a minute dropped: its reports kept failing"
                );
            }
        }
    }

    /// Reports every pending minute, oldest first; stops at the first failure, which is
    /// retried at the next flush.
    async fn flush(&mut self) {
        while let Some(entry) = self.pending.first_entry() {
            self.seq += 1;
            let report = TimingReport {
                host: self.host.clone(),
                seq: self.seq,
                minute: *entry.key(),
                types: entry
                    .get()
                    .iter()
                    .map(|(name, timing)| (name.clone(), timing.clone()))
                    .collect(),
            };
            if let Err(e) = self.reporter.record(&report).await {
                tracing::warn!(error = %e, "per-type timing not recorded; retrying at the next flush");
                return;
            }
            entry.remove();
        }
    }

    /// Flushes at every multiple of the interval (wall clock, so that with an interval
    /// dividing a minute no flush spans two minutes) until `stop`, then once more with
    /// what the last runs added.
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let every = u64::try_from(self.interval.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        loop {
            let now = crate::envelope::now_ms();
            let next = (now / every + 1) * every;
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(Duration::from_millis(next - now)) => {}
            }
            // The runs counted since the last flush ended before `next`.
            self.collect(minute_of(next - 1));
            // A stop interrupts a flush that waits on an unanswering Redis (a call's timeout
            // is 5 s); what it did not record is retried by the bounded final flush.
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.flush() => {}
            }
        }
        self.collect(minute_of(crate::envelope::now_ms()));
        // Bounded, and short: it comes after the workers' own bounded shutdown, and a host
        // stopping while Redis is away must not wait on operator figures.
        if tokio::time::timeout(FINAL_FLUSH_BOUND, self.flush())
            .await
            .is_err()
        {
            tracing::warn!("per-type timing of the last seconds not recorded at shutdown");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_bound_and_the_rest_goes_last() {
        assert_eq!(TypeTiming::bucket_of(0), 0);
        assert_eq!(TypeTiming::bucket_of(100), 0);
        assert_eq!(TypeTiming::bucket_of(101), 1);
        assert_eq!(TypeTiming::bucket_of(1_000), 3);
        assert_eq!(TypeTiming::bucket_of(30_000_000), BUCKETS - 2);
        assert_eq!(TypeTiming::bucket_of(30_000_001), BUCKETS - 1);
    }

    #[test]
    fn quantiles_read_the_bucket_bounds() {
        let mut timing = TypeTiming::default();
        timing.buckets[2] = 90; // ≤ 500 µs
        timing.buckets[8] = 10; // ≤ 50 ms
        timing.handled = 100;
        timing.total_us = 90 * 400 + 10 * 40_000;
        assert_eq!(timing.quantile_us(0.5), 500);
        assert_eq!(timing.quantile_us(0.9), 500);
        assert_eq!(timing.quantile_us(0.95), 50_000);
        assert_eq!(timing.mean_us(), 4_360);
        assert_eq!(TypeTiming::default().quantile_us(0.5), 0);
    }

    #[test]
    fn counters_are_emptied_by_each_take() {
        let counters = Counters::default();
        counters.record(Duration::from_micros(300), true);
        counters.record(Duration::from_millis(2), false);
        // Another thread adds to another shard; a take sums them.
        std::thread::scope(|s| {
            s.spawn(|| counters.record(Duration::from_micros(50), true));
        });
        counters.start().succeeded();
        drop(counters.start());
        let taken = counters.take();
        assert_eq!((taken.handled, taken.failed), (3, 2));
        assert!(taken.total_us >= 2_350, "{taken:?}");
        assert_eq!(taken.buckets[0], 3, "the 50 µs run and the two timed now");
        assert_eq!(taken.buckets[2], 1);
        assert_eq!(taken.buckets[4], 1);
        assert_eq!(counters.take(), TypeTiming::default());
    }
}
