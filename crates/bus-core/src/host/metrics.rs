//! Host and client metrics (feature `metrics`), through the [`metrics`](https://docs.rs/metrics)
//! facade: the application installs whichever recorder it likes (Prometheus with feature
//! `prometheus` and `serve_prometheus`, OpenTelemetry, StatsD, ...) and the bus records
//! into it. Names follow the OpenTelemetry messaging conventions where they define one
//! (`messaging.client.*`, `messaging.process.duration`) and are `bus.*` otherwise;
//! docs/operations.md ("Host metrics") lists each with its labels.
//!
//! A worker registers its handles once, when the host starts, so recording a message
//! is a few atomic operations, not a registry lookup. Handles are bound to the recorder
//! installed when the host starts: install it before [`Host::run`](crate::Host::run).
//! Without the feature every function here is an empty inline one.

// Without the feature the names and labels are unused and every recorder is empty.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

use std::future::Future;

use super::outcome::Outcome;
use super::Routes;
use crate::transport::Source;

/// Messages the host received from the transport (counter, `{message}`).
pub const CONSUMED_MESSAGES: &str = "messaging.client.consumed.messages";
/// Time a handler took, middleware included, by outcome (histogram, seconds).
pub const PROCESS_DURATION: &str = "messaging.process.duration";
/// Messages handled, by outcome: `ack`, `retry`, `dead_letter`, or `released` (reserved,
/// never started, handed back at shutdown) (counter, `{message}`).
pub const HANDLED_MESSAGES: &str = "bus.host.handled.messages";
/// Handlers running now (gauge).
pub const HANDLERS_RUNNING: &str = "bus.host.handlers.running";
/// Messages reserved and waiting for a handler slot (gauge).
pub const PREFETCHED_MESSAGES: &str = "bus.host.prefetched.messages";
/// Lock renewals of messages held, by `bus.lock.result`: `kept` or `lost` (counter).
pub const LOCK_RENEWALS: &str = "bus.host.lock.renewals";
/// Messages of crashed consumers the host's recovery returned to the queue (counter).
pub const RECOVERED_MESSAGES: &str = "bus.host.recovered.messages";
/// Messages sent or published, failed ones with `error.type` (counter, `{message}`).
pub const SENT_MESSAGES: &str = "messaging.client.sent.messages";
/// Messages per send or publish call (histogram, `{message}`).
pub const BATCH_SIZE: &str = "bus.client.batch.size";
/// Duration of each transport call: `send`, `publish`, `ack`, `retry`, `dead_letter`,
/// `renew`, `recover` (histogram, seconds).
pub const OPERATION_DURATION: &str = "messaging.client.operation.duration";

/// The state of a processor's circuit breaker: 0 closed, 1 open, 2 half-open (gauge;
/// only processors with a breaker).
pub const BREAKER_STATE: &str = "bus.host.breaker.state";
/// 1 while the host's last reserve found the queue paused by flow control, else 0 (gauge).
pub const QUEUE_PAUSED: &str = "bus.host.queue.paused";

/// The `messaging.system` of every series.
const SYSTEM: &str = "bus";

/// Transport calls of a worker whose duration is recorded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Ack,
    Retry,
    DeadLetter,
    Renew,
    Recover,
}

impl Op {
    const ALL: [Op; 5] = [Op::Ack, Op::Retry, Op::DeadLetter, Op::Renew, Op::Recover];

    fn name(self) -> &'static str {
        match self {
            Op::Ack => "ack",
            Op::Retry => "retry",
            Op::DeadLetter => "dead_letter",
            Op::Renew => "renew",
            Op::Recover => "recover",
        }
    }
}

/// A worker's metric handles, registered once when it starts.
#[derive(Debug, Clone)]
pub(crate) struct WorkerMetrics {
    #[cfg(feature = "metrics")]
    inner: std::sync::Arc<enabled::Handles>,
}

impl WorkerMetrics {
    /// The handles of a worker consuming `routes`; with a breaker gauge if `breaker`.
    pub(crate) fn new(routes: &Routes, breaker: bool) -> Self {
        WorkerMetrics {
            #[cfg(feature = "metrics")]
            inner: std::sync::Arc::new(enabled::Handles::new(routes, breaker)),
        }
    }

    /// The circuit breaker changed state.
    #[inline]
    pub(crate) fn breaker(&self, state: crate::BreakerState) {
        #[cfg(feature = "metrics")]
        if let Some(gauge) = &self.inner.breaker {
            gauge.set(state.gauge());
        }
    }

