//! The circuit breaker of a processor (docs/concepts.md, "Circuit
//! breakers"): when too many of its handlers fail, the host stops reserving from its
//! queue for a cool-down, then lets one message through as a probe and closes again if
//! it succeeds.
//!
//! Host-side logic: each host decides for itself from its own handlers' outcomes, so it
//! works the same on every transport. [`Machine`] is the state machine, a pure value
//! driven by the caller's clock; [`Breaker`] shares it between a worker's fetch loop
//! (which asks before reserving) and its handlers (which report outcomes).

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::metrics::WorkerMetrics;
use crate::transport::{Receipt, Source};

// The fleet scope: the transport holds every host back and judges the probe; this host
// trips it and shows what it saw.
mod fleet;
// The breaker as a layer around the worker's consumer.
mod guard;
pub(crate) use guard::Guarded;

/// Buckets of the sliding window: its resolution is a tenth of the window.
const BUCKETS: usize = 10;

/// The settings of a processor's circuit breaker
/// ([`ProcessingSettings::circuit_breaker`](crate::ProcessingSettings::circuit_breaker)).
///
/// The defaults: it opens when at least half of the handler runs of the last 30 s
/// failed, once there were at least 20 of them; it stays open 5 s, then lets one message
/// through as a probe. It stops this host only ([`BreakerScope::Host`]) unless set to
/// stop every host ([`BreakerScope::Fleet`]).
///
/// ```
/// use std::time::Duration;
/// use bus_core::{CircuitBreaker, ProcessingSettings};
///
/// let settings = ProcessingSettings::default().circuit_breaker(Some(
///     CircuitBreaker::default()
///         .failure_ratio(0.25)
///         .cool_down(Duration::from_secs(30)),
/// ));
/// assert_eq!(settings.circuit_breaker.unwrap().minimum_calls, 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct CircuitBreaker {
    /// See [`CircuitBreaker::failure_ratio()`].
    pub failure_ratio: f64,
    /// See [`CircuitBreaker::minimum_calls()`].
    pub minimum_calls: u32,
    /// See [`CircuitBreaker::window()`].
    pub window: Duration,
    /// See [`CircuitBreaker::cool_down()`].
    pub cool_down: Duration,
    /// See [`CircuitBreaker::scope()`].
    pub scope: BreakerScope,
}

/// Which consumers a tripped circuit breaker stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum BreakerScope {
    /// This host's worker only: each host judges its own handlers (no transport support
    /// needed).
    #[default]
    Host,
    /// Every consumer of the queue, on every host: the trip is stored in the transport
    /// (in Redis, the queue's `flow` hash), the transport's reserve holds every consumer
    /// back, and exactly one message (one per partition) goes through as the probe, judged
    /// by the host that took it. Needs a transport with a fleet breaker (Redis, in-memory).
    Fleet,
}

impl BreakerScope {
    /// `host` or `fleet`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerScope::Host => "host",
            BreakerScope::Fleet => "fleet",
        }
    }
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        CircuitBreaker {
            failure_ratio: 0.5,
            minimum_calls: 20,
            window: Duration::from_secs(30),
            cool_down: Duration::from_secs(5),
            scope: BreakerScope::Host,
        }
    }
}

impl CircuitBreaker {
    /// The share of failed runs (retried or dead-lettered) over the window at which the
    /// breaker opens (kept within 0.01–1.0; 0.5 by default).
    pub fn failure_ratio(mut self, ratio: f64) -> Self {
        self.failure_ratio = if ratio.is_nan() {
            1.0
        } else {
            ratio.clamp(0.01, 1.0)
        };
        self
    }
    /// Runs the window must hold before the ratio counts (at least 1; 20 by default), so
    /// that one failure of a quiet queue does not open it.
    pub fn minimum_calls(mut self, calls: u32) -> Self {
        self.minimum_calls = calls.max(1);
        self
    }
    /// The sliding window the ratio is taken over (at least 100 ms; 30 s by default).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window.max(Duration::from_millis(100));
        self
    }
    /// How long the breaker stays open before it lets a probe through (at least 10 ms;
    /// 5 s by default).
    pub fn cool_down(mut self, cool_down: Duration) -> Self {
        self.cool_down = cool_down.max(Duration::from_millis(10));
        self
    }

    /// Which consumers it stops: this host's ([`BreakerScope::Host`], the default) or
    /// every host's ([`BreakerScope::Fleet`]).
    pub fn scope(mut self, scope: BreakerScope) -> Self {
        self.scope = scope;
        self
    }

    /// The same settings with each value in the range its setter keeps.
    pub(crate) fn in_range(self) -> Self {
        let CircuitBreaker {
            failure_ratio,
            minimum_calls,
            window,
            cool_down,
            scope: _,
        } = self;
        self.failure_ratio(failure_ratio)
            .minimum_calls(minimum_calls)
            .window(window)
            .cool_down(cool_down)
    }
}