    /// What held the source back at the last receive (the paused gauge).
    #[inline]
    pub(crate) fn hold(&self, hold: crate::transport::Hold) {
        #[cfg(feature = "metrics")]
        self.inner
            .paused
            .set(f64::from(u8::from(hold == crate::transport::Hold::Paused)));
        #[cfg(not(feature = "metrics"))]
        let _ = hold;
    }

    /// `n` messages received.
    #[inline]
    pub(crate) fn consumed(&self, n: usize) {
        #[cfg(feature = "metrics")]
        self.inner.consumed.increment(n as u64);
    }

    /// A message reserved into the local buffer.
    #[inline]
    pub(crate) fn buffered(&self) {
        #[cfg(feature = "metrics")]
        self.inner.prefetched.increment(1.0);
    }

    /// A message taken out of the local buffer (started, or to be released).
    #[inline]
    pub(crate) fn unbuffered(&self) {
        #[cfg(feature = "metrics")]
        self.inner.prefetched.decrement(1.0);
    }

    /// `n` reserved messages handed back unstarted.
    #[inline]
    pub(crate) fn released(&self, n: usize) {
        #[cfg(feature = "metrics")]
        self.inner.handled[3].increment(n as u64);
    }

    /// Runs a handler: counts it as running meanwhile, then records its duration and
    /// outcome. A combinator, not an `async fn`: an `async fn` wrapping a future stores it
    /// twice (as its argument and as the value it awaits), and the handler's future is
    /// the bulk of every message's task.
    #[inline]
    pub(super) fn process<'a, F: Future<Output = Outcome> + 'a>(
        &'a self,
        handling: F,
    ) -> impl Future<Output = Outcome> + 'a {
        #[cfg(feature = "metrics")]
        {
            use futures::FutureExt;
            let running = enabled::Running::new(&self.inner.running);
            let started = std::time::Instant::now();
            handling.map(move |outcome| {
                drop(running);
                let i = enabled::outcome_index(&outcome);
                self.inner.handled[i].increment(1);
                self.inner.duration[i].record(started.elapsed().as_secs_f64());
                outcome
            })
        }
        #[cfg(not(feature = "metrics"))]
        handling
    }

    /// Times one transport call; a failed one is recorded with `error.type`.
    #[inline]
    pub(crate) async fn call<T>(
        &self,
        op: Op,
        call: impl Future<Output = crate::Result<T>>,
    ) -> crate::Result<T> {
        #[cfg(feature = "metrics")]
        {
            let started = std::time::Instant::now();
            let result = call.await;
            let (ok, failed) = &self.inner.calls[op as usize];
            match &result {
                Ok(_) => ok.record(started.elapsed().as_secs_f64()),
                Err(_) => failed.record(started.elapsed().as_secs_f64()),
            }
            result
        }
        #[cfg(not(feature = "metrics"))]
        call.await
    }

    /// One renewal round: which locks were kept.
    #[inline]
    pub(crate) fn renewed(&self, kept: &[bool]) {
        #[cfg(feature = "metrics")]
        {
            let held = kept.iter().filter(|k| **k).count() as u64;
            self.inner.renewals.0.increment(held);
            self.inner.renewals.1.increment(kept.len() as u64 - held);
        }
    }

    /// `n` messages recovered by a sweep.
    #[inline]
    pub(crate) fn recovered(&self, n: usize) {
        #[cfg(feature = "metrics")]
        self.inner.recovered.increment(n as u64);
    }
}

/// Records a send or publish of `n` messages to `destination` (`operation` is `send` or
/// `publish`): its duration, the messages (with `error.type` when it failed) and the
/// batch size.
#[inline]
pub(crate) async fn sent<T>(
    operation: &'static str,
    destination: &'static str,
    n: usize,
    call: impl Future<Output = crate::Result<T>>,
) -> crate::Result<T> {
    #[cfg(feature = "metrics")]
    {
        let started = std::time::Instant::now();
        let result = call.await;
        enabled::sent(operation, destination, n, started, result.as_ref().err());
        result
    }
    #[cfg(not(feature = "metrics"))]
    call.await
}

/// The destination and subscription labels of a source.
fn destination(source: &Source) -> (&str, Option<&str>) {
    match source {
        Source::Queue(name) => (name, None),
        Source::Subscription { topic, name } => (topic, Some(name)),
    }
}

#[cfg(feature = "metrics")]
mod enabled {
    use ::metrics::{counter, gauge, histogram, Counter, Gauge, Histogram, Label};

    use super::*;

    /// Outcome labels, in the order of [`Handles::handled`].
    const OUTCOMES: [&str; 4] = ["ack", "retry", "dead_letter", "released"];

    #[derive(Debug)]
    pub(super) struct Handles {
        pub(super) consumed: Counter,
        pub(super) handled: [Counter; 4],
        pub(super) duration: [Histogram; 3],
        pub(super) running: Gauge,
        pub(super) prefetched: Gauge,
        /// Per [`Op`]: succeeded, failed.
        pub(super) calls: Vec<(Histogram, Histogram)>,
        /// Kept, lost.
        pub(super) renewals: (Counter, Counter),
        pub(super) recovered: Counter,
        pub(super) breaker: Option<Gauge>,
        pub(super) paused: Gauge,
    }

    impl Handles {
        pub(super) fn new(routes: &Routes, breaker: bool) -> Self {
            // The host builds a source's routes with its first processor, so one exists.
            let (destination, subscription) = destination(&routes.registrations[0].source);
            let mut base = vec![
                Label::from_static_parts("messaging.system", SYSTEM),
                Label::new("messaging.destination.name", destination.to_owned()),
            ];
            if let Some(subscription) = subscription {
                base.push(Label::new(
                    "messaging.destination.subscription.name",
                    subscription.to_owned(),
                ));
            }
            // A series covers the whole source: the type of its processor, or of each of
            // them (comma-separated) when one queue has processors for several types.
            let types: Vec<&str> = routes
                .registrations
                .iter()
                .map(|r| r.message.message_type())
                .collect();
            let mut typed = base.clone();
            typed.push(Label::new("bus.message.type", types.join(",")));
            let with = |labels: &[Label], extra: &[(&'static str, &'static str)]| {
                let mut labels = labels.to_vec();
                labels.extend(extra.iter().map(|(k, v)| Label::from_static_parts(k, v)));
                labels
            };
            let per_outcome = |outcome: &'static str| {
                with(
                    &typed,
                    &[
                        ("messaging.operation.name", "process"),
                        ("bus.outcome", outcome),
                    ],
                )
            };
            let handled = OUTCOMES.map(|o| counter!(HANDLED_MESSAGES, per_outcome(o)));
            let duration =
                [0, 1, 2].map(|i| histogram!(PROCESS_DURATION, per_outcome(OUTCOMES[i])));
            let calls = Op::ALL
                .iter()
                .map(|op| {
                    let ok = with(&base, &[("messaging.operation.name", op.name())]);
                    let failed = with(
                        &base,
                        &[
                            ("messaging.operation.name", op.name()),
                            ("error.type", "transport"),
                        ],
                    );
                    (
                        histogram!(OPERATION_DURATION, ok),
                        histogram!(OPERATION_DURATION, failed),
                    )
                })
                .collect();
            let consumed = with(&typed, &[("messaging.operation.name", "receive")]);
            Handles {
                consumed: counter!(CONSUMED_MESSAGES, consumed),
                handled,
                duration,
                running: gauge!(HANDLERS_RUNNING, typed.clone()),
                prefetched: gauge!(PREFETCHED_MESSAGES, typed.clone()),
                calls,
                renewals: (
                    counter!(LOCK_RENEWALS, with(&base, &[("bus.lock.result", "kept")])),
                    counter!(LOCK_RENEWALS, with(&base, &[("bus.lock.result", "lost")])),
                ),
                recovered: counter!(RECOVERED_MESSAGES, base.clone()),
                breaker: breaker.then(|| gauge!(BREAKER_STATE, base.clone())),
                paused: gauge!(QUEUE_PAUSED, base.clone()),
            }
        }
    }

    pub(super) fn outcome_index(outcome: &Outcome) -> usize {
        match outcome {
            Outcome::Ack => 0,
            Outcome::Retry(..) => 1,
            Outcome::DeadLetter(..) => 2,
        }
    }

    /// Counts a running handler for as long as it lives (an aborted handler included).
    pub(super) struct Running<'g>(&'g Gauge);

    impl<'g> Running<'g> {
        pub(super) fn new(gauge: &'g Gauge) -> Self {
            gauge.increment(1.0);
            Running(gauge)
        }
    }

    impl Drop for Running<'_> {
        fn drop(&mut self) {
            self.0.decrement(1.0);
        }
    }

    pub(super) fn sent(
        operation: &'static str,
        destination: &'static str,
        n: usize,
        started: std::time::Instant,
        error: Option<&crate::Error>,
    ) {
        let seconds = started.elapsed().as_secs_f64();
        let labels = [
            ("messaging.system", SYSTEM),
            ("messaging.destination.name", destination),
            ("messaging.operation.name", operation),
        ];
        histogram!(BATCH_SIZE, &labels).record(n as f64);
        match error {
            None => {
                histogram!(OPERATION_DURATION, &labels).record(seconds);
                counter!(SENT_MESSAGES, &labels).increment(n as u64);
            }
            Some(error) => {
                let mut labels = labels.to_vec();
                labels.push(("error.type", error_type(error)));
                histogram!(OPERATION_DURATION, &labels).record(seconds);
                counter!(SENT_MESSAGES, &labels).increment(n as u64);
            }
        }
    }

    /// A low-cardinality class of a failed call, for `error.type`.
    fn error_type(error: &crate::Error) -> &'static str {
        match error {
            crate::Error::OutcomeUnknown(_) | crate::Error::Timeout(_) => "timeout",
            crate::Error::Transport(_) => "transport",
            crate::Error::NotReplicated { .. } => "not_replicated",
            _ => "invalid",
        }
    }
}