/// Where a circuit breaker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BreakerState {
    /// Messages flow.
    Closed,
    /// Nothing is reserved until the cool-down ends.
    Open,
    /// One message runs as a probe; its outcome closes or re-opens the breaker.
    HalfOpen,
}

impl BreakerState {
    /// `closed`, `open` or `half-open`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        }
    }

    /// The value of the host's breaker gauge: 0 closed, 1 open, 2 half-open.
    pub fn gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the fetch loop may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Reserve as usual.
    Go,
    /// Reserve nothing until this time (the cool-down's end), or until the state changes
    /// (`None`: a probe is running).
    Wait(Option<Instant>),
    /// The cool-down is over: once everything held is settled, reserve one message as the
    /// probe ([`Machine::begin_probe`]).
    Probe,
}

/// Runs and failures of one bucket of the window.
#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// Which slice of time it counts (`elapsed / slice`), so a stale bucket is known.
    slice: u64,
    calls: u32,
    failures: u32,
}

/// The state machine, driven by the caller's clock.
#[derive(Debug)]
pub(crate) struct Machine {
    settings: CircuitBreaker,
    state: BreakerState,
    /// Open: when the cool-down ends.
    until: Instant,
    /// Half-open: whether the probe was reserved (its outcome decides).
    probing: bool,
    epoch: Instant,
    buckets: [Bucket; BUCKETS],
}

impl Machine {
    pub(crate) fn new(settings: CircuitBreaker, now: Instant) -> Self {
        Machine {
            settings: settings.in_range(),
            state: BreakerState::Closed,
            until: now,
            probing: false,
            epoch: now,
            buckets: [Bucket::default(); BUCKETS],
        }
    }

    pub(crate) fn state(&self) -> BreakerState {
        self.state
    }

    pub(crate) fn admit(&self, now: Instant) -> Admit {
        match self.state {
            BreakerState::Closed => Admit::Go,
            BreakerState::Open if now < self.until => Admit::Wait(Some(self.until)),
            BreakerState::Open => Admit::Probe,
            BreakerState::HalfOpen if self.probing => Admit::Wait(None),
            BreakerState::HalfOpen => Admit::Probe,
        }
    }

    /// The probe is about to be reserved: the breaker is half-open from now on.
    pub(crate) fn begin_probe(&mut self) {
        if self.state != BreakerState::Closed {
            self.state = BreakerState::HalfOpen;
            self.probing = true;
        }
    }

    /// The probe's reserve found nothing: the next reserve tries again.
    pub(crate) fn probe_unused(&mut self) {
        self.probing = false;
    }

    /// A handler's outcome. Only a closed breaker counts them, and a half-open one
    /// takes its probe's; an open one ignores the runs it let start before it opened.
    pub(crate) fn record(&mut self, succeeded: bool, now: Instant) {
        match self.state {
            BreakerState::Closed => {
                let bucket = self.bucket(now);
                bucket.calls += 1;
                bucket.failures += u32::from(!succeeded);
                let (calls, failures) = self.totals(now);
                if calls >= self.settings.minimum_calls
                    && f64::from(failures) >= self.settings.failure_ratio * f64::from(calls)
                {
                    self.open(now);
                }
            }
            BreakerState::HalfOpen if self.probing => {
                if succeeded {
                    self.state = BreakerState::Closed;
                    self.probing = false;
                    self.buckets = [Bucket::default(); BUCKETS];
                } else {
                    self.open(now);
                }
            }
            BreakerState::HalfOpen | BreakerState::Open => {}
        }
    }

    /// Runs and failures within the window (the current bucket's slice and the nine
    /// before it).
    pub(crate) fn totals(&self, now: Instant) -> (u32, u32) {
        let current = self.slice_of(now);
        self.buckets
            .iter()
            .filter(|b| b.slice + BUCKETS as u64 > current && b.slice <= current)
            .fold((0, 0), |(c, f), b| (c + b.calls, f + b.failures))
    }

    fn open(&mut self, now: Instant) {
        self.state = BreakerState::Open;
        self.probing = false;
        self.until = now + self.settings.cool_down;
        self.buckets = [Bucket::default(); BUCKETS];
    }

    fn slice_of(&self, now: Instant) -> u64 {
        let slice = (self.settings.window / BUCKETS as u32).max(Duration::from_millis(1));
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos() / slice.as_nanos())
            .unwrap_or(u64::MAX)
    }

    fn bucket(&mut self, now: Instant) -> &mut Bucket {
        let slice = self.slice_of(now);
        let bucket = &mut self.buckets[(slice % BUCKETS as u64) as usize];
        if bucket.slice != slice {
            *bucket = Bucket {
                slice,
                ..Bucket::default()
            };
        }
        bucket
    }
}

/// A worker's breaker: the machine behind a lock (taken once per outcome and once per
/// reserve), with each change of state logged once and published to the fetch loop, the
/// metrics and the heartbeat.
#[derive(Debug)]
pub(crate) struct Breaker {
    source: Source,
    machine: Mutex<Machine>,
    state: watch::Sender<BreakerState>,
    /// Fleet scope: the probes this host reserved and has not judged yet.
    probes: Mutex<Vec<Receipt>>,
    scope: BreakerScope,
    /// Fleet scope: how many trips this host has stored and probes it has seen judged, so
    /// that a reserve that started before one is not taken as news of the fleet's state.
    judged: std::sync::atomic::AtomicU64,
    /// The worker's breaker gauge (none in unit tests).
    metrics: Option<WorkerMetrics>,
}

impl Breaker {
    pub(crate) fn new(
        source: Source,
        settings: CircuitBreaker,
        metrics: Option<WorkerMetrics>,
    ) -> Self {
        if let Some(metrics) = &metrics {
            metrics.breaker(BreakerState::Closed);
        }
        Breaker {
            source,
            machine: Mutex::new(Machine::new(settings, Instant::now())),
            state: watch::Sender::new(BreakerState::Closed),
            probes: Mutex::new(Vec::new()),
            scope: settings.scope,
            judged: std::sync::atomic::AtomicU64::new(0),
            metrics,
        }
    }

    /// The current state, and changes of it.
    pub(crate) fn watch(&self) -> watch::Receiver<BreakerState> {
        self.state.subscribe()
    }

    pub(crate) fn state(&self) -> BreakerState {
        *self.state.borrow()
    }

    pub(crate) fn admit(&self) -> Admit {
        // Fleet scope: the transport's reserve holds back and hands out the probe.
        if self.fleet() {
            return Admit::Go;
        }
        self.with(|m, now| m.admit(now))
    }

    pub(crate) fn begin_probe(&self) {
        self.with(|m, _| m.begin_probe());
    }

    pub(crate) fn probe_unused(&self) {
        self.with(|m, _| m.probe_unused());
    }

    pub(crate) fn record(&self, succeeded: bool) {
        self.with(|m, now| m.record(succeeded, now));
    }

    /// Runs `f` on the machine, then logs and publishes a change of state.
    fn with<T>(&self, f: impl FnOnce(&mut Machine, Instant) -> T) -> T {
        let now = Instant::now();
        // A poisoned lock only means a panic elsewhere mid-update: the machine's fields
        // are each valid on their own, so carry on with it.
        let mut machine = self.machine.lock().unwrap_or_else(|e| e.into_inner());
        let before = machine.state();
        let out = f(&mut machine, now);
        let after = machine.state();
        if after != before {
            let settings = machine.settings;
            drop(machine);
            self.changed(before, after, &settings);
        }
        out
    }