/// Registers the help text and unit of every metric above with the installed recorder
/// (call it after installing one; [`serve_prometheus`] does).
#[cfg(feature = "metrics")]
pub fn describe() {
    use ::metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        CONSUMED_MESSAGES,
        Unit::Count,
        "Messages the host received from the transport"
    );
    describe_histogram!(
        PROCESS_DURATION,
        Unit::Seconds,
        "Time a handler took, middleware included, by outcome"
    );
    describe_counter!(
        HANDLED_MESSAGES,
        Unit::Count,
        "Messages handled, by outcome (ack, retry, dead_letter, released)"
    );
    describe_gauge!(HANDLERS_RUNNING, Unit::Count, "Handlers running now");
    describe_gauge!(
        PREFETCHED_MESSAGES,
        Unit::Count,
        "Messages reserved and waiting for a handler slot"
    );
    describe_counter!(
        LOCK_RENEWALS,
        Unit::Count,
        "Lock renewals of held messages, by result (kept, lost)"
    );
    describe_counter!(
        RECOVERED_MESSAGES,
        Unit::Count,
        "Messages of crashed consumers returned to the queue by recovery"
    );
    describe_gauge!(
        BREAKER_STATE,
        Unit::Count,
        "State of the processor's circuit breaker: 0 closed, 1 open, 2 half-open"
    );
    describe_gauge!(
        QUEUE_PAUSED,
        Unit::Count,
        "1 while the queue is paused by flow control (as the host's last reserve found it)"
    );
    describe_counter!(
        SENT_MESSAGES,
        Unit::Count,
        "Messages sent or published (failed calls with error.type)"
    );
    describe_histogram!(BATCH_SIZE, Unit::Count, "Messages per send or publish call");
    describe_histogram!(
        OPERATION_DURATION,
        Unit::Seconds,
        "Duration of each transport call, by operation"
    );
}

/// The bucket bounds OpenTelemetry recommends for messaging durations, in seconds.
#[cfg(feature = "prometheus")]
const DURATION_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// Bucket bounds of [`BATCH_SIZE`].
#[cfg(feature = "prometheus")]
const BATCH_BUCKETS: [f64; 10] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

/// Installs a Prometheus recorder as the process's global one and serves its text format
/// on `listen` (every path but `/health` answers with the metrics; put it on `/metrics`
/// in the scrape config). Names are converted the way Prometheus expects (`.` to `_`,
/// `_total` on counters, `_seconds` on durations); histograms get OpenTelemetry's
/// recommended buckets. Call it inside a Tokio runtime (the endpoint runs on it, and stops
/// with it) and before [`Host::run`](crate::Host::run). The returned handle renders the same text, for an application
/// that would rather serve it on its own server.
///
/// ```no_run
/// # async fn demo() -> bus_core::Result<()> {
/// bus_core::metrics::serve_prometheus("127.0.0.1:9100".parse().unwrap())?;
/// # Ok(()) }
/// ```
#[cfg(feature = "prometheus")]
pub fn serve_prometheus(
    listen: std::net::SocketAddr,
) -> crate::Result<metrics_exporter_prometheus::PrometheusHandle> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    let failed = |e: &dyn std::fmt::Display| {
        crate::Error::Config(format!("cannot serve Prometheus metrics on {listen}: {e}"))
    };
    let runtime = tokio::runtime::Handle::try_current().map_err(|e| failed(&e))?;
    let _entered = runtime.enter();
    let (recorder, exporter) = PrometheusBuilder::new()
        .with_http_listener(listen)
        .with_recommended_naming(true)
        .set_buckets_for_metric(Matcher::Suffix("duration".into()), &DURATION_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(BATCH_SIZE.into()), &BATCH_BUCKETS))
        .and_then(PrometheusBuilder::build)
        .map_err(|e| failed(&e))?;
    let handle = recorder.handle();
    ::metrics::set_global_recorder(recorder).map_err(|e| failed(&e))?;
    runtime.spawn(async move {
        if let Err(e) = exporter.await {
            tracing::warn!(error = ?e, "the Prometheus metrics endpoint stopped");
        }
    });
    describe();
    Ok(handle)
}