    fn changed(&self, before: BreakerState, after: BreakerState, settings: &CircuitBreaker) {
        let source = &self.source;
        match after {
            BreakerState::Open if self.fleet() => tracing::warn!(
                %source, state = "open", scope = "fleet", cool_down = ?settings.cool_down,
                "circuit breaker open on every host: too many handlers failed (here, or on the host that tripped it, or its probe); no host reserves until the cool-down ends"
            ),
            BreakerState::Open if before == BreakerState::Closed => tracing::warn!(
                %source, state = "open", cool_down = ?settings.cool_down,
                failure_ratio = settings.failure_ratio, window = ?settings.window,
                "circuit breaker opened: too many handlers failed; not reserving until the cool-down ends"
            ),
            BreakerState::Open => tracing::warn!(
                %source, state = "open", cool_down = ?settings.cool_down,
                "circuit breaker re-opened: the probe failed"
            ),
            BreakerState::HalfOpen => tracing::info!(
                %source, state = "half-open", scope = settings.scope.as_str(),
                "circuit breaker half-open: one message runs as a probe"
            ),
            BreakerState::Closed => tracing::info!(
                %source, state = "closed", scope = settings.scope.as_str(),
                "circuit breaker closed: the probe succeeded; reserving as usual"
            ),
        }
        if let Some(metrics) = &self.metrics {
            metrics.breaker(after);
        }
        self.state.send_replace(after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn machine(t0: Instant) -> Machine {
        Machine::new(
            CircuitBreaker::default()
                .minimum_calls(4)
                .failure_ratio(0.5)
                .window(ms(1_000))
                .cool_down(ms(500)),
            t0,
        )
    }

    #[test]
    fn opens_at_the_ratio_once_the_minimum_is_reached() {
        let t0 = Instant::now();
        let mut m = machine(t0);
        // Three failures: below the minimum of four runs, however bad.
        for _ in 0..3 {
            m.record(false, t0);
        }
        assert_eq!(m.state(), BreakerState::Closed);
        assert_eq!(m.admit(t0), Admit::Go);
        m.record(true, t0 + ms(10));
        // 3 of 4 failed: 0.75 >= 0.5.
        assert_eq!(m.state(), BreakerState::Open);
        assert_eq!(m.admit(t0 + ms(10)), Admit::Wait(Some(t0 + ms(510))));
    }

    #[test]
    fn stays_closed_below_the_ratio() {
        let t0 = Instant::now();
        let mut m = machine(t0);
        for i in 0..100 {
            // One failure in four: never half of the runs once there are four.
            m.record(i % 4 != 0, t0 + ms(i));
        }
        assert_eq!(m.state(), BreakerState::Closed);
    }

    #[test]
    fn old_failures_leave_the_window() {
        let t0 = Instant::now();
        let mut m = machine(t0);
        for _ in 0..3 {
            m.record(false, t0);
        }
        assert_eq!(m.totals(t0), (3, 3));
        // A window later they no longer count: one more failure is 1 of 1, below 4 runs.
        m.record(false, t0 + ms(1_100));
        assert_eq!(m.totals(t0 + ms(1_100)), (1, 1));
        assert_eq!(m.state(), BreakerState::Closed);
    }

    #[test]
    fn probes_once_after_the_cool_down_and_closes_on_success() {
        let t0 = Instant::now();
        let mut m = machine(t0);
        for _ in 0..4 {
            m.record(false, t0);
        }
        assert_eq!(m.admit(t0 + ms(499)), Admit::Wait(Some(t0 + ms(500))));
        assert_eq!(m.admit(t0 + ms(500)), Admit::Probe);
        // Runs that started before it opened finish meanwhile: not counted.
        m.record(true, t0 + ms(500));
        assert_eq!(m.state(), BreakerState::Open);
        m.begin_probe();
        assert_eq!(m.state(), BreakerState::HalfOpen);
        // While the probe runs, nothing else is reserved.
        assert_eq!(m.admit(t0 + ms(600)), Admit::Wait(None));
        m.record(true, t0 + ms(700));
        assert_eq!(m.state(), BreakerState::Closed);
        // The window starts afresh: three failures do not re-open it.
        for _ in 0..3 {
            m.record(false, t0 + ms(800));
        }
        assert_eq!(m.state(), BreakerState::Closed);
    }

    #[test]
    fn a_failed_probe_re_opens_for_another_cool_down() {
        let t0 = Instant::now();
        let mut m = machine(t0);
        for _ in 0..4 {
            m.record(false, t0);
        }
        m.begin_probe();
        m.record(false, t0 + ms(600));
        assert_eq!(m.state(), BreakerState::Open);
        assert_eq!(m.admit(t0 + ms(1_000)), Admit::Wait(Some(t0 + ms(1_100))));
        assert_eq!(m.admit(t0 + ms(1_100)), Admit::Probe);
    }

    #[test]
    fn a_probe_that_found_nothing_is_tried_again() {
        let t0 = Instant::now();
        let mut m = machine(t0);
        for _ in 0..4 {
            m.record(false, t0);
        }
        m.begin_probe();
        m.probe_unused();
        assert_eq!(m.state(), BreakerState::HalfOpen);
        assert_eq!(m.admit(t0 + ms(900)), Admit::Probe);
    }

    #[test]
    fn settings_are_kept_in_range() {
        let b = CircuitBreaker::default()
            .failure_ratio(7.0)
            .minimum_calls(0)
            .window(Duration::ZERO)
            .cool_down(Duration::ZERO);
        assert_eq!(b.failure_ratio, 1.0);
        assert_eq!(b.minimum_calls, 1);
        assert_eq!(b.window, ms(100));
        assert_eq!(b.cool_down, ms(10));
        assert_eq!(
            CircuitBreaker::default()
                .failure_ratio(f64::NAN)
                .failure_ratio,
            1.0
        );
        let raw = CircuitBreaker {
            failure_ratio: -1.0,
            ..CircuitBreaker::default()
        };
        assert_eq!(raw.in_range().failure_ratio, 0.01);
    }
}
